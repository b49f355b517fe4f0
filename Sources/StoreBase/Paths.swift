#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Path strings, taken apart and joined the way `NSString`'s path methods do, without loading Foundation's
/// Objective-C bridge (storectl links only FoundationEssentials, which keeps every command's start short).
public enum Path {
    /// The folder part: `a/b/c.db` → `a/b`, `/c.db` → `/`, `c.db` → `` (empty).
    public static func parent(_ path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "" }
        if slash == trimmed.startIndex { return "/" }
        var head = trimmed[..<slash]
        while head.count > 1 && head.hasSuffix("/") { head = head.dropLast() }
        return String(head)
    }

    /// The last component: `a/b/c.db` → `c.db`.
    public static func lastComponent(_ path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/"), trimmed.count > 1 else { return String(trimmed) }
        return String(trimmed[trimmed.index(after: slash)...])
    }

    /// `component` under `folder`, with one slash between them.
    public static func join(_ folder: String, _ component: String) -> String {
        if folder.isEmpty { return component }
        if component.isEmpty { return folder }
        return folder.hasSuffix("/") ? folder + component : folder + "/" + component
    }

    /// `path` with `~` expanded, repeated slashes, `.` and `..` removed (for an absolute path) and no trailing
    /// slash: a lexical normal form, as `NSString.standardizingPath` gives on Linux. Symbolic links are kept.
    public static func standardized(_ path: String) -> String {
        var p = path
        if p == "~" || p.hasPrefix("~/"), let home = getenv("HOME") {
            p = String(cString: home) + p.dropFirst()
        }
        let absolute = p.hasPrefix("/")
        var parts: [Substring] = []
        for part in p.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == "..", absolute {
                if !parts.isEmpty { parts.removeLast() }
                continue
            }
            parts.append(part)
        }
        let joined = parts.joined(separator: "/")
        if absolute { return "/" + joined }
        return joined.isEmpty ? (p.isEmpty ? "" : ".") : joined
    }
}

/// Bytes as hexadecimal text, and back.
public enum Hex {
    /// The value of one hex digit (either case), or nil.
    public static func digit(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Hex text (either case) as bytes; nil when it is not an even number of hex digits.
    ///
    ///     Hex.bytes("00fF") // [0x00, 0xff]
    public static func bytes(_ text: some StringProtocol) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let hi = digit(chars[i]), let lo = digit(chars[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    /// `[0x00, 0xff]` → `00ff` (or `00FF` with `uppercase`).
    public static func string(_ bytes: some Sequence<UInt8>, uppercase: Bool = false) -> String {
        let digits = Array((uppercase ? "0123456789ABCDEF" : "0123456789abcdef").utf8)
        var out: [UInt8] = []
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Writing to the standard streams without buffering in between (diagnostics must not wait for an exit).
public enum StandardStream {
    /// Writes `text` to standard output.
    public static func out(_ text: String) { write(1, text) }
    /// Writes `text` to standard error.
    public static func err(_ text: String) { write(2, text) }

    /// Writes all of `text` to `fd`, retrying short writes and interrupted calls. A closed pipe ends the output.
    private static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count, let base = buffer.baseAddress {
                let n = Glibc.write(fd, base + offset, buffer.count - offset)
                if n > 0 {
                    offset += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }

    /// Everything on standard input until end of file.
    public static func readAllInput() -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return read(0, base, raw.count)
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            result.append(contentsOf: buffer[0..<n])
        }
        return result
    }
}

/// Times as ISO 8601 text in UTC, formatted with the C library's `gmtime_r` (no calendar or time-zone database
/// to load, which matters in commands that scripts call in loops).
public enum ISOTime {
    /// `2024-05-01T10:00:00Z` for whole seconds, `2024-05-01T10:00:00.123Z` with `milliseconds`.
    ///
    ///     ISOTime.string(unixMilliseconds: 1714557600123, fractional: true) // "2024-05-01T10:00:00.123Z"
    public static func string(unixMilliseconds ms: Int64, fractional: Bool) -> String {
        // Floor division, so that times before 1970 keep a positive millisecond part.
        var seconds = time_t(ms / 1000)
        var millis = Int(ms % 1000)
        if millis < 0 {
            millis += 1000
            seconds -= 1
        }
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return String(ms) }
        func pad(_ n: Int32, _ width: Int) -> String {
            let text = String(n)
            return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
        }
        var out = pad(parts.tm_year + 1900, 4) + "-" + pad(parts.tm_mon + 1, 2) + "-" + pad(parts.tm_mday, 2)
        out += "T" + pad(parts.tm_hour, 2) + ":" + pad(parts.tm_min, 2) + ":" + pad(parts.tm_sec, 2)
        if fractional { out += "." + pad(Int32(millis), 3) }
        return out + "Z"
    }
}
