import StoreBase
/// A value stored in, or bound to, SQLite: one of its five storage classes.
public enum Value: Hashable, Sendable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    /// Text whose bytes are not valid UTF-8, kept exactly (a Swift `String` would replace them with U+FFFD).
    /// SQLite stores any bytes as text; reading such a column gives this case, and binding it writes the bytes back.
    case textBytes([UInt8])
    case blob([UInt8])

    /// `.text` when `bytes` are valid UTF-8, else `.textBytes` with the bytes as they are.
    public static func text<C: Collection>(bytes: C) -> Value where C.Element == UInt8 {
        if let text = String(validating: bytes, as: UTF8.self) { return .text(text) }
        return .textBytes(Array(bytes))
    }

    public var isNull: Bool { if case .null = self { return true } else { return false } }

    /// The integer, if this is an integer (or a real with an integral value).
    public var int64: Int64? {
        switch self {
        case .integer(let v): return v
        case .real(let d) where d.rounded() == d && abs(d) < 9.2e18: return Int64(d)
        default: return nil
        }
    }

    /// The text, if this is text.
    public var string: String? { if case .text(let s) = self { return s } else { return nil } }

    /// The number as a Double, if this is a number.
    public var double: Double? {
        switch self {
        case .integer(let v): return Double(v)
        case .real(let d): return d
        default: return nil
        }
    }

    /// SQLite's own name for the storage class, as `typeof()` reports it.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .integer: return "integer"
        case .real: return "real"
        case .text, .textBytes: return "text"
        case .blob: return "blob"
        }
    }

    /// The value as an SQL literal, the way SQLite's `quote()` writes it. For messages and generated SQL only.
    public var sqlLiteral: String {
        switch self {
        case .null: return "NULL"
        case .integer(let v): return String(v)
        case .real(let d): return String(d)
        case .text(let s): return "'" + s.replacingText("'", with: "''") + "'"
        case .textBytes(let b): return "CAST(X'" + Hex.string(b, uppercase: true) + "' AS TEXT)"
        case .blob(let b): return "X'" + Hex.string(b, uppercase: true) + "'"
        }
    }

    public var description: String {
        switch self {
        case .null: return "NULL"
        case .integer(let v): return String(v)
        case .real(let d): return String(d)
        case .text(let s): return s
        case .textBytes(let b): return String(decoding: b, as: UTF8.self)
        case .blob(let b): return "<\(b.count) bytes>"
        }
    }
}

extension Value: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral, ExpressibleByNilLiteral,
    ExpressibleByFloatLiteral
{
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(stringLiteral value: String) { self = .text(value) }
    public init(nilLiteral: ()) { self = .null }
    public init(floatLiteral value: Double) { self = .real(value) }
}

/// A Swift type that can be bound to a statement parameter.
public protocol SQLBindable {
    var sqliteValue: Value { get }
}

extension Value: SQLBindable { public var sqliteValue: Value { self } }
extension Int: SQLBindable { public var sqliteValue: Value { .integer(Int64(self)) } }
extension Int64: SQLBindable { public var sqliteValue: Value { .integer(self) } }
extension Int32: SQLBindable { public var sqliteValue: Value { .integer(Int64(self)) } }
extension Double: SQLBindable { public var sqliteValue: Value { .real(self) } }
extension String: SQLBindable { public var sqliteValue: Value { .text(self) } }
extension Substring: SQLBindable { public var sqliteValue: Value { .text(String(self)) } }
extension Bool: SQLBindable { public var sqliteValue: Value { .integer(self ? 1 : 0) } }
extension Optional: SQLBindable where Wrapped: SQLBindable {
    public var sqliteValue: Value { self?.sqliteValue ?? .null }
}

/// Quotes an SQL identifier (a table or column name) so that any name, even one with quotes, spaces or SQL in
/// it, is read as a name and nothing else.
///
///     quoteIdentifier(#"my "table""#) // "\"my \"\"table\"\"\""
public func quoteIdentifier(_ name: String) -> String {
    if !name.utf8.contains(UInt8(ascii: "\"")) { return "\"" + name + "\"" }
    return "\"" + name.replacingText("\"", with: "\"\"") + "\""
}

/// Quotes a string as an SQL text literal.
public func quoteLiteral(_ text: String) -> String {
    if !text.utf8.contains(UInt8(ascii: "'")) { return "'" + text + "'" }
    return "'" + text.replacingText("'", with: "''") + "'"
}
