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
    /// Whether colour is allowed on stderr: a terminal, and neither `NO_COLOR` nor `--no-color`.
    public var color: Bool
    /// Whether colour is allowed on stdout: the same, for stdout (data piped into a file or a script never is).
    public var colorOut: Bool
    /// `--quiet`: no progress or notes on stderr.
    public var quiet = false

    public init(out: @escaping (String) -> Void, err: @escaping (String) -> Void, isTerminal: Bool, color: Bool,
                colorOut: Bool = false)
    {
        self.writeOut = out
        self.writeErr = err
        self.isTerminal = isTerminal
        self.color = color
        self.colorOut = colorOut
    }

    /// The process's own stdout and stderr; `environment` is the one storectl was started with (for `NO_COLOR`).
    public static func standard(environment: [String: String]) -> Console {
        let tty = isatty(2) == 1
        // NO_COLOR: "when present and not an empty string" (no-color.org).
        let noColor = environment["NO_COLOR"].map { !$0.isEmpty } ?? false
        // Straight to the file descriptors: FileHandle adds nothing here but start-up work in every process.
        return Console(out: { s in StandardStream.out(s) }, err: { s in StandardStream.err(s) }, isTerminal: tty,
                       color: tty && !noColor, colorOut: isatty(1) == 1 && !noColor)
    }

    /// Writes a line of data to stdout.
    public func out(_ text: String) { writeOut(text.hasSuffix("\n") ? text : text + "\n") }

    /// Writes a diagnostic line to stderr (even with --quiet: warnings matter).
    public func err(_ text: String) { writeErr(text.hasSuffix("\n") ? text : text + "\n") }

    /// Writes a note to stderr, unless --quiet.
    public func note(_ text: String) { if !quiet { err(text) } }

    /// Writes raw text to stderr with no newline (progress redraws).
    public func errRaw(_ text: String) { writeErr(text) }

    /// Prints `value` as one JSON document on stdout, under the JSON contract (docs/json.md): the document is an
    /// object carrying `"version": 1`, every key a Swift property names is snake_case (`pendingExport` ->
    /// `pending_export`; keys that are data, like store and table names, stay as they are), keys are sorted.
    /// `value` must encode as an object (a struct or a `[String: ...]` dictionary).
    public func json<T: Encodable>(_ value: T) {
        write(value, pretty: true)
    }

    /// Prints `value` as one compact JSON line under the same contract (for `watch`).
    public func jsonLine<T: Encodable>(_ value: T) {
        write(value, pretty: false)
    }

    private func write<T: Encodable>(_ value: T, pretty: Bool) {
        do {
            let data = try Console.encoder(pretty: pretty).encode(JSONEnvelope(body: value))
            out(String(decoding: data, as: UTF8.self))
        } catch {
            err("error: internal: cannot encode the JSON document: \(error)")
        }
    }

    /// The encoder of every JSON document storectl prints.
    public static func encoder(pretty: Bool) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            : [.sortedKeys, .withoutEscapingSlashes]
        encoder.keyEncodingStrategy = .custom { path in
            guard let key = path.last else { return JSONKey("") }
            if key is any VerbatimCodingKey || key.intValue != nil { return key }
            return JSONKey(JSONContract.snakeCase(key.stringValue))
        }
        return encoder
    }

    /// Wraps `text`, bound for stdout, in an ANSI colour when stdout may be coloured.
    public func paintOut(_ text: String, _ code: String) -> String {
        colorOut ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    /// Wraps `text`, bound for stderr, in an ANSI colour when stderr may be coloured.
    public func paint(_ text: String, _ code: String) -> String {
        color ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }
}

/// A JSON document: `"version"` first, then the body's own keys, in the same object.
struct JSONEnvelope<Body: Encodable>: Encodable {
    var body: Body

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: JSONKey.self)
        try c.encode(JSONContract.version, forKey: JSONKey("version"))
        try body.encode(to: encoder)
    }
}

/// A key made at run time (the snake_case form of a property name).
struct JSONKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { stringValue = string }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// Structured debug log lines on stderr, with --verbose or STORECTL_LOG=debug:
/// `storectl: level=debug event=command path="storectl sync" config=/srv/app/config.yaml`.
public final class Log: @unchecked Sendable {
    private let console: Console
    public let enabled: Bool

    public init(console: Console, enabled: Bool) {
        self.console = console
        self.enabled = enabled
    }

    /// Writes one `key=value` line (logfmt) when enabled. Never give it a secret.
    public func debug(_ event: String, _ fields: [String: String] = [:]) {
        guard enabled else { return }
        var line = "storectl: time=\(ISOTime.string(unixMilliseconds: Int64(Date().timeIntervalSince1970 * 1000), fractional: true)) level=debug event=\(event)"
        for key in fields.keys.sorted() {
            guard let value = fields[key] else { continue }
            let plain = !value.isEmpty && !value.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline })
            line += " \(key)=" + (plain ? value : JSONText.quoted(value))
        }
        console.err(line)
    }
}

/// A progress bar on stderr, drawn only on a terminal and never with --quiet or --json:
/// `export [##########--------------------] 1200/3600  33%  2.4k/s  ETA 1s`.
public final class Progress {
    private let console: Console
    private let label: String
    private let enabled: Bool
    private let started: Double
    private var lastDraw = 0.0
    private var drawn = false

    public init(console: Console, label: String, json: Bool) {
        self.console = console
        self.label = label
        self.enabled = console.isTerminal && !console.quiet && !json
        self.started = Date().timeIntervalSince1970
    }

    /// Redraws the bar, at most ten times a second.
    public func update(done: Int, total: Int?) {
        guard enabled else { return }
        let now = Date().timeIntervalSince1970
        guard now - lastDraw > 0.1 || done == total else { return }
        lastDraw = now
        drawn = true
        console.errRaw("\r\u{1B}[2K" + Progress.line(label: label, done: done, total: total, elapsed: now - started))
    }

    /// The text of the bar: count, percentage, rate and time left (when the total is known).
    static func line(label: String, done: Int, total: Int?, elapsed: Double) -> String {
        let rate = elapsed > 0 ? Double(done) / elapsed : 0
        var text = label
        if let total, total > 0 {
            let width = 30
            let filled = min(width, done * width / total)
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            text += " [\(bar)] \(done)/\(total)  \(min(100, done * 100 / total))%"
        } else {
            text += " \(done)"
        }
        if rate > 0 { text += "  " + Progress.rate(rate) }
        if let total, total > done, rate > 0 { text += "  ETA " + Progress.duration(Double(total - done) / rate) }
        return text
    }

    /// Items per second, short: `850/s`, `2.4k/s`, `1.2M/s`.
    static func rate(_ perSecond: Double) -> String {
        if perSecond >= 1_000_000 { return oneDecimal(perSecond / 1_000_000) + "M/s" }
        if perSecond >= 1_000 { return oneDecimal(perSecond / 1_000) + "k/s" }
        return "\(Int(perSecond.rounded()))/s"
    }

    /// A duration, short: `45s`, `3m05s`, `1h02m`.
    static func duration(_ seconds: Double) -> String {
        let s = max(0, Int(seconds.rounded(.up)))
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m" + (s % 60 < 10 ? "0" : "") + "\(s % 60)s" }
        return "\(s / 3600)h" + ((s % 3600) / 60 < 10 ? "0" : "") + "\((s % 3600) / 60)m"
    }

    private static func oneDecimal(_ value: Double) -> String {
        let tenths = Int((value * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    /// Clears the bar's line (the next update draws it again).
    public func finish() {
        guard enabled, drawn else { return }
        drawn = false
        console.errRaw("\r\u{1B}[2K")
    }
}
