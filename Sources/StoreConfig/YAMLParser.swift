internal import CYAML
import StoreBase

/// Parses YAML text into a `YAMLDocument` with libyaml's event API.
///
/// Duplicate keys, anchors, aliases, tags and more than one document are refused: a config says everything once,
/// in plain sight.
public enum YAMLParser {
    /// The deepest nesting accepted (a guard against pathological input).
    static let maximumDepth = 64

    /// Parses `bytes` (UTF-8).
    /// - Parameter displayPath: the file name used in error locations.
    /// - Throws: `ConfigError` (exit 78) with `file:line:col` for a syntax error, a tab used for indentation,
    ///   a duplicate key, an anchor, alias or tag, or a second document.
    public static func parse(_ bytes: [UInt8], displayPath: String) throws -> YAMLDocument {
        let source = SourceText(bytes)
        let reader = try EventReader(source: source, displayPath: displayPath)
        var builder = TreeBuilder(reader: reader, source: source, displayPath: displayPath)
        let root = try builder.document()
        return YAMLDocument(root: root, source: source)
    }

    /// Parses `text`.
    /// - Throws: `ConfigError`, as `parse(_:displayPath:)`.
    public static func parse(_ text: String, displayPath: String = "<text>") throws -> YAMLDocument {
        try parse(Array(text.utf8), displayPath: displayPath)
    }
}

/// One libyaml event, copied out of C memory.
struct RawEvent {
    enum Kind {
        case streamStart, streamEnd, documentStart, documentEnd, alias
        case scalar(String, YAMLScalarStyle)
        case mappingStart(flow: Bool), mappingEnd
        case sequenceStart(flow: Bool), sequenceEnd
    }

    var kind: Kind
    var start: YAMLMark
    var end: YAMLMark
    var anchor: String?
    var tag: String?
}

/// Owns a libyaml parser and the input bytes it reads, and hands out events one at a time.
final class EventReader {
    // libyaml keeps a pointer to the parser inside the parser (`read_handler_data = parser` in
    // yaml_parser_set_input_string), so the struct lives at a fixed heap address, never in a Swift variable.
    private let parser: UnsafeMutablePointer<yaml_parser_t>
    // "Set a string input. Note that the input pointer must be valid while the parser object exists."
    // (yaml.h, yaml_parser_set_input_string): the bytes live in this buffer until deinit.
    private let input: UnsafeMutableBufferPointer<UInt8>
    private let source: SourceText
    private let displayPath: String

    init(source: SourceText, displayPath: String) throws {
        self.source = source
        self.displayPath = displayPath
        parser = .allocate(capacity: 1)
        input = .allocate(capacity: max(source.bytes.count, 1))
        _ = input.initialize(from: source.bytes)
        guard yaml_parser_initialize(parser) == 1 else {
            parser.deallocate()
            input.deallocate()
            throw StoreError(.software, "cannot initialize the YAML parser (out of memory)")
        }
        yaml_parser_set_input_string(parser, input.baseAddress, source.bytes.count)
    }

    deinit {
        yaml_parser_delete(parser)
        parser.deallocate()
        input.deallocate()
    }

    /// The next event.
    /// - Throws: `ConfigError` for a syntax error.
    func next() throws -> RawEvent {
        var event = yaml_event_t()
        // "An application is responsible for freeing any buffers associated with the produced event object
        // using the yaml_event_delete function." (yaml.h, yaml_parser_parse)
        guard yaml_parser_parse(parser, &event) == 1 else { throw syntaxError() }
        defer { yaml_event_delete(&event) }
        let start = mark(event.start_mark)
        let end = mark(event.end_mark)
        var anchor: String?
        var tag: String?
        let kind: RawEvent.Kind
        switch event.type {
        case YAML_STREAM_START_EVENT: kind = .streamStart
        case YAML_STREAM_END_EVENT: kind = .streamEnd
        case YAML_DOCUMENT_START_EVENT: kind = .documentStart
        case YAML_DOCUMENT_END_EVENT: kind = .documentEnd
        case YAML_ALIAS_EVENT:
            kind = .alias
            anchor = string(event.data.alias.anchor)
        case YAML_SCALAR_EVENT:
            let scalar = event.data.scalar
            let value = scalar.value.map { String(decoding: UnsafeBufferPointer(start: $0, count: scalar.length),
                                                  as: UTF8.self) } ?? ""
            let style: YAMLScalarStyle
            switch scalar.style {
            case YAML_SINGLE_QUOTED_SCALAR_STYLE: style = .singleQuoted
            case YAML_DOUBLE_QUOTED_SCALAR_STYLE: style = .doubleQuoted
            case YAML_LITERAL_SCALAR_STYLE: style = .literal
            case YAML_FOLDED_SCALAR_STYLE: style = .folded
            default: style = .plain
            }
            kind = .scalar(value, style)
            anchor = string(scalar.anchor)
            tag = string(scalar.tag)
        case YAML_MAPPING_START_EVENT:
            kind = .mappingStart(flow: event.data.mapping_start.style == YAML_FLOW_MAPPING_STYLE)
            anchor = string(event.data.mapping_start.anchor)
            tag = string(event.data.mapping_start.tag)
        case YAML_MAPPING_END_EVENT: kind = .mappingEnd
        case YAML_SEQUENCE_START_EVENT:
            kind = .sequenceStart(flow: event.data.sequence_start.style == YAML_FLOW_SEQUENCE_STYLE)
            anchor = string(event.data.sequence_start.anchor)
            tag = string(event.data.sequence_start.tag)
        case YAML_SEQUENCE_END_EVENT: kind = .sequenceEnd
        default: kind = .streamEnd
        }
        return RawEvent(kind: kind, start: start, end: end, anchor: anchor, tag: tag)
    }

    private func string(_ pointer: UnsafeMutablePointer<yaml_char_t>?) -> String? {
        guard let pointer else { return nil }
        return String(cString: pointer)
    }

    /// libyaml's 0-based mark, whose `index` counts characters, as a 1-based mark with a byte offset.
    private func mark(_ m: yaml_mark_t) -> YAMLMark {
        YAMLMark(line: m.line + 1, column: m.column + 1, offset: source.byteOffset(ofCharacter: m.index))
    }

    /// The parser's error as a `ConfigError` pointing at the problem.
    private func syntaxError() -> any Error {
        let p = parser.pointee
        let problem = p.problem.map { String(cString: $0) } ?? "the text is not valid YAML"
        if p.error == YAML_MEMORY_ERROR {
            return StoreError(.software, "out of memory while parsing \(displayPath)")
        }
        if p.error == YAML_READER_ERROR {
            // Reader errors carry a byte offset (problem_offset), not a mark.
            let (line, column) = source.position(ofByte: p.problem_offset)
            return ConfigError(displayPath, source, line: line, column: column, keyPath: "",
                               "invalid text: \(problem)", hint: "save the file as UTF-8 text")
        }
        var at = mark(p.problem_mark)
        if at.line > source.lineCount {
            // At the end of the stream libyaml moves to a line after the last one; point at the end of the text.
            at = source.mark(ofByte: source.bytes.count)
        }
        var error = ConfigError(displayPath, source, line: at.line, column: at.column, keyPath: "",
                                "invalid YAML: \(problem)")
        if let context = p.context.map({ String(cString: $0) }) {
            let c = mark(p.context_mark)
            error.details.append("note: \(context) (line \(c.line), column \(c.column))")
        }
        if at.offset < source.bytes.count, source.bytes[at.offset] == 0x09 {
            error.hint = "indent with spaces: YAML does not allow tabs for indentation"
        } else if problem.contains("mapping values are not allowed") {
            error.hint = "put a space after ':' in keys, and quote values that contain ': '"
        } else if problem.contains("did not find expected key") {
            error.hint = "check the indentation of this line against the keys above it"
        }
        return error
    }
}

/// Builds the node tree from events, checking the rules libyaml leaves to the application.
struct TreeBuilder {
    let reader: EventReader
    let source: SourceText
    let displayPath: String

    init(reader: EventReader, source: SourceText, displayPath: String) {
        self.reader = reader
        self.source = source
        self.displayPath = displayPath
    }

    private func error(_ mark: YAMLMark, _ path: String, _ message: String, hint: String? = nil) -> ConfigError {
        ConfigError(displayPath, source, line: mark.line, column: mark.column, keyPath: path, message, hint: hint)
    }

    /// Reads the stream: nothing, or exactly one document.
    mutating func document() throws -> YAMLNode? {
        var root: YAMLNode?
        var documents = 0
        while true {
            let event = try reader.next()
            switch event.kind {
            case .streamStart, .documentEnd:
                continue
            case .documentStart:
                documents += 1
                if documents > 1 {
                    throw error(event.start, "", "a config holds one YAML document; found a second one",
                                hint: "remove the second '---' and everything after it, or merge the documents")
                }
            case .streamEnd:
                return root
            default:
                root = try node(event, path: "", depth: 0)
            }
        }
    }

    private mutating func node(_ event: RawEvent, path: String, depth: Int) throws -> YAMLNode {
        guard depth < YAMLParser.maximumDepth else {
            throw error(event.start, path, "nesting is deeper than \(YAMLParser.maximumDepth) levels")
        }
        if case .alias = event.kind {
            throw error(event.start, path, "aliases (*\(event.anchor ?? "")) are not supported",
                        hint: "write the value out in full")
        }
        if let anchor = event.anchor {
            throw error(event.start, path, "anchors (&\(anchor)) are not supported",
                        hint: "write the value out in full")
        }
        if let tag = event.tag {
            throw error(event.start, path, "tags (\(tag)) are not supported", hint: "remove the tag")
        }
        switch event.kind {
        case .scalar(let value, let style):
            var range = event.start.offset..<event.end.offset
            if style == .literal || style == .folded {
                // A block scalar's end mark lies after its trailing line breaks (and may sit inside the next
                // line's indentation); the source text ends at its last non-blank byte.
                var end = range.upperBound
                while end > range.lowerBound, [0x20, 0x09, 0x0A, 0x0D].contains(source.bytes[end - 1]) { end -= 1 }
                range = range.lowerBound..<end
            }
            return YAMLNode(kind: .scalar(value, style), start: event.start, end: source.mark(ofByte: range.upperBound),
                            sourceRange: range)
        case .mappingStart(let flow):
            var pairs: [YAMLPair] = []
            var seen: [String: YAMLNode] = [:]
            while true {
                let keyEvent = try reader.next()
                if case .mappingEnd = keyEvent.kind {
                    let end = flow ? keyEvent.end : (pairs.last.map { Self.contentEnd($0) } ?? event.start)
                    return YAMLNode(kind: .mapping(pairs), start: event.start, end: end,
                                    sourceRange: event.start.offset..<end.offset, isFlow: flow)
                }
                let key = try node(keyEvent, path: path, depth: depth + 1)
                guard let name = key.scalar else {
                    throw error(key.start, path, "keys must be plain text, not \(key.described)")
                }
                let keyPath = KeyPath.child(path, name)
                if let first = seen[name] {
                    throw error(key.start, keyPath, "duplicate key, first set at line \(first.start.line)",
                                hint: "remove one of the two '\(name):' entries")
                }
                seen[name] = key
                var value = try node(try reader.next(), path: keyPath, depth: depth + 1)
                if value.scalar == "", value.style == .plain, value.sourceRange.isEmpty {
                    // libyaml places an empty value at the next token, often on a later line; anchor it at its key.
                    value = YAMLNode(kind: value.kind, start: key.start, end: key.end,
                                     sourceRange: key.sourceRange.upperBound..<key.sourceRange.upperBound,
                                     isImplicitNull: true)
                }
                pairs.append(YAMLPair(key: key, value: value))
            }
        case .sequenceStart(let flow):
            var items: [YAMLNode] = []
            while true {
                let itemEvent = try reader.next()
                if case .sequenceEnd = itemEvent.kind {
                    let end = flow ? itemEvent.end : (items.last?.end ?? event.start)
                    return YAMLNode(kind: .sequence(items), start: event.start, end: end,
                                    sourceRange: event.start.offset..<end.offset, isFlow: flow)
                }
                items.append(try node(itemEvent, path: KeyPath.item(path, items.count), depth: depth + 1))
            }
        default:
            throw error(event.start, path, "unexpected YAML structure")
        }
    }

    /// Where a mapping entry's text ends: its value's end, or its key's end when the value is an implicit null.
    static func contentEnd(_ pair: YAMLPair) -> YAMLMark {
        pair.value.isImplicitNull ? pair.key.end : pair.value.end
    }
}

extension SourceText {
    /// The byte ranges of the values of secret keys (`secret:`, `password:`), found with libyaml's scanner so that
    /// a value on another line than its key, a block scalar or a flow mapping spread over lines is found too.
    /// Tokens are read up to the first syntax error; the text before it is all an excerpt can show reliably, and
    /// `redacted(_:)` covers the line of the error itself.
    func secretRanges(before limit: Int) -> [Range<Int>] {
        let parser = UnsafeMutablePointer<yaml_parser_t>.allocate(capacity: 1)
        defer { parser.deallocate() }
        guard yaml_parser_initialize(parser) == 1 else { return [] }
        defer { yaml_parser_delete(parser) }
        let input = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: max(bytes.count, 1))
        defer { input.deallocate() }
        _ = input.initialize(from: bytes)
        yaml_parser_set_input_string(parser, input.baseAddress, bytes.count)
        var ranges: [Range<Int>] = []
        // KEY, SCALAR(secret), VALUE, SCALAR(the value): the state counts how far along that sequence we are.
        var state = 0
        // libyaml's scanner checks every pending simple key at each token, so very deep flow nesting costs the
        // square of its depth: stop at the depth the parser itself refuses, and at the end of the excerpt's line.
        var depth = 0
        while true {
            var token = yaml_token_t()
            // "An application is responsible for freeing any buffers associated with the produced token object
            // using the yaml_token_delete function." (yaml.h, yaml_parser_scan)
            guard yaml_parser_scan(parser, &token) == 1 else { break }
            defer { yaml_token_delete(&token) }
            let type = token.type
            if type == YAML_STREAM_END_TOKEN || type == YAML_NO_TOKEN { break }
            if byteOffset(ofCharacter: Int(token.start_mark.index)) >= limit { break }
            if type == YAML_FLOW_SEQUENCE_START_TOKEN || type == YAML_FLOW_MAPPING_START_TOKEN
                || type == YAML_BLOCK_SEQUENCE_START_TOKEN || type == YAML_BLOCK_MAPPING_START_TOKEN
            {
                depth += 1
                if depth > YAMLParser.maximumDepth { break }
            } else if type == YAML_FLOW_SEQUENCE_END_TOKEN || type == YAML_FLOW_MAPPING_END_TOKEN
                || type == YAML_BLOCK_END_TOKEN
            {
                depth -= 1
            }
            switch (state, type) {
            case (_, YAML_KEY_TOKEN):
                state = 1
            case (1, YAML_SCALAR_TOKEN):
                let scalar = token.data.scalar
                let value = scalar.value.map {
                    String(decoding: UnsafeBufferPointer(start: $0, count: scalar.length), as: UTF8.self)
                } ?? ""
                state = Self.secretKeys.contains(value) ? 2 : 0
            case (2, YAML_VALUE_TOKEN):
                state = 3
            case (3, YAML_SCALAR_TOKEN):
                let lower = byteOffset(ofCharacter: Int(token.start_mark.index))
                let upper = byteOffset(ofCharacter: Int(token.end_mark.index))
                if lower < upper { ranges.append(lower..<upper) }
                state = 0
            default:
                state = 0
            }
        }
        return ranges
    }
}
