import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// Why one cloud record cannot be applied as it is: it is set aside (in the `Inbox`) with this reason, and
/// every other record still flows.
struct RecordProblem: Error, Equatable {
    var reason: String
    var hint: String
}

/// Applies cloud records to the local store, one at a time. Runs inside a transaction whose author is
/// `cloud-import`; the `Importer` drives it page by page, the `Exporter` uses it to bring a local row to the
/// outcome of a conflict.
///
/// Every record is checked before it touches a row: its fields are a JSON object, a natural key is present, and
/// its type is the one its name was first seen with. A record that fails (here, or in SQLite: a constraint, a
/// type) is a `RecordProblem` for the caller to set aside.
final class RecordApplier {
    enum Outcome: Equatable {
        case applied
        case deleted
        /// Already known (the device's own echo, or a repeat).
        case skipped
        /// Waiting for a parent that has not arrived yet.
        case pending
        /// Held back until the import's other records are in (see `defersUntilSettled`).
        case deferred
        /// The record's type is not a table this store tracks.
        case unknownType
        /// A conflict under merge_policy `error`.
        case conflict
    }

    let db: Connection
    let entities: [String: EntityMap]
    let policy: MergePolicy
    let exportToken: Int64
    /// A data migration this store ran after the zone had it (`SchemaGate.adopt`): the migration's own updates up
    /// to this history seq are the zone's, not local changes.
    let adoptedMigrationThrough: Int64
    let codec: FieldCodec
    var conflicts: [ConflictReport] = []
    /// Generated SQL per entity and purpose, built once per import rather than once per record.
    private var sqlTexts: [String: String] = [:]
    /// Whether any record waits for a parent (when none does, applying a record need not look there).
    var hasParked: Bool
    /// Whether any local change after the export token exists; when false, no merge is ever needed.
    let hasPendingLocal: Bool
    /// Every record wins over the local changes it meets, whole (a read-only participant's import): the row takes
    /// the record's values, UNIQUE columns included, whatever the merge policy.
    var cloudWins = false
    /// Per surrogate-keyed table, the largest rowid of a row deleted here and not exported yet whose record is
    /// still live in the record map: a new row the import inserts never takes it (nor anything below it), so that
    /// the record keeps its key until the delete is sent (a read-only participant never sends it, and
    /// `sync --discard-local` puts the row back there).
    private(set) var reservedRowIDs: [String: Int64] = [:]
    /// Entities with a `unique:` rule: their applied rows are listed in `temp._storectl_touched` for dedup.
    let dedupEntities: Set<String>
    /// `unique:` rules, which also pick the winner when a SQL UNIQUE constraint on the same columns is hit.
    let uniqueRules: [String: UniqueRule]
    /// Entities that are parents of a foreign key with an action (`CASCADE`, `SET NULL`, `SET DEFAULT`): deleting
    /// one of their rows changes other rows, and those changes are local changes to export.
    let cascadingParents: Set<String>
    /// Entities that other tracked tables reference: their deleted rows are remembered for the orphan check.
    let referencedEntities: Set<String>
    /// The restore time, when this store was found to be an older copy of itself (see `Reconciler`): a row
    /// inserted after it is a new row, never the row an own record of the same rowid describes.
    var restoredAt: Int64?
    /// While a restored store takes back its later self's records: the history (after, upTo] of this copy that its
    /// later self exported (see `Reconciler`).
    var exportedByLaterSelf: (after: Int64, upTo: Int64)?
    /// While a restored store takes back its later self's records: per table and rowid key, the name the later self
    /// gave a row this copy deleted and inserted again in that history (`Reconciler.renamedByLaterSelf`).
    var laterSelfsNames: [String: [String: String]] = [:]
    /// While an import applies its pages: two kinds of record are held back in the `Inbox` until every other
    /// record of the import is in, because the order the cloud hands them over in is not an order the origin
    /// store ever passed through.
    /// - A tombstone of a row whose deletion cascades: a child moved away from it in the same export (or a later
    ///   one the import also brings) must be moved before SQLite's `ON DELETE` action reaches it.
    /// - A record that meets a SQL UNIQUE constraint held by another row: the holder's own deletion or change may
    ///   come later in the import (a row deleted and inserted again with the same unique values). Only a
    ///   collision that is still there once everything else is applied makes the two records duplicates.
    var defersUntilSettled = false
    /// Whether the inbox may hold a held-back record.
    private var hasDeferred = false
    private func sql(_ key: String, _ entity: EntityMap, _ make: () -> String) -> String {
        let k = key + "\u{0}" + entity.name
        if let text = sqlTexts[k] { return text }
        let text = make()
        sqlTexts[k] = text
        return text
    }

    init(db: Connection, entities: [String: EntityMap], policy: MergePolicy, dedupEntities: Set<String> = [],
         uniqueRules: [String: UniqueRule] = [:]) throws
    {
        self.db = db
        self.dedupEntities = dedupEntities
        self.uniqueRules = uniqueRules
        self.hasParked = try Inbox(db).has(.waiting)
        if !dedupEntities.isEmpty {
            try db.execute("CREATE TEMP TABLE IF NOT EXISTS _storectl_touched(entity TEXT NOT NULL, pk TEXT NOT NULL, "
                           + "PRIMARY KEY (entity, pk)) WITHOUT ROWID; DELETE FROM temp._storectl_touched;")
        }
        try db.execute("""
            CREATE TEMP TABLE IF NOT EXISTS _storectl_applied(entity TEXT NOT NULL, pk TEXT NOT NULL,
                PRIMARY KEY (entity, pk)) WITHOUT ROWID;
            CREATE TEMP TABLE IF NOT EXISTS _storectl_deleted_parents(entity TEXT NOT NULL, pk TEXT NOT NULL,
                row TEXT NOT NULL, PRIMARY KEY (entity, pk)) WITHOUT ROWID;
            """)
        self.entities = entities
        self.policy = policy
        self.codec = FieldCodec(db: db)
        let token = try MirrorState.exportToken(db)
        self.exportToken = token
        self.adoptedMigrationThrough = try SchemaGate.adoptedThrough(db)
        self.hasPendingLocal = try db.scalar(
            "SELECT 1 FROM _storectl_history WHERE seq > ? AND author <> ? LIMIT 1",
            [token, MirrorState.importAuthor]) != nil
        var cascading: Set<String> = []
        var referenced: Set<String> = []
        for e in entities.values {
            for fk in e.foreignKeys {
                referenced.insert(fk.parentTable)
                if ["CASCADE", "SET NULL", "SET DEFAULT"].contains(fk.onDelete.uppercased()) {
                    cascading.insert(fk.parentTable)
                }
            }
        }
        self.cascadingParents = cascading
        self.referencedEntities = referenced
        self.restoredAt = Int64(try MirrorState.meta(db, .restoredAt) ?? "")
        if hasPendingLocal {
            for e in entities.values where e.isSurrogate {
                let reserved = try db.scalar("""
                    SELECT max(CAST(json_extract(h.pk, '$[0]') AS INTEGER)) FROM _storectl_history h
                    WHERE h.seq > ?1 AND h.author <> ?2 AND h.op = 'D' AND h.entity = ?3
                      AND EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = ?3 AND r.pk = h.pk AND r.deleted = 0)
                    """, [token, MirrorState.importAuthor, e.name])?.int64
                if let reserved { reservedRowIDs[e.name] = reserved }
            }
        }
    }

    /// Forgets the rows noted by the last import (`_storectl_applied`, `_storectl_deleted_parents`).
    func resetNotes() throws {
        try db.execute("DELETE FROM temp._storectl_applied; DELETE FROM temp._storectl_deleted_parents;")
    }

    // MARK: The record map

    /// Whether two record names stand for one record (equal, or one an alias of the other, or both of one target).
    func sameRecord(_ a: String, _ b: String) throws -> Bool {
        if a == b { return true }
        return try db.scalar("""
            SELECT coalesce((SELECT target FROM _storectl_aliases WHERE record_name = ?1), ?1)
                 = coalesce((SELECT target FROM _storectl_aliases WHERE record_name = ?2), ?2)
            """, [a, b])?.int64 == 1
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

    /// The local side of a possible conflict for one row: what changed since the last export (every column for an
    /// insert), whether it ends deleted. Nil when the row has no local change.
    func localChanges(_ entity: EntityMap, pk: String, after: Int64? = nil) throws -> MergeSide? {
        guard hasPendingLocal || after != nil else { return nil }
        let s = try db.cached("""
            SELECT op, changed, author, seq FROM _storectl_history
            WHERE seq > ?1 AND entity = ?2 AND pk = ?3 AND author <> ?4 ORDER BY seq
            """)
        var columns: Set<String> = []
        var any = false
        var lastOp = ""
        var derived = true
        var deletes: [Int64] = []
        var lastInsert: Int64?
        try s.forEach([after ?? exportToken, entity.name, pk, MirrorState.importAuthor]) { row in
            if row.string(0) == "U", row.string(2) == SchemaGate.migrationAuthor,
               (row.int64(3) ?? 0) <= adoptedMigrationThrough
            {
                return
            }
            any = true
            lastOp = row.string(0) ?? ""
            if row.string(2) != Deduplicator.author || lastOp != "U" { derived = false }
            if lastOp == "I" {
                columns = Set(entity.fieldColumns)
                lastInsert = row.int64(3)
            } else if lastOp == "U", let changed = row.string(1) {
                for c in try codecColumns(changed) { columns.insert(c) }
            } else if lastOp == "D", let seq = row.int64(3) {
                deletes.append(seq)
            }
        }
        guard any else { return nil }
        let deleted = lastOp == "D"
        // Re-points only: a merge's `keep:` values on the winner's row are a user's values, never derived.
        let references = Set(entity.foreignKeys.flatMap(\.columns))
        var side = MergeSide(deleted: deleted, changed: deleted ? [] : columns.intersection(entity.fieldColumns),
                             derived: derived && !deleted && !columns.isEmpty && columns.isSubset(of: references))
        if !deleted, entity.isSurrogate, after == nil, let lastInsert, let first = deletes.first, first < lastInsert {
            // A delete and an insert at the key that an export already gave a new name for do not make the row new
            // again (`Exporter.renameReusedKeys`): only a delete after that does.
            let renamed = try renamedUpTo(entity, pk: pk) ?? 0
            side.recreated = deletes.contains { $0 > renamed && $0 < lastInsert }
        }
        return side
    }

    /// The local changes of a row that meets a record of the cloud, without the columns whose value here is the
    /// base's (`base`: the fields as last synced): their history may be older than the base (a save of an
    /// interrupted export, adopted since: `Reconciler`), or a value was changed and changed back. Nil when no
    /// change is left. The export narrows its side the same way (`Exporter.resolve`), so the two directions agree.
    func localChanges(_ entity: EntityMap, pk: String, against base: Value?) throws -> MergeSide? {
        guard var local = try localChanges(entity, pk: pk) else { return nil }
        guard let base, !local.deleted, !local.recreated, !local.changed.isEmpty else { return local }
        let statement = try db.cached("""
            SELECT \(entity.fieldsJSON("t", extra: "r.extra")) FROM main.\(entity.quotedName) t
            LEFT JOIN _storectl_records r ON r.entity = ?1 AND r.pk = ?2 WHERE \(entity.pkMatches("t", json: "?2"))
            """)
        var fields: String?
        try statement.forEach([entity.name, pk]) { row in fields = row.string(0) }
        guard let fields else { return local }
        local.changed.formIntersection(try codec.differing(base: base, fields, columns: local.changed.sorted()))
        return local.changed.isEmpty ? nil : local
    }

    /// The last history seq an export's rename of a reused rowid looked at for this key (`_storectl_renamed`).
    private func renamedUpTo(_ entity: EntityMap, pk: String) throws -> Int64? {
        try RecordMap(db).renamedUpTo(entity: entity.name, pk: pk)
    }

    private func codecColumns(_ json: String) throws -> [String] {
        let s = try db.cached("SELECT value FROM json_each(?)")
        var out: [String] = []
        try s.forEach([json]) { row in if let v = row.string(0) { out.append(v) } }
        return out
    }

    // MARK: Applying

    /// Applies one record from the cloud. With `respectLocalChanges` false, the record wins over local changes
    /// (the export uses that to bring a row to a merge it saved).
    /// - Throws: `RecordProblem` for a record that cannot be applied as it is; `SQLiteError`.
    func apply(_ record: CloudRecord, respectLocalChanges requested: Bool = true) throws -> Outcome {
        let respectLocalChanges = requested && !cloudWins
        if hasDeferred {
            // A newer version of a held-back record supersedes it (it is held back again if it must be).
            try Inbox(db).remove(record.recordName, from: .held)
        }
        guard let entity = entities[record.recordType] else { return .unknownType }
        let entry = try RecordMap(db).entry(named: record.recordName)
        if let entry, entry.entity != record.recordType {
            throw RecordProblem(reason: "record '\(record.recordName)' was a '\(entry.entity)' record and is now "
                                    + "a '\(record.recordType)' record; a record keeps its type for good",
                                hint: "the device that saved it wrote another table's row under this name; "
                                    + "delete the record in the cloud, or fix that device's store")
        }
        if let entry, entry.changeTag == record.changeTag { return .skipped }
        if record.deleted {
            if defersUntilSettled, cascadingParents.contains(entity.name), let entry,
               try rowExists(entity, pk: entry.pk)
            {
                return try deferUntilSettled(record)
            }
            return try applyDeletion(record, entity: entity, entry: entry, respectLocalChanges: respectLocalChanges)
        }
        if entity.isSurrogate, entity.references.isEmpty, entity.uniqueKeys.isEmpty,
           entry == nil || entry?.deleted == true, entity.pathSafe, !Self.mentionsSpecialObject(record.fields),
           try ownRowID(entity, name: record.recordName) == nil,
           try insertNew(record, entity: entity, entry: entry)
        {
            return .applied
        }
        return try applyLive(record, entity: entity, entry: entry, respectLocalChanges: respectLocalChanges)
    }

    /// Applies a live record: finds its row (`rowKey`), reads what the decision needs (`liveFacts`), decides
    /// (`LiveAction.decide`), and executes the action.
    private func applyLive(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?, respectLocalChanges: Bool)
        throws -> Outcome
    {
        let decoded = try codec.decodeRecord(record.fields, columns: entity.fieldColumns)
        guard let references = try resolveReferences(decoded, of: record, entity: entity) else {
            try park(record)
            return .pending
        }
        var resolved = references.values
        let selfReferences = references.selfReferences
        var entry = entry
        var pk = try rowKey(record, entity: entity, entry: entry, decoded: decoded, resolved: resolved)
        let allocated = !selfReferences.isEmpty && pk == nil
        if !selfReferences.isEmpty {
            pk = try pointAtItself(entity, pk: pk, columns: selfReferences, values: &resolved)
        }
        let exists = try pk.map { try rowExists(entity, pk: $0) } ?? false
        if entry == nil, !entity.isSurrogate, exists, let pk {
            switch try mergeDuplicateAtKey(entity, record: record, pk: pk) {
            case .none: break
            case .lost: return .deleted
            case .won(let other): entry = other
            }
        }
        let facts = try liveFacts(record, entity: entity, entry: entry, pk: allocated ? nil : pk, exists: exists,
                                  decoded: decoded, resolved: resolved, respectLocalChanges: respectLocalChanges)
        let finalPK: String
        switch LiveAction.decide(facts, policy: policy, columns: entity.fieldColumns,
                                 uniqueKeys: entity.mergeKeys(with: uniqueRules[entity.name])) {
        case .conflict(let columns):
            return conflict(record, entity: entity, columns: columns, serverDeleted: false)
        case .keepLocalDelete:
            // The row stays deleted; the export sends the tombstone over this record.
            try setMap(entity: entity.name, pk: pk ?? "[]", name: record.recordName, tag: record.changeTag,
                       base: .text(record.fields), extra: decoded.extra, deleted: false)
            return .skipped
        case .update(let columns):
            guard let pk else { preconditionFailure("an update of a row that has no key") }
            let values = resolved.filter { columns.contains($0.key) }
            let after = try uniqueValues(entity, pk: pk, taking: values)
            if let merged = try resolveUnique(entity, record: record, values: after, target: pk, weighed: resolved) {
                return merged
            }
            if !values.isEmpty { try update(entity, pk: pk, values: values) }
            try applyTaken(entity, pk: pk)
            finalPK = pk
        case .insert(let columns):
            if let merged = try resolveUnique(entity, record: record, values: resolved, target: nil,
                                              selfReferences: selfReferences)
            {
                return merged
            }
            var values = resolved.filter { columns.contains($0.key) }
            if entity.isSurrogate, let pk, let rowid = Self.rowID(pk) {
                values[entity.primaryKey[0]] = .integer(rowid)  // an own record's row comes back at its rowid
            }
            finalPK = try insert(entity, values: values)
            try applyTaken(entity, pk: finalPK)
        }
        try finish(record, entity: entity, entry: entry, pk: finalPK, extra: decoded.extra)
        return .applied
    }

    /// The values of the row at `pk`'s UNIQUE columns once it takes `values`: those, and its own in the columns it
    /// keeps, with which it meets other rows. A UNIQUE value the merge policy keeps here (a swap made here) is the
    /// row's, and the record's old value in that column, which the swap's other row holds now, is no collision. (A
    /// duplicate's winner is still weighed by the record's values, which every store sees alike.)
    private func uniqueValues(_ entity: EntityMap, pk: String, taking values: [String: Value]) throws -> [String: Value] {
        var after = values
        let kept = Set(entity.uniqueKeys.joined()).subtracting(values.keys).sorted()
        if !kept.isEmpty {
            for (column, value) in zip(kept, try currentValues(entity, pk: pk, columns: kept)) { after[column] = value }
        }
        return after
    }

    /// Reports a conflict under `merge_policy: error`: the record changes nothing.
    private func conflict(_ record: CloudRecord, entity: EntityMap, columns: [String], serverDeleted: Bool) -> Outcome {
        conflicts.append(ConflictReport(entity: entity.name, recordName: record.recordName, localColumns: columns,
                                        serverDeleted: serverDeleted))
        return .conflict
    }

    /// The key of the row a live record stands for: the record map's (unless a deleted surrogate row's rowid, which
    /// may belong to a new, unrelated row by now), the rowid of an own record's name, or the natural key its fields
    /// hold. Nil for a new row of a surrogate-keyed table.
    /// - Throws: `RecordProblem` for a natural key missing, not a value, or not the one the record's name says.
    private func rowKey(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?, decoded: DecodedFields,
                        resolved: [String: Value]) throws -> String?
    {
        if let entry, !(entry.deleted && entity.isSurrogate) { return entry.pk }
        if entity.isSurrogate { return try ownRowID(entity, name: record.recordName).map { "[\($0)]" } }
        for column in entity.primaryKey where resolved[column] == nil {
            throw RecordProblem(reason: "the record has no value for key column '\(column)' of '\(entity.name)'",
                                hint: "a record of '\(entity.name)' must carry its whole primary key ("
                                    + entity.primaryKey.joined(separator: ", ") + ")")
        }
        for column in entity.primaryKey where decoded.objects.contains(column) {
            throw RecordProblem(reason: "key column '\(column)' of '\(entity.name)' holds a JSON object or array, "
                                    + "not a value", hint: "a key is a number, a text or a blob")
        }
        let parts: [Value] = entity.primaryKey.map { resolved[$0] ?? .null }
        if entry == nil, entity.references.allSatisfy({ !entity.primaryKey.contains($0.column) }) {
            // A natural key names its record: a record whose fields say another key is not what its name says.
            // (A key that holds a reference keeps its name when the parent is merged into another: not checked.)
            let params = parts.indices.map { EntityMap.jsonValue("?\($0 + 1)") }.joined(separator: ", ")
            let expected = entity.name + ":" + (try db.scalar("SELECT json_array(\(params))", parts)?.string ?? "")
            if expected != record.recordName {
                throw RecordProblem(reason: "its fields hold the key \(expected.dropFirst(entity.name.count + 1)) "
                                        + "but its name says \(record.recordName)",
                                    hint: "the device that saved it wrote a record whose name and key disagree; "
                                        + "delete the record in the cloud, or save the row again from its store")
            }
        }
        return try canonicalKey(entity, values: parts)
    }

    /// What `LiveAction.decide` needs to know of a live record and its row at `pk` (nil: a row new here, or a key
    /// allocated just now, which no local change can have touched).
    private func liveFacts(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?, pk: String?, exists: Bool,
                           decoded: DecodedFields, resolved: [String: Value], respectLocalChanges: Bool) throws
        -> LiveFacts
    {
        var facts = LiveFacts(recordColumns: Set(decoded.values.keys), rowExists: exists)
        guard respectLocalChanges, let pk,
              let local = try localChanges(entity, pk: pk, against: entry?.pk == pk ? entry?.base : nil),
              exists || local.deleted,
              try !(local.deleted && entry == nil && keyStoodForAnotherRecord(entity, pk: pk, name: record.recordName))
        else { return facts }
        facts.local = local
        facts.serverChanged = Set(try codec.differing(base: entry?.base, record.fields, columns: entity.fieldColumns))
        facts.serverHoldsLocalValues = try !local.deleted && exists
            && rowHolds(entity, pk: pk, values: resolved, columns: local.changed)
        return facts
    }

    /// The record's values with each reference resolved to the parent row's local key, and the columns that
    /// reference the record itself (a root folder that is its own parent: they take the row's own key once it is
    /// known). Nil when a parent is not here (yet): the record waits for it.
    /// - Throws: `RecordProblem` for a plain value where a reference belongs, or a reference where none can be.
    private func resolveReferences(_ decoded: DecodedFields, of record: CloudRecord, entity: EntityMap) throws
        -> (values: [String: Value], selfReferences: [String])?
    {
        for reference in entity.references {
            // A reference travels as a record name: a plain value there would be read as a local rowid, which
            // names different rows on different stores.
            if case .value(let v)? = decoded.values[reference.column], !v.isNull {
                throw RecordProblem(reason: "field '\(reference.column)' holds the plain value \(v.sqlLiteral) where a "
                                        + "reference to a '\(reference.parent)' record belongs",
                                    hint: "a reference is {\"$ref\": \"RECORD NAME\"}; the device that saved it wrote "
                                        + "a local key instead")
            }
        }
        var resolved: [String: Value] = [:]
        var selfReferences: [String] = []
        for (column, value) in decoded.values {
            switch value {
            case .value(let v): resolved[column] = v
            case .ref(let name):
                guard let name else { resolved[column] = .null; continue }
                guard let ref = entity.reference(for: column) else {
                    throw RecordProblem(reason: "field '\(column)' holds a reference, but column '\(column)' of "
                                            + "'\(entity.name)' is not a foreign key to a surrogate-keyed table",
                                        hint: "the device that saved it has another schema for '\(entity.name)'; "
                                            + "make the schemas agree, then run 'storectl sync' again")
                }
                if let parentKey = try parentKey(parent: ref.parent, recordName: name) {
                    resolved[column] = parentKey
                } else if ref.parent == entity.name, entity.isSurrogate, try sameRecord(name, record.recordName) {
                    selfReferences.append(column)
                } else {
                    return nil
                }
            }
        }
        return (resolved, selfReferences)
    }

    /// Gives the columns that reference the record itself its row's own key: the row's rowid, or for a new row the
    /// rowid SQLite would give it, taken now so that the reference can name it. Returns the row's key.
    private func pointAtItself(_ entity: EntityMap, pk: String?, columns: [String], values: inout [String: Value])
        throws -> String
    {
        var key = pk
        if key == nil {
            let column = quoteIdentifier(entity.primaryKey[0])
            let top = try db.scalar("SELECT max(\(column)) FROM \(entity.quotedName)")?.int64 ?? 0
            var next = top &+ 1
            if top == Int64.max {
                // The largest rowid is taken: like SQLite, take an unused one at random.
                repeat {
                    next = Int64.random(in: 1...Int64.max)
                } while try db.scalar("SELECT 1 FROM \(entity.quotedName) WHERE \(column) = ?", [next]) != nil
            }
            key = "[\(next)]"
        }
        let own = Self.rowID(key ?? "").map { Value.integer($0) } ?? .null
        for column in columns { values[column] = own }
        return key ?? "[]"
    }

    /// What `mergeDuplicateAtKey` decided.
    private enum KeyDuplicate {
        /// No other record stands for the row.
        case none
        /// The incoming record won: the row becomes its, merged from the other record's last synced state.
        case won(RecordMapEntry)
        /// The incoming record lost: it is deleted in the cloud, an alias of the row's record.
        case lost
    }

    /// A record of a natural-key table that meets a row another record already stands for: the key holds a
    /// reference, and the two parents were merged as duplicates (each store gave its own parent a child at the same
    /// key). The two records are duplicates too: the lowest name wins on every store, the other becomes its alias
    /// and is deleted in the cloud.
    private func mergeDuplicateAtKey(_ entity: EntityMap, record: CloudRecord, pk: String) throws -> KeyDuplicate {
        guard let other = try RecordMap(db).entry(entity: entity.name, pk: pk), !other.deleted,
              try !sameRecord(other.recordName, record.recordName) else { return .none }
        if record.recordName < other.recordName {
            try alias(other.recordName, to: record.recordName, entity: entity)
            if other.changeTag != nil { try outbox(other.recordName, type: entity.name, tag: other.changeTag, reason: .duplicate) }
            return .won(RecordMapEntry(entity: entity.name, pk: pk, recordName: other.recordName, changeTag: other.changeTag,
                                       base: other.base, deleted: false))
        }
        try alias(record.recordName, to: other.recordName, entity: entity)
        try outbox(record.recordName, type: entity.name, tag: record.changeTag, reason: .duplicate)
        try note(entity, pk: pk)
        return .lost
    }

    /// Whether the record map gives `pk` to another record than `name` (neither an alias of the other): a key that
    /// names its parent's row (`tags(note_id, tag)`) stands for another record once the parent's rowid holds a new
    /// parent. A deletion made here at that key deleted the other record's row, not this record's, which is new
    /// here.
    private func keyStoodForAnotherRecord(_ entity: EntityMap, pk: String, name: String) throws -> Bool {
        guard let mapped = try RecordMap(db).entry(entity: entity.name, pk: pk)?.recordName else { return false }
        return try !sameRecord(mapped, name)
    }

    /// Whether the row holds `values` in every one of `columns` (each of which `values` must have).
    private func rowHolds(_ entity: EntityMap, pk: String, values: [String: Value], columns: Set<String>) throws
        -> Bool
    {
        let names = columns.sorted()
        guard names.allSatisfy({ values[$0] != nil }) else { return false }
        let tests = names.enumerated().map { "t.\(quoteIdentifier($1)) IS ?\($0 + 2)" }
        let text = "SELECT 1 FROM \(entity.quotedName) t WHERE \(entity.pkMatches("t", json: "?1"))"
            + tests.map { " AND " + $0 }.joined()
        return try !db.query(text, [.text(pk)] + names.compactMap { values[$0] }).isEmpty
    }

    /// Whether the fields text contains an object whose first key starts with `$` (`{"$blob"`, `{"$text"`,
    /// `{"$ref"`): a byte scan, no Foundation on this hot path. A string value holding those bytes has its quotes
    /// escaped, so it never matches.
    static func mentionsSpecialObject(_ text: String) -> Bool {
        let needle: [UInt8] = [UInt8(ascii: "{"), UInt8(ascii: "\""), UInt8(ascii: "$")]
        let utf8 = text.utf8
        return utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            guard bytes.count >= needle.count else { return false }
            var i = 0
            while i <= bytes.count - needle.count {
                if bytes[i] == needle[0] && bytes[i + 1] == needle[1] && bytes[i + 2] == needle[2] { return true }
                i += 1
            }
            return false
        } ?? text.contains("{\"$")
    }

    /// The common case of a large import: a new row of a surrogate-keyed table with no references, whose record
    /// holds exactly the table's columns. SQLite's JSON functions decode the fields inside the INSERT itself.
    /// Returns false when the record is not that case (fields not an object, a column missing, a field the table
    /// lacks): the general path then handles it.
    private func insertNew(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?) throws -> Bool {
        if let reserved = reservedRowIDs[entity.name] { return try insertNew(record, entity: entity, entry: entry,
                                                                              above: reserved) }
        let s = try db.cached(sql("insertNew", entity) {
            let columns = entity.fieldColumns
            let paths = columns.map { quoteLiteral(jsonPath($0)) }
            return """
                INSERT INTO \(entity.quotedName)(\(columns.map(quoteIdentifier).joined(separator: ", ")))
                SELECT \(paths.map { "json_extract(?1, \($0))" }.joined(separator: ", "))
                WHERE json_valid(?1) AND json_type(?1) = 'object'
                  \(paths.map { "AND json_type(?1, \($0)) IS NOT NULL" }.joined(separator: " "))
                  AND (SELECT count(*) FROM json_each(?1)) = \(columns.count)
                """
        })
        try s.bind([record.fields])
        try s.step()
        guard db.changes == 1 else { return false }
        try finish(record, entity: entity, entry: entry, pk: "[\(db.lastInsertRowID)]", extra: nil)
        return true
    }

    /// `insertNew` for a table with a reserved rowid (`reservedRowIDs`): the row takes the rowid after the larger
    /// of the table's largest and the reserved one, as the set-based path does (`PageApplier.largestRowID`).
    private func insertNew(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?, above reserved: Int64) throws
        -> Bool
    {
        let key = quoteIdentifier(entity.primaryKey[0])
        let s = try db.cached(sql("insertNewAbove", entity) {
            let columns = entity.fieldColumns
            let paths = columns.map { quoteLiteral(jsonPath($0)) }
            return """
                INSERT INTO \(entity.quotedName)(\(key), \(columns.map(quoteIdentifier).joined(separator: ", ")))
                SELECT max(coalesce((SELECT max(\(key)) FROM \(entity.quotedName)), 0), ?2) + 1,
                       \(paths.map { "json_extract(?1, \($0))" }.joined(separator: ", "))
                WHERE json_valid(?1) AND json_type(?1) = 'object'
                  \(paths.map { "AND json_type(?1, \($0)) IS NOT NULL" }.joined(separator: " "))
                  AND (SELECT count(*) FROM json_each(?1)) = \(columns.count)
                """
        })
        try s.bind([record.fields, reserved])
        try s.step()
        guard db.changes == 1 else { return false }
        try finish(record, entity: entity, entry: entry, pk: "[\(db.lastInsertRowID)]", extra: nil)
        return true
    }

    /// Records an applied record: the record map, the parked list, and the rows dedup and the orphan check look
    /// at.
    private func finish(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?, pk: String, extra: String?) throws {
        if let entry, entry.pk != pk {
            // The name still points at another key (a deleted row's old rowid): move it.
            try setMap(entity: entity.name, pk: pk, name: record.recordName, tag: record.changeTag,
                       base: .text(record.fields), extra: extra, deleted: false)
        } else {
            try RecordMap(db).record(entity: entity.name, pk: pk, name: record.recordName, tag: record.changeTag,
                                     base: .text(record.fields), extra: extra, deleted: false)
        }
        if hasParked { try Inbox(db).remove(record.recordName, from: .waiting) }
        if dedupEntities.contains(entity.name) {
            try db.run("INSERT OR IGNORE INTO temp._storectl_touched(entity, pk) VALUES (?, ?)", [entity.name, pk])
        }
        if !entity.foreignKeys.isEmpty {
            try db.run("INSERT OR IGNORE INTO temp._storectl_applied(entity, pk) VALUES (?, ?)", [entity.name, pk])
        }
    }

    /// Applies a tombstone: reads what the decision needs (`tombstoneFacts`), decides (`TombstoneAction.decide`),
    /// and executes the action.
    private func applyDeletion(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?,
                               respectLocalChanges: Bool) throws -> Outcome
    {
        if hasParked { try Inbox(db).remove(record.recordName, from: .waiting) }
        let facts = try tombstoneFacts(record, entity: entity, entry: entry, respectLocalChanges: respectLocalChanges)
        if let target = facts.aliasTarget {
            // A duplicate merged into `target` elsewhere: its name now stands for the winner, whatever happens here.
            try alias(record.recordName, to: target, entity: entity)
            hasParked = true
        }
        guard let entry else { return .skipped }
        let action = TombstoneAction.decide(facts, policy: policy, columns: entity.fieldColumns)
        func mark(deleted: Bool, base: Value? = nil) throws {
            try setMap(entity: entity.name, pk: entry.pk, name: record.recordName, tag: record.changeTag, base: base,
                       extra: nil, deleted: deleted)
        }
        switch action {
        case .nothing:
            return .skipped
        case .mergeIntoWinner(let winner):
            try repoint(entity, from: entry.pk, to: winner)
            // Children on a UNIQUE column follow the value the winner's record brings, when the settle applies
            // it next (the winner's row does not hold it yet). Without that record, the row's values are not
            // known to be the winner's final ones: the loser's deletion takes its course, as before.
            if let name = facts.aliasTarget {
                if let incoming = settleValues[name] {
                    var values = try rowValues(entity, pk: winner)
                    values.merge(incoming) { _, new in new }
                    try keepUniqueReferences(entity, loser: entry.pk, winner: values)
                } else if settling {
                    // Every record of the import that is not held back is in: the winner's row holds what its
                    // record says (its children follow its value, as a store that made the merge moved them).
                    try keepUniqueReferences(entity, loser: entry.pk, winner: try rowValues(entity, pk: winner))
                }
            }
            // The winner takes nothing from the loser here (`valuesTaken`): the store that made the merge took what
            // it needed and sent it with this tombstone; the winner's record since is what every store holds, and a
            // store that meets the merge late must not take a value back over it.
            try deleteRow(entity, pk: entry.pk)
            try mark(deleted: true)
            return .deleted
        case .waitForWinner:
            // Merged when the winner arrives (the same rule picks the same winner here).
            try mark(deleted: false, base: entry.base)
            try note(entity, pk: entry.pk)
            return .skipped
        case .bothDeleted:
            try mark(deleted: true)
            return .skipped
        case .keepLocal:
            try mark(deleted: false)
            return .skipped
        case .conflict(let columns):
            return conflict(record, entity: entity, columns: columns, serverDeleted: true)
        case .delete:
            if facts.rowExists { try deleteRow(entity, pk: entry.pk) }
            try mark(deleted: true)
            return facts.rowExists ? .deleted : .skipped
        }
    }

    /// What the store knows of a tombstone's record, for `TombstoneAction.decide`.
    private func tombstoneFacts(_ record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?,
                                respectLocalChanges: Bool) throws -> TombstoneFacts
    {
        var facts = TombstoneFacts(aliasTarget: try aliasTarget(of: record), mapped: entry != nil, rowExists: false,
                                   respectLocalChanges: respectLocalChanges)
        guard let entry else { return facts }
        facts.rowExists = try rowExists(entity, pk: entry.pk)
        guard facts.rowExists else { return facts }
        if let target = facts.aliasTarget {
            if let winner = try db.scalar("""
                SELECT pk FROM _storectl_records WHERE \(RecordMap.named("?1")) AND +entity = ? AND deleted = 0
                """, [target, entity.name])?.string, try winner == entry.pk || rowExists(entity, pk: winner)
            {
                facts.winnerPK = winner
                facts.isWinner = winner == entry.pk
            }
            return facts
        }
        guard respectLocalChanges else { return facts }
        facts.local = try localChanges(entity, pk: entry.pk, against: entry.base)
        if facts.local?.deleted != true, facts.local?.recreated != true {
            // The tombstone of the record the row's rowid had, not of the record the later self sent the row as.
            facts.reinsertedInLaterSelfsExport = try reinsertedInLaterSelfsExport(entity, pk: entry.pk)
                && laterSelfsNames[entity.name]?[entry.pk] != record.recordName
        }
        return facts
    }

    /// Deletes a local row for the cloud. What the schema's `ON DELETE` actions change in other tracked rows is a
    /// local change (author `import-cascade`): the other devices must see the children go too. A deleted parent is
    /// remembered, so that the orphan check can find children that still point at it.
    func deleteRow(_ entity: EntityMap, pk: String) throws {
        if referencedEntities.contains(entity.name) {
            try db.run("""
                INSERT OR REPLACE INTO temp._storectl_deleted_parents(entity, pk, row)
                SELECT ?1, ?2, \(entity.rowJSON("t")) FROM \(entity.quotedName) t WHERE \(entity.pkMatches("t", json: "?2"))
                """, [entity.name, pk])
        }
        let before = cascadingParents.contains(entity.name) ? try MirrorState.lastHistorySeq(db) : nil
        let s = try db.cached("DELETE FROM \(entity.quotedName) WHERE \(entity.pkMatches(entity.quotedName, json: "?1"))")
        try s.bind([pk])
        try s.step()
        if let before {
            try db.run("""
                UPDATE _storectl_history SET author = ?1
                WHERE seq > ?2 AND author = ?3 AND NOT (entity = ?4 AND pk = ?5)
                """, [MirrorState.cascadeAuthor, before, MirrorState.importAuthor, entity.name, pk])
        }
    }

    // MARK: References and keys

    /// The local key of the parent row a reference names, or nil when it is not here (yet).
    func parentKey(parent: String, recordName: String) throws -> Value? {
        let s = try db.cached("""
            SELECT json_extract(m.pk, '$[0]') FROM _storectl_records m
            WHERE \(RecordMap.named("coalesce((SELECT a.target FROM _storectl_aliases a WHERE a.record_name = ?1), ?1)", "m"))
              AND +m.entity = ?2 AND m.deleted = 0 AND NOT \(RecordMap.keptGone("m"))
            """)
        try s.bind([recordName, parent])
        if try s.step() {
            let v = s.column(0)
            try s.reset()
            // The map may still know a row that is gone (deleted locally, not exported yet; a key no row has is
            // not read, `RecordMap.keepGone`).
            if let parentEntity = entities[parent], try rowExists(parentEntity, pk: "[\(v.sqlLiteral)]") { return v }
            return nil
        }
        if let parentEntity = entities[parent], let rowid = try ownRowID(parentEntity, name: recordName) {
            return .integer(rowid)
        }
        return nil
    }

    /// The rowid of the local row an own record name (`table/PREFIX` + 12 hex digits of the rowid) stands for,
    /// when that row exists and the record map knows no name for it: a record this store saved before a crash (or
    /// before it was restored from an older copy) and never recorded. A row inserted after the restore time is a
    /// new row that reused the rowid, and is not it.
    func ownRowID(_ entity: EntityMap, name: String) throws -> Int64? {
        guard entity.isSurrogate, !entity.namePrefix.isEmpty else { return nil }
        let prefix = entity.name + "/" + entity.namePrefix
        guard name.hasPrefix(prefix) else { return nil }
        let digits = name.dropFirst(prefix.count)
        guard !digits.isEmpty, digits.count <= 16, digits.allSatisfy(\.isHexDigit),
              let bits = UInt64(digits, radix: 16) else { return nil }
        let rowid = Int64(bitPattern: bits)
        let s = try db.cached(sql("ownRowID", entity) {
            """
            SELECT 1 FROM \(entity.quotedName) t WHERE t.\(quoteIdentifier(entity.primaryKey[0])) = ?1
              AND NOT EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = ?2 AND r.pk = json_array(?1))
              AND NOT EXISTS (SELECT 1 FROM _storectl_history h WHERE h.entity = ?2 AND h.pk = json_array(?1)
                              AND h.op = 'I' AND h.ts > ?3)
            """
        })
        try s.bind([rowid, entity.name, restoredAt ?? Int64.max])
        let found = try s.step()
        try s.reset()
        return found ? rowid : nil
    }

    static func rowID(_ pk: String) -> Int64? {
        guard pk.hasPrefix("["), pk.hasSuffix("]") else { return nil }
        return Int64(pk.dropFirst().dropLast())
    }

    func canonicalKey(_ entity: EntityMap, values: [Value]) throws -> String {
        if values.count == 1, case .integer(let v) = values[0] { return "[\(v)]" }
        let params = values.indices.map { EntityMap.jsonValue("?\($0 + 1)") }.joined(separator: ", ")
        return try db.scalar("SELECT json_array(\(params))", values)?.string ?? "[]"
    }

    private func park(_ record: CloudRecord) throws {
        hasParked = true
        try Inbox(db).put(record, .waiting)
    }

    // MARK: Writing rows

    func update(_ entity: EntityMap, pk: String, values: [String: Value]) throws {
        let columns = entity.fieldColumns.filter { values[$0] != nil }
        guard !columns.isEmpty else { return }
        let sets = columns.enumerated().map { "\(quoteIdentifier($1)) = ?\($0 + 2)" }.joined(separator: ", ")
        let s = try db.cached("UPDATE \(entity.quotedName) SET \(sets) WHERE \(entity.pkMatches(entity.quotedName, json: "?1"))")
        try s.bind([pk] + columns.map { values[$0] ?? .null })
        try s.step()
    }

    /// Inserts a row with the given columns (a column the record lacks gets its default); returns its key.
    func insert(_ entity: EntityMap, values given: [String: Value]) throws -> String {
        var values = given
        if entity.isSurrogate, values[entity.primaryKey[0]] == nil, let reserved = reservedRowIDs[entity.name] {
            // Never the rowid of a row deleted here whose record is still live (`reservedRowIDs`).
            let key = quoteIdentifier(entity.primaryKey[0])
            let top = try db.scalar("SELECT max(\(key)) FROM \(entity.quotedName)")?.int64 ?? 0
            values[entity.primaryKey[0]] = .integer(max(top, reserved) + 1)
        }
        let columns = entity.columns.filter { values[$0] != nil }
        let names = columns.map(quoteIdentifier).joined(separator: ", ")
        let params = columns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
        var text = columns.isEmpty ? "INSERT INTO \(entity.quotedName) DEFAULT VALUES"
            : "INSERT INTO \(entity.quotedName)(\(names)) VALUES (\(params))"
        if !entity.isSurrogate, !columns.isEmpty {
            let keys = entity.primaryKey.map(quoteIdentifier).joined(separator: ", ")
            let others = columns.filter { !entity.primaryKey.contains($0) }
            let update = others.isEmpty ? "NOTHING"
                : "UPDATE SET " + others.map { "\(quoteIdentifier($0)) = excluded.\(quoteIdentifier($0))" }
                    .joined(separator: ", ")
            text += " ON CONFLICT(\(keys)) DO \(update)"
        }
        let s = try db.cached(text)
        try s.bind(columns.map { values[$0] ?? .null })
        try s.step()
        if entity.isSurrogate {
            return try canonicalKey(entity, values: [.integer(db.lastInsertRowID)])
        }
        return try canonicalKey(entity, values: entity.primaryKey.map { values[$0] ?? .null })
    }

    func setMap(entity: String, pk: String, name: String, tag: String?, base: Value?, extra: String?,
                deleted: Bool) throws
    {
        try Self.setMap(db, entity: entity, pk: pk, name: name, tag: tag, base: base, extra: extra, deleted: deleted)
    }

    /// Points `name` at (entity, pk) in the record map, detaching the name from any other key (`RecordMap.set`).
    static func setMap(_ db: Connection, entity: String, pk: String, name: String, tag: String?, base: Value?,
                       extra: String? = nil, deleted: Bool) throws
    {
        try RecordMap(db).set(entity: entity, pk: pk, name: name, tag: tag, base: base, extra: extra, deleted: deleted)
    }

    // MARK: UNIQUE constraints

    /// A record whose values would break a SQL UNIQUE constraint of the table, held by another local row: the two
    /// records are duplicates, and one winner is kept everywhere (the `unique:` rule for those columns, else the
    /// lowest record name), like `unique:` dedup. The loser's children are re-pointed to the winner, the loser is
    /// deleted here and in the cloud, and its name becomes an alias of the winner's. Returns nil when no
    /// constraint is hit (apply the record normally), else the outcome.
    /// `selfReferences`: the columns that reference the record itself; when the record is merged into a row that
    /// holds its UNIQUE value, they name that row.
    /// `weighed`: the values the `unique:` rule weighs for the incoming side (default `values`): the record's, as
    /// every store sees them, so that every store picks the same winner.
    private func resolveUnique(_ entity: EntityMap, record: CloudRecord, values: [String: Value], target: String?,
                               selfReferences: [String] = [], weighed: [String: Value]? = nil) throws -> Outcome?
    {
        takenByWinner = [:]
        guard !entity.uniqueKeys.isEmpty else { return nil }
        for columns in entity.uniqueKeys {
            let keyValues = columns.map { values[$0] ?? .null }
            if keyValues.contains(where: \.isNull) { continue }  // NULLs never collide in a UNIQUE index
            let match = columns.enumerated().map {
                entity.uniqueEquals(columns, column: $1, "t.\(quoteIdentifier($1))", "?\($0 + 1)")
            }.joined(separator: " AND ")
            let n = columns.count
            let rows = try db.query("""
                SELECT \(entity.pkJSON("t")), coalesce(r.record_name, \(entity.derivedName("t"))), r.change_tag,
                       r.deleted
                FROM \(entity.quotedName) t
                LEFT JOIN _storectl_records r ON r.entity = ?\(n + 1) AND r.pk = \(entity.pkJSON("t"))
                WHERE \(match)
                """, keyValues + [Value.text(entity.name)])
            guard let holder = rows.first, let holderPK = holder[0].string, holderPK != target else { continue }
            let holderName = holder[1].string ?? ""
            var values = values
            if let own = Self.rowID(holderPK) {
                // A record that is its own parent, merged into the holder's row, is that row's own parent.
                for column in selfReferences { values[column] = .integer(own) }
            }
            if holderName == record.recordName { continue }
            if defersUntilSettled { return try deferUntilSettled(record) }
            if let target, let weighed, keyValues != columns.map({ weighed[$0] ?? .null }),
               try keyValues != currentValues(entity, pk: target, columns: columns)
            {
                // A chain of keys the merge policy could not keep whole: the merged key is neither side's, and it
                // is no duplicate of the row that holds it.
                throw RecordProblem(reason: "merged with this store's changes, its value of UNIQUE "
                                        + "(\(columns.joined(separator: ", "))) is one neither side wrote, and the row "
                                        + "of record \(holderName) holds it",
                                    hint: "change that key of one of the two rows on either store, then run "
                                        + "'storectl sync' again")
            }
            if unfreeableRows.contains(entity.name + "\u{0}" + holderPK) {
                throw RecordProblem(reason: "its value of UNIQUE (\(columns.joined(separator: ", "))) is held by the row "
                                        + "of record \(holderName), whose own record moves it away, but the table "
                                        + "refuses every temporary value that would free it for the move",
                                    hint: "let the column accept NULL, or relax its CHECK or STRICT type, then run "
                                        + "'storectl sync' again")
            }
            if blockedRows.contains(entity.name + "\u{0}" + holderPK) {
                throw RecordProblem(reason: "its value of UNIQUE (\(columns.joined(separator: ", "))) is held by the row "
                                        + "of record \(holderName), whose own change that frees it cannot be applied here",
                                    hint: "fix what the other set-aside record names; both are tried again on every "
                                        + "'storectl sync'")
            }
            if target == nil, entity.isSurrogate,
               try holder[3].int64 == 1 || localChanges(entity, pk: holderPK)?.recreated == true
            {
                return try recreate(entity, record: record, values: values, as: holderPK, mapped: holderName,
                                    tag: holder[3].int64 == 1 ? nil : holder[2].string)
            }
            // A read-only participant's own row (never saved: it is never sent) gives way to the cloud's record,
            // as the cloud's value wins over every change of its own.
            let incomingWins = try cloudWins && holder[2].isNull
                || wins(entity, columns: columns, incoming: (record.recordName, weighed ?? values),
                        holder: (holderName, holderPK))
            if incomingWins {
                // The local holder loses: its children follow the incoming record's row, then it goes.
                let taken = valuesTaken(entity, loser: try rowValues(entity, pk: holderPK), winner: values)
                if let target {
                    try repoint(entity, from: holderPK, to: target)
                    try keepUniqueReferences(entity, loser: holderPK, winner: values.merging(taken) { $1 })
                    try deleteLoser(entity, pk: holderPK, name: holderName, winner: record.recordName,
                                    tag: holder[2].string)
                    takenByWinner = taken
                    return nil
                }
                if entity.isSurrogate {
                    // The holder's row becomes the incoming record's (same rowid, so its children stay), and
                    // the holder's record is deleted in the cloud.
                    try alias(holderName, to: record.recordName, entity: entity)
                    if holder[2].string != nil {
                        try outbox(holderName, type: entity.name, tag: holder[2].string,
                                   reason: .duplicate)
                    }
                    // Children on another UNIQUE key of the holder follow the incoming record's value of it.
                    try keepUniqueReferences(entity, loser: holderPK, winner: values, deleted: false)
                    try update(entity, pk: holderPK, values: values.merging(taken) { $1 }.filter {
                        entity.fieldColumns.contains($0.key)
                    })
                    try markTaken(entity, pk: holderPK, columns: Array(taken.keys))
                    let decoded = try codec.decodeRecord(record.fields, columns: entity.fieldColumns)
                    try finish(record, entity: entity, entry: nil, pk: holderPK, extra: decoded.extra)
                    try note(entity, pk: holderPK)
                    // The children's records still name the loser: send them again, naming the winner.
                    try markChildrenChanged(entity, pk: holderPK)
                    return .applied
                }
                // A natural key: the incoming record becomes a new row at its own key, inserted after this
                // returns. The holder's children follow it first (foreign keys are deferred in the import's
                // transaction), or the holder's delete would take them with it (ON DELETE CASCADE).
                let key = entity.primaryKey.map { values[$0] ?? .null }
                if !key.contains(where: \.isNull),
                   let winnerPK = try db.scalar("SELECT json_array(\(key.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))",
                                                key)?.string
                {
                    try repoint(entity, from: holderPK, to: winnerPK)
                }
                try keepUniqueReferences(entity, loser: holderPK, winner: values.merging(taken) { $1 })
                try deleteLoser(entity, pk: holderPK, name: holderName, winner: record.recordName,
                                tag: holder[2].string)
                takenByWinner = taken
                return nil
            }
            // The incoming record loses: it is deleted everywhere, its children follow the holder.
            try alias(record.recordName, to: holderName, entity: entity)
            if let target {
                try repoint(entity, from: target, to: holderPK)
                let winner = try rowValues(entity, pk: holderPK)
                let taken = valuesTaken(entity, loser: try rowValues(entity, pk: target), winner: winner)
                try keepUniqueReferences(entity, loser: target, winner: winner.merging(taken) { $1 })
                // The row the record mapped to goes; its deletion is exported as this record's tombstone.
                try HistoryTracker(db: db).transaction(author: mergeAuthor) { _ in
                    try deleteRow(entity, pk: target)
                }
                takenByWinner = taken
                try applyTaken(entity, pk: holderPK)
                try setMap(entity: entity.name, pk: target, name: record.recordName, tag: record.changeTag,
                           base: .text(record.fields), extra: nil, deleted: false)
            } else {
                try outbox(record.recordName, type: entity.name, tag: record.changeTag,
                           reason: .duplicate)
                // The incoming record's children (on their way) reference its values.
                takenByWinner = valuesTaken(entity, loser: values, winner: try rowValues(entity, pk: holderPK))
                try applyTaken(entity, pk: holderPK)
            }
            try note(entity, pk: holderPK)
            return .deleted
        }
        return nil
    }

    /// The holder of the record's UNIQUE value is a row inserted here, since the last export, at the rowid of a
    /// deleted row: it has no record of its own yet (the record its rowid was mapped to is deleted, here or
    /// everywhere), and it would get a new name on export. It is the record re-created here (the row stands for the
    /// record that holds its UNIQUE value, as `Exporter.sendOutbox` says), not a duplicate of it: merging the two
    /// under the name its rowid had would make a deleted record the winner, and the record and its children would
    /// follow it on every device. So the row takes the record's name, and keeps what was written here where the
    /// merge policy says the local side wins (`error` included: this store never saw the record, so no edit was
    /// made over it); the children other devices gave the record come to it, and the export sends the row as an
    /// update of the record. The record its rowid was mapped to, when still live, is deleted through the outbox, as
    /// the export's rename would have.
    ///
    /// Unless the record is this store's own, the name its later self gave the row at this rowid when this copy had
    /// already deleted and inserted it there (before it was copied): then the record is the row this copy held,
    /// which was deleted here since, and it is deleted everywhere, its children with it; the row here is new, and
    /// gets a name of its own on export.
    private func recreate(_ entity: EntityMap, record: CloudRecord, values: [String: Value], as pk: String,
                          mapped: String, tag: String?) throws -> Outcome
    {
        if let tag, mapped != record.recordName {
            try outbox(mapped, type: entity.name, tag: tag, reason: .reusedRowid)
        }
        if try localChanges(entity, pk: pk)?.recreated == true,
           try isLaterSelfsName(entity, record: record, forRowAt: pk)
        {
            try outbox(record.recordName, type: entity.name, tag: record.changeTag, reason: .reusedRowid)
            try setMap(entity: entity.name, pk: pk, name: record.recordName, tag: record.changeTag, base: nil,
                       extra: nil, deleted: true)
            return .deleted
        }
        let all = Set(entity.fieldColumns)
        if case .live(let takeServer) = policy.decide(local: MergeSide(deleted: false, changed: all),
                                                     server: MergeSide(deleted: false, changed: all),
                                                     columns: entity.fieldColumns)
        {
            try update(entity, pk: pk, values: values.filter { takeServer.contains($0.key) })
        }
        let decoded = try codec.decodeRecord(record.fields, columns: entity.fieldColumns)
        try finish(record, entity: entity, entry: nil, pk: pk, extra: decoded.extra)
        // The export must not rename the row again for the delete and insert it already stands for.
        try RecordMap(db).markRenamed(entity: entity.name, pk: pk, upto: try MirrorState.lastHistorySeq(db))
        try note(entity, pk: pk)
        return .applied
    }

    /// Whether `record` is the name this store's later self gave the row at `pk` for a delete and insert there that
    /// this copy made too (in the history its later self exported): a name of this store for that rowid, with the
    /// suffix a rename adds.
    private func isLaterSelfsName(_ entity: EntityMap, record: CloudRecord, forRowAt pk: String) throws -> Bool {
        guard let rowid = Self.rowID(pk), !entity.namePrefix.isEmpty,
              let base = try db.scalar("SELECT \(entity.surrogateName("?1"))", [rowid])?.string,
              record.recordName.hasPrefix(base + ".") else { return false }
        return try reinsertedInLaterSelfsExport(entity, pk: pk)
    }

    /// Whether this copy deleted the row at `pk` and inserted another there in the history its later self exported
    /// (a restored store taking back its later records): its later self gave that row a new name (a rowid reused,
    /// or a key that names a parent whose rowid was reused).
    private func reinsertedInLaterSelfsExport(_ entity: EntityMap, pk: String) throws -> Bool {
        guard let range = exportedByLaterSelf else { return false }
        return try db.scalar("""
            SELECT 1 FROM _storectl_history d JOIN _storectl_history i ON i.entity = d.entity AND i.pk = d.pk
            WHERE d.entity = ?1 AND d.pk = ?2 AND d.op = 'D' AND i.op = 'I' AND d.seq < i.seq
              AND d.seq > ?3 AND i.seq <= ?4 AND d.author <> ?5 AND i.author <> ?5
            LIMIT 1
            """, [entity.name, pk, range.after, range.upTo, MirrorState.importAuthor]) != nil
    }

    /// Whether the incoming record beats the local holder of the same unique values.
    private func wins(_ entity: EntityMap, columns: [String], incoming: (name: String, values: [String: Value]),
                      holder: (name: String, pk: String)) throws -> Bool
    {
        if let rule = uniqueRules[entity.name], Set(rule.columns) == Set(columns) {
            let column: String
            let newest: Bool
            switch rule.keep {
            case .first: return incoming.name < holder.name
            case .newest(let c): column = c; newest = true
            case .oldest(let c): column = c; newest = false
            }
            let mine = incoming.values[column] ?? .null
            let comparison = try db.scalar("""
                SELECT CASE WHEN ?1 IS t.\(quoteIdentifier(column)) THEN 0 WHEN ?1 > t.\(quoteIdentifier(column))
                    OR t.\(quoteIdentifier(column)) IS NULL THEN 1 ELSE -1 END
                FROM \(entity.quotedName) t WHERE \(entity.pkMatches("t", json: "?2"))
                """, [mine, Value.text(holder.pk)])?.int64 ?? 0
            if comparison != 0 { return newest ? comparison > 0 : comparison < 0 }
        }
        return incoming.name < holder.name
    }

    private func deleteLoser(_ entity: EntityMap, pk: String, name: String, winner: String, tag: String?) throws {
        try alias(name, to: winner, entity: entity)
        try HistoryTracker(db: db).transaction(author: mergeAuthor) { _ in
            try deleteRow(entity, pk: pk)
        }
        if tag == nil {
            // Never in the cloud: nothing to delete there.
            try RecordMap(db).removeUnsaved(entity: entity.name, pk: pk)
        }
    }

    /// Points the children of the row `from` at the row `to`: every foreign key that references the parent's whole
    /// primary key (a composite key too, its columns in any order).
    func repoint(_ parent: EntityMap, from: String, to: String) throws {
        for child in entities.values {
            for fk in child.foreignKeys where fk.parentTable == parent.name && fk.columns.count == parent.primaryKey.count {
                // The position in the parent's key of the column each referencing column names.
                let positions = fk.parentColumns.compactMap { $0.flatMap { parent.primaryKey.firstIndex(of: $0) } }
                guard positions.count == fk.columns.count, Set(positions).count == positions.count else { continue }
                let pairs = zip(fk.columns.map(quoteIdentifier), positions)
                let set = pairs.map { "\($0) = json_extract(?1, '$[\($1)]')" }.joined(separator: ", ")
                let match = pairs.map { "\($0) = json_extract(?2, '$[\($1)]')" }.joined(separator: " AND ")
                try HistoryTracker(db: db).transaction(author: mergeAuthor) { _ in
                    try db.run("UPDATE OR IGNORE main.\(child.quotedName) SET \(set) WHERE \(match)", [to, from])
                }
            }
        }
    }

    /// Keeps the children that reference the loser `pk` of a duplicate merge by a UNIQUE key of `parent` rather than
    /// its primary key (`REFERENCES tags(code)`; `repoint` moves those that reference the key): they follow the
    /// winner's values of that key (`winner`: the winning row's values as they will be once the merge is applied).
    /// Where the winner holds the same values (the key the two rows collide on, in the same spelling or another
    /// one its collation matches), the children already name the
    /// winner, but the loser's deletion would still reach them through its `ON DELETE` action (CASCADE, SET NULL,
    /// SET DEFAULT, RESTRICT), and SQL cannot put the value on the winner while the loser holds it. So the loser's
    /// value is set aside first (a placeholder, as for a UNIQUE value that moves between rows), the children are put
    /// back on the value (their `ON UPDATE` action followed the placeholder), and the winner takes the value when the
    /// merge is applied: foreign keys are checked at the import's commit. A table that refuses every placeholder
    /// (or an `ON UPDATE RESTRICT` child) leaves the loser's deletion to its action, as before.
    /// `deleted`: false when the loser's row is not deleted but takes the winner's values (a surrogate row that
    /// becomes the incoming record's): then only the children's values follow.
    private func keepUniqueReferences(_ parent: EntityMap, loser pk: String, winner: [String: Value],
                                      deleted: Bool = true) throws
    {
        var held: [(reference: UniqueReference, values: [Value], keys: String)] = []
        var toFree: [[(String, Value)]] = []
        for reference in UniqueReference.to(parent, among: entities.values) {
            let (child, fk, columns) = (reference.child, reference.fk, reference.columns)
            let from = try currentValues(parent, pk: pk, columns: columns)
            let to = columns.map { winner[$0] ?? .null }
            guard from.count == columns.count, !from.contains(where: \.isNull), !to.contains(where: \.isNull)
            else { continue }
            if from != to {
                // The children follow the winner's value (another UNIQUE key of the table, or another spelling).
                let set = fk.columns.enumerated().map { "\(quoteIdentifier($1)) = ?\($0 + 1 + columns.count)" }
                    .joined(separator: ", ")
                try HistoryTracker(db: db).transaction(author: mergeAuthor) { _ in
                    try db.run("UPDATE OR IGNORE main.\(child.quotedName) SET \(set) WHERE \(reference.matches(parent))",
                               from + to)
                }
            }
            guard deleted, fk.onDelete.uppercased() != "NO ACTION", fk.onUpdate.uppercased() != "RESTRICT"
            else { continue }
            // The children the loser's deletion would still reach: those on a value the loser's matches.
            guard let keys = try reference.children(on: from, of: parent, db: db) else { continue }
            held.append((reference, to, keys))
            toFree.append(Array(zip(columns, from)))
        }
        guard !held.isEmpty else { return }
        var freed: Set<String> = []
        for columns in toFree where !columns.contains(where: { freed.contains($0.0) }) {
            keptChildrenSerial += 1
            guard let value = try free(parent, pk: pk, columns: columns, name: "kept children",
                                       serial: 1_000_000 + keptChildrenSerial)
            else { break }  // the children keep the value; the loser's deletion reaches them as before
            freed.insert(value.column)
        }
        // A child that would duplicate another on the value (its own UNIQUE key) stays where the placeholder put
        // it, and the loser's deletion takes its course for it, as for a duplicate child.
        for h in held { try h.reference.putBack(h.keys, on: h.values, db: db) }
    }

    private var keptChildrenSerial = 0

    /// What the winner of the duplicate merge `resolveUnique` just made takes from its loser (`valuesTaken`), for
    /// the caller that writes the winner's row (`applyTaken`).
    private var takenByWinner: [String: Value] = [:]

    /// The values a duplicate merge's winner takes from its loser: a UNIQUE value children reference (`REFERENCES
    /// tags(label)`, another column than the one the two collide on) that the loser holds and the winner does not
    /// (NULL in every column of the reference). The loser's children stay under the winner with it; without it they
    /// would reference a value no row holds (the import failed with the foreign-key error until a store set the
    /// value again) or go with the loser by `ON DELETE CASCADE`. The winner takes it whether or not children are
    /// here yet, so every store that makes the merge makes it alike, and the merge sends it (`markTaken`).
    private func valuesTaken(_ parent: EntityMap, loser: [String: Value], winner: [String: Value]) -> [String: Value] {
        var taken: [String: Value] = [:]
        // In one order on every store: two references that share a column take the same values everywhere.
        for reference in UniqueReference.to(parent, among: entities.values) {
            let columns = reference.columns
            guard columns.allSatisfy({ (winner[$0] ?? .null).isNull && taken[$0] == nil }) else { continue }
            let from = columns.map { loser[$0] ?? .null }
            guard !from.contains(where: \.isNull) else { continue }
            for (column, value) in zip(columns, from) { taken[column] = value }
        }
        return taken
    }

    /// Writes what the winner of the last merge takes from its loser (`takenByWinner`) into its row `pk`, where the
    /// row still holds NULL there and no other row holds the value, and marks it to be sent.
    private func applyTaken(_ entity: EntityMap, pk: String) throws {
        let taken = takenByWinner
        takenByWinner = [:]
        guard !taken.isEmpty else { return }
        let columns = taken.keys.sorted()
        let sets = columns.enumerated().map { "\(quoteIdentifier($1)) = ?\($0 + 2)" }.joined(separator: ", ")
        let null = columns.map { "\(quoteIdentifier($0)) IS NULL" }.joined(separator: " AND ")
        let table = "main.\(entity.quotedName)"
        try db.run("UPDATE OR IGNORE \(table) SET \(sets) WHERE \(entity.pkMatches(table, json: "?1")) AND \(null)",
                   [Value.text(pk)] + columns.map { taken[$0] ?? .null })
        if db.changes > 0 { try markTaken(entity, pk: pk, columns: columns) }
    }

    /// Writes a history row (author `dedupe`) for the columns of the row `pk` a merge's winner took from its loser,
    /// so that the next export sends them. A read-only participant sends nothing: the writers send them.
    private func markTaken(_ entity: EntityMap, pk: String, columns: [String]) throws {
        guard !columns.isEmpty, !cloudWins else { return }
        try MirrorState.markChanged(db, entity: entity.name, pk: pk, columns: columns, author: Deduplicator.author)
    }

    /// The author of what a duplicate merge changes here (the loser's deletion, its children re-pointed).
    private var mergeAuthor: String { Deduplicator.importAuthor(cloudRowsOnly: mergesOnlyCloudRows) }

    /// A read-only participant with no change of its own pending: the rows a merge meets are the cloud's, and so is
    /// what the merge does to them (the writers make the same merge and send it). Where the participant holds
    /// changes it has not sent, a merge can meet them, and stays its own (reported as not sent). What followed from
    /// its earlier imports does not count: its export token passes that (`MirrorState.passImportedHistory`).
    var mergesOnlyCloudRows: Bool { cloudWins && !hasPendingLocal }

    /// Writes a history row (author `dedupe`) for every row that references the row `pk` of `parent`, so that the
    /// next export sends their records again with the parent's current record name.
    private func markChildrenChanged(_ parent: EntityMap, pk: String) throws {
        // A read-only participant sends nothing: the writers send the children again.
        guard parent.primaryKey.count == 1, !cloudWins else { return }
        for child in entities.values {
            for fk in child.foreignKeys where fk.parentTable == parent.name && fk.columns.count == 1
                && (fk.parentColumns.first ?? nil) == parent.primaryKey[0]
            {
                try db.run("""
                    INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed)
                    SELECT NULL, ?1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), ?2,
                           \(child.pkJSON("c")), 'U', json_array(?3)
                    FROM main.\(child.quotedName) c WHERE c.\(quoteIdentifier(fk.columns[0])) = json_extract(?4, '$[0]')
                    """, [Deduplicator.author, child.name, fk.columns[0], pk])
            }
        }
    }

    /// Where a tombstone says its record went (`{"$alias": "WINNER"}`: merged as a duplicate), or nil for a deletion.
    func aliasTarget(of record: CloudRecord) throws -> String? {
        guard record.deleted else { return nil }
        return try Self.aliasTarget(db, tombstone: record.fields, of: record.recordName)
    }

    /// Where the tombstone fields `fields` of record `name` say it went, or nil for a deletion.
    static func aliasTarget(_ db: Connection, tombstone fields: String, of name: String) throws -> String? {
        guard fields.utf8.count > 2 else { return nil }
        let target = try db.scalar("SELECT json_extract(?1, '$.\"$alias\"') WHERE json_valid(?1)", [fields])?.string
        return target == name ? nil : target
    }

    func alias(_ name: String, to target: String, entity: EntityMap) throws {
        try RecordMap(db).alias(name, to: target, entity: entity.name)
    }

    /// Queues a tombstone for a record that no local row stands for: the next export deletes it in the cloud.
    func outbox(_ name: String, type: String, tag: String?, reason: Outgoing.Reason) throws {
        try Outgoing(db).delete(name, type: type, tag: tag, reason: reason)
    }

    private func note(_ entity: EntityMap, pk: String) throws {
        if dedupEntities.contains(entity.name) {
            try db.run("INSERT OR IGNORE INTO temp._storectl_touched(entity, pk) VALUES (?, ?)", [entity.name, pk])
        }
    }

    // MARK: UNIQUE values moving between rows

    /// A UNIQUE value of a local row set aside while held-back records are applied (`freeMovingUniqueValues`).
    struct FreedValue {
        let entity: EntityMap
        let pk: String
        let column: String
        let original: Value
        let placeholder: Value
    }

    /// The restore of a freed value met another row holding it: the settle is done again, with that row kept
    /// as it is (`keptRows`), or, when its own record could not be applied, blocking (`blockedRows`).
    struct FreedValueTaken: Error {
        let row: String
        let recordSetAside: Bool
    }

    /// Rows (`entity NUL pk`) the settle does not free: a row that keeps its value by the merge policy, so a record
    /// that meets it is a duplicate, as without freeing.
    var keptRows: Set<String> = []
    /// Rows whose held-back record could not be applied here (set aside): a record that meets one of their UNIQUE
    /// values waits, set aside too, instead of merging two rows that are distinct in the cloud.
    var blockedRows: Set<String> = []
    /// The record name of each freed row's held-back record.
    private var freedRecords: [String: String] = [:]
    /// Rows whose held-back record moves a UNIQUE value away that no placeholder could free: a record that meets
    /// their value is set aside (reported), never merged with them.
    var unfreeableRows: Set<String> = []
    /// Held-back tombstones whose rows' UNIQUE values `freeMovingUniqueValues` freed because a held-back live record
    /// takes them (a row replaced by a new one that takes its value): they are applied after the live records and
    /// the children that move to them, since their deletion, applied first, would cascade to those children.
    var lateTombstones: Set<String> = []
    /// Held-back tombstones whose rows hold a value a held-back live record takes, and that no placeholder could
    /// free: the import sets them aside (reported) instead of applying them before the children moved.
    var unfreeableTombstones: Set<String> = []
    /// The UNIQUE values the settle's live records bring (`avoidKey`): never a placeholder.
    private var avoid: Set<String> = []
    /// The values of the settle's live records with UNIQUE keys, by record name: what a merged duplicate's winner
    /// will hold once its record is applied (`keepUniqueReferences` when the loser's tombstone goes first).
    var settleValues: [String: [String: Value]] = [:]
    /// Whether the held-back records are being applied (`Importer.applyHeldBack`): every other record of the
    /// import is in.
    var settling = false

    private static func avoidKey(_ entity: String, _ column: String, _ value: Value) -> String {
        // Lower-cased: a NOCASE column finds 'A' and 'a' equal.
        entity + "\u{0}" + column + "\u{0}" + value.sqlLiteral.lowercased()
    }

    /// Frees the UNIQUE values that held-back live records move away from their rows: a swap, a shift, a reorder
    /// of a position column. Each row that exists here and whose record carries other values for one of the
    /// table's UNIQUE keys gets a placeholder in one column of that key (NULL where the column allows it, else a
    /// value no application writes), so that applying the records in any order meets only the rows that keep
    /// their values: those are real duplicates. A tombstone's row frees its values by its deletion, applied
    /// before the live records, except a value a live record of the settle takes: that one is freed too, and the
    /// tombstone applied last (`lateTombstones`). `restoreFreedValues` puts back what no record replaced.
    func freeMovingUniqueValues(_ records: [CloudRecord]) throws -> [FreedValue] {
        var freed: [FreedValue] = []
        unfreeableRows = []
        lateTombstones = []
        unfreeableTombstones = []
        let takers = try incomingUniqueValues(records)
        try freeValuesTakenFromTombstones(records, takers: takers, into: &freed)
        try freeValuesMovedByLiveRecords(records, into: &freed)
        return freed
    }

    /// The values the live records of `records` bring to UNIQUE keys, references resolved to the parent's key here;
    /// each becomes a value no placeholder may take (`avoid`).
    private func incomingUniqueValues(_ records: [CloudRecord]) throws -> [(entity: EntityMap, values: [String: Value])] {
        var takers: [(entity: EntityMap, values: [String: Value])] = []
        avoid = []
        settleValues = [:]
        for record in records where !record.deleted {
            guard let entity = entities[record.recordType], !entity.uniqueKeys.isEmpty else { continue }
            let values = try keyValues(of: codec.decodeRecord(record.fields, columns: entity.fieldColumns), entity: entity)
            takers.append((entity, values))
            settleValues[record.recordName] = values
            for key in entity.uniqueKeys {
                for column in key { if let v = values[column] { avoid.insert(Self.avoidKey(entity.name, column, v)) } }
            }
        }
        return takers
    }

    /// A record's values with its references resolved to the parent's key here (a reference to a parent not here
    /// is left out): what the row holds once the record is applied, as UNIQUE keys compare it.
    func keyValues(of decoded: DecodedFields, entity: EntityMap) throws -> [String: Value] {
        var values: [String: Value] = [:]
        for (column, value) in decoded.values {
            switch value {
            case .value(let v): values[column] = v
            case .ref(nil): values[column] = .null
            case .ref(let name?):
                if let ref = entity.reference(for: column),
                   let key = try parentKey(parent: ref.parent, recordName: name) { values[column] = key }
            }
        }
        return values
    }

    /// A tombstone's row frees its values by its deletion, applied first; but a value a live record takes is freed
    /// now, and the tombstone applied last (`lateTombstones`): children may move from its row to that record's row.
    private func freeValuesTakenFromTombstones(_ records: [CloudRecord],
                                               takers: [(entity: EntityMap, values: [String: Value])],
                                               into freed: inout [FreedValue]) throws
    {
        for record in records where record.deleted {
            // (A merged duplicate's tombstone is no deletion: it merges its row into the winner, first.)
            guard let entity = entities[record.recordType], !entity.uniqueKeys.isEmpty,
                  try aliasTarget(of: record) == nil,
                  let entry = try RecordMap(db).entry(named: record.recordName), entry.entity == entity.name, !entry.deleted,
                  !keptRows.contains(entity.name + "\u{0}" + entry.pk),
                  !blockedRows.contains(entity.name + "\u{0}" + entry.pk),
                  try rowExists(entity, pk: entry.pk)
            else { continue }
            var freedHere: Set<String> = []
            for key in entity.uniqueKeys where key.allSatisfy({ !entity.primaryKey.contains($0) }) {
                if key.contains(where: freedHere.contains) { continue }
                guard try takers.contains(where: { taker in
                    try taker.entity.name == entity.name && rowHolds(entity, pk: entry.pk, key: key, taker.values)
                }) else { continue }
                let current = try currentValues(entity, pk: entry.pk, columns: key)
                let row = entity.name + "\u{0}" + entry.pk
                freedRecords[row] = record.recordName
                let columns = key.enumerated().map { ($1, current[$0]) }
                if let one = try free(entity, pk: entry.pk, columns: columns, name: record.recordName,
                                      serial: freed.count)
                {
                    freed.append(one)
                    freedHere.insert(one.column)
                    lateTombstones.insert(record.recordName)
                } else {
                    // No placeholder the table accepts: the tombstone and the record that takes the value wait, set
                    // aside, rather than delete the children that moved from this row to that record's row.
                    unfreeableRows.insert(row)
                    unfreeableTombstones.insert(record.recordName)
                }
            }
        }
    }

    /// The values live records move away from their rows (a swap, a shift, a reorder), freed.
    private func freeValuesMovedByLiveRecords(_ records: [CloudRecord], into freed: inout [FreedValue]) throws {
        for record in records where !record.deleted {
            guard let entity = entities[record.recordType], !entity.uniqueKeys.isEmpty,
                  let entry = try RecordMap(db).entry(named: record.recordName), entry.entity == entity.name, !entry.deleted,
                  !keptRows.contains(entity.name + "\u{0}" + entry.pk),
                  !blockedRows.contains(entity.name + "\u{0}" + entry.pk),
                  try rowExists(entity, pk: entry.pk)
            else { continue }
            freedRecords[entity.name + "\u{0}" + entry.pk] = record.recordName
            let values = try keyValues(of: codec.decodeRecord(record.fields, columns: entity.fieldColumns),
                                       entity: entity)
            var freedHere: Set<String> = []
            for key in entity.uniqueKeys where key.allSatisfy({ !entity.primaryKey.contains($0) }) {
                // A key that shares a column already freed in this row is free too (the placeholder is unique).
                if key.contains(where: freedHere.contains) { continue }
                let current = try currentValues(entity, pk: entry.pk, columns: key)
                if current.count != key.count || current.contains(where: \.isNull) { continue }
                // A key the record leaves out, or moves to NULL, frees nothing (NULLs never collide); a reference
                // counts as the parent's key here.
                let incoming = key.compactMap { values[$0] }
                guard incoming.count == key.count, !incoming.contains(where: \.isNull), current != incoming
                else { continue }
                let columns = key.enumerated().map { ($1, current[$0]) }
                if let one = try free(entity, pk: entry.pk, columns: columns,
                                      name: record.recordName, serial: freed.count)
                {
                    freed.append(one)
                    freedHere.insert(one.column)
                } else {
                    // The table refuses every placeholder (a CHECK, a STRICT type): a record that meets this row's
                    // value waits, set aside, rather than merge a row that moves away as a duplicate.
                    unfreeableRows.insert(entity.name + "\u{0}" + entry.pk)
                }
            }
        }
    }

    /// Puts back each freed value that no record replaced (the row kept it, by the merge policy, or its record
    /// was set aside). Rows that are gone (merged as duplicates) have nothing to put back.
    /// - Throws: `FreedValueTaken` when another row took the value meanwhile; `SQLiteError`.
    func restoreFreedValues(_ freed: [FreedValue]) throws {
        for f in freed where try rowExists(f.entity, pk: f.pk) {
            guard try currentValues(f.entity, pk: f.pk, columns: [f.column]) == [f.placeholder] else { continue }
            do {
                try db.transaction { try update(f.entity, pk: f.pk, values: [f.column: f.original]) }
            } catch let error as SQLiteError where error.isAboutValues {
                let row = f.entity.name + "\u{0}" + f.pk
                // Its record was set aside, waits for a parent, or is a conflict: it did not apply here.
                let setAside = try freedRecords[row].map { name in
                    try Inbox(db).holds(name, in: [.setAside, .waiting]) || conflicts.contains { $0.recordName == name }
                } ?? false
                throw FreedValueTaken(row: row, recordSetAside: setAside)
            }
        }
    }

    /// Whether the row at `pk` holds, in the columns of `key`, the values `values` gives them, as the table compares
    /// them (its collations); false when a value is missing or NULL (NULLs never collide).
    private func rowHolds(_ entity: EntityMap, pk: String, key: [String], _ values: [String: Value]) throws -> Bool {
        var args: [any SQLBindable] = [pk]
        var match: [String] = []
        for column in key {
            guard let v = values[column], !v.isNull else { return false }
            args.append(v)
            match.append("t.\(quoteIdentifier(column)) = ?\(args.count)")
        }
        return try db.scalar("SELECT 1 FROM main.\(entity.quotedName) t WHERE \(entity.pkMatches("t", json: "?1")) AND "
                             + match.joined(separator: " AND "), args) != nil
    }

    private func currentValues(_ entity: EntityMap, pk: String, columns: [String]) throws -> [Value] {
        let row = try db.query("SELECT " + columns.map { "t.\(quoteIdentifier($0))" }.joined(separator: ", ")
                                   + " FROM \(entity.quotedName) t WHERE \(entity.pkMatches("t", json: "?1"))", [pk])
        return row.first?.values ?? []
    }

    /// Every column of the row `pk`, by name.
    private func rowValues(_ entity: EntityMap, pk: String) throws -> [String: Value] {
        Dictionary(zip(entity.columns, try currentValues(entity, pk: pk, columns: entity.columns)),
                   uniquingKeysWith: { a, _ in a })
    }

    /// Brings the referencing columns of synced child rows back to their last synced records where a freed
    /// value's `ON UPDATE` action (CASCADE, SET NULL, SET DEFAULT) moved them: a child applied before its parent
    /// was freed followed the placeholder, then the parent's new value. A child with a local change of its own,
    /// and rows storectl does not sync, keep what the actions gave them.
    func realignChildren(of freed: [FreedValue]) throws {
        // The record map keeps hashes, not values (`FieldHashes`): the value a child's record holds is found among
        // the freed values, the only ones the actions moved children away from.
        var originals: [String: [Value]] = [:]
        for f in freed {
            switch f.original {
            case .integer, .real, .text: originals[f.entity.name + "\u{0}" + f.column, default: []].append(f.original)
            default: continue  // blobs and text that is not plain travel wrapped: no child key holds them as is
            }
        }
        guard !originals.isEmpty else { return }
        for child in entities.values {
            for fk in try db.foreignKeys(of: child.name) where !["NO ACTION", "RESTRICT"].contains(fk.onUpdate.uppercased()) {
                guard let parent = entities[fk.parentTable] else { continue }
                for (i, column) in fk.columns.enumerated() {
                    guard let target = fk.parentColumns[i] ?? (i < parent.primaryKey.count ? parent.primaryKey[i] : nil),
                          let values = originals[parent.name + "\u{0}" + target], child.fieldColumns.contains(column)
                    else { continue }
                    let c = quoteIdentifier(column)
                    for value in values {
                        try db.run("""
                            UPDATE main.\(child.quotedName) AS t SET \(c) = ?5
                            FROM _storectl_records r
                            WHERE r.entity = ?1 AND r.pk = \(child.pkJSON("t")) AND r.deleted = 0
                              AND typeof(r.base) = 'blob' AND (t.\(c) IS NOT ?5 COLLATE BINARY OR typeof(t.\(c)) <> typeof(?5))
                              AND storectl_base_has(r.base, json_quote(?4),
                                                    \(FieldHashes.canonicalSQL(type: "typeof(?5)", value: "?5"))) = 1
                              AND NOT EXISTS (SELECT 1 FROM _storectl_history h WHERE h.seq > ?2 AND h.entity = ?1
                                              AND h.pk = r.pk AND h.author <> ?3
                                              AND (h.op <> 'U' OR EXISTS (SELECT 1 FROM json_each(h.changed) c
                                                                          WHERE c.value = ?4)))
                            """, [child.name, exportToken, MirrorState.importAuthor, column, value])
                    }
                }
            }
        }
    }

    /// Sets one of `columns` (with their current values) to a placeholder the table accepts: NULL where the column
    /// allows it, else a value of the column's own type that no application writes (an integer, a text or a blob
    /// naming the record). The value as stored is what is kept as the placeholder. Nil when the table accepts none
    /// (a CHECK, a STRICT type): the row keeps its value.
    /// Placeholders shaped like `value`: the same text with one letter or digit changed (from the end, in its own
    /// class: a digit for a digit, a lower-case letter for a lower-case one), the text with a suffix, a far multiple
    /// of an integer. A CHECK on a pattern, a length or a sign usually accepts one of them; one another row holds
    /// is refused by the UNIQUE constraint and the next is tried.
    static func lookalikes(of value: Value, serial: Int) -> [Value] {
        switch value {
        case .text(let text):
            var out: [Value] = []
            var chars = Array(text.unicodeScalars)
            var changed = 0
            for i in chars.indices.reversed() where changed < 4 {
                let c = chars[i].value
                let (low, high): (UInt32, UInt32)
                switch c {
                case 48...57: (low, high) = (48, 57)
                case 97...122: (low, high) = (97, 122)
                case 65...90: (low, high) = (65, 90)
                default: continue
                }
                let span = high - low + 1
                let shifted = low + (c - low + 1 + UInt32(serial % Int(span - 1))) % span
                let original = chars[i]
                chars[i] = Unicode.Scalar(shifted)!
                var s = String.UnicodeScalarView()
                s.append(contentsOf: chars)
                out.append(.text(String(s)))
                chars[i] = original
                changed += 1
            }
            out.append(.text(text + "\u{1}storectl \(serial)"))
            return out
        case .integer(let v):
            let (far, overflow) = v.multipliedReportingOverflow(by: 1_000_003)
            return overflow ? [] : [.integer(far + (v < 0 ? -1 : 1) * Int64(7_919 + serial))]
        default:
            return []
        }
    }

    private func free(_ entity: EntityMap, pk: String, columns: [(String, Value)], name: String, serial: Int) throws
        -> FreedValue?
    {
        let types = Dictionary(try db.columns(of: entity.name).map { ($0.name, $0.declaredType.uppercased()) },
                               uniquingKeysWith: { a, _ in a })
        for (column, original) in columns {
            let integer = Value.integer(Int64.min + 7_919 + Int64(serial))
            let real = Value.real(-1e300 * Double(serial + 1))
            let text = Value.text("\u{1}storectl moving \(serial) " + name)
            let blob = Value.blob(Array(("\u{1}storectl moving \(serial) " + name).utf8))
            let type = types[column] ?? ""
            var candidates: [Value] = entity.notNullColumns.contains(column) ? [] : [.null]
            if type.contains("INT") {
                candidates += [integer, real, text, blob]
            } else if type.contains("REAL") || type.contains("FLOA") || type.contains("DOUB") {
                // A large integer would be stored as the same double for every row.
                candidates += [real, integer, text, blob]
            } else if type.contains("NUM") || type.contains("DEC") || type.contains("BOOL") || type.contains("DATE") {
                candidates += [integer, real, text, blob]
            } else if type.contains("CHAR") || type.contains("CLOB") || type.contains("TEXT") {
                candidates += [text, blob, integer, real]
            } else {
                candidates += [blob, text, integer, real]
            }
            // Last, values shaped like the original (a CHECK on a pattern or a length refuses the ones above).
            candidates += Self.lookalikes(of: original, serial: serial)
            for placeholder in candidates where !avoid.contains(Self.avoidKey(entity.name, column, placeholder)) {
                do {
                    try db.transaction { try update(entity, pk: pk, values: [column: placeholder]) }
                } catch let error as SQLiteError where error.isAboutValues {
                    continue
                }
                // Kept as stored (a column's affinity may have converted it); it must differ from the value.
                let stored = try currentValues(entity, pk: pk, columns: [column]).first ?? .null
                if stored == original {
                    try db.transaction { try update(entity, pk: pk, values: [column: original]) }
                    continue
                }
                return FreedValue(entity: entity, pk: pk, column: column, original: original, placeholder: stored)
            }
        }
        return nil
    }

    // MARK: Deferred and parked records

    private func deferUntilSettled(_ record: CloudRecord) throws -> Outcome {
        try Inbox(db).put(record, .held)
        hasDeferred = true
        return .deferred
    }

    /// Forgets the held-back records that the table `source` (with a `record_name` column) names: newer versions
    /// of them are being applied.
    func forgetDeferred(namesIn source: String) throws {
        guard hasDeferred else { return }
        try db.execute(Inbox.removeSQL(from: [.held], namesSelectedBy: "SELECT record_name FROM \(source)"))
    }

    /// The records `defersUntilSettled` held back, tombstones first (each kind in the order the cloud gave it),
    /// and forgets them: the caller applies them with `defersUntilSettled` off.
    func takeDeferred(zone: String) throws -> [CloudRecord] {
        let records = try Inbox(db).take(.held, zone: zone)
        hasDeferred = false
        return records
    }

    /// Applies parked records whose parents have arrived, until no more can be applied. Records in a cycle of
    /// references (a row that points at itself, or rows that point at each other) are inserted with the
    /// references still unknown set to NULL, then the references are filled in, in the same transaction.
    /// Returns how many are still waiting.
    /// - Throws: `SQLiteError`; a parked record that fails is set aside by `onProblem`.
    ///
    /// Progress is a record that settles: applied, merged, skipped (a local delete wins, a version already in).
    /// Such a record leaves the parked list. A conflict under `merge_policy: error` (which the caller reports)
    /// is no progress and stays parked: trying it again changes nothing.
    ///
    /// The rounds follow the engine's retry rule (`Rounds`): another round runs while the parked records are ones
    /// no round has met yet; after a round that settles none, the cycles are broken once before it gives up.
    func retryPending(zone: String, onProblem: (CloudRecord, RecordProblem) throws -> Void) throws -> Int {
        var rounds = Rounds<[String]>()
        var cyclesBroken = false
        while true {
            let parked = try parkedRecords(zone: zone)
            if parked.isEmpty { return 0 }
            let state = parked.map { $0.recordName + "\u{0}" + $0.changeTag } + [cyclesBroken ? "\u{0}cycles" : ""]
            guard rounds.another(state) else { return parked.count }
            var progress = false
            for record in parked {
                do {
                    switch try apply(record) {
                    case .pending, .conflict, .unknownType:
                        break
                    case .applied, .deleted, .skipped, .deferred:
                        // (A held-back record is held in the inbox now: it left the waiting ones.)
                        try Inbox(db).remove(record.recordName, from: .waiting)
                        progress = true
                    }
                } catch let problem as RecordProblem {
                    try Inbox(db).remove(record.recordName, from: .waiting)
                    try onProblem(record, problem)
                    progress = true
                }
            }
            if progress { cyclesBroken = false; continue }
            guard !cyclesBroken, try breakCycles(parked) else { return parked.count }
            cyclesBroken = true
        }
    }

    /// The parked records (waiting for a parent in the inbox), oldest first.
    func parkedRecords(zone: String) throws -> [CloudRecord] {
        try Inbox(db).records(.waiting, zone: zone)
    }

    /// Inserts the parked records whose missing parents are all parked too (or are themselves), with those
    /// references NULL; returns whether any was inserted. A NOT NULL reference cannot wait as NULL: such a
    /// record stays parked. A record that waits, directly or down a chain of parked records, for a parent that is
    /// not parked is in no cycle: it stays parked too (it would be a row no device wrote, with a NULL parent).
    private func breakCycles(_ parked: [CloudRecord]) throws -> Bool {
        let parkedNames = Set(parked.map(\.recordName))
        var candidates: [(record: CloudRecord, entity: EntityMap, stripped: [String: FieldValue], missing: Set<String>,
                          nullable: Bool)] = []
        var unreachable: Set<String> = []
        for record in parked {
            guard let entity = entities[record.recordType] else { continue }
            let decoded = try codec.decodeRecord(record.fields, columns: entity.fieldColumns)
            var missing: Set<String> = []
            var nullable = true
            var stripped = decoded.values
            for (column, value) in decoded.values {
                guard case .ref(let name?) = value, let ref = entity.reference(for: column),
                      try parentKey(parent: ref.parent, recordName: name) == nil else { continue }
                if !parkedNames.contains(name) { unreachable.insert(record.recordName) }
                if entity.notNullColumns.contains(column) { nullable = false }
                missing.insert(name)
                stripped[column] = .value(.null)
            }
            if !missing.isEmpty { candidates.append((record, entity, stripped, missing, nullable)) }
        }
        // Down the chains of parked records, to a fixpoint (`Rounds`).
        var rounds = Rounds<Set<String>>()
        while rounds.another(unreachable) {
            for c in candidates where !c.missing.isDisjoint(with: unreachable) { unreachable.insert(c.record.recordName) }
        }
        var inserted: [CloudRecord] = []
        for (record, _, stripped, _, nullable) in candidates where nullable && !unreachable.contains(record.recordName) {
            let fields = try codec.encode(stripped)
            var placeholder = record
            placeholder.fields = fields
            placeholder.changeTag = ""  // not the real tag: the second pass applies the whole record
            if try apply(placeholder) == .applied { inserted.append(record) }
        }
        for record in inserted {
            try Inbox(db).put(record, .waiting)
            hasParked = true
        }
        return !inserted.isEmpty
    }
}
