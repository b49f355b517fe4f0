import StoreBase

/// Reads a config file: libyaml events -> nodes with marks -> `${VAR}` expansion in scalars -> typed decode ->
/// defaults -> validation.
public enum ConfigLoader {
    /// Loads and validates the config at `path`.
    ///
    /// - Parameters:
    ///   - path: the absolute path of the file.
    ///   - displayPath: the path as the user wrote it, used in messages (`config.yaml:12:11: error: ...`).
    ///   - environment: the variables `${VAR}` references expand from.
    ///   - expandEnvironment: false leaves `${VAR}` text as it is (`--no-expand-env`).
    /// - Throws: a `DiagnosedError`: exit 66 when the file is missing, 78 for anything wrong inside it, with
    ///   `file:line:col`, the key path, the source line and a caret.
    public static func load(path: String, displayPath: String? = nil, environment: [String: String], expandEnvironment: Bool = true) throws
        -> Config
    {
        throw StoreError(.software, "config loading is not built yet")
    }
}
