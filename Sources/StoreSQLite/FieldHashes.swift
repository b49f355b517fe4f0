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
/// (`json_quote(key)`), `value` its JSON, exact (`FieldHashes.canonicalSQL`: a real with all its digits and a
/// decimal point or an exponent), so the text '1' (`"1"`), the integer 1 (`1`) and the real 1.0 (`1.0`) differ, as
/// they do in the record. A record without fields is an empty blob; when a
/// record names a field twice, either value counts as the one last synced. A collision of two values of one field
/// (one in 2^64) would make a change look like none.
///
///     SELECT storectl_field_hashes(json_quote(key), json_quote(value)) FROM json_each(fields)  -- reals: see above
///     SELECT storectl_field_hashes_of(json_quote('title'), json_quote(title), ...)   -- the same, from columns
///     SELECT storectl_base_has(base, json_quote('title'), json_quote(title))   -- 1 or 0, NULL when it lacks the field
public enum FieldHashes {
    /// Bytes per field.
    public static let entrySize = 12

    /// Computes the hashes: one libcrypto digest context, reused, and the name hashes met so far (a table has few
    /// names). Not `Sendable`: one owner at a time (each connection has its own).
    public final class Hasher {
        private var digest: Digest64?
        /// Names met so far and their hashes, searched in order (a table has few names).
        private var names: [(name: [UInt8], hash: UInt32)] = []

        public init() {}

        private func context() throws -> Digest64 {
            if let digest { return digest }
            let made = try Digest64()
            digest = made
            return made
        }

        /// The 4-byte hash of a field name (its JSON string).
        public func nameHash(_ name: UnsafeRawBufferPointer) throws -> UInt32 {
            for known in names where known.name.count == name.count {
                if known.name.withUnsafeBytes({ $0.elementsEqual(name) }) { return known.hash }
            }
            let hash = UInt32(truncatingIfNeeded: try context().sha256Prefix(tag: 0, name) >> 32)
            if names.count < 256 { names.append((Array(name), hash)) }
            return hash
        }

        /// The 8-byte hash of a field name and value (both JSON).
        public func valueHash(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> UInt64 {
            try context().sha256Prefix(tag: 1, name, value)
        }

        public func valueHash(name: [UInt8], value: [UInt8]) throws -> UInt64 {
            try name.withUnsafeBytes { n in try value.withUnsafeBytes { v in try valueHash(name: n, value: v) } }
        }

        /// The entry of one field.
        func entry(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) throws -> (UInt32, UInt64) {
            (try nameHash(name), try valueHash(name: name, value: value))
        }

        /// The base made of `entries`, sorted.
        static func blob(_ entries: [(UInt32, UInt64)]) -> [UInt8] {
            let sorted = entries.sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
            var blob: [UInt8] = []
            blob.reserveCapacity(sorted.count * entrySize)
            for (name, value) in sorted {
                withUnsafeBytes(of: name.bigEndian) { blob.append(contentsOf: $0) }
                withUnsafeBytes(of: value.bigEndian) { blob.append(contentsOf: $0) }
            }
            return blob
        }

        /// The value hashes `base` holds for the field `name` (JSON string): none when it lacks the field, more
        /// than one when two names share a name hash or a record named a field twice.
        public func valueHashes(in base: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer) throws -> [UInt64] {
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

        /// The entries `base` holds for the fields `names` (JSON strings), as `storectl_field_hashes_of` makes them
        /// from those fields' values; nil when it lacks one of them or holds two values for one.
        public func entries(in base: [UInt8], names: [[UInt8]]) throws -> [UInt8]? {
            var entries: [(UInt32, UInt64)] = []
            for name in names {
                let hashes = try base.withUnsafeBytes { b in try name.withUnsafeBytes { try valueHashes(in: b, name: $0) } }
                guard hashes.count == 1 else { return nil }
                entries.append((try name.withUnsafeBytes { try nameHash($0) }, hashes[0]))
            }
            return Self.blob(entries)
        }

        /// Whether `base` has `value` (JSON) for the field `name`; nil when it lacks the field.
        public func holds(in base: UnsafeRawBufferPointer, name: UnsafeRawBufferPointer,
                          value: UnsafeRawBufferPointer) throws -> Bool? {
            let hashes = try valueHashes(in: base, name: name)
            if hashes.isEmpty { return nil }
            return hashes.contains(try valueHash(name: name, value: value))
        }

        public func holds(_ base: [UInt8], name: [UInt8], value: [UInt8]) throws -> Bool? {
            try base.withUnsafeBytes { b in
                try name.withUnsafeBytes { n in try value.withUnsafeBytes { try holds(in: b, name: n, value: $0) } }
            }
        }
    }

    /// Registers, with a `Hasher` of the connection's own:
    /// - `storectl_field_hashes(name, value)`: aggregate, the base of the fields given (an empty blob for none);
    /// - `storectl_field_hashes_of(name, value, ...)`: the same of the pairs given, for a record whose fields are
    ///   known (no JSON to walk);
    /// - `storectl_base_has(base, name, value)`: 1 when `base` holds that value for the field, 0 when another, NULL
    ///   when it lacks the field or is not a base.
    static func register(_ db: OpaquePointer) {
        let flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC
        let release: @convention(c) (UnsafeMutableRawPointer?) -> Void = { pointer in
            if let pointer { Unmanaged<Hasher>.fromOpaque(pointer).release() }
        }
        let hasher = Hasher()
        func retained() -> UnsafeMutableRawPointer { Unmanaged.passRetained(hasher).toOpaque() }
        sqlite3_create_function_v2(db, "storectl_field_hashes", 2, flags, retained(), nil, { context, argc, argv in
            guard argc == 2, let argv else { return }
            guard let slot = sqlite3_aggregate_context(context, Int32(MemoryLayout<UnsafeMutableRawPointer?>.size))?
                .assumingMemoryBound(to: UnsafeMutableRawPointer?.self) else {
                sqlite3_result_error_nomem(context)
                return
            }
            let box: FieldHashes.Accumulator
            if let existing = slot.pointee {
                box = Unmanaged<FieldHashes.Accumulator>.fromOpaque(existing).takeUnretainedValue()
            } else {
                box = FieldHashes.Accumulator()
                slot.pointee = Unmanaged.passRetained(box).toOpaque()
            }
            do {
                let entry = try FieldHashes.text(argv[0]) { name in
                    try FieldHashes.text(argv[1]) { value in try FieldHashes.hasher(context).entry(name: name, value: value) }
                }
                box.entries.append(entry)
            } catch {
                box.failure = "\(error)"
            }
        }, { context in
            let slot = sqlite3_aggregate_context(context, 0)?.assumingMemoryBound(to: UnsafeMutableRawPointer?.self)
            var entries: [(UInt32, UInt64)] = []
            if let existing = slot?.pointee {
                let box = Unmanaged<FieldHashes.Accumulator>.fromOpaque(existing).takeRetainedValue()
                slot?.pointee = nil
                if let failure = box.failure {
                    sqlite3_result_error(context, "storectl_field_hashes: \(failure)", -1)
                    return
                }
                entries = box.entries
            }
            // Making the blob cannot fail: the failures of the steps were reported above.
            Hasher.blob(entries).withUnsafeBytes {
                sqlite3_result_blob(context, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count),
                                    storectl_sqlite_transient())
            }
        }, release)
        sqlite3_create_function_v2(db, "storectl_field_hashes_of", -1, flags, retained(), { context, argc, argv in
            guard argc % 2 == 0 else {
                sqlite3_result_error(context, "storectl_field_hashes_of: names and values come in pairs", -1)
                return
            }
            do {
                var entries: [(UInt32, UInt64)] = []
                entries.reserveCapacity(Int(argc) / 2)
                for i in stride(from: 0, to: Int(argc), by: 2) {
                    entries.append(try FieldHashes.text(argv?[i]) { name in
                        try FieldHashes.text(argv?[i + 1]) { value in try FieldHashes.hasher(context).entry(name: name, value: value) }
                    })
                }
                Hasher.blob(entries).withUnsafeBytes {
                    sqlite3_result_blob(context, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count),
                                        storectl_sqlite_transient())
                }
            } catch {
                sqlite3_result_error(context, "storectl_field_hashes_of: \(error)", -1)
            }
        }, nil, nil, release)
        sqlite3_create_function_v2(db, "storectl_base_has", 3, flags, retained(), { context, argc, argv in
            guard argc == 3, let argv, let base = argv[0], sqlite3_value_type(base) == SQLITE_BLOB else {
                sqlite3_result_null(context)
                return
            }
            do {
                let bytes = Int(sqlite3_value_bytes(base))
                let holds = try FieldHashes.text(argv[1]) { name in
                    try FieldHashes.text(argv[2]) { value in
                        try FieldHashes.hasher(context).holds(
                            in: UnsafeRawBufferPointer(start: bytes > 0 ? sqlite3_value_blob(base) : nil, count: bytes),
                            name: name, value: value)
                    }
                }
                if let holds { sqlite3_result_int(context, holds ? 1 : 0) } else { sqlite3_result_null(context) }
            } catch {
                sqlite3_result_error(context, "storectl_base_has: \(error)", -1)
            }
        }, nil, nil, release)
    }

    fileprivate final class Accumulator {
        var entries: [(UInt32, UInt64)] = []
        var failure: String?
    }

    /// The reason a function call fails when its hasher is missing (it never is: `register` gives every function one).
    fileprivate struct MissingHasher: Error, CustomStringConvertible {
        var description: String { "the function was registered without its hasher" }
    }

    fileprivate static func hasher(_ context: OpaquePointer?) throws -> Hasher {
        guard let data = sqlite3_user_data(context) else { throw MissingHasher() }
        return Unmanaged<Hasher>.fromOpaque(data).takeUnretainedValue()
    }

    /// Calls `body` with the bytes of an argument as SQLite renders it as text (NULL: none), without a copy.
    fileprivate static func text<T>(_ value: OpaquePointer?, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        guard let value, let text = sqlite3_value_text(value) else { return try body(UnsafeRawBufferPointer(start: nil, count: 0)) }
        return try body(UnsafeRawBufferPointer(start: text, count: Int(sqlite3_value_bytes(value))))
    }
}
