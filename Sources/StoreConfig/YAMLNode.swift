import StoreBase

/// A position in a YAML source.
///
/// `line` and `column` are 1-based and count characters (as editors and libyaml do); `offset` is the byte offset
/// into the UTF-8 source, which is what edits need.
public struct YAMLMark: Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var column: Int
    public var offset: Int

    public init(line: Int, column: Int, offset: Int) {
        self.line = line
        self.column = column
        self.offset = offset
    }

    public var description: String { "\(line):\(column)" }
}

/// How a scalar was written.
public enum YAMLScalarStyle: String, Sendable, Equatable {
    case plain
    case singleQuoted = "single-quoted"
    case doubleQuoted = "double-quoted"
    case literal
    case folded
}

/// One `key: value` entry of a mapping.
public struct YAMLPair: Sendable {
    public var key: YAMLNode
    public var value: YAMLNode

    public init(key: YAMLNode, value: YAMLNode) {
        self.key = key
        self.value = value
    }
}

/// A node of a parsed YAML document: a scalar, a mapping or a sequence, with where it was written.
public struct YAMLNode: Sendable {
    public enum Kind: Sendable {
        /// The scalar's value (after YAML unquoting and, once expanded, `${VAR}` expansion) and its style.
        case scalar(String, YAMLScalarStyle)
        /// The entries, in file order.
        case mapping([YAMLPair])
        /// The items, in file order.
        case sequence([YAMLNode])
    }

    public var kind: Kind
    /// Where the node starts (for a scalar: its first character, or its opening quote or `|`/`>` indicator).
    public var start: YAMLMark
    /// Just after the node's last character.
    public var end: YAMLMark
    /// For a scalar, the bytes of its source text, quotes included (a block scalar: from its indicator to its last
    /// non-blank character). Empty for an implicit null.
    public var sourceRange: Range<Int>
    /// Whether a mapping or sequence is written in flow style (`{...}`, `[...]`).
    public var isFlow: Bool
    /// Whether this is the nothing after `key:`, which YAML reads as null.
    public var isImplicitNull: Bool
    /// Whether the scalar's value came through a `${VAR}` reference.
    public var fromReference: Bool

    public init(kind: Kind, start: YAMLMark, end: YAMLMark, sourceRange: Range<Int>, isFlow: Bool = false,
                isImplicitNull: Bool = false, fromReference: Bool = false)
    {
        self.kind = kind
        self.start = start
        self.end = end
        self.sourceRange = sourceRange
        self.isFlow = isFlow
        self.isImplicitNull = isImplicitNull
        self.fromReference = fromReference
    }

    /// The scalar's value, or nil for a mapping or a sequence.
    public var scalar: String? {
        if case .scalar(let value, _) = kind { return value }
        return nil
    }

    /// The scalar's style, or nil for a mapping or a sequence.
    public var style: YAMLScalarStyle? {
        if case .scalar(_, let style) = kind { return style }
        return nil
    }

    /// The entries of a mapping, or nil.
    public var pairs: [YAMLPair]? {
        if case .mapping(let pairs) = kind { return pairs }
        return nil
    }

    /// The items of a sequence, or nil.
    public var items: [YAMLNode]? {
        if case .sequence(let items) = kind { return items }
        return nil
    }

    /// Whether YAML reads the node as null: nothing, `~` or `null`, unquoted.
    public var isNull: Bool {
        guard case .scalar(let value, .plain) = kind else { return false }
        return isImplicitNull || ["", "~", "null", "Null", "NULL"].contains(value)
    }

    /// The value for `key` in a mapping.
    public subscript(key: String) -> YAMLNode? {
        pairs?.first(where: { $0.key.scalar == key })?.value
    }

    /// What the node is, for messages: `'text'`, `a mapping`, `a list` or `nothing`.
    var described: String {
        if isNull { return "nothing" }
        switch kind {
        case .scalar(let value, _): return "'\(SourceText.printable(value))'"
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        }
    }
}

/// A parsed YAML document: its root node (nil for an empty file) and the source it came from.
public struct YAMLDocument: Sendable {
    public var root: YAMLNode?
    public var source: SourceText

    public init(root: YAMLNode?, source: SourceText) {
        self.root = root
        self.source = source
    }

    /// The node at dotted `path` components, walking mappings by key.
    public func node(at components: [String]) -> YAMLNode? {
        var node = root
        for component in components {
            node = node?[component]
        }
        return node
    }
}

/// The bytes of a YAML source with the indexes that turn libyaml's character marks into byte offsets and back.
public struct SourceText: Sendable {
    /// The UTF-8 source, as read.
    public let bytes: [UInt8]
    /// The length of a leading UTF-8 byte order mark (libyaml skips it without counting it).
    let bomLength: Int
    /// The byte offset of each character after the BOM, then the end of the text.
    private let characterStarts: [Int]
    /// The byte offset of the start of each line.
    private let lineStarts: [Int]

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
        let bom = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        bomLength = bom
        var starts: [Int] = []
        starts.reserveCapacity(bytes.count + 1)
        var lines = [0]
        for i in bom..<bytes.count {
            // A UTF-8 continuation byte is 10xxxxxx; every other byte starts a character.
            if bytes[i] & 0xC0 != 0x80 { starts.append(i) }
            if bytes[i] == 0x0A { lines.append(i + 1) }
        }
        starts.append(bytes.count)
        characterStarts = starts
        lineStarts = lines
    }

    /// The byte offset of the character libyaml numbers `index` (`yaml_mark_t.index` counts characters).
    public func byteOffset(ofCharacter index: Int) -> Int {
        guard index >= 0 else { return bomLength }
        return index < characterStarts.count ? characterStarts[index] : bytes.count
    }

    /// The number of lines (a final line break does not start a new line).
    public var lineCount: Int {
        if let last = lineStarts.last, last == bytes.count, lineStarts.count > 1 { return lineStarts.count - 1 }
        return lineStarts.count
    }

    /// The text of 1-based `line`, without its line break.
    public func lineText(_ line: Int) -> String {
        guard line >= 1, line <= lineStarts.count else { return "" }
        let start = max(lineStarts[line - 1], line == 1 ? bomLength : 0)
        var end = line < lineStarts.count ? lineStarts[line] - 1 : bytes.count
        if end > start, bytes[end - 1] == 0x0D { end -= 1 }
        guard end > start else { return "" }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    /// The 1-based line and character column of byte `offset`.
    public func position(ofByte offset: Int) -> (line: Int, column: Int) {
        let target = min(max(offset, 0), bytes.count)
        var low = 0
        var high = lineStarts.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if lineStarts[mid] <= target { low = mid } else { high = mid - 1 }
        }
        let lineStart = max(lineStarts[low], low == 0 ? bomLength : 0)
        var column = 1
        var i = lineStart
        while i < target {
            if bytes[i] & 0xC0 != 0x80 { column += 1 }
            i += 1
        }
        return (low + 1, column)
    }

    /// The mark of byte `offset`.
    public func mark(ofByte offset: Int) -> YAMLMark {
        let (line, column) = position(ofByte: offset)
        return YAMLMark(line: line, column: column, offset: offset)
    }

    /// The byte offset of the start of 1-based `line`.
    func lineStart(_ line: Int) -> Int {
        guard line >= 1 else { return 0 }
        return line <= lineStarts.count ? lineStarts[line - 1] : bytes.count
    }

    /// The widest source line an excerpt shows; a longer line is cut to this many characters around the caret.
    static let excerptWidth = 100

    /// The source line and a caret under `column`, as printed under an error:
    ///
    ///        12 |     mode: clod
    ///           |           ^
    ///
    /// Secrets never show: the value of every `secret:` (or `password:`) key, in block or flow style, and every
    /// password a URL or a libpq `key=value` string on the line holds are replaced by `<redacted>`. A line longer
    /// than `excerptWidth` is cut around the caret, with `…` where text was left out, and control characters show
    /// as `?`.
    public func excerpt(line: Int, column: Int) -> [String] {
        guard line >= 1, line <= lineStarts.count else { return [] }
        let start = max(lineStarts[line - 1], line == 1 ? bomLength : 0)
        let raw = Array(lineText(line).utf8)
        // The caret's byte offset in the line, from its character column.
        var caretByte = 0
        var seen = 1
        while caretByte < raw.count, seen < column {
            caretByte += 1
            while caretByte < raw.count, raw[caretByte] & 0xC0 == 0x80 { caretByte += 1 }
            seen += 1
        }
        let lineEnd = line < lineStarts.count ? lineStarts[line] : bytes.count
        let masks = secretRanges(before: lineEnd).compactMap { range -> Range<Int>? in
            let lower = max(range.lowerBound - start, 0)
            let upper = min(range.upperBound - start, raw.count)
            return lower < upper ? lower..<upper : nil
        }
        func shown(_ bytes: ArraySlice<UInt8>) -> String {
            var out: [UInt8] = []
            var i = bytes.startIndex
            while i < bytes.endIndex {
                if let mask = masks.first(where: { $0.contains(i) }) {
                    out += Array(Redaction.placeholder.utf8)
                    i = max(mask.upperBound, i + 1)
                    continue
                }
                out.append(bytes[i])
                i += 1
            }
            return Self.redacted(String(decoding: out, as: UTF8.self))
        }
        let text = shown(raw[...]).unicodeScalars.map { scalar -> Character in
            scalar == "\t" || !(scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)) ? Character(scalar) : "?"
        }
        // A column past the end of the line (libyaml's mark at the end of the text) points just after its last
        // character.
        let caret = min(shown(raw[..<caretByte]).count + (column - seen), text.count)
        // Cut to a readable width around the caret.
        var lower = 0
        var upper = text.count
        if text.count > Self.excerptWidth {
            lower = max(0, min(caret - Self.excerptWidth / 2, text.count - Self.excerptWidth))
            upper = min(text.count, lower + Self.excerptWidth)
        }
        let body = (lower > 0 ? "…" : "") + String(text[lower..<upper]) + (upper < text.count ? "…" : "")
        var pad = lower > 0 ? " " : ""
        for i in lower..<max(lower, min(caret, upper)) { pad.append(text[i] == "\t" ? "\t" : " ") }
        let number = String(line)
        let width = max(5, number.count)
        let gutter = String(repeating: " ", count: width - number.count) + number
        return ["\(gutter) | \(body)", String(repeating: " ", count: width) + " | " + pad + "^"]
    }

    /// A value as an error may quote it: `<redacted>` when it mentions a secret key (`secret:hunter2`, written
    /// without the space YAML needs), else with every password of a URL or connection string in it redacted.
    static func printable(_ value: String) -> String {
        let lower = value.lowercased()
        if secretKeys.contains(where: { lower.contains($0) }) { return Redaction.placeholder }
        return Redaction.text(value)
    }

    /// The keys whose values are secrets wherever they appear in a config.
    static let secretKeys: Set<String> = ["secret", "password", "sslpassword", "encryption_key"]

    /// `line` with the value of every secret key (block or flow style) and every password in a URL or a libpq
    /// `key=value` string replaced by `<redacted>`.
    static func redacted(_ line: String) -> String {
        let chars = Array(line)
        var out = ""
        var i = 0
        // A line inside a flow mapping spread over lines has its '{' on an earlier line; it ends in ',' or '}'.
        let last = chars.lastIndex(where: { $0 != " " && $0 != "\t" }).map { chars[$0] }
        var inFlow = last == "," || last == "}" || last == "]"
        while i < chars.count {
            let c = chars[i]
            if c == "{" || c == "[" { inFlow = true }
            // A key starts after the indentation, a '- ', a '{' or a ','; it may be quoted.
            let atKeyStart = i == 0 || " \t{,-".contains(chars[i - 1])
            if atKeyStart, let (length, _) = secretKey(in: chars, at: i) {
                var j = i + length
                while j < chars.count, chars[j] == " " || chars[j] == "\t" { j += 1 }
                if j < chars.count, chars[j] == ":" {
                    // `secret:hunter2`, without the space YAML needs, is meant as a key too.
                    out += String(chars[i...j]) + " " + Redaction.placeholder
                    j += 1
                    while j < chars.count, chars[j] == " " || chars[j] == "\t" { j += 1 }
                    let placeholder = Array(Redaction.placeholder)
                    if j + placeholder.count <= chars.count, Array(chars[j..<(j + placeholder.count)]) == placeholder {
                        // Already hidden (the scanner found the value): keep what follows.
                        i = j + placeholder.count
                        continue
                    }
                    // The value runs to the end of the line, or in flow style to the next ',' or '}' outside quotes.
                    guard inFlow else { return Redaction.text(out) }
                    var quote: Character?
                    while j < chars.count {
                        let d = chars[j]
                        if let q = quote {
                            if d == q { quote = nil }
                        } else if d == "'" || d == "\"" {
                            quote = d
                        } else if d == "," || d == "}" {
                            break
                        }
                        j += 1
                    }
                    i = j
                    continue
                }
            }
            out.append(c)
            i += 1
        }
        return Redaction.text(out)
    }

    /// The length of the secret key (`secret`, `"secret"`, `'password'`, ...) at `i`, if one starts there.
    private static func secretKey(in chars: [Character], at i: Int) -> (Int, String)? {
        for key in secretKeys {
            for quote in ["", "\"", "'"] {
                let candidate = Array(quote + key + quote)
                if i + candidate.count <= chars.count, Array(chars[i..<(i + candidate.count)]) == candidate {
                    return (candidate.count, key)
                }
            }
        }
        return nil
    }
}
