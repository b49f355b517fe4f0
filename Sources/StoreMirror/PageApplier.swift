import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// Applies the plain records of a fetched page with a few statements per table instead of several per record, and
/// hands every other record to `RecordApplier`, in page order.
///
/// A record is plain when its table has surrogate keys, no references and no UNIQUE constraint, and the record is
/// one of:
/// - new here (its name is not in the record map), live, with exactly the table's field columns and no blob,
///   text or reference object: `INSERT ... SELECT` at the rowids SQLite would give them one by one;
/// - a newer state of a row the map knows, which has no local change after the export token (the same test
///   `RecordApplier.localChanges` makes) and still exists: `UPDATE ... FROM`;
/// - a tombstone `{}` of such a row of a table no other table references: `DELETE`;
/// - one the map already holds at the same change tag, or a tombstone of a record never seen: skipped.
///
/// Anything else (an own record name, a record whose table or shape differs, a merge, a reference, a duplicate)
/// goes through `RecordApplier.apply`. The page is applied in runs: the plain records before the first other one
/// with one statement each, then that record on its own, then the rest of the page is looked at again, so that
/// every record sees the state the records before it left, exactly as when they are applied one by one.
/// Failures are the caller's: the page runs in a savepoint that the `Importer` rolls back to apply the page
/// record by record, setting aside the ones that fail.
final class PageApplier {
    let db: Connection
    let applier: RecordApplier
    private var sqlTexts: [String: String] = [:]

    /// What a page did, in `ImportReport` counts.
    struct Counts {
        var applied = 0
        var deleted = 0
        var skipped = 0
    }

    init(db: Connection, applier: RecordApplier) throws {
        self.db = db
        self.applier = applier
        try db.execute("""
            CREATE TEMP TABLE IF NOT EXISTS _storectl_page(i INTEGER PRIMARY KEY, record_name TEXT NOT NULL UNIQUE,
                record_type TEXT NOT NULL, fields TEXT NOT NULL, change_tag TEXT NOT NULL, deleted INTEGER NOT NULL);
            CREATE TEMP TABLE IF NOT EXISTS _storectl_page_kind(i INTEGER PRIMARY KEY, record_type TEXT NOT NULL,
                kind TEXT NOT NULL, pk TEXT, local INTEGER);
            CREATE TEMP TABLE IF NOT EXISTS _storectl_page_new(local INTEGER PRIMARY KEY, i INTEGER NOT NULL);
            DELETE FROM temp._storectl_page;
            DELETE FROM temp._storectl_page_kind;
            """)
    }

    /// Whether a table's records can take the set-based path at all.
    static func isPlain(_ entity: EntityMap) -> Bool {
        entity.isSurrogate && entity.references.isEmpty && entity.uniqueKeys.isEmpty && entity.pathSafe
    }

    /// Applies `records` (one page, in seq order); `other` applies one record the set-based path does not take.
    /// - Throws: `RecordProblem`, `SQLiteError` (the caller rolls the page back).
    func apply(_ records: [CloudRecord], other: (CloudRecord) throws -> Void) throws -> Counts {
        var counts = Counts()
        var staged = [Bool](repeating: false, count: records.count)
        var types: Set<String> = []
        do {
            let insert = try db.cached("""
                INSERT INTO temp._storectl_page(i, record_name, record_type, fields, change_tag, deleted)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                """)
            for (i, record) in records.enumerated() {
                guard let entity = applier.entities[record.recordType], Self.isPlain(entity),
                      !isOwnName(record.recordName, entity),
                      record.deleted ? (record.fields == "{}" && !applier.referencedEntities.contains(entity.name))
                          : !RecordApplier.mentionsSpecialObject(record.fields)
                else { continue }
                try insert.bind(.integer(Int64(i)), at: 1)
                try insert.bind(.text(record.recordName), at: 2)
                try insert.bind(.text(record.recordType), at: 3)
                try insert.bind(.text(record.fields), at: 4)
                try insert.bind(.text(record.changeTag), at: 5)
                try insert.bind(.integer(record.deleted ? 1 : 0), at: 6)
                try insert.step()
                staged[i] = true
                types.insert(record.recordType)
            }
        } catch let error as SQLiteError where error.isConstraint {
            // A name twice in one page: one by one, the second sees the first.
            try db.execute("DELETE FROM temp._storectl_page; DELETE FROM temp._storectl_page_kind;")
            for record in records { try other(record) }
            return counts
        }
        defer { try? db.execute("DELETE FROM temp._storectl_page; DELETE FROM temp._storectl_page_kind;") }
        // A newer version of a record held back earlier in the import supersedes it.
        try applier.forgetDeferred(namesIn: "temp._storectl_page")
        let entities = types.sorted().compactMap { applier.entities[$0] }
        var lo = -1
        while lo < records.count {
            var hi = records.count
            if let next = staged[(lo + 1)...].firstIndex(of: false) { hi = next }
            if !entities.isEmpty && lo + 1 < hi {
                for entity in entities { try classify(entity, after: lo, pageSize: records.count) }
                if let rest = try db.scalar("""
                    SELECT min(i) FROM temp._storectl_page_kind WHERE i > ?1 AND i < ?2 AND kind = 'rest'
                    """, [lo, hi])?.int64 {
                    hi = Int(rest)
                }
                for entity in entities { try applyRun(entity, after: lo, before: hi, counts: &counts) }
            }
            if hi < records.count { try other(records[hi]) }
            lo = hi
        }
        return counts
    }

    /// Whether `name` is one this store gives its own rows (`RecordApplier.ownRowID` may then map it to a row).
    private func isOwnName(_ name: String, _ entity: EntityMap) -> Bool {
        !entity.namePrefix.isEmpty && name.hasPrefix(entity.name + "/" + entity.namePrefix)
    }

    private func sql(_ key: String, _ entity: EntityMap, _ make: () -> String) -> String {
        let k = key + "\u{0}" + entity.name
        if let text = sqlTexts[k] { return text }
        let text = make()
        sqlTexts[k] = text
        return text
    }

    /// The largest rowid `entity` holds or, for an AUTOINCREMENT table, ever gave (0 when none).
    private func largestRowID(_ entity: EntityMap) throws -> Int64 {
        var top = try db.scalar(sql("top", entity) {
            "SELECT max(\(quoteIdentifier(entity.primaryKey[0]))) FROM main.\(entity.quotedName)"
        })?.int64 ?? 0
        if try db.scalar("SELECT 1 FROM main.sqlite_master WHERE name = 'sqlite_sequence'") != nil,
           let used = try db.scalar("SELECT seq FROM main.sqlite_sequence WHERE name = ?", [entity.name])?.int64
        {
            top = max(top, used)
        }
        return top
    }

    /// Decides, for each staged record of `entity` after index `after`, what it is: `new`, `update`, `delete`,
    /// `skip`, or `rest` (for `RecordApplier`).
    private func classify(_ entity: EntityMap, after: Int, pageSize: Int) throws {
        // New rows are numbered from the largest rowid on, as SQLite would number them one by one (read before
        // this run's deletes, so that no new row takes the rowid of a row the same run deletes); the numbers of
        // rows after the run's end are given again when the next run is classified. Near the largest rowid
        // SQLite picks rowids at random: new rows then go one by one.
        let top = try largestRowID(entity)
        let room = top <= Int64.max - Int64(pageSize)
        let key = quoteIdentifier(entity.primaryKey[0])
        let columns = entity.fieldColumns
        let text = sql("classify", entity) {
            let paths = columns.map { quoteLiteral(jsonPath($0)) }
            let shape = "json_valid(s.fields) AND json_type(s.fields) = 'object'"
                + paths.map { " AND json_type(s.fields, \($0)) IS NOT NULL" }.joined()
                + " AND (SELECT count(*) FROM json_each(s.fields)) = \(columns.count)"
            return """
                INSERT OR REPLACE INTO temp._storectl_page_kind(i, record_type, kind, pk, local)
                    SELECT s.i AS i, s.record_type AS record_type, CASE
                        WHEN r.record_name IS NULL THEN
                            CASE WHEN s.deleted THEN 'skip' WHEN ?6 AND \(shape) THEN 'new' ELSE 'rest' END
                        WHEN r.entity IS NOT s.record_type THEN 'rest'
                        WHEN r.change_tag IS s.change_tag THEN 'skip'
                        WHEN r.deleted <> 0 THEN 'rest'
                        WHEN ?3 AND EXISTS (SELECT 1 FROM main._storectl_history h WHERE h.seq > ?4
                            AND h.entity = ?1 AND h.pk = r.pk AND h.author <> ?5) THEN 'rest'
                        WHEN s.deleted THEN 'delete'
                        WHEN NOT EXISTS (SELECT 1 FROM main.\(entity.quotedName) t
                                         WHERE t.\(key) = json_extract(r.pk, '$[0]')) THEN 'rest'
                        WHEN \(shape) THEN 'update'
                        ELSE 'rest' END AS kind, r.pk AS pk, json_extract(r.pk, '$[0]') AS local
                    FROM temp._storectl_page s
                    LEFT JOIN main._storectl_records r ON r.record_name = s.record_name
                    WHERE s.record_type = ?1 AND s.i > ?2
                """
        }
        try db.run(text, [entity.name, after, applier.hasPendingLocal, applier.exportToken, MirrorState.importAuthor,
                          room])
        guard room else { return }
        // The new rows take the rowids top + 1, top + 2, ... in page order: the rowids an INTEGER PRIMARY KEY
        // gives rows inserted after one at `top` (a window function over the run cost as much as the rest of the
        // classification).
        try db.run("DELETE FROM temp._storectl_page_new")
        try db.run("INSERT INTO temp._storectl_page_new(local, i) VALUES (?1, -1)", [top])
        try db.run("""
            INSERT INTO temp._storectl_page_new(i) SELECT i FROM temp._storectl_page_kind
            WHERE record_type = ?1 AND i > ?2 AND kind = 'new' ORDER BY i
            """, [entity.name, after])
        guard db.changes > 0 else { return }
        try db.run("""
            UPDATE temp._storectl_page_kind AS k SET local = n.local, pk = '[' || n.local || ']'
            FROM temp._storectl_page_new n WHERE n.i = k.i AND n.i >= 0
            """)
    }

    /// Applies the records of `entity` classified `new`, `update` and `delete` between the two indexes.
    private func applyRun(_ entity: EntityMap, after lo: Int, before hi: Int, counts: inout Counts) throws {
        let name = quoteLiteral(entity.name)
        let key = quoteIdentifier(entity.primaryKey[0])
        let columns = entity.fieldColumns
        let paths = columns.map { quoteLiteral(jsonPath($0)) }
        // `k`: the decisions (`_storectl_page_kind`); `p`: the staged records, joined to them by `i`.
        let range = "k.record_type = \(name) AND k.i > ?1 AND k.i < ?2"
        let staged = "temp._storectl_page_kind k JOIN temp._storectl_page p ON p.i = k.i"
        let bounds: [any SQLBindable] = [lo, hi]
        var kinds: [String: Int] = [:]
        for row in try db.query(sql("kinds", entity) {
            "SELECT k.kind, count(*) FROM temp._storectl_page_kind k WHERE \(range) GROUP BY k.kind"
        }, bounds) {
            if let kind = row[0].string { kinds[kind] = Int(row[1].int64 ?? 0) }
        }
        counts.skipped += kinds["skip"] ?? 0
        // Tombstones first: a new row may take the rowid a deleted row's map entry still names.
        if let deletes = kinds["delete"], deletes > 0 {
            try db.run(sql("gone", entity) {
                """
                UPDATE temp._storectl_page_kind AS k SET kind = 'gone' WHERE \(range) AND k.kind = 'delete'
                  AND NOT EXISTS (SELECT 1 FROM main.\(entity.quotedName) t WHERE t.\(key) = k.local)
                """
            }, bounds)
            let gone = db.changes
            try db.run(sql("delete", entity) {
                """
                DELETE FROM main.\(entity.quotedName) WHERE \(key) IN
                    (SELECT k.local FROM temp._storectl_page_kind k WHERE \(range) AND k.kind = 'delete')
                """
            }, bounds)
            try db.run(sql("deleteMap", entity) {
                RecordMap.pageSQL(.tombstones, entity: entity.name, columns: columns, source: staged, filter: range)
            }, bounds)
            counts.deleted += deletes - gone
            counts.skipped += gone
        }
        if let updates = kinds["update"], updates > 0 {
            try db.run(sql("update", entity) {
                let sets = zip(columns, paths).map { "\(quoteIdentifier($0)) = json_extract(p.fields, \($1))" }
                return """
                    UPDATE main.\(entity.quotedName) AS t SET \(sets.joined(separator: ", "))
                    FROM \(staged) WHERE \(range) AND k.kind = 'update' AND t.\(key) = k.local
                    """
            }, bounds)
            try db.run(sql("updateMap", entity) {
                RecordMap.pageSQL(.updates, entity: entity.name, columns: columns, source: staged, filter: range)
            }, bounds)
            counts.applied += updates
        }
        if let inserts = kinds["new"], inserts > 0 {
            try db.run(sql("insert", entity) {
                """
                INSERT INTO main.\(entity.quotedName)(\(key), \(columns.map(quoteIdentifier).joined(separator: ", ")))
                SELECT k.local, \(paths.map { "json_extract(p.fields, \($0))" }.joined(separator: ", "))
                FROM \(staged) WHERE \(range) AND k.kind = 'new' ORDER BY k.i
                """
            }, bounds)
            try db.run(sql("insertMap", entity) {
                RecordMap.pageSQL(.inserts, entity: entity.name, columns: columns, source: staged, filter: range)
            }, bounds)
            counts.applied += inserts
        }
        let applied = (kinds["new"] ?? 0) + (kinds["update"] ?? 0)
        if applier.hasParked {
            try db.run(sql("unpark", entity) {
                """
                DELETE FROM main._storectl_pending WHERE record_name IN (SELECT p.record_name FROM \(staged)
                    WHERE \(range) AND k.kind IN ('new', 'update', 'delete', 'gone'))
                """
            }, bounds)
        }
        if applied > 0 && applier.dedupEntities.contains(entity.name) {
            try db.run(sql("touched", entity) {
                """
                INSERT OR IGNORE INTO temp._storectl_touched(entity, pk)
                SELECT \(name), k.pk FROM temp._storectl_page_kind k WHERE \(range) AND k.kind IN ('new', 'update')
                """
            }, bounds)
        }
        if applied > 0 && !entity.foreignKeys.isEmpty {
            try db.run(sql("applied", entity) {
                """
                INSERT OR IGNORE INTO temp._storectl_applied(entity, pk)
                SELECT \(name), k.pk FROM temp._storectl_page_kind k WHERE \(range) AND k.kind IN ('new', 'update')
                """
            }, bounds)
        }
    }
}
