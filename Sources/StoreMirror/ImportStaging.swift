import Dispatch
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// What an import fetched from the cloud, kept in the store connection's temporary database until the import's
/// write transaction applies it: no network round trip is ever made while that transaction is open, so an app's
/// write never waits on one (docs/sync-guarantees.md, "The import's write transaction").
///
/// Two tables of the connection's `temp` database (writing them takes no lock on the store file):
/// - `_storectl_import_staged`: the pages of changes, in fetch order (`page` from 0), one page at a time in
///   memory; and, as page -1, the records the store already keeps waiting in its inbox (parked or set aside), so
///   that a lookup inside the transaction still finds a record applied from them.
/// - `_storectl_import_lookups`: single records fetched before the transaction (`fetchRecord`), each found or
///   absent: set-aside records kept without their fields, the targets along alias chains, and parents that
///   records of this import name and the store does not hold.
///
/// Inside the transaction, `lookup` answers from the prefetched records first (fetched last, so the newest), then
/// from the staged ones (the newest seq); a record neither holds is `.unknown`: not here yet, for this import.
final class ImportStaging {
    /// What the import knows of one record without asking the cloud.
    enum Lookup {
        /// The record as fetched (it may be a tombstone).
        case found(CloudRecord)
        /// The cloud held no such record when it was looked up.
        case absent
        /// Neither fetched nor staged: not here yet, as far as this import can tell.
        case unknown
    }

    let db: Connection
    /// How many pages are staged.
    private(set) var pages = 0
    /// Records the container marked as saved by an account that may not write the zone (`CloudRecord.rejection`):
    /// never staged, set aside by the import.
    private(set) var rejected: [CloudRecord] = []

    /// Creates (or empties) the staging tables.
    /// - Throws: `SQLiteError`.
    init(db: Connection) throws {
        self.db = db
        try db.execute("""
            CREATE TEMP TABLE IF NOT EXISTS _storectl_import_staged(id INTEGER PRIMARY KEY, page INTEGER NOT NULL,
                record_name TEXT NOT NULL, record_type TEXT NOT NULL, fields TEXT NOT NULL, change_tag TEXT NOT NULL,
                seq INTEGER NOT NULL, deleted INTEGER NOT NULL, modified_by TEXT NOT NULL, modified_at REAL NOT NULL,
                history_seq INTEGER, superseded INTEGER NOT NULL DEFAULT 0);
            CREATE INDEX IF NOT EXISTS temp._storectl_import_staged_page ON _storectl_import_staged(page);
            CREATE TEMP TABLE IF NOT EXISTS _storectl_import_lookups(record_name TEXT PRIMARY KEY,
                found INTEGER NOT NULL, record_type TEXT NOT NULL, fields TEXT NOT NULL, change_tag TEXT NOT NULL,
                seq INTEGER NOT NULL, deleted INTEGER NOT NULL, modified_by TEXT NOT NULL, modified_at REAL NOT NULL)
                WITHOUT ROWID;
            """)
        try clear()
    }

    /// Empties the staging tables (their space goes back to the temporary file). The index of staged records by
    /// name is made once they are all staged (`indexNames`): one sort, rather than a search per record staged.
    /// - Throws: `SQLiteError`.
    func clear() throws {
        try db.execute("""
            DROP INDEX IF EXISTS temp._storectl_import_staged_name;
            DELETE FROM temp._storectl_import_staged; DELETE FROM temp._storectl_import_lookups;
            """)
        pages = 0
        rejected = []
    }

    // MARK: Fetching, before the write transaction

    /// Fails when the store's write transaction is open: a cloud call there would make every app write wait on it.
    /// - Throws: `StoreError` (software).
    func requireNoWriteTransaction(_ call: String) throws {
        if db.holdsWriteTransaction {
            throw StoreError(.software, "storectl called the cloud (\(call)) inside the import's write transaction",
                             hint: "report this as a bug in storectl; nothing of this import was applied")
        }
    }

    /// The highest schema version the pages of the last `fetchChanges` read in their own snapshots, or `.notRead`
    /// when a page did not read it, or a lookup fetched a record after them (`SchemaGate.recheck` asks the cloud).
    private(set) var schemaVersionSeen: SchemaVersionRead = .notRead

    /// Fetches every page of changes after `token` into the staging table, the next page on a thread of its own
    /// (through the cloud's own connection) while this one is staged. Returns the token after the last page and how
    /// many records the pages held. With `onlyTypes`, only records of those types are staged.
    /// - Throws: `CloudError`, `SQLiteError`.
    func fetchChanges(cloud: any CloudDatabase, zone: String, after token: ServerChangeToken?, limit: Int,
                      device: String, onlyTypes: Set<String>?) throws -> (token: ServerChangeToken?, fetched: Int)
    {
        try requireNoWriteTransaction("fetchChanges")
        var token = token
        var fetched = 0
        schemaVersionSeen = .read(nil)
        try ChangePages.forEach(cloud: cloud, zone: zone, after: token, limit: limit, excludingDevice: device,
                                trace: "import.fetch") { batch in
            let records = onlyTypes.map { only in batch.records.filter { only.contains($0.recordType) } }
                ?? batch.records
            rejected += records.filter { $0.rejection != nil }
            let tStage = Trace.start()
            try stage(records.filter { $0.rejection == nil })
            Trace.add("import.stage", tStage)
            fetched += batch.records.count
            token = batch.token
            switch (schemaVersionSeen, batch.schemaVersion) {
            case (.read(let highest), .read(let version)):
                if (version?.version ?? 0) >= (highest?.version ?? 0) { schemaVersionSeen = .read(version) }
            default:
                schemaVersionSeen = .notRead
            }
            Failpoint.hit("import.after-fetch")
        }
        try indexNames()
        return (token, fetched)
    }

    /// Fetches this store's own records saved after seq `after` (`fetchDeviceRecords`) into the staging table, a
    /// page at a time: a reconciliation applies them in its write transaction afterwards (`Reconciler`). Its saves
    /// that another device's save replaced since are staged only when `superseded` (they are never looked up).
    /// - Throws: `CloudError`, `SQLiteError`.
    func fetchDeviceRecords(cloud: any CloudDatabase, zone: String, device: String, after: Int64, limit: Int,
                            superseded: Bool) throws
    {
        var seq = after
        while true {
            try requireNoWriteTransaction("fetchDeviceRecords")
            let (fetched, more) = try cloud.fetchDeviceRecords(zone: zone, device: device, after: seq, limit: limit)
            let records = superseded ? fetched : fetched.filter { !$0.superseded }
            try stage(records.map(\.record), historySeqs: records.map(\.historySeq),
                      superseded: records.map(\.superseded))
            seq = fetched.last?.record.seq ?? seq
            if !more { return try indexNames() }
        }
    }

    /// Indexes the staged records by name, once every page is staged (`lookup`, the parents this import brings).
    private func indexNames() throws {
        try db.execute("""
            CREATE INDEX IF NOT EXISTS temp._storectl_import_staged_name ON _storectl_import_staged(record_name, seq)
            """)
    }

    /// Stages one page (an empty page too, so that pages keep their numbers).
    private func stage(_ records: [CloudRecord], historySeqs: [Int64?]? = nil, superseded: [Bool]? = nil) throws {
        let page = pages
        // A deferred transaction that writes only the temporary database: it takes no lock on the store file.
        try db.transaction(.deferred) {
            let insert = try db.cached("""
                INSERT INTO temp._storectl_import_staged(page, record_name, record_type, fields, change_tag, seq,
                    deleted, modified_by, modified_at, history_seq, superseded) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """)
            for (i, r) in records.enumerated() {
                try insert.forEach([page, r.recordName, r.recordType, r.fields, r.changeTag, r.seq, r.deleted,
                                    r.modifiedBy, r.modifiedAt, historySeqs?[i], superseded?[i] ?? false]) { _ in }
            }
        }
        pages += 1
    }

    /// Keeps a copy of the records the store holds waiting (parked for a parent, set aside with their fields), as
    /// page -1: a record applied from them inside the transaction is then still known there.
    /// - Throws: `SQLiteError`.
    func keepWaitingRecords() throws {
        try db.transaction(.deferred) {
            try db.run("""
                INSERT INTO temp._storectl_import_staged(page, record_name, record_type, fields, change_tag, seq,
                    deleted, modified_by, modified_at)
                SELECT -1, record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at
                FROM main._storectl_inbox WHERE state IN ('waiting', 'set_aside') AND fields <> ''
                """)
        }
    }

    /// Fetches, before the write transaction, every single record the import may need to know: the current version
    /// of set-aside records kept without their fields, the records along alias chains (the winners of merged
    /// duplicates, and where they went in turn), the parents named by the staged, parked and set-aside records
    /// that the store does not hold and this import does not bring, and the records `names`.
    /// - Throws: `CloudError`, `SQLiteError`.
    func prefetchLookups(cloud: any CloudDatabase, zone: String, entities: [String: EntityMap],
                         also names: [String] = []) throws
    {
        try keepWaitingRecords()
        for name in names { try fetchRecord(cloud: cloud, zone: zone, name) }
        let fieldless = try db.query("""
            SELECT record_name FROM main._storectl_inbox WHERE state = 'set_aside' AND fields = '' ORDER BY seq
            """)
            .compactMap { $0[0].string }
        for name in fieldless { try fetchRecord(cloud: cloud, zone: zone, name) }
        let aliasTargets = try db.query("""
            SELECT a.target FROM _storectl_aliases a CROSS JOIN _storectl_records r ON \(RecordMap.named("a.record_name", "r"))
            WHERE r.deleted = 0
            UNION
            SELECT json_extract(fields, '$."$alias"') FROM temp._storectl_import_staged
            WHERE deleted = 1 AND page >= 0 AND instr(fields, '"$alias"') > 0 AND json_valid(fields)
            """).compactMap { $0[0].string }
        for start in aliasTargets {
            var target = start
            // Down the chain of merges, to its end or to a name met before (`Rounds`).
            var rounds = Rounds<String>()
            while rounds.another(target) {
                let record: CloudRecord?
                switch try lookup(target) {
                case .found(let found): record = found
                case .absent: record = nil
                case .unknown: record = try fetchRecord(cloud: cloud, zone: zone, target)
                }
                guard let record, record.deleted,
                      let next = try RecordApplier.aliasTarget(db, tombstone: record.fields, of: target)
                else { break }
                target = next
            }
        }
        let tMissing = Trace.start()
        let missing = try missingParents(entities)
        Trace.add("import.prefetch.missing-parents", tMissing)
        for name in missing { try fetchRecord(cloud: cloud, zone: zone, name) }
    }

    /// The record names of parents that staged, parked, set-aside or prefetched live records name, and that
    /// neither the record map, the aliases, nor this import knows.
    private func missingParents(_ entities: [String: EntityMap]) throws -> [String] {
        var names: Set<String> = []
        for child in entities.values where child.pathSafe {
            for fk in child.foreignKeys {
                guard let parent = entities[fk.parentTable] else { continue }
                let parentColumns = fk.parentColumns.compactMap { $0 }
                guard parentColumns.count == fk.columns.count else { continue }
                let name: String
                if fk.columns.count == 1, child.reference(for: fk.columns[0]) != nil {
                    name = "json_extract(fields, \(quoteLiteral(jsonPath(fk.columns[0]) + ".\"$ref\"")))"
                } else if !parent.isSurrogate && parentColumns == parent.primaryKey {
                    let values = fk.columns.map { "json_extract(fields, \(quoteLiteral(jsonPath($0))))" }
                    name = "CASE WHEN " + values.map { "\($0) IS NOT NULL" }.joined(separator: " AND ")
                        + " THEN \(quoteLiteral(parent.name + ":")) || json_array("
                        + values.map { EntityMap.jsonValue($0) }.joined(separator: ", ") + ") END"
                } else {
                    continue
                }
                // The distinct names first (a link table names few parents many times); a parent this import
                // brings is the common case, so the staged records are asked first.
                let rows = try db.query("""
                    WITH names(n) AS MATERIALIZED (
                        SELECT \(name) FROM temp._storectl_import_staged
                        WHERE record_type = ?1 AND deleted = 0 AND json_valid(fields)
                        UNION
                        SELECT \(name) FROM temp._storectl_import_lookups
                        WHERE found = 1 AND record_type = ?1 AND deleted = 0 AND json_valid(fields))
                    SELECT n FROM names
                    WHERE n IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM temp._storectl_import_staged s WHERE s.record_name = n)
                      AND NOT EXISTS (SELECT 1 FROM temp._storectl_import_lookups l WHERE l.record_name = n)
                      AND NOT EXISTS (SELECT 1 FROM _storectl_records r WHERE \(RecordMap.named("n", "r")))
                      AND NOT EXISTS (SELECT 1 FROM _storectl_aliases a WHERE a.record_name = n)
                    """, [child.name])
                for row in rows { if let n = row[0].string { names.insert(n) } }
            }
        }
        return names.sorted()
    }

    /// Fetches one record and keeps it (or its absence) for `lookup`.
    @discardableResult
    private func fetchRecord(cloud: any CloudDatabase, zone: String, _ name: String) throws -> CloudRecord? {
        try requireNoWriteTransaction("fetchRecord")
        let fetched = try cloud.fetchRecord(zone: zone, recordName: name)
        // A record read after the pages, outside their snapshots: the schema version is asked again after it.
        if fetched != nil { schemaVersionSeen = .notRead }
        // A record saved by an account that may not write the zone is not taken for the record's state.
        if fetched?.rejection != nil { return nil }
        let record = fetched
        try db.transaction(.deferred) {
            try db.run("""
                INSERT OR REPLACE INTO temp._storectl_import_lookups(record_name, found, record_type, fields,
                    change_tag, seq, deleted, modified_by, modified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """, [name, record != nil, record?.recordType ?? "", record?.fields ?? "", record?.changeTag ?? "",
                      record?.seq ?? 0, record?.deleted ?? false, record?.modifiedBy ?? "", record?.modifiedAt ?? 0])
        }
        return record
    }

    // MARK: Inside the write transaction

    /// A staged record as the import first looks at it: what decides where it goes, without its fields (a record
    /// the set-based path takes is copied from table to table, never read into memory: `PageApplier`).
    struct Header {
        /// Its row in the staging table (`record(_:zone:)` reads it whole).
        let id: Int64
        let recordName: String
        let recordType: String
        let deleted: Bool
        /// The size of its fields in bytes (UTF-8).
        let size: Int
        /// Its fields are `{}`.
        let emptyFields: Bool
        /// Its fields hold `{"$` (a blob, a text or a reference object: `RecordApplier.mentionsSpecialObject`).
        let special: Bool
    }

    /// The staging table, for a statement that copies staged records by `Header.id`.
    static let table = "temp._storectl_import_staged"

    /// The headers of the records of staged page `page`, in the order they were fetched.
    /// - Throws: `SQLiteError`.
    func headers(page: Int) throws -> [Header] {
        let select = try db.cached("""
            SELECT id, record_name, record_type, deleted, length(CAST(fields AS BLOB)), fields = '{}',
                   instr(fields, '{"$') > 0
            FROM temp._storectl_import_staged WHERE page = ? ORDER BY id
            """)
        var headers: [Header] = []
        try select.forEach([page]) {
            headers.append(Header(id: $0.int64(0) ?? 0, recordName: $0.string(1) ?? "", recordType: $0.string(2) ?? "",
                                  deleted: $0.int64(3) == 1, size: Int($0.int64(4) ?? 0), emptyFields: $0.int64(5) == 1,
                                  special: $0.int64(6) == 1))
        }
        return headers
    }

    /// The staged record `header` names, whole.
    /// - Throws: `SQLiteError`.
    func record(_ header: Header, zone: String) throws -> CloudRecord {
        let select = try db.cached("""
            SELECT record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at
            FROM temp._storectl_import_staged WHERE id = ?
            """)
        var found: CloudRecord?
        try select.forEach([header.id]) { found = Self.record($0.row, zone: zone) }
        guard let found else {
            throw StoreError(.software, "the import's staged record \(header.recordName) is gone",
                             hint: "report this as a bug in storectl; nothing of this import was applied")
        }
        return found
    }

    /// The own records of staged page `page` (`fetchDeviceRecords`), in seq order.
    /// - Throws: `SQLiteError`.
    func deviceRecords(page: Int, zone: String) throws -> [DeviceRecord] {
        try db.query("""
            SELECT record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at, history_seq,
                   superseded
            FROM temp._storectl_import_staged WHERE page = ? ORDER BY id
            """, [page]).map {
                DeviceRecord(record: Self.record($0, zone: zone), historySeq: $0[8].int64, superseded: $0[9].int64 == 1)
            }
    }

    /// What this import knows of record `name`, without asking the cloud.
    /// - Throws: `SQLiteError`.
    func lookup(_ name: String) throws -> Lookup {
        if let row = try db.query("""
            SELECT record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at, found
            FROM temp._storectl_import_lookups WHERE record_name = ?
            """, [name]).first
        {
            return row[8].int64 == 1 ? .found(Self.record(row, zone: "")) : .absent
        }
        if let row = try db.query("""
            SELECT record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at
            FROM temp._storectl_import_staged WHERE record_name = ? AND superseded = 0 ORDER BY seq DESC, id DESC
            LIMIT 1
            """, [name]).first
        {
            return .found(Self.record(row, zone: ""))
        }
        return .unknown
    }

    private static func record(_ row: Row, zone: String) -> CloudRecord {
        CloudRecord(zone: zone, recordName: row[0].string ?? "", recordType: row[1].string ?? "",
                    fields: row[2].string ?? "", changeTag: row[3].string ?? "", seq: row[4].int64 ?? 0,
                    deleted: row[5].int64 == 1, modifiedBy: row[6].string ?? "", modifiedAt: row[7].double ?? 0)
    }
}
