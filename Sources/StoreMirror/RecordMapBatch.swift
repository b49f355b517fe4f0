import StoreBase
import StoreSQLite

/// Record-map upserts gathered in memory and written with one statement per batch (`json_each` over a JSON array
/// of the entries) instead of one statement per record.
///
/// The entries are written in the order they were added, with the same upsert a single entry uses. When the
/// statement fails on the record-name index (a name still attached to another key), it is rolled back as a whole
/// and every entry is written again one by one, each moving its name as `RecordApplier.setMap` does.
///
///     var batch = RecordMapBatch()
///     if !batch.add(entity: "notes", pk: "[1]", name: name, tag: tag, base: fields, deleted: false) { ... }
///     try batch.flush(db)
struct RecordMapBatch {
    struct Entry {
        var entity: String
        var pk: String
        var name: String
        var tag: String?
        var base: String?
        var deleted: Bool
    }

    private(set) var entries: [Entry] = []
    private var json: [UInt8] = []

    var isEmpty: Bool { entries.isEmpty }

    init() {
        json.reserveCapacity(1 << 16)
    }

    static let upsertSQL = """
        INSERT INTO _storectl_records(entity, pk, record_name, change_tag, base, deleted)
        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5 FROM json_each(?1) WHERE 1
        ON CONFLICT(entity, pk) DO UPDATE SET record_name = excluded.record_name,
            change_tag = excluded.change_tag, base = excluded.base, deleted = excluded.deleted
        """

    /// Adds an entry. Returns false (and adds nothing) when a value holds a NUL character, which SQLite's text
    /// binding would cut: the caller writes that entry on its own.
    mutating func add(entity: String, pk: String, name: String, tag: String?, base: String?, deleted: Bool) -> Bool {
        let start = json.count
        json.append(entries.isEmpty ? UInt8(ascii: "[") : UInt8(ascii: ","))
        json.append(UInt8(ascii: "["))
        Self.appendString(entity, to: &json)
        json.append(UInt8(ascii: ","))
        Self.appendString(pk, to: &json)
        json.append(UInt8(ascii: ","))
        Self.appendString(name, to: &json)
        json.append(UInt8(ascii: ","))
        Self.appendOptional(tag, to: &json)
        json.append(UInt8(ascii: ","))
        Self.appendOptional(base, to: &json)
        json.append(UInt8(ascii: ","))
        json.append(deleted ? UInt8(ascii: "1") : UInt8(ascii: "0"))
        json.append(UInt8(ascii: "]"))
        if json[start...].contains(0) {
            json.removeSubrange(start...)
            return false
        }
        entries.append(Entry(entity: entity, pk: pk, name: name, tag: tag, base: base, deleted: deleted))
        return true
    }

    /// Writes the gathered entries and empties the batch.
    /// - Throws: `SQLiteError`.
    mutating func flush(_ db: Connection) throws {
        guard !entries.isEmpty else { return }
        json.append(UInt8(ascii: "]"))
        let text = String(decoding: json, as: UTF8.self)
        let pending = entries
        entries.removeAll(keepingCapacity: true)
        json.removeAll(keepingCapacity: true)
        do {
            let s = try db.cached(Self.upsertSQL)
            try s.bind([text])
            try s.step()
        } catch let error as SQLiteError where error.isConstraint {
            // A name is still attached to another key (an old mapping): write each entry, moving its name.
            for e in pending {
                try RecordApplier.setMap(db, entity: e.entity, pk: e.pk, name: e.name, tag: e.tag, base: e.base,
                                         deleted: e.deleted)
            }
        }
    }

    private static func appendOptional(_ text: String?, to out: inout [UInt8]) {
        if let text {
            appendString(text, to: &out)
        } else {
            out.append(contentsOf: [UInt8(ascii: "n"), UInt8(ascii: "u"), UInt8(ascii: "l"), UInt8(ascii: "l")])
        }
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `text` as a JSON string literal (RFC 8259: quote, backslash and control characters escaped; a NUL
    /// character is left as it is, for `add` to refuse).
    static func appendString(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            // Runs of plain bytes are copied whole; only the bytes that need it are escaped.
            var run = 0
            for i in 0..<bytes.count {
                let byte = bytes[i]
                guard byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || (byte < 0x20 && byte != 0)
                else { continue }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<i]))
                if byte < 0x20 {
                    out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"),
                                            UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
                } else {
                    out.append(UInt8(ascii: "\\"))
                    out.append(byte)
                }
                run = i + 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<bytes.count]))
        }
        out.append(UInt8(ascii: "\""))
    }
}
