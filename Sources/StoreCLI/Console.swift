import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase

/// Where a command writes: data to stdout, diagnostics to stderr. Tests capture both.
public final class Console: @unchecked Sendable {
    private let writeOut: (String) -> Void
    private let writeErr: (String) -> Void
    /// Whether stderr is a terminal (progress bars appear only then).
    public let isTerminal: Bool
    /// Whether colour is allowed (`NO_COLOR` and `--no-color` turn it off).
    public var color: Bool
    /// `--quiet`: no progress or notes on stderr.
    public var quiet = false

    public init(out: @escaping (String) -> Void, err: @escaping (String) -> Void, isTerminal: Bool, color: Bool) {
        self.writeOut = out
        self.writeErr = err
        self.isTerminal = isTerminal
        self.color = color
    }

    /// The process's own stdout and stderr.
    public static func standard() -> Console {
        let tty = isatty(2) == 1
        let noColor = getenv("NO_COLOR").map { $0.pointee != 0 } ?? false
        // Straight to the file descriptors: FileHandle adds nothing here but start-up work in every process.
        return Console(out: { s in StandardStream.out(s) }, err: { s in StandardStream.err(s) }, isTerminal: tty,
                       color: tty && !noColor)
    }

    /// Writes a line of data to stdout.
    public func out(_ text: String) { writeOut(text.hasSuffix("\n") ? text : text + "\n") }

    /// Writes a diagnostic line to stderr (even with --quiet: warnings matter).
    public func err(_ text: String) { writeErr(text.hasSuffix("\n") ? text : text + "\n") }

    /// Writes a note to stderr, unless --quiet.
    public func note(_ text: String) { if !quiet { err(text) } }

    /// Writes raw text to stderr with no newline (progress redraws).
    public func errRaw(_ text: String) { writeErr(text) }

    /// Prints `value` as one pretty JSON document on stdout, keys sorted so that output is stable.
    public func json<T: Encodable>(_ value: T) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        if let data = try? encoder.encode(value) {
            out(String(decoding: data, as: UTF8.self))
        }
    }

    /// Prints `value` as one compact JSON line (for `watch`).
    public func jsonLine<T: Encodable>(_ value: T) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        if let data = try? encoder.encode(value) {
            out(String(decoding: data, as: UTF8.self))
        }
    }

    /// Wraps `text` in an ANSI colour when colour is on.
    public func paint(_ text: String, _ code: String) -> String {
        color ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }
}

/// A progress bar on stderr, drawn only on a terminal and never with --quiet or --json.
public final class Progress {
    private let console: Console
    private let label: String
    private let enabled: Bool
    private var lastDraw = 0.0
    private var drawn = false

    public init(console: Console, label: String, json: Bool) {
        self.console = console
        self.label = label
        self.enabled = console.isTerminal && !console.quiet && !json
    }

    /// Redraws the bar, at most ten times a second.
    public func update(done: Int, total: Int?) {
        guard enabled else { return }
        let now = Date().timeIntervalSince1970
        guard now - lastDraw > 0.1 || done == total else { return }
        lastDraw = now
        drawn = true
        if let total, total > 0 {
            let width = 30
            let filled = min(width, done * width / total)
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            console.errRaw("\r\(label) [\(bar)] \(done)/\(total)")
        } else {
            console.errRaw("\r\(label) \(done)")
        }
    }

    /// Clears the bar's line (the next update draws it again).
    public func finish() {
        guard enabled, drawn else { return }
        drawn = false
        console.errRaw("\r\u{1B}[2K")
    }
}
