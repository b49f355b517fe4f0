import FoundationEssentials
import StoreBase

/// A JSON value taken from data (a row's fields, a record's fields), for reports that show it as it is.
///
///     let value = JSONValue(jsonText: #"{"title":"hi"}"#)   // .object(["title": .string("hi")])
public indirect enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// Parses JSON text; text that is not JSON becomes a string value holding it.
    public init(jsonText: String) {
        if let value = try? JSONDecoder().decode(JSONValue.self, from: Data(jsonText.utf8)) {
            self = value
        } else {
            self = .string(jsonText)
        }
    }

    /// A key of a JSON object: data (a column name), written as it is.
    struct Key: VerbatimCodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(_ string: String) { stringValue = string }
        init?(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        if let object = try? decoder.container(keyedBy: Key.self) {
            var result: [String: JSONValue] = [:]
            for key in object.allKeys { result[key.stringValue] = try object.decode(JSONValue.self, forKey: key) }
            self = .object(result)
            return
        }
        if var array = try? decoder.unkeyedContainer() {
            var result: [JSONValue] = []
            while !array.isAtEnd { result.append(try array.decode(JSONValue.self)) }
            self = .array(result)
            return
        }
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let b = try? single.decode(Bool.self) {
            self = .bool(b)
        } else if let i = try? single.decode(Int64.self) {
            self = .integer(i)
        } else if let d = try? single.decode(Double.self) {
            self = .number(d)
        } else {
            self = .string(try single.decode(String.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .null:
            var c = encoder.singleValueContainer()
            try c.encodeNil()
        case .bool(let b):
            var c = encoder.singleValueContainer()
            try c.encode(b)
        case .integer(let i):
            var c = encoder.singleValueContainer()
            try c.encode(i)
        case .number(let d):
            var c = encoder.singleValueContainer()
            try c.encode(d)
        case .string(let s):
            var c = encoder.singleValueContainer()
            try c.encode(s)
        case .array(let items):
            var c = encoder.unkeyedContainer()
            for item in items { try c.encode(item) }
        case .object(let fields):
            var c = encoder.container(keyedBy: Key.self)
            for (key, value) in fields { try c.encode(value, forKey: Key(key)) }
        }
    }

    /// The value as compact text for people: strings quoted, objects and arrays as JSON.
    public var display: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .integer(let i): return String(i)
        case .number(let d): return String(d)
        case .string(let s): return JSONText.quoted(s)
        case .array(let items): return "[" + items.map(\.display).joined(separator: ", ") + "]"
        case .object(let fields):
            return "{" + fields.keys.sorted().map { JSONText.quoted($0) + ": " + (fields[$0]?.display ?? "null") }
                .joined(separator: ", ") + "}"
        }
    }
}
