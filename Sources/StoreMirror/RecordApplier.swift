import StoreBase
import StoreCloud
import StoreSQLite

/// Applies cloud records to the local store. Runs inside a transaction whose author is `cloud-import`.
final class RecordApplier {
    enum Outcome: Equatable {
        case applied
        case deleted
        /// Already known (the device's own echo, or a repeat).
        case skipped
        /// Waiting for a parent that has not arrived yet.
        case pending
        /// The record's type is not a table this store tracks.
        case unknownType
        /// A conflict under merge_policy `error`.
        case conflict
    }

    let db: Connection
    let entities: [String: EntityMap]
    let policy: MergePolicy
    let exportToken: Int64
    let codec: FieldCodec
    /// Whether any local change after the export token exists; when false, no merge is ever needed.
    let hasPendingLocal: Bool
    var conflicts: [ConflictReport] = []
    /// Generated SQL per entity and purpose, built once per import rather than once per record.
    private var sqlTexts: [String: String] = [:]

    private func sql(_ key: String, _ entity: EntityMap, _ make: () -> String) -> String {
        let k = key + "\u{0}" + entity.name
        if let text = sqlTexts[k] { return text }
        let text = make()
        sqlTexts[k] = text
        return text
    }

    /// Whether any record waits for a parent (when none does, applying a record need not look there).
    var hasParked: Bool

    /// Entities with a `unique:` rule: their applied rows are listed in `temp._storectl_touched` for dedup.
    let dedupEntities: Set<String>

    init(db: Connection, entities: [String: EntityMap], policy: MergePolicy, dedupEntities: Set<String> = []) throws {
        self.db = db
        self.dedupEntities = dedupEntities
        self.hasParked = try db.scalar("SELECT EXISTS (SELECT 1 FROM _storectl_pending)")?.int64 == 1
        if !dedupEntities.isEmpty {
            try db.execute("CREATE TEMP TABLE IF NOT EXISTS _storectl_touched(entity TEXT NOT NULL, pk TEXT NOT NULL, "
                           + "PRIMARY KEY (entity, pk)) WITHOUT ROWID; DELETE FROM temp._storectl_touched;")
        }
        self.entities = entities
        self.policy = policy
        self.codec = FieldCodec(db: db)
        let token = try MirrorState.exportToken(db)
        self.exportToken = token
        self.hasPendingLocal = try db.scalar(
            "SELECT 1 FROM _storectl_history WHERE seq > ? AND author <> ? LIMIT 1",
            [token, MirrorState.importAuthor]) != nil
    }

    struct MapEntry {
        var pk: String
        var tag: String?
        var base: String?
        var deleted: Bool
    }

    func mapEntry(name: String) throws -> MapEntry? {
        let s = try db.cached("SELECT pk, change_tag, base, deleted FROM _storectl_records WHERE record_name = ?")
        try s.bind([name])
        guard try s.step() else { return nil }
        let entry = MapEntry(pk: s.string(0) ?? "[]", tag: s.string(1), base: s.string(2), deleted: s.int64(3) == 1)
        try s.reset()
        return entry
    }

    func rowExists(_ entity: EntityMap, pk: String) throws -> Bool {
        let s = try db.cached(sql("exists", entity) {
            "SELECT 1 FROM \(entity.quotedName) t WHERE \(entity.pkMatches("t", json: "?1"))"
        })
        try s.bind([pk])
        let found = try s.step()
        try s.reset()
        return found
    }

    /// The columns changed locally since the last export, for one row (every column for an insert).
    /// Returns nil when the row has no local change.
    func localChanges(_ entity: EntityMap, pk: String) throws -> (columns: [String], deleted: Bool)? {
        guard hasPendingLocal else { return nil }
        let s = try db.cached("""
            SELECT op, changed FROM _storectl_history
            WHERE seq > ?1 AND entity = ?2 AND pk = ?3 AND author <> ?4 ORDER BY seq
            """)
        var columns: [String] = []
        var any = false
        var lastOp = ""
        try s.forEach([exportToken, entity.name, pk, MirrorState.importAuthor]) { row in
            any = true
            lastOp = row.string(0) ?? ""
            if lastOp == "I" {
                columns = entity.fieldColumns
            } else if lastOp == "U", let changed = row.string(1) {
                for c in try codecColumns(changed) where !columns.contains(c) { columns.append(c) }
            }
        }
        guard any else { return nil }
        return (columns.filter { entity.fieldColumns.contains($0) }, lastOp == "D")
    }

    private func codecColumns(_ json: String) throws -> [String] {
        let s = try db.cached("SELECT value FROM json_each(?)")
        var out: [String] = []
        try s.forEach([json]) { row in if let v = row.string(0) { out.append(v) } }
        return out
    }

    /// Applies one record from the cloud.
    func apply(_ record: CloudRecord, respectLocalChanges: Bool = true) throws -> Outcome {
        guard let entity = entities[record.recordType] else { return .unknownType }
        let entry = try mapEntry(name: record.recordName)
        if let entry, entry.tag == record.changeTag { return .skipped }
        if record.deleted {
            return try applyDeletion(record, entity: entity, entry: entry, respectLocalChanges: respectLocalChanges)
        }
        if entity.isSurrogate, entity.references.isEmpty, entry == nil || entry?.deleted == true, entity.pathSafe,
           !Self.mentionsBlob(record.fields)
        {
            return try insertNew(record, entity: entity, entry: entry)
        }
        let fields = try codec.decode(record.fields)
        // Resolve references to local keys; a missing parent parks the record until the parent arrives.
        var resolved: [String: Value] = [:]
        for (column, value) in fields {
            switch value {
            case .value(let v): resolved[column] = v
            case .ref(let name):
                guard let name else { resolved[column] = .null; continue }
                guard let ref = entity.reference(for: column),
                      let parentKey = try parentKey(parent: ref.parent, recordName: name)
                else {
                    try park(record)
                    return .pending
                }
                resolved[column] = parentKey
            }
        }
        // Which local row is it?
        // A deleted surrogate-keyed row's rowid may belong to a new, unrelated row by now.
        var pk: String? = entry?.deleted == true && entity.isSurrogate ? nil : entry?.pk
        if pk == nil && !entity.isSurrogate {
            pk = try canonicalKey(entity, values: entity.primaryKey.map { resolved[$0] ?? .null })
        }
        let exists = try pk.map { try rowExists(entity, pk: $0) } ?? false
        var columns = entity.fieldColumns
        if exists, respectLocalChanges, let pk, let local = try localChanges(entity, pk: pk) {
            switch policy {
            case .error:
                conflicts.append(ConflictReport(entity: entity.name, recordName: record.recordName,
                                                localColumns: local.columns, serverDeleted: false))
                return .conflict
            case .serverWins:
                break
            case .localWins:
                columns = []
            case .propertyLocalWins:
                columns = columns.filter { !local.columns.contains($0) }
            case .propertyServerWins:
                let serverChanged = try codec.differing(entry?.base, record.fields, columns: entity.fieldColumns)
                columns = columns.filter { !local.columns.contains($0) || serverChanged.contains($0) }
            }
        }
        var finalPK: String
        if exists, let pk {
            if !columns.isEmpty { try update(entity, pk: pk, columns: columns, values: resolved) }
            finalPK = pk
        } else {
            finalPK = try insert(entity, values: resolved)
        }
        try finish(record, entity: entity, entry: entry, pk: finalPK)
        return .applied
    }

    /// Whether the fields text contains `"$blob"` (a byte scan: no Foundation on this hot path).
    static func mentionsBlob(_ text: String) -> Bool {
        let needle = Array("\"$blob\"".utf8)
        let utf8 = text.utf8
        return utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            guard bytes.count >= needle.count else { return false }
            var i = 0
            while i <= bytes.count - needle.count {
                if bytes[i] == needle[0] && bytes[i + 1] == needle[1] {
                    var match = true
                    for j in 2..<needle.count where bytes[i + j] != needle[j] {
                        match = false
                        break
                    }
                    if match { return true }
                }
                i += 1
            }
            return false
        } ?? text.contains("\"$blob\"")
    }

    /// The common case of a large import: a new row of a surrogate-keyed table with no references. SQLite's JSON
    /// functions decode the fields inside the INSERT itself.
    private func insertNew(_ record: CloudRecord, entity: EntityMap, entry: MapEntry?) throws -> Outcome {
        let s = try db.cached(sql("insertNew", entity) {
            let columns = entity.fieldColumns
            return """
                INSERT INTO \(entity.quotedName)(\(columns.map(quoteIdentifier).joined(separator: ", ")))
                VALUES (\(columns.map { "json_extract(?1, \(quoteLiteral(jsonPath($0))))" }.joined(separator: ", ")))
                """
        })
        try s.bind([record.fields])
        try s.step()
        try finish(record, entity: entity, entry: entry, pk: "[\(db.lastInsertRowID)]")
        return .applied
    }

    /// Records an applied record: the record map, the parked list, and the rows dedup must look at.
    private func finish(_ record: CloudRecord, entity: EntityMap, entry: MapEntry?, pk: String) throws {
        if let entry, entry.pk != pk {
            // The name still points at another key (a deleted row's old rowid): move it.
            try db.run("DELETE FROM _storectl_records WHERE record_name = ?1 AND NOT (entity = ?2 AND pk = ?3)",
                       [record.recordName, entity.name, pk])
        }
        let s = try db.cached("""
            INSERT INTO _storectl_records(entity, pk, record_name, change_tag, base, deleted) VALUES (?1, ?2, ?3, ?4, ?5, 0)
            ON CONFLICT(entity, pk) DO UPDATE SET record_name = excluded.record_name, change_tag = excluded.change_tag,
                base = excluded.base, deleted = 0
            """)
        try s.bind([entity.name, pk, record.recordName, record.changeTag, record.fields])
        try s.step()
        if hasParked {
            try db.run("DELETE FROM _storectl_pending WHERE record_name = ?", [record.recordName])
        }
        if dedupEntities.contains(entity.name) {
            try db.run("INSERT OR IGNORE INTO temp._storectl_touched(entity, pk) VALUES (?, ?)", [entity.name, pk])
        }
    }

    private func applyDeletion(_ record: CloudRecord, entity: EntityMap, entry: MapEntry?,
                               respectLocalChanges: Bool) throws -> Outcome
    {
        if hasParked { try db.run("DELETE FROM _storectl_pending WHERE record_name = ?", [record.recordName]) }
        guard let entry else { return .skipped }
        let exists = try rowExists(entity, pk: entry.pk)
        if exists, respectLocalChanges, let local = try localChanges(entity, pk: entry.pk), !local.deleted {
            switch policy {
            case .error:
                conflicts.append(ConflictReport(entity: entity.name, recordName: record.recordName,
                                                localColumns: local.columns, serverDeleted: true))
                return .conflict
            case .localWins, .propertyLocalWins:
                // Keep the row; the next export saves it over the tombstone.
                try setMap(entity: entity.name, pk: entry.pk, name: record.recordName, tag: record.changeTag,
                           base: nil, deleted: false)
                return .skipped
            case .serverWins, .propertyServerWins:
                break
            }
        }
        if exists {
            let s = try db.cached("DELETE FROM \(entity.quotedName) WHERE \(entity.pkMatches(entity.quotedName, json: "?1"))")
            try s.bind([entry.pk])
            try s.step()
        }
        try setMap(entity: entity.name, pk: entry.pk, name: record.recordName, tag: record.changeTag, base: nil,
                   deleted: true)
        return exists ? .deleted : .skipped
    }

    func parentKey(parent: String, recordName: String) throws -> Value? {
        let s = try db.cached("""
            SELECT json_extract(pk, '$[0]') FROM _storectl_records WHERE record_name = ? AND entity = ? AND deleted = 0
            """)
        try s.bind([recordName, parent])
        guard try s.step() else { return nil }
        let v = s.column(0)
        try s.reset()
        return v
    }

    func canonicalKey(_ entity: EntityMap, values: [Value]) throws -> String {
        if values.count == 1, case .integer(let v) = values[0] { return "[\(v)]" }
        let params = values.indices.map { EntityMap.jsonValue("?\($0 + 1)") }.joined(separator: ", ")
        return try db.scalar("SELECT json_array(\(params))", values)?.string ?? "[]"
    }

    private func park(_ record: CloudRecord) throws {
        hasParked = true
        try db.run("""
            INSERT INTO _storectl_pending(record_name, record_type, fields, change_tag, seq) VALUES (?, ?, ?, ?, ?)
            ON CONFLICT(record_name) DO UPDATE SET record_type = excluded.record_type, fields = excluded.fields,
                change_tag = excluded.change_tag, seq = excluded.seq
            """, [record.recordName, record.recordType, record.fields, record.changeTag, record.seq])
    }

    private func update(_ entity: EntityMap, pk: String, columns: [String], values: [String: Value]) throws {
        let sets = columns.enumerated().map { "\(quoteIdentifier($1)) = ?\($0 + 2)" }.joined(separator: ", ")
        let s = try db.cached("UPDATE \(entity.quotedName) SET \(sets) WHERE \(entity.pkMatches(entity.quotedName, json: "?1"))")
        try s.bind([pk] + columns.map { values[$0] ?? .null })
        try s.step()
    }

    private func insert(_ entity: EntityMap, values: [String: Value]) throws -> String {
        let columns = entity.fieldColumns
        let text = sql("insert", entity) {
            let names = columns.map(quoteIdentifier).joined(separator: ", ")
            let params = columns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
            if entity.isSurrogate {
                return "INSERT INTO \(entity.quotedName)(\(names)) VALUES (\(params))"
            }
            let keys = entity.primaryKey.map(quoteIdentifier).joined(separator: ", ")
            let others = columns.filter { !entity.primaryKey.contains($0) }
            let update = others.isEmpty ? "NOTHING"
                : "UPDATE SET " + others.map { "\(quoteIdentifier($0)) = excluded.\(quoteIdentifier($0))" }
                    .joined(separator: ", ")
            return "INSERT INTO \(entity.quotedName)(\(names)) VALUES (\(params)) ON CONFLICT(\(keys)) DO \(update)"
        }
        let s = try db.cached(text)
        try s.bind(columns.map { values[$0] ?? .null })
        try s.step()
        if entity.isSurrogate {
            return try canonicalKey(entity, values: [.integer(db.lastInsertRowID)])
        }
        return try canonicalKey(entity, values: entity.primaryKey.map { values[$0] ?? .null })
    }

    func setMap(entity: String, pk: String, name: String, tag: String?, base: String?, deleted: Bool) throws {
        try Self.setMap(db, entity: entity, pk: pk, name: name, tag: tag, base: base, deleted: deleted)
    }

    /// Points `name` at (entity, pk) in the record map, detaching the name from any other key.
    static func setMap(_ db: Connection, entity: String, pk: String, name: String, tag: String?, base: String?,
                       deleted: Bool) throws
    {
        try db.run("DELETE FROM _storectl_records WHERE record_name = ?1 AND NOT (entity = ?2 AND pk = ?3)",
                   [name, entity, pk])
        let s = try db.cached("""
            INSERT INTO _storectl_records(entity, pk, record_name, change_tag, base, deleted) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
            ON CONFLICT(entity, pk) DO UPDATE SET record_name = excluded.record_name, change_tag = excluded.change_tag,
                base = excluded.base, deleted = excluded.deleted
            """)
        try s.bind([entity, pk, name, tag, base, deleted])
        try s.step()
    }

    /// Applies parked records whose parents have arrived, until no more can be applied.
    /// Returns how many are still waiting.
    func retryPending() throws -> Int {
        while true {
            let parked = try db.query("SELECT record_name, record_type, fields, change_tag, seq FROM _storectl_pending ORDER BY seq")
            if parked.isEmpty { return 0 }
            var progress = false
            for row in parked {
                let record = CloudRecord(zone: "", recordName: row[0].string ?? "", recordType: row[1].string ?? "",
                                         fields: row[2].string ?? "{}", changeTag: row[3].string ?? "",
                                         seq: row[4].int64 ?? 0, deleted: false, modifiedBy: "", modifiedAt: 0)
                if try apply(record) != .pending { progress = true }
            }
            if !progress { return parked.count }
        }
    }
}
