import StoreBase

/// One piece of argv after tokenizing, with the index of the argv element it came from (for error messages).
public struct ArgumentToken: Equatable, Sendable {
    public enum Kind: Equatable, Sendable {
        /// `--name` or `--name=value` (the value is attached only in the second form).
        case long(name: String, value: String?)
        /// One letter of `-abc`, or `-x` alone.
        case short(Character)
        /// A word that is not an option, or any word after `--`.
        case value(String)
    }

    public var kind: Kind
    /// Index in argv (0 is the first argument after the program name).
    public var index: Int
}

/// Splits argv into tokens before anything interprets it: `--x v`, `--x=v`, `-abc`, and `--`.
public enum ArgumentTokenizer {
    public static func tokenize(_ argv: [String]) -> [ArgumentToken] {
        var tokens: [ArgumentToken] = []
        var afterTerminator = false
        for (i, arg) in argv.enumerated() {
            if afterTerminator {
                tokens.append(ArgumentToken(kind: .value(arg), index: i))
            } else if arg == "--" {
                afterTerminator = true
            } else if arg.hasPrefix("--") {
                let body = arg.dropFirst(2)
                if let eq = body.firstIndex(of: "=") {
                    tokens.append(ArgumentToken(kind: .long(name: String(body[..<eq]),
                                                            value: String(body[body.index(after: eq)...])), index: i))
                } else {
                    tokens.append(ArgumentToken(kind: .long(name: String(body), value: nil), index: i))
                }
            } else if arg.hasPrefix("-") && arg.count > 1 && !arg.dropFirst().allSatisfy({ $0.isNumber || $0 == "." }) {
                for c in arg.dropFirst() { tokens.append(ArgumentToken(kind: .short(c), index: i)) }
            } else {
                tokens.append(ArgumentToken(kind: .value(arg), index: i))
            }
        }
        return tokens
    }
}

/// An option a command accepts.
public struct OptionSpec: Sendable {
    public var name: String
    public var short: Character?
    /// The placeholder of its value (e.g. "TOKEN"), or nil for a flag.
    public var valueName: String?
    public var help: String
    /// Whether it may be given more than once.
    public var repeatable: Bool
    /// Whether shell completion leaves it out (an option the completion scripts call, not one people type).
    public var hidden: Bool

    public init(_ name: String, short: Character? = nil, value: String? = nil, repeatable: Bool = false,
                hidden: Bool = false, help: String)
    {
        self.name = name
        self.short = short
        self.valueName = value
        self.help = help
        self.repeatable = repeatable
        self.hidden = hidden
    }

    public var isFlag: Bool { valueName == nil }
}

/// A usage error: exit 64, with the argument that caused it and a hint.
public struct UsageError: DiagnosedError {
    public var summary: String
    public var hint: String?
    public var exitCode: ExitCode { .usage }

    public init(_ summary: String, hint: String? = nil) {
        self.summary = summary
        self.hint = hint
    }
}

/// The options and arguments a command was given, after parsing.
///
/// A command reads its options by name; every name it asks for must be in its declared `options` table (or be a
/// global option). Asking for another name is a bug in storectl: it stops a debug build (the test suite runs one)
/// and reads as "not given" in a release build. `undeclaredQueries` lists such names for tests.
public struct ParsedArguments: Sendable {
    public var flags: Set<String> = []
    public var values: [String: [String]] = [:]
    public var positionals: [String] = []
    /// The option names the command declared; nil when built by hand (no check).
    public var declared: Set<String>?
    /// The command's name, for the message of an undeclared query.
    public var commandName = ""

    public init() {}

    /// The arguments of `command`, checked against its declared options.
    public init(declaredBy command: any Command.Type) {
        declared = Set(command.options.map(\.name))
        commandName = command.name
    }

    /// Whether `name` may be asked for: declared by the command, or global.
    public func isDeclared(_ name: String) -> Bool {
        guard let declared else { return true }
        return declared.contains(name) || GlobalOptions.specs.contains { $0.name == name }
    }

    private func checked(_ name: String) -> Bool {
        if isDeclared(name) { return true }
        assertionFailure("command '\(commandName)' reads option --\(name), which its options table does not declare")
        return false
    }

    /// Whether the flag `--name` was given.
    public func flag(_ name: String) -> Bool { checked(name) && flags.contains(name) }

    /// The last value of `--name VALUE`, if given.
    public func value(_ name: String) -> String? { checked(name) ? values[name]?.last : nil }

    /// Every value of a repeatable `--name VALUE`.
    public func all(_ name: String) -> [String] { checked(name) ? values[name] ?? [] : [] }

    /// The value of `--name` as an integer.
    /// - Throws: `UsageError` when it is not one.
    public func int(_ name: String) throws -> Int? {
        guard let raw = value(name) else { return nil }
        guard let n = Int(raw) else {
            throw UsageError("--\(name) expects an integer, got '\(raw)'")
        }
        return n
    }
}
