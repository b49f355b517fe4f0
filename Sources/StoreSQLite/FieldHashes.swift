internal import CSQLite
import StoreBase
import StoreCrypto

/// The record map's form of a record's fields as last synced (its *base*): for each field, a hash of its name and
/// a hash of its name and value. The values themselves are not kept.
///
/// What the base answers is whether a field still holds the value last synced (per-property merges, the export's
/// "nothing really changed" check, rows written without history): a fingerprint answers that in 12 bytes a field,
/// where the values took as much room as the row itself. The values of fields the local table lacks are kept
/// apart, in the map's `extra` (they are sent with the row).
///
/// Layout: 12 bytes a field, sorted: the first 4 bytes of SHA-256(0x00 || name), then the first 8 bytes of
/// SHA-256(0x01 || name || 0x00 || value), big-endian. `name` is the field's name as a JSON string
/// (`json_quote(key)`), `value` its JSON (`json_quote(value)` of `json_each`), so the text '1' and the integer 1
/// differ, as they do in the record. A record without fields is an empty blob; when a name appears twice, the first
/// counts. A collision of two values of one field (one in 2^64) would make a change look like none.
///
///     SELECT storectl_field_hashes(json_quote(key), json_quote(value)) FROM json_each(fields)  -- reals: see above
///     SELECT storectl_base_field(base, json_quote('title'))   -- 8-byte blob, NULL when the base lacks it
public enum FieldHashes {
    /// Bytes per field.
    public static let entrySize = 12

    /// The 4-byte hash of a field name (its JSON string).
    public static func nameHash(_ name: some Collection<UInt8>) throws -> UInt32 {
        var bytes: [UInt8] = [0]
        bytes.append(contentsOf: name)
        return UInt32(truncatingIfNeeded: try bytes.withUnsafeBytes { try Crypto.sha256Prefix64($0) } >> 32)
    }

    /// The 8-byte hash of a field name and value (both JSON).
    public static func valueHash(name: some Collection<UInt8>, value: some Collection<UInt8>) throws -> UInt64 {
        var bytes: [UInt8] = [1]
        bytes.reserveCapacity(name.count + value.count + 2)
        bytes.append(contentsOf: name)
        bytes.append(0)
        bytes.append(contentsOf: value)
        return try bytes.withUnsafeBytes { try Crypto.sha256Prefix64($0) }
    }

    /// The base of `fields`: (name, value) pairs as JSON.
    public static func make(_ fields: [(name: [UInt8], value: [UInt8])]) throws -> [UInt8] {
        var seen = Set<[UInt8]>()
        var entries: [(UInt32, UInt64)] = []
        entries.reserveCapacity(fields.count)
        for field in fields where seen.insert(field.name).inserted {
            entries.append((try nameHash(field.name), try valueHash(name: field.name, value: field.value)))
        }
        entries.sort { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
        var blob: [UInt8] = []
        blob.reserveCapacity(entries.count * entrySize)
        for (name, value) in entries {
            for shift in stride(from: 24, through: 0, by: -8) { blob.append(UInt8(truncatingIfNeeded: name >> UInt32(shift))) }
            for shift in stride(from: 56, through: 0, by: -8) { blob.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
        }
        return blob
    }

    /// The value hashes `base` holds for the field `name` (JSON string): none when it lacks the field, more than
    /// one only when two names share a name hash.
    public static func valueHashes(in base: [UInt8], name: some Collection<UInt8>) throws -> [UInt64] {
        let wanted = try nameHash(name)
        var result: [UInt64] = []
        var offset = 0
        while offset + entrySize <= base.count {
            var n: UInt32 = 0
            for i in 0..<4 { n = n << 8 | UInt32(base[offset + i]) }
            if n == wanted {
                var v: UInt64 = 0
                for i in 4..<12 { v = v << 8 | UInt64(base[offset + i]) }
                result.append(v)
            } else if n > wanted {
                break
            }
            offset += entrySize
        }
        return result
    }

    /// Whether `base` has `value` (JSON) for the field `name`; nil when it lacks the field.
    public static func holds(_ base: [UInt8], name: some Collection<UInt8>, value: some Collection<UInt8>) throws -> Bool? {
        let hashes = try valueHashes(in: base, name: name)
        if hashes.isEmpty { return nil }
        return hashes.contains(try valueHash(name: name, value: value))
    }

    static func bigEndian(_ value: UInt64) -> [UInt8] {
        stride(from: 56, through: 0, by: -8).map { UInt8(truncatingIfNeeded: value >> UInt64($0)) }
    }

    /// Registers `storectl_field_hashes(name, value)` (aggregate: the base of the fields given, an empty blob for
    /// none), `storectl_field_hash(name, value)` (one field's 8-byte value hash) and `storectl_base_field(base,
    /// name)` (the value hash `base` holds for `name`, NULL when it lacks the field or is not a base).
    static func register(_ db: OpaquePointer) {
        sqlite3_create_function_v2(db, "storectl_field_hashes", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil, nil,
                                   { context, argc, argv in
            guard argc == 2, let argv else { return }
            guard let slot = sqlite3_aggregate_context(context, Int32(MemoryLayout<UnsafeMutableRawPointer?>.size))?
                .assumingMemoryBound(to: UnsafeMutableRawPointer?.self) else {
                sqlite3_result_error_nomem(context)
                return
            }
            let box: Accumulator
            if let existing = slot.pointee {
                box = Unmanaged<FieldHashes.Accumulator>.fromOpaque(existing).takeUnretainedValue()
            } else {
                box = FieldHashes.Accumulator()
                slot.pointee = Unmanaged.passRetained(box).toOpaque()
            }
            box.fields.append((FieldHashes.bytes(argv[0]), FieldHashes.bytes(argv[1])))
        }, { context in
            let slot = sqlite3_aggregate_context(context, 0)?.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
            var fields: [(name: [UInt8], value: [UInt8])] = []
            if let existing = slot?.pointee {
                fields = Unmanaged<FieldHashes.Accumulator>.fromOpaque(existing).takeRetainedValue().fields
                slot?.pointee = nil
            }
            do {
                let blob = try FieldHashes.make(fields)
                blob.withUnsafeBytes { sqlite3_result_blob(context, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1),
                                                           Int32($0.count), storectl_sqlite_transient()) }
            } catch {
                sqlite3_result_error(context, "storectl_field_hashes: \(error)", -1)
            }
        }, nil)
        sqlite3_create_function_v2(db, "storectl_field_hash", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
                                   { context, argc, argv in
            guard argc == 2, let argv else { return }
            do {
                let hash = FieldHashes.bigEndian(try FieldHashes.valueHash(name: FieldHashes.bytes(argv[0]), value: FieldHashes.bytes(argv[1])))
                hash.withUnsafeBytes { sqlite3_result_blob(context, $0.baseAddress, 8, storectl_sqlite_transient()) }
            } catch {
                sqlite3_result_error(context, "storectl_field_hash: \(error)", -1)
            }
        }, nil, nil, nil)
        sqlite3_create_function_v2(db, "storectl_base_field", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
                                   { context, argc, argv in
            guard argc == 2, let argv, let base = argv[0], sqlite3_value_type(base) == SQLITE_BLOB else {
                sqlite3_result_null(context)
                return
            }
            do {
                guard let first = try FieldHashes.valueHashes(in: FieldHashes.bytes(base), name: FieldHashes.bytes(argv[1])).first else {
                    sqlite3_result_null(context)
                    return
                }
                FieldHashes.bigEndian(first).withUnsafeBytes {
                    sqlite3_result_blob(context, $0.baseAddress, 8, storectl_sqlite_transient())
                }
            } catch {
                sqlite3_result_error(context, "storectl_base_field: \(error)", -1)
            }
        }, nil, nil, nil)
    }

    fileprivate final class Accumulator {
        var fields: [(name: [UInt8], value: [UInt8])] = []
    }

    /// The bytes of an argument as SQLite renders it as text (NULL: none).
    fileprivate static func bytes(_ value: OpaquePointer?) -> [UInt8] {
        guard let value, let text = sqlite3_value_text(value) else { return [] }
        return Array(UnsafeBufferPointer(start: text, count: Int(sqlite3_value_bytes(value))))
    }
}
