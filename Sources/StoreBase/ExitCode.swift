/// A process exit status from `sysexits.h`. Scripts depend on these numbers.
public struct ExitCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public init(_ rawValue: Int32) { self.rawValue = rawValue }

    /// 0: success.
    public static let ok = ExitCode(0)
    /// 1: a check found problems that are not errors of the tool (rarely used).
    public static let failure = ExitCode(1)
    /// 64 EX_USAGE: the command was used incorrectly.
    public static let usage = ExitCode(64)
    /// 65 EX_DATAERR: the input data was incorrect.
    public static let dataError = ExitCode(65)
    /// 66 EX_NOINPUT: an input file did not exist or was not readable.
    public static let noInput = ExitCode(66)
    /// 67 EX_NOUSER: an account named in the command is not known to the container.
    public static let noUser = ExitCode(67)
    /// 69 EX_UNAVAILABLE: the account or the cloud is unavailable.
    public static let unavailable = ExitCode(69)
    /// 70 EX_SOFTWARE: an internal software error.
    public static let software = ExitCode(70)
    /// 73 EX_CANTCREAT: an output file cannot be created.
    public static let cantCreate = ExitCode(73)
    /// 74 EX_IOERR: an error occurred while doing I/O.
    public static let ioError = ExitCode(74)
    /// 75 EX_TEMPFAIL: a temporary failure; the user is invited to retry.
    public static let tempFail = ExitCode(75)
    /// 77 EX_NOPERM: permission denied.
    public static let noPermission = ExitCode(77)
    /// 78 EX_CONFIG: a configuration error.
    public static let config = ExitCode(78)

    public var description: String { String(rawValue) }

    /// The class of the error as one snake_case word, for `error.kind` in JSON: `usage`, `data`, `no_input`,
    /// `no_user`, `unavailable`, `internal`, `cant_create`, `io`, `temporary`, `permission`, `config` (`failure` for 1).
    public var kind: String {
        switch rawValue {
        case 0: return "ok"
        case 1: return "failure"
        case 64: return "usage"
        case 65: return "data"
        case 66: return "no_input"
        case 67: return "no_user"
        case 69: return "unavailable"
        case 70: return "internal"
        case 73: return "cant_create"
        case 74: return "io"
        case 75: return "temporary"
        case 77: return "permission"
        case 78: return "config"
        default: return "exit_\(rawValue)"
        }
    }
}

/// An error that knows its exit code and how to explain itself to a user.
///
/// Every error storectl reports says what went wrong, where, and what to do about it.
public protocol DiagnosedError: Error, CustomStringConvertible {
    /// The `sysexits.h` status the process exits with.
    var exitCode: ExitCode { get }
    /// What went wrong and where, on one line (without the `error: ` prefix).
    var summary: String { get }
    /// Lines printed after the summary: source excerpts, details.
    var details: [String] { get }
    /// What to do about it, if there is something to do.
    var hint: String? { get }
    /// Where, when it is a place in a file: `config.yaml:12:11`. Printed before `error:`.
    var location: String? { get }
    /// The store the error is about, when the error knows it (the CLI otherwise names the store it acted on).
    var store: String? { get }
    /// The account status (`available`, `noAccount`, ...), when the error is about the account.
    var accountStatus: String? { get }
}

extension DiagnosedError {
    public var details: [String] { [] }
    public var hint: String? { nil }
    public var location: String? { nil }
    public var store: String? { nil }
    public var accountStatus: String? { nil }
    public var description: String {
        var lines = [(location.map { $0 + ": " } ?? "") + "error: " + summary]
        lines += details
        if let hint { lines.append("hint: " + hint) }
        return lines.joined(separator: "\n")
    }
}

/// A general-purpose diagnosed error for the cases that need no type of their own.
public struct StoreError: DiagnosedError, Equatable {
    public var exitCode: ExitCode
    public var summary: String
    public var details: [String]
    public var hint: String?

    public init(_ exitCode: ExitCode, _ summary: String, details: [String] = [], hint: String? = nil) {
        self.exitCode = exitCode
        self.summary = summary
        self.details = details
        self.hint = hint
    }
}
