/// Small text helpers shared by the layers: "did you mean" suggestions and duration parsing.
public enum Suggest {
    /// The candidate closest to `word` by edit distance, if it is close enough to be a plausible typo.
    ///
    ///     Suggest.closest("stauts", in: ["status", "sync"]) // "status"
    public static func closest(_ word: String, in candidates: some Sequence<String>) -> String? {
        let w = Array(word.lowercased())
        var best: (String, Int)?
        for c in candidates {
            let d = distance(w, Array(c.lowercased()))
            if let current = best, current.1 <= d { continue }
            best = (c, d)
        }
        guard let (name, d) = best else { return nil }
        let limit = max(2, w.count / 3)
        return d <= limit ? name : nil
    }

    /// Damerau-Levenshtein (optimal string alignment) distance.
    public static func distance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var d = Array(repeating: Array(repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
                }
            }
        }
        return d[a.count][b.count]
    }
}

/// A span of time written as `30d`, `12h`, `15m`, `45s` or `500ms`, at most `maximumText` (100 years).
public struct DurationSpec: Equatable, Sendable, CustomStringConvertible {
    public var seconds: Double
    public var text: String

    /// The longest duration accepted: 100 years, so that every duration converts to milliseconds in an `Int64`.
    public static let maximumSeconds: Double = 36_500 * 86_400
    /// `maximumSeconds` as it is written in messages.
    public static let maximumText = "36500d"

    /// Parses `text`, or returns nil when it is not a duration or is longer than `maximumSeconds`.
    public init?(_ text: String) {
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400), ("w", 604800)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            let number = text.dropLast(suffix.count)
            guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
                  let n = Double(number), n >= 0, n.isFinite, n * factor <= Self.maximumSeconds
            else { continue }
            self.seconds = n * factor
            self.text = text
            return
        }
        return nil
    }

    /// `seconds` whole seconds, written `Ns`.
    public static func seconds(_ n: Int) -> DurationSpec {
        DurationSpec(seconds: Double(n), text: "\(n)s")
    }

    private init(seconds: Double, text: String) {
        self.seconds = seconds
        self.text = text
    }

    public var description: String { text }
}

/// JSON text pieces for documents written without an encoder (large ones, where `JSONEncoder`'s per-value cost
/// shows, e.g. `storectl history --json`).
public enum JSONText {
    /// `text` as a JSON string literal (RFC 8259 §7): quotes, backslashes and control characters escaped, everything
    /// else as UTF-8.
    ///
    ///     JSONText.quoted("a\"b\n") // "\"a\\\"b\\n\""
    public static func quoted(_ text: String) -> String {
        var out = "\""
        out.reserveCapacity(text.utf8.count + 2)
        var needsEscape = false
        for byte in text.utf8 where byte < 0x20 || byte == 0x22 || byte == 0x5C {
            needsEscape = true
            break
        }
        if !needsEscape {
            out += text
        } else {
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case "\u{08}": out += "\\b"
                case "\u{0C}": out += "\\f"
                case let c where c.value < 0x20:
                    let hex = String(c.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                default:
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
        return out
    }
}

extension StringProtocol {
    /// The text without leading and trailing spaces and tabs (line breaks kept), like Foundation's
    /// `trimmingCharacters(in: .whitespaces)`.
    public func trimmingSpaces() -> String {
        trimmed { $0.isWhitespace && !$0.isNewline }
    }

    /// The text without leading and trailing whitespace, line breaks included.
    public func trimmingWhitespace() -> String {
        trimmed { $0.isWhitespace }
    }

    private func trimmed(_ drop: (Character) -> Bool) -> String {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}

/// URL percent-encoding.
public enum PercentEncoding {
    /// `text` with its `%XX` escapes decoded, or nil when an escape is malformed or the result is not UTF-8 (as
    /// Foundation's `removingPercentEncoding`).
    ///
    ///     PercentEncoding.decoded("my%20notes.db") // "my notes.db"
    public static func decoded(_ text: String) -> String? {
        guard text.utf8.contains(UInt8(ascii: "%")) else { return text }
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, let hi = Hex.digit(bytes[i + 1]), let lo = Hex.digit(bytes[i + 2]) else {
                    return nil
                }
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }
}

extension String {
    /// The text cut or padded with spaces to exactly `length` characters, like Foundation's
    /// `padding(toLength:withPad:startingAt:)` with a space.
    public func padded(to length: Int) -> String {
        count >= length ? String(prefix(length)) : self + String(repeating: " ", count: length - count)
    }
}

extension String {
    /// The text with every occurrence of `target` replaced, matched byte for byte in UTF-8 (as Foundation's
    /// `replacingOccurrences(of:with:)` matches literally). Unlike `replacing(_:with:)`, which compares whole
    /// characters, a quote followed by a combining mark is still found, which SQL and identifier quoting rely on.
    ///
    ///     "it's".replacingText("'", with: "''") // "it''s"
    public func replacingText(_ target: String, with replacement: String) -> String {
        let t = Array(target.utf8)
        guard let first = t.first else { return self }
        let bytes = Array(utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        var changed = false
        while i < bytes.count {
            if bytes[i] == first, i + t.count <= bytes.count, bytes[i..<(i + t.count)].elementsEqual(t) {
                out.append(contentsOf: replacement.utf8)
                i += t.count
                changed = true
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return changed ? String(decoding: out, as: UTF8.self) : self
    }
}
