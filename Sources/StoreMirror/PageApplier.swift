import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// Applies the plain records of a fetched page with a few statements per table instead of several per record, and
/// hands every other record to `RecordApplier`, in page order.
///
/// A record is plain when `RecordApplier.apply` would do exactly this with it, and it is one of:
/// - new here (its name is not in the record map), live, with exactly the table's field columns and no blob or
///   text object: `INSERT ... SELECT`. A surrogate-keyed row takes the rowid SQLite would give it one by one; a
///   natural-keyed row needs a name that is the one its key derives (`EntityMap.naturalName`), key values of the
///   types its columns store as they are (`keyTypes`), no local row and no local history at that key;
/// - a newer state of a row the map knows, which has no local change after the export token (the same test
///   `RecordApplier.localChanges` makes), still exists, and keeps its natural key: `UPDATE ... FROM`;
/// - a tombstone `{}` of such a row of a table no other table references: `DELETE`;
/// - one the map already holds at the same change tag, or a tombstone of a record never seen: skipped.
///
/// A reference (`{"$ref": "NAME"}`) is resolved in SQL as `RecordApplier.parentKey` does (the record map, through
/// the aliases, a live entry whose row exists), or to a parent that is new earlier in the same run; a record whose
/// parent is not found, or whose reference is malformed, is not plain (`RecordApplier` parks it or sets it aside).
/// A record of a table with UNIQUE constraints is plain only when its values meet no other local row and no other
/// plain record of the run (NULLs never collide): a duplicate, a swap, a value moving between rows is
/// `RecordApplier`'s (`resolveUnique`, `deferUntilSettled`).
///
/// Anything else (an own record name, a record whose table or shape differs, a merge, a missing parent, a
/// duplicate) goes through `RecordApplier.apply`. The page is applied in runs: the plain records before the first
/// other one with one statement each (parents before children), then that record on its own, then the rest of the
/// page is looked at again, so that every record sees the state the records before it left, exactly as when they
/// are applied one by one. Failures are the caller's: the page runs in a savepoint that the `Importer` rolls back
/// to apply the page record by record, setting aside the ones that fail.
final class PageApplier {
    let db: Connection
    let applier: RecordApplier
    private var sqlTexts: [String: String] = [:]
    /// `isPlain` per table, worked out once per import rather than once per record.
    private var plainTables: [String: Bool] = [:]

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
                kind TEXT NOT NULL, pk TEXT, local INTEGER, refs TEXT);
            CREATE TEMP TABLE IF NOT EXISTS _storectl_page_new(local INTEGER PRIMARY KEY, i INTEGER NOT NULL);
            DELETE FROM temp._storectl_page;
            DELETE FROM temp._storectl_page_kind;
            """)
    }

    /// Whether a table's records can take the set-based path at all: every column can be named in a JSON path,
    /// and a natural key is one a record's fields give as the row stores it (`keyTypes`).
    static func isPlain(_ entity: EntityMap) -> Bool {
        entity.pathSafe && (entity.isSurrogate || keyTypes(entity) != nil)
    }

    /// For each column of a natural key, the JSON types of a record's value that the column stores unchanged, so
    /// that the key the record names is the key its row gets: `integer` for INTEGER affinity, `text` for TEXT,
    /// both for a column with no affinity. Nil when a key column holds a reference or converts values (REAL,
    /// NUMERIC): such records go one by one.
    static func keyTypes(_ entity: EntityMap) -> [[String]]? {
        var types: [[String]] = []
        for column in entity.primaryKey {
            guard entity.reference(for: column) == nil, let c = entity.columns.firstIndex(of: column) else { return nil }
            // https://sqlite.org/datatype3.html, "Determination Of Column Affinity", in its order.
            let declared = c < entity.declaredTypes.count ? entity.declaredTypes[c].uppercased() : ""
            if declared.contains("INT") {
                types.append(["integer"])
            } else if declared.contains("CHAR") || declared.contains("CLOB") || declared.contains("TEXT") {
                types.append(["text"])
            } else if declared.contains("BLOB") || declared.isEmpty {
                types.append(["integer", "text"])
            } else {
                return nil
            }
        }
        return types
    }

    /// Applies `records` (one page, in seq order, staged by the import: `ImportStaging`); `other` applies one
    /// record the set-based path does not take.
    /// - Throws: `RecordProblem`, `SQLiteError` (the caller rolls the page back).
    func apply(_ records: [ImportStaging.Header], other: (ImportStaging.Header) throws -> Void) throws -> Counts {
        var counts = Counts()
        var staged = [Bool](repeating: false, count: records.count)
        var types: Set<String> = []
        let tStage = Trace.start()
        // The staging table's ids of the records taken, by position in the page (null for the others).
        var ids = "["
        for (i, record) in records.enumerated() {
            if i > 0 { ids += "," }
            // A reference travels as an object: the classification checks each field of a table with
            // references; elsewhere any blob, text or reference object sends the record one by one.
            guard let entity = applier.entities[record.recordType], isPlainTable(entity),
                  !isOwnName(record.recordName, entity),
                  record.deleted ? record.emptyFields : !entity.references.isEmpty || !record.special
            else {
                ids += "null"
                continue
            }
            ids += String(record.id)
            staged[i] = true
            types.insert(record.recordType)
        }
        ids += "]"
        do {
            try db.run("""
                INSERT INTO temp._storectl_page(i, record_name, record_type, fields, change_tag, deleted)
                SELECT j.key, s.record_name, s.record_type, s.fields, s.change_tag, s.deleted
                FROM json_each(?1) j CROSS JOIN \(ImportStaging.table) s ON s.id = j.value
                WHERE j.type = 'integer' ORDER BY j.key
                """, [ids])
        } catch let error as SQLiteError where error.isConstraint {
            // A name twice in one page: one by one, the second sees the first.
            try db.execute("DELETE FROM temp._storectl_page; DELETE FROM temp._storectl_page_kind;")
            for record in records { try other(record) }
            return counts
        }
        defer { try? db.execute("DELETE FROM temp._storectl_page; DELETE FROM temp._storectl_page_kind;") }
        Trace.add("import.page.stage", tStage)
        // A newer version of a record held back earlier in the import supersedes it.
        try applier.forgetDeferred(namesIn: "temp._storectl_page")
        // Parents first: a child resolves a reference to a parent new in the same run through the parent's
        // classification, and its rows go in after the parent's.
        let entities = EntityMap.parentFirst(types.sorted().compactMap { applier.entities[$0] })
        var lo = -1
        while lo < records.count {
            var hi = records.count
            if let next = staged[(lo + 1)...].firstIndex(of: false) { hi = next }
            if !entities.isEmpty && lo + 1 < hi {
                // Decisions of an earlier run past its end are stale: a reference must not find them.
                try db.run("DELETE FROM temp._storectl_page_kind WHERE i > ?1", [lo])
                let tClassify = Trace.start()
                for entity in entities { try classify(entity, after: lo, before: hi, pageSize: records.count) }
                Trace.add("import.page.classify", tClassify)
                if let rest = try db.scalar("""
                    SELECT min(i) FROM temp._storectl_page_kind WHERE i > ?1 AND i < ?2 AND kind = 'rest'
                    """, [lo, hi])?.int64 {
                    hi = Int(rest)
                }
                let tRun = Trace.start()
                for entity in entities { try applyRun(entity, after: lo, before: hi, counts: &counts) }
                Trace.add("import.page.run", tRun)
            }
            if hi < records.count { try other(records[hi]) }
            lo = hi
        }
        return counts
    }

    private func isPlainTable(_ entity: EntityMap) -> Bool {
        if let plain = plainTables[entity.name] { return plain }
        let plain = Self.isPlain(entity)
        plainTables[entity.name] = plain
        return plain
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

    /// The largest rowid `entity` holds or, for an AUTOINCREMENT table, ever gave (0 when none); with
    /// `besideDeletesBetween`, leaving out the rows of the tombstones classified `delete` between the two indexes.
    private func largestRowID(_ entity: EntityMap, besideDeletesBetween range: (Int, Int64)? = nil) throws -> Int64 {
        let key = quoteIdentifier(entity.primaryKey[0])
        var top: Int64
        if let range {
            top = try db.scalar(sql("topBeside", entity) {
                """
                SELECT \(key) FROM main.\(entity.quotedName) WHERE \(key) NOT IN (SELECT local
                    FROM temp._storectl_page_kind WHERE record_type = ?1 AND kind = 'delete' AND i > ?2 AND i < ?3)
                ORDER BY \(key) DESC LIMIT 1
                """
            }, [entity.name, range.0, range.1])?.int64 ?? 0
        } else {
            top = try db.scalar(sql("top", entity) { "SELECT max(\(key)) FROM main.\(entity.quotedName)" })?.int64 ?? 0
        }
        if let reserved = applier.reservedRowIDs[entity.name] { top = max(top, reserved) }
        if try db.scalar("SELECT 1 FROM main.sqlite_master WHERE name = 'sqlite_sequence'") != nil,
           let used = try db.scalar("SELECT seq FROM main.sqlite_sequence WHERE name = ?", [entity.name])?.int64
        {
            top = max(top, used)
        }
        return top
    }

    // MARK: SQL of one table

    /// A field's path, as an SQL literal.
    private static func path(_ column: String) -> String { quoteLiteral(jsonPath(column)) }

    /// The value a plain record gives `column` (over the staged record `p` and its decision `k`): a reference's
    /// resolved parent key (`k.refs`), else the field as SQLite's JSON functions read it.
    private static func value(_ entity: EntityMap, _ column: String) -> String {
        if let j = entity.references.firstIndex(where: { $0.column == column }) {
            return "json_extract(k.refs, '$[\(j)]')"
        }
        return "json_extract(p.fields, \(path(column)))"
    }

    /// The canonical key (`RecordApplier.canonicalKey`) that the natural-keyed record `s` names in its fields.
    private static func naturalKey(_ entity: EntityMap, record s: String) -> String {
        "json_array(" + entity.primaryKey.map { EntityMap.jsonValue("json_extract(\(s).fields, \(path($0)))") }
            .joined(separator: ", ") + ")"
    }

    /// A row of `entity` at the canonical key `pk` exists.
    private static func rowAt(_ entity: EntityMap, _ pk: String) -> String {
        "EXISTS (SELECT 1 FROM main.\(entity.quotedName) t WHERE \(entity.pkMatches("t", json: pk)))"
    }

    /// The key `pk` has history after the export token by another author than the import: a local change.
    private static let localHistory = """
        ?3 AND EXISTS (SELECT 1 FROM main._storectl_history h WHERE h.seq > ?4 AND h.entity = ?1 AND h.pk = %@
                       AND h.author <> ?5)
        """

    /// The record name the reference in field `ref.column` of staged record `p` names, through the aliases (the
    /// winner of a merged duplicate): NULL when the field holds no reference (worked out once per record, in the
    /// classification's `WITH`).
    private static func referenceTarget(_ ref: EntityMap.Reference, record p: String) -> String {
        let path = quoteLiteral(jsonPath(ref.column) + ".\"$ref\"")
        let name = "json_extract(\(p).fields, \(path))"
        return "CASE WHEN json_valid(\(p).fields) AND json_type(\(p).fields, \(path)) = 'text' THEN coalesce("
            + "(SELECT a.target FROM main._storectl_aliases a WHERE a.record_name = \(name)), \(name)) END"
    }

    /// The local key of the parent that record `s` names through `target` (`referenceTarget`): the record map's
    /// live entry of that name whose row exists (`RecordApplier.parentKey`), else a parent new earlier in this run
    /// (`?2`: the run's start). NULL when neither.
    private func parentKey(_ ref: EntityMap.Reference, target: String, record s: String) -> String {
        let parentKeyColumn = quoteIdentifier(applier.entities[ref.parent]?.primaryKey.first ?? "rowid")
        return """
            CASE WHEN \(target) IS NOT NULL THEN coalesce(
                (SELECT json_extract(m.pk, '$[0]') FROM main._storectl_records m
                 WHERE \(RecordMap.named(target, "m")) AND +m.entity = \(quoteLiteral(ref.parent)) AND m.deleted = 0
                   AND EXISTS (SELECT 1 FROM main.\(quoteIdentifier(ref.parent)) t
                               WHERE t.\(parentKeyColumn) = json_extract(m.pk, '$[0]'))),
                (SELECT pk.local FROM temp._storectl_page pp JOIN temp._storectl_page_kind pk ON pk.i = pp.i
                 WHERE pp.record_name = \(target) AND pk.record_type = \(quoteLiteral(ref.parent))
                   AND pk.kind = 'new' AND pp.i > ?2 AND pp.i < \(s).i)) END
            """
    }

    /// The decisions of `entity`'s staged records: `new`, `update`, `delete`, `skip`, `void` (a tombstone of a
    /// record never seen) or `rest` (for `RecordApplier`). Bind: entity, run start, whether local changes exist,
    /// export token, import author, whether new rows can be numbered, run end.
    private func classifySQL(_ entity: EntityMap) -> String {
        let columns = entity.fieldColumns
        let references = Set(entity.references.map(\.column))
        var shape = "json_valid(s.fields) AND json_type(s.fields) = 'object'"
            + columns.map { " AND json_type(s.fields, \(Self.path($0))) IS NOT NULL" }.joined()
            + " AND (SELECT count(*) FROM json_each(s.fields)) = \(columns.count)"
        if !references.isEmpty {
            // Staged with their reference objects: no other field may hold an object (a blob, a text, a misplaced
            // reference).
            shape += columns.filter { !references.contains($0) }
                .map { " AND json_type(s.fields, \(Self.path($0))) <> 'object'" }.joined()
        }
        var newRow = "?6 AND \(shape)"
        var sameKey = ""
        var tombstone = applier.referencedEntities.contains(entity.name) ? "'rest'" : "'delete'"
        var pk = "r.pk"
        var local = "json_extract(r.pk, '$[0]')"
        // Worked out once per record in the `WITH` (the expressions are long, and SQLite would repeat them at
        // every use): a natural key (`nk`), the target of each reference (`t0`, `t1`, ...).
        var once: [String] = []
        if !entity.isSurrogate, let types = Self.keyTypes(entity) {
            once.append("CASE WHEN json_valid(p.fields) AND json_type(p.fields) = 'object' THEN "
                        + Self.naturalKey(entity, record: "p") + " END AS nk")
            let key = "s.nk"
            let typed = zip(entity.primaryKey, types).map { column, types in
                "json_type(s.fields, \(Self.path(column))) IN (\(types.map(quoteLiteral).joined(separator: ", ")))"
            }.joined(separator: " AND ")
            // "its fields hold the key X but its name says Y" is `RecordApplier`'s to report.
            newRow = "\(shape) AND \(typed) AND s.record_name = \(quoteLiteral(entity.name + ":")) || \(key)"
                + " AND NOT \(Self.rowAt(entity, key))"
                + " AND NOT (\(Self.localHistory.replacingText("%@", with: key)))"
            sameKey = " AND \(typed) AND \(key) = r.pk"
            // A NULL in a key (a table with rowids allows it) is matched with IS one by one, never by IN.
            let nulls = entity.primaryKey.indices.map { "json_type(r.pk, '$[\($0)]') = 'null'" }
                .joined(separator: " OR ")
            if tombstone == "'delete'" { tombstone = "CASE WHEN \(nulls) THEN 'rest' ELSE 'delete' END" }
            pk = "CASE WHEN r.record_name IS NULL THEN \(key) ELSE r.pk END"
            local = "NULL"
        }
        once += entity.references.enumerated().map { j, ref in "\(Self.referenceTarget(ref, record: "p")) AS t\(j)" }
        let refs = entity.references.isEmpty ? "NULL"
            : "json_array(" + entity.references.enumerated().map { j, ref in
                parentKey(ref, target: "s.t\(j)", record: "s")
            }.joined(separator: ", ") + ")"
        return """
            WITH s AS MATERIALIZED (
                SELECT p.i, p.record_name, p.record_type, p.fields, p.change_tag, p.deleted\(once.map { ", " + $0 }.joined())
                FROM temp._storectl_page p WHERE p.record_type = ?1 AND p.i > ?2 AND p.i < ?7)
            INSERT OR REPLACE INTO temp._storectl_page_kind(i, record_type, kind, pk, local, refs)
                SELECT s.i AS i, s.record_type AS record_type, CASE
                    WHEN r.record_name IS NULL THEN
                        CASE WHEN s.deleted THEN 'void' WHEN \(newRow) THEN 'new' ELSE 'rest' END
                    WHEN r.entity IS NOT s.record_type THEN 'rest'
                    WHEN r.change_tag IS s.change_tag THEN 'skip'
                    WHEN r.deleted <> 0 THEN 'rest'
                    WHEN \(Self.localHistory.replacingText("%@", with: "r.pk")) THEN 'rest'
                    WHEN s.deleted THEN \(tombstone)
                    WHEN NOT \(Self.rowAt(entity, "r.pk")) THEN 'rest'
                    WHEN \(shape)\(sameKey) THEN 'update'
                    ELSE 'rest' END AS kind, \(pk) AS pk, \(local) AS local,
                    CASE WHEN s.deleted THEN NULL ELSE \(refs) END AS refs
                FROM s LEFT JOIN main._storectl_records r ON \(RecordMap.named("s.record_name", "r"))
            """
    }

    /// Decides, for each staged record of `entity` between the two indexes, what it is (`classifySQL`), then
    /// sends on the ones whose references are not found here or whose UNIQUE values meet another row or another
    /// record of the run, and numbers the new rows of a surrogate-keyed table.
    private func classify(_ entity: EntityMap, after: Int, before: Int, pageSize: Int) throws {
        // New rows are numbered from the largest rowid on, as SQLite would number them one by one; the numbers of
        // rows after the run's end are given again when the next run is classified. Near the largest rowid
        // SQLite picks rowids at random: new rows then go one by one.
        var top = entity.isSurrogate ? try largestRowID(entity) : 0
        let room = !entity.isSurrogate || top <= Int64.max - Int64(pageSize)
        try db.run(sql("classify", entity) { classifySQL(entity) },
                   [entity.name, after, applier.hasPendingLocal, applier.exportToken, MirrorState.importAuthor,
                    room, before])
        let bounds: [any SQLBindable] = [entity.name, after, before]
        let candidates = "k.record_type = ?1 AND k.i > ?2 AND k.i < ?3 AND k.kind IN ('new', 'update')"
        if !entity.references.isEmpty {
            // A reference is plain when it is JSON null (the column's NULL) or names a parent found here.
            try db.run(sql("refs", entity) {
                let found = entity.references.enumerated().map { j, ref in
                    "(json_type(p.fields, \(Self.path(ref.column))) = 'null'"
                        + " OR json_extract(k.refs, '$[\(j)]') IS NOT NULL)"
                }.joined(separator: " AND ")
                return """
                    UPDATE temp._storectl_page_kind AS k SET kind = 'rest' FROM temp._storectl_page p
                    WHERE p.i = k.i AND \(candidates) AND NOT (\(found))
                    """
            }, bounds)
        }
        for (n, key) in entity.uniqueKeys.enumerated() where key.allSatisfy(entity.fieldColumns.contains) {
            // `RecordApplier.resolveUnique`: a value held by another local row is a duplicate (or a value on its
            // way to another row); two records of the run with the same values are, one by one, the second a
            // duplicate of the first. A NULL never collides.
            try db.run(sql("unique\(n)", entity) {
                let match = key.map {
                    entity.uniqueEquals(key, column: $0, "t.\(quoteIdentifier($0))", Self.value(entity, $0))
                }.joined(separator: " AND ")
                return """
                    UPDATE temp._storectl_page_kind AS k SET kind = 'rest' FROM temp._storectl_page p
                    WHERE p.i = k.i AND \(candidates)
                      AND EXISTS (SELECT 1 FROM main.\(entity.quotedName) t WHERE \(match)
                                  AND (k.kind = 'new' OR NOT (\(entity.pkMatches("t", json: "k.pk")))))
                    """
            }, bounds)
            try db.run(sql("uniqueRun\(n)", entity) {
                let values = key.map { Self.value(entity, $0) }
                let nulls = values.map { "\($0) IS NULL" }.joined(separator: " OR ")
                let comparable = zip(key, values).map { entity.uniqueComparable(key, column: $0, $1) }
                return """
                    WITH c(i, u) AS (
                        SELECT k.i, CASE WHEN \(nulls) THEN NULL ELSE json_array(\(comparable.joined(separator: ", "))) END
                        FROM temp._storectl_page_kind k JOIN temp._storectl_page p ON p.i = k.i WHERE \(candidates))
                    UPDATE temp._storectl_page_kind SET kind = 'rest' WHERE i IN (
                        SELECT i FROM c WHERE u IN (SELECT u FROM c WHERE u IS NOT NULL GROUP BY u HAVING count(*) > 1))
                    """
            }, bounds)
        }
        guard entity.isSurrogate, room else { return }
        // One by one, the first new row takes the rowid after the largest one the tombstones before it leave (a
        // deleted largest rowid is given again, unless the table is AUTOINCREMENT), and every later one the rowid
        // after the row before it. So the new rows take the rowids top + 1, top + 2, ... in page order (a window
        // function over the run cost as much as the rest of the classification).
        if let first = try db.scalar(sql("firstNew", entity) {
            "SELECT min(i) FROM temp._storectl_page_kind WHERE record_type = ?1 AND i > ?2 AND kind = 'new'"
        }, [entity.name, after])?.int64,
           try db.scalar(sql("deletesFirst", entity) {
               """
               SELECT EXISTS (SELECT 1 FROM temp._storectl_page_kind WHERE record_type = ?1 AND i > ?2 AND i < ?3
                              AND kind = 'delete')
               """
           }, [entity.name, after, first])?.int64 == 1
        {
            top = try largestRowID(entity, besideDeletesBetween: (after, first))
        }
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
        counts.skipped += (kinds["skip"] ?? 0) + (kinds["void"] ?? 0)
        // Tombstones first: a new row may take the rowid a deleted row's map entry still names.
        if let deletes = kinds["delete"], deletes > 0 {
            try db.run(sql("gone", entity) {
                """
                UPDATE temp._storectl_page_kind AS k SET kind = 'gone' WHERE \(range) AND k.kind = 'delete'
                  AND NOT \(Self.rowAt(entity, "k.pk"))
                """
            }, bounds)
            let gone = db.changes
            try db.run(sql("delete", entity) {
                let target = entity.isSurrogate ? key : "(" + entity.primaryKey.map(quoteIdentifier)
                    .joined(separator: ", ") + ")"
                let keys = entity.isSurrogate ? "k.local"
                    : entity.primaryKey.indices.map { ValueJSON.keyValue("k.pk", $0) }.joined(separator: ", ")
                return """
                    DELETE FROM main.\(entity.quotedName) WHERE \(target) IN
                        (SELECT \(keys) FROM temp._storectl_page_kind k WHERE \(range) AND k.kind = 'delete')
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
                let sets = columns.map { "\(quoteIdentifier($0)) = \(Self.value(entity, $0))" }
                let row = entity.isSurrogate ? "t.\(key) = k.local" : entity.pkMatches("t", json: "k.pk")
                return """
                    UPDATE main.\(entity.quotedName) AS t SET \(sets.joined(separator: ", "))
                    FROM \(staged) WHERE \(range) AND k.kind = 'update' AND \(row)
                    """
            }, bounds)
            try db.run(sql("updateMap", entity) {
                RecordMap.pageSQL(.updates, entity: entity.name, columns: columns, source: staged, filter: range)
            }, bounds)
            counts.applied += updates
        }
        if let inserts = kinds["new"], inserts > 0 {
            let tInsert = Trace.start()
            try db.run(sql("insert", entity) {
                let names = (entity.isSurrogate ? [key] : []) + columns.map(quoteIdentifier)
                let values = (entity.isSurrogate ? ["k.local"] : []) + columns.map { Self.value(entity, $0) }
                return """
                    INSERT INTO main.\(entity.quotedName)(\(names.joined(separator: ", ")))
                    SELECT \(values.joined(separator: ", ")) FROM \(staged) WHERE \(range) AND k.kind = 'new' ORDER BY k.i
                    """
            }, bounds)
            Trace.add("import.page.run.insert", tInsert)
            let tMap = Trace.start()
            try db.run(sql("insertMap", entity) {
                RecordMap.pageSQL(.inserts, entity: entity.name, columns: columns, source: staged, filter: range)
            }, bounds)
            Trace.add("import.page.run.insert-map", tMap)
            counts.applied += inserts
        }
        let applied = (kinds["new"] ?? 0) + (kinds["update"] ?? 0)
        if applier.hasParked {
            // A tombstone of a record never seen still ends its wait for a parent (`RecordApplier.applyDeletion`).
            try db.run(sql("unpark", entity) {
                Inbox.removeSQL(from: [.waiting], namesSelectedBy: """
                    SELECT p.record_name FROM \(staged) WHERE \(range) AND k.kind IN ('new', 'update', 'delete', 'gone', 'void')
                    """)
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
