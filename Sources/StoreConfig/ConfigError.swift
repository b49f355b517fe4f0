import StoreBase

/// An error in a config file, pointing at the place it was found.
///
/// It prints as:
///
///     config.yaml:12:11: error: stores.notes.mode: expected one of local, cloud, got 'clod'
///        12 |     mode: clod
///           |           ^
///     hint: did you mean 'cloud'?
public struct ConfigError: DiagnosedError, Equatable {
    public var exitCode: ExitCode
    /// `displayPath:line:column`.
    public var location: String?
    /// `keypath: message` (just the message for problems that belong to no key).
    public var summary: String
    /// The source line and a caret under the column.
    public var details: [String]
    public var hint: String?
    /// The dotted key path the error is about (`stores.notes.mode`), if any.
    public var keyPath: String?
    /// The 1-based line and column, if known.
    public var line: Int?
    public var column: Int?

    public init(exitCode: ExitCode = .config, location: String?, summary: String, details: [String] = [],
                hint: String? = nil, keyPath: String? = nil, line: Int? = nil, column: Int? = nil)
    {
        self.exitCode = exitCode
        self.location = location
        self.summary = summary
        self.details = details
        self.hint = hint
        self.keyPath = keyPath
        self.line = line
        self.column = column
    }

    /// An error at `line:column` of `source`, about `keyPath` (empty for none).
    init(_ displayPath: String, _ source: SourceText, line: Int, column: Int, keyPath: String, _ message: String,
         hint: String? = nil)
    {
        self.init(location: "\(displayPath):\(line):\(column)",
                  summary: keyPath.isEmpty ? message : "\(keyPath): \(message)",
                  details: source.excerpt(line: line, column: column), hint: hint,
                  keyPath: keyPath.isEmpty ? nil : keyPath, line: line, column: column)
    }

    /// The first printed line: `config.yaml:12:11: error: stores.notes.mode: ...`.
    public var firstLine: String { (location.map { $0 + ": " } ?? "") + "error: " + summary }
}

/// Builds dotted key paths: `stores.notes.cloud.url`, `stores.notes.entities.notes.unique[0]`.
enum KeyPath {
    static func child(_ parent: String, _ key: String) -> String { parent.isEmpty ? key : parent + "." + key }
    static func item(_ parent: String, _ index: Int) -> String { parent + "[\(index)]" }
}
