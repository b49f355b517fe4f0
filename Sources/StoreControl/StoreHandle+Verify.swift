import FoundationEssentials
import StoreBase
import StoreCloud
import StoreConfig
import StoreMirror
import StoreSQLite

/// What `storectl verify` found: the store compared with its zone, table by table. The JSON form is stable.
public struct VerifyReport: Sendable, Codable, Equatable {
    /// One tracked table.
    public struct Table: Sendable, Codable, Equatable {
        public var table: String
        /// Rows in the store.
        public var localRows: Int
        /// Live records of this table in the zone.
        public var cloudRecords: Int
        /// Rows whose record holds exactly their values.
        public var matching: Int
        /// Rows whose record holds other values.
        public var differing: Int
        /// Rows with no live record.
        public var localOnly: Int
        /// Live records with no row.
        public var cloudOnly: Int
    }

    /// One column of a row that differs: its value here and in the cloud (nil: the side has no such row), and
    /// the SQLite type of each (`integer`, `real`, `text`, `blob`, `null`, or `reference` for a reference to
    /// another record): the integer 1 and the real 1.0 are different values, whose JSON numbers may look alike.
    /// A real is shown with every digit it needs to read back the same (0.1 and 0.10000000000000002 differ).
    public struct Column: Sendable, Codable, Equatable {
        public var column: String
        public var local: JSONValue?
        public var cloud: JSONValue?
        public var localType: String?
        public var cloudType: String?

        public init(column: String, local: JSONValue?, cloud: JSONValue?, localType: String? = nil,
                    cloudType: String? = nil)
        {
            self.column = column
            self.local = local
            self.cloud = cloud
            self.localType = localType
            self.cloudType = cloudType
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(column, forKey: .column)
            try c.encode(local, forKey: .local)
            try c.encode(cloud, forKey: .cloud)
            try c.encode(localType, forKey: .localType)
            try c.encode(cloudType, forKey: .cloudType)
        }

        /// `side`'s value as text for people: a real with every digit it needs, and its type after it when the
        /// two sides hold values of different types (`1 (integer)` and `1.0 (real)`, `"\u0001" (text)` and
        /// `{"$blob": "01"} (blob)`). "-" when the side has no such row.
        public func shown(local side: Bool) -> String {
            guard let value = side ? local : cloud else { return "-" }
            let type = side ? localType : cloudType
            let other = side ? cloudType : localType
            if let type, let other, type != other { return value.display + " (\(type))" }
            return value.display
        }
    }

    /// One row that differs.
    public struct Difference: Sendable, Codable, Equatable {
        public var table: String
        /// The row's primary key (a JSON array of the key values), or nil for a record no local row maps to.
        public var key: JSONValue?
        public var recordName: String
        /// `differs` (both sides hold it, with other values), `local_only` or `cloud_only`.
        public var state: String
        /// The columns that differ (every column for a row only one side holds).
        public var columns: [Column]
        /// What explains it, when something does: `pending_export` (a local change not exported yet),
        /// `pending_import` (a cloud change not imported yet), `waiting_for_parent` (a record whose parent has
        /// not arrived), `parent_deleted` (a record whose parent the zone deleted, so no store can hold it). Nil: nothing storectl knows of explains it (it was changed behind storectl's back).
        public var pending: String?

        /// `state` in words: `differs`, `only here` or `only in the cloud`.
        public var stateInWords: String {
            switch state {
            case "local_only": return "only here"
            case "cloud_only": return "only in the cloud"
            default: return "differs"
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(table, forKey: .table)
            try c.encode(key, forKey: .key)
            try c.encode(recordName, forKey: .recordName)
            try c.encode(state, forKey: .state)
            try c.encode(columns, forKey: .columns)
            try c.encode(pending, forKey: .pending)
        }
    }

    public var store: String
    public var url: String
    public var container: String
    public var zone: String
    /// Whether the zone exists at all.
    public var zoneExists: Bool
    /// Whether every row matches its record and every live record its row.
    public var inSync: Bool
    public var tables: [Table]
    /// How many rows differ, in all.
    public var differenceCount: Int
    /// How many of them nothing pending explains.
    public var unexplainedCount: Int
    /// The rows that differ, at most `limit` of them, unexplained ones first.
    public var differences: [Difference]
    /// Whether `differences` was cut at the limit.
    public var truncated: Bool
    /// Live records of record types this store does not track (other stores' tables); not differences.
    public var untrackedRecords: Int
}

extension StoreHandle {
    /// `storectl verify`: compares the store with its zone, table by table, and names the rows that differ. Reads
    /// only: nothing is created or changed, in the store or in the cloud.
    /// - Parameter limit: at most this many differing rows are listed (all are counted).
    /// - Throws: `StoreError` 66 for a missing store, `AccountUnavailableError` (69/75), `CloudError` (69 missing
    ///   container, 75 temporary).
    public func verify(limit: Int = 1000) throws -> VerifyReport {
        try requireExists()
        let cloud = try cloudSettings()
        let db = try database()
        try historyTracker().requireInitialized()
        let (status, opened) = CloudConnector.accountStatusAndContainer(settings: cloud, environment: environment)
        // A container that is not there is said as such (for a bound store: gone, with what to do), never
        // compared as an empty zone.
        if status.containerMissing, boundContainer() != nil { throw boundContainerMissingError(cloud) }
        if status.status != .available { throw AccountUnavailableError(report: status, storeName: settings.name) }
        let backend: any CloudDatabase
        do {
            backend = try opened ?? CloudConnector.open(settings: cloud, environment: environment,
                                                        createIfMissing: false)
        } catch {
            throw explainMissingContainer(error)
        }
        return try Self.compare(db: db, store: settings.name, cloud: try encryptedCloud(backend), url: cloud.url,
                                zone: cloud.zone, limit: limit)
    }

    /// Compares the store `db` with `zone` of `cloud`, with the exporter's own encoding of rows and record names,
    /// so that what verify calls in sync is what sync calls nothing to do.
    /// - Throws: `CloudError`, `SQLiteError`.
    static func compare(db: Connection, store: String, cloud: any CloudDatabase, url: String, zone: String,
                        limit: Int, zoneBefore: ZoneInfo? = nil) throws -> VerifyReport
    {
        // One read snapshot of the store for the whole comparison, taken before the cloud is fetched: a sync that
        // commits meanwhile (another process) changes nothing the comparison reads here, and what it saved or
        // imported is newer in the fetched records than in the store, which the tokens read in the same snapshot
        // mark as pending. Without it, a row imported after the fetch differed from its (older) fetched record.
        if !db.isInTransaction {
            // The zone as it was before the snapshot: a record saved after that (this store's own export running
            // meanwhile in another process included) is newer than the snapshot, and pending.
            let before = try cloud.zoneInfo(zone, countLive: false)
            return try db.transaction(.deferred) {
                try compare(db: db, store: store, cloud: cloud, url: url, zone: zone, limit: limit, zoneBefore: before)
            }
        }
        let withdraw = try readableMirrorState(db)
        defer { withdraw() }
        let entities = try Mirror.entityMaps(db)
        let device = try MirrorState.storeID(db)
        var report = VerifyReport(store: store, url: Redaction.connectionString(url), container: cloud.container, zone: zone,
                                  zoneExists: false, inSync: true, tables: [], differenceCount: 0,
                                  unexplainedCount: 0, differences: [], truncated: false, untrackedRecords: 0)
        try db.execute("""
            CREATE TEMP TABLE IF NOT EXISTS _storectl_verify_cloud(record_name TEXT PRIMARY KEY, record_type TEXT,
                fields TEXT, seq INTEGER, modified_by TEXT, deleted INTEGER) WITHOUT ROWID;
            DELETE FROM temp._storectl_verify_cloud;
            CREATE TEMP TABLE IF NOT EXISTS _storectl_verify_local(pk TEXT, record_name TEXT PRIMARY KEY, fields TEXT)
                WITHOUT ROWID;
            """)
        defer { try? db.execute("DROP TABLE IF EXISTS temp._storectl_verify_cloud; "
                                + "DROP TABLE IF EXISTS temp._storectl_verify_local") }
        // Read before the cloud: an export that commits while the cloud is fetched moves the token past changes
        // whose records the fetched copy may lack; read first, they count as pending.
        let exportToken = try MirrorState.exportToken(db)
        // The keys with a local change after the export token, by anyone but the import, read once: looked up
        // per row, the history after the token (a whole import of it) would be read again for every row.
        try db.execute("""
            CREATE TEMP TABLE IF NOT EXISTS _storectl_verify_pending(entity TEXT, pk TEXT, PRIMARY KEY (entity, pk))
                WITHOUT ROWID;
            DELETE FROM temp._storectl_verify_pending;
            """)
        defer { try? db.execute("DROP TABLE IF EXISTS temp._storectl_verify_pending") }
        // The app may keep writing while the tables are compared: a change written after this point (its history
        // seq above `snapshotSeq`) is pending too, although the set below was read before it.
        let snapshotSeq = try MirrorState.lastHistorySeq(db)
        try db.run("""
            INSERT OR IGNORE INTO temp._storectl_verify_pending(entity, pk)
            SELECT entity, pk FROM _storectl_history WHERE seq > ? AND author <> ?
            UNION ALL SELECT record_type, pk FROM _storectl_outgoing WHERE kind = 'save'
            """, [exportToken, MirrorState.importAuthor])
        // Records saved after the server token by other devices are changes this store has not imported yet.
        var importedUpTo: Int64 = -1
        // Records with a higher seq were saved after the snapshot began (none is known without `zoneBefore`).
        var savedAfter = Int64.max
        if let info = try cloud.zoneInfo(zone, countLive: false) {
            report.zoneExists = true
            if let zoneBefore, zoneBefore.epoch == info.epoch { savedAfter = zoneBefore.lastSeq }
            if let raw = try MirrorState.serverToken(db, zone: zone), let token = ServerChangeToken(rawValue: raw),
               token.epoch == info.epoch
            {
                importedUpTo = token.seq
            }
            Failpoint.hit("verify.before-fetch")
            let tFetch = Trace.start()
            defer { Trace.add("verify.fetch", tFetch) }
            let insert = try db.prepare("INSERT OR REPLACE INTO temp._storectl_verify_cloud VALUES (?, ?, ?, ?, ?, ?)")
            // The next page is fetched while this one is kept.
            try ChangePages.forEach(cloud: cloud, zone: zone, after: nil, limit: 1000, excludingDevice: nil,
                                    trace: "verify.fetch-page") { batch in
                try db.transaction {
                    for r in batch.records {
                        try insert.bind([r.recordName, r.recordType, r.fields, r.seq, r.modifiedBy, r.deleted ? 1 : 0])
                        while try insert.step() {}
                        try insert.reset()
                    }
                }
            }
            try resolveAliases(db)
        }
        let tracked = Set(entities.map(\.name))
        report.untrackedRecords = Int(try db.scalar(
            "SELECT count(*) FROM temp._storectl_verify_cloud WHERE deleted = 0 AND record_type NOT IN (SELECT value FROM json_each(?))",
            ["[" + tracked.sorted().map(JSONText.quoted).joined(separator: ",") + "]"])?.int64 ?? 0)

        var all = Differences(limit: limit)
        for e in entities.sorted(by: { Array($0.name.utf8).lexicographicallyPrecedes(Array($1.name.utf8)) }) {
            let tLocal = Trace.start()
            try db.execute("DELETE FROM temp._storectl_verify_local")
            try db.execute("INSERT OR REPLACE INTO temp._storectl_verify_local " + e.localRecordsSQL)
            Trace.add("verify.local", tLocal)
            let tCompare = Trace.start()
            defer { Trace.add("verify.compare", tCompare) }
            var table = VerifyReport.Table(table: e.name, localRows: 0, cloudRecords: 0, matching: 0, differing: 0,
                                           localOnly: 0, cloudOnly: 0)
            table.localRows = Int(try db.scalar("SELECT count(*) FROM temp._storectl_verify_local")?.int64 ?? 0)
            table.cloudRecords = Int(try db.scalar(
                "SELECT count(*) FROM temp._storectl_verify_cloud WHERE record_type = ? AND deleted = 0",
                [e.name])?.int64 ?? 0)
            // The constant default of each column, as a JSON value.
            var defaults: [String: JSONValue] = [:]
            for column in try db.columns(of: e.name) {
                guard let sql = column.defaultSQL, !sql.uppercased().hasPrefix("CURRENT_"), !sql.contains("("),
                      let text = try? db.scalar("SELECT json_quote(\(sql))")?.string else { continue }
                defaults[column.name] = JSONValue(jsonText: text)
            }
            // A local change after the export token, by anyone but the import, is pending export.
            let pendingExport = """
                (EXISTS (SELECT 1 FROM temp._storectl_verify_pending h WHERE h.entity = \(quoteLiteral(e.name))
                         AND h.pk = %PK%)
                 OR EXISTS (SELECT 1 FROM _storectl_history h WHERE h.seq > \(snapshotSeq)
                            AND h.entity = \(quoteLiteral(e.name)) AND h.pk = %PK%
                            AND h.author <> \(quoteLiteral(MirrorState.importAuthor))))
                """
            let pendingImport = "(%C%.seq > \(importedUpTo) AND %C%.modified_by IS NOT \(quoteLiteral(device)))"
            // This store's own save after the snapshot began: an export in another process, pending here.
            let ownSaveDuring = "(%C%.seq > \(savedAfter) AND %C%.modified_by IS \(quoteLiteral(device)))"

            // A record that waits in the inbox for its parent (deleted here, or not here yet): looked up only for
            // a row that differs.
            let waiting = try db.prepare("""
                SELECT 1 FROM _storectl_inbox WHERE record_name = ? AND state = 'waiting'
                """)
            func waitsForParent(_ name: String) throws -> Bool {
                var found = false
                try waiting.forEach([name]) { _ in found = true }
                return found
            }
            // Both sides hold the record.
            // Each query streams its rows (a whole zone may be compared): nothing but the counts and the first
            // `limit` differences of each kind is kept.
            try db.prepare("""
                SELECT l.pk, l.record_name, l.fields, c.fields,
                       \(pendingExport.replacingText("%PK%", with: "l.pk")) OR \(ownSaveDuring.replacingText("%C%", with: "c")),
                       \(pendingImport.replacingText("%C%", with: "c"))
                FROM temp._storectl_verify_local l JOIN temp._storectl_verify_cloud c
                  ON c.record_name = l.record_name AND c.deleted = 0
                """).forEach { row in
                let local = row.string(2) ?? "{}"
                let remote = row.string(3) ?? "{}"
                // A field the record lacks says nothing about the column (the device that saved it has no such
                // column): the row's NULL or the column's default is no difference.
                let columns = local == remote ? [] : try Self.differingColumns(db, local, remote).filter { c in
                    !(c.cloud == nil && (c.local == nil || c.local == .null || c.local == defaults[c.column]))
                }
                if columns.isEmpty {
                    table.matching += 1
                    return
                }
                table.differing += 1
                let name = row.string(1) ?? ""
                all.add(.init(table: e.name, key: row.string(0).map(JSONValue.init(jsonText:)),
                              recordName: name, state: "differs", columns: columns,
                              pending: row.int64(4) == 1 ? "pending_export"
                                 : row.int64(5) == 1 ? "pending_import"
                                 : try waitsForParent(name) ? "waiting_for_parent" : nil))
            }
            // Rows with no live record: not exported yet, or deleted in the cloud.
            try db.prepare("""
                SELECT l.pk, l.record_name, l.fields, \(pendingExport.replacingText("%PK%", with: "l.pk"))
                           OR coalesce((SELECT \(ownSaveDuring.replacingText("%C%", with: "c"))
                                        FROM temp._storectl_verify_cloud c WHERE c.record_name = l.record_name), 0),
                       coalesce((SELECT \(pendingImport.replacingText("%C%", with: "c"))
                                 FROM temp._storectl_verify_cloud c WHERE c.record_name = l.record_name), 0)
                FROM temp._storectl_verify_local l
                WHERE NOT EXISTS (SELECT 1 FROM temp._storectl_verify_cloud c
                                  WHERE c.record_name = l.record_name AND c.deleted = 0)
                """).forEach { row in
                table.localOnly += 1
                all.add(.init(table: e.name, key: row.string(0).map(JSONValue.init(jsonText:)),
                              recordName: row.string(1) ?? "", state: "local_only",
                              columns: try Self.columns(db, row.string(2) ?? "{}", local: true),
                              pending: row.int64(3) == 1 ? "pending_export"
                                 : row.int64(4) == 1 ? "pending_import" : nil))
            }
            // A record that points at a parent the zone no longer holds alive cannot be a row anywhere: the
            // parent's deletion removed its children on every store that applied it (ON DELETE CASCADE).
            let orphan = e.references.isEmpty ? "0" : "(" + e.references.map { ref in
                let path = quoteLiteral("$.\"" + ref.column.replacingText("\"", with: "\\\"") + "\".\"$ref\"")
                return "(json_valid(c.fields) AND json_extract(c.fields, \(path)) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
                    + "temp._storectl_verify_cloud p WHERE p.record_name = json_extract(c.fields, \(path)) "
                    + "AND p.deleted = 0))"
            }.joined(separator: " OR ") + ")"
            // A record set aside here, a tombstone waiting in the outbox, a duplicate merged into another.
            let setAside = """
                CASE WHEN EXISTS (SELECT 1 FROM _storectl_inbox q WHERE q.record_name = c.record_name
                                         AND q.state = 'set_aside')
                     THEN 'set_aside'
                     WHEN EXISTS (SELECT 1 FROM _storectl_outgoing o WHERE o.record_name = c.record_name
                                      AND o.kind = 'delete')
                     THEN 'pending_export'
                     WHEN EXISTS (SELECT 1 FROM _storectl_aliases a WHERE a.record_name = c.record_name)
                     THEN 'merged_duplicate' END
                """
            // Live records with no row: not imported yet, waiting for a parent, or deleted here. A record a
            // read-only participant deleted, whose rowid a row of its own took, is kept under a key no row has
            // (`RecordMap.keepGone`): it is named by the key it had.
            let key = RecordMap.keyHeld("m")
            try db.prepare("""
                SELECT c.record_name, c.fields, \(key),
                       CASE WHEN m.pk IS NULL THEN 0 ELSE \(pendingExport.replacingText("%PK%", with: key)) END
                           OR \(ownSaveDuring.replacingText("%C%", with: "c")),
                       \(pendingImport.replacingText("%C%", with: "c")),
                       EXISTS (SELECT 1 FROM _storectl_inbox p WHERE p.record_name = c.record_name
                                   AND p.state = 'waiting'),
                       \(orphan),
                       \(setAside)
                FROM temp._storectl_verify_cloud c
                LEFT JOIN _storectl_records m ON \(RecordMap.named("c.record_name", "m"))
                WHERE c.record_type = ? AND c.deleted = 0
                  AND NOT EXISTS (SELECT 1 FROM temp._storectl_verify_local l WHERE l.record_name = c.record_name)
                """).forEach([e.name]) { row in
                table.cloudOnly += 1
                let pending = row.int64(3) == 1 ? "pending_export" : row.int64(4) == 1 ? "pending_import"
                    : row.int64(5) == 1 ? "waiting_for_parent" : row.int64(6) == 1 ? "parent_deleted"
                    : row.string(7)
                all.add(.init(table: e.name, key: row.string(2).map(JSONValue.init(jsonText:)),
                              recordName: row.string(0) ?? "", state: "cloud_only",
                              columns: try Self.columns(db, row.string(1) ?? "{}", local: false), pending: pending))
            }
            report.tables.append(table)
        }
        report.differenceCount = all.count
        report.unexplainedCount = all.unexplainedCount
        report.inSync = all.count == 0
        report.differences = all.listed
        report.truncated = all.count > report.differences.count
        return report
    }

    /// The differences `compare` found: every one counted, the first `limit` of each kind kept, unexplained ones
    /// listed first (they are what the user has to look at).
    struct Differences {
        let limit: Int
        private(set) var count = 0
        private(set) var unexplainedCount = 0
        private var unexplained: [VerifyReport.Difference] = []
        private var explained: [VerifyReport.Difference] = []

        init(limit: Int) { self.limit = max(limit, 0) }

        mutating func add(_ difference: VerifyReport.Difference) {
            count += 1
            if difference.pending == nil {
                unexplainedCount += 1
                if unexplained.count < limit { unexplained.append(difference) }
            } else if explained.count < limit {
                explained.append(difference)
            }
        }

        var listed: [VerifyReport.Difference] { Array((unexplained + explained).prefix(limit)) }
    }

    /// A reference naming a duplicate merged into another record (`{"$ref":"LOSER"}`) names the winner in the
    /// fetched cloud records: the rows point at the winner, and every store resolves the loser's name through its
    /// aliases the same way, so the two are the same reference.
    static func resolveAliases(_ db: Connection) throws {
        var aliases: [String: String] = [:]
        for row in try db.query("SELECT record_name, target FROM _storectl_aliases") {
            if let name = row[0].string, let target = row[1].string { aliases[name] = target }
        }
        guard !aliases.isEmpty else { return }
        let opening = "{\"$ref\":\""
        let update = try db.prepare("UPDATE temp._storectl_verify_cloud SET fields = ? WHERE record_name = ?")
        for row in try db.query("""
            SELECT record_name, fields FROM temp._storectl_verify_cloud WHERE deleted = 0 AND instr(fields, ?) > 0
            """, [opening]) {
            guard let name = row[0].string, let fields = row[1].string else { continue }
            var out = ""
            var rest = Substring(fields)
            var changed = false
            while let start = rest.firstRange(of: opening) {
                out += rest[..<start.upperBound]
                rest = rest[start.upperBound...]
                guard let close = rest.firstIndex(of: "\"") else { break }
                let ref = String(rest[..<close])
                if let target = aliases[ref], !target.contains("\""), !target.contains("\\") {
                    out += target
                    changed = true
                } else {
                    out += ref
                }
                rest = rest[close...]
            }
            guard changed else { continue }
            out += rest
            try update.bind([out, name])
            while try update.step() {}
            try update.reset()
        }
    }

    /// Lets a store that never synced be read like one that did, without writing to it: an empty record map,
    /// inbox and outbox in the connection's temp schema stand in for the missing ones until `withdraw` is called
    /// (they must not outlive the read: they would hide the real tables that sync creates).
    static func readableMirrorState(_ db: Connection) throws -> () -> Void {
        var made: [String] = []
        // A store that never synced: empty stand-ins of this version's shape.
        for table in ["_storectl_records", "_storectl_aliases"] {
            guard try !db.tableExists(table), let sql = RecordMap.standInSQL(table) else { continue }
            try db.execute(sql)
            made.append(table)
        }
        if try db.tableExists("_storectl_records"),
           try !db.columns(of: "_storectl_records").contains(where: { $0.name == "stored_name" })
        {
            // A store of an older format, read without writing (it is upgraded on its first write): its map keeps
            // every name, and before format 2 it has no `extra`.
            try RecordMap.readOlderMap(db)
            made.append("view:_storectl_records")
        }
        if try !db.tableExists("_storectl_inbox") {
            // A store of an older storectl, read without writing: its parked and set-aside records, as one inbox.
            try db.execute("CREATE TEMP VIEW IF NOT EXISTS _storectl_inbox AS SELECT * FROM "
                           + (try MirrorState.inboxSource(db)))
            made.append("view:_storectl_inbox")
        }
        if try !db.tableExists("_storectl_outgoing") {
            // The same for its tombstones not sent yet.
            try db.execute("CREATE TEMP VIEW IF NOT EXISTS _storectl_outgoing AS SELECT * FROM "
                           + (try MirrorState.outgoingSource(db)))
            made.append("view:_storectl_outgoing")
        }
        return {
            db.clearStatementCache()
            for table in made {
                if table.hasPrefix("view:") {
                    try? db.execute("DROP VIEW IF EXISTS temp.\(table.dropFirst(5))")
                } else {
                    try? db.execute("DROP TABLE IF EXISTS temp.\(table)")
                }
            }
        }
    }

    /// SQL for a `json_each` row of record fields as shown: its JSON (a real comes back as the double itself, see
    /// `shownValue`), its atom, and the SQLite type the value has in a row.
    private static let shownColumns = """
        CASE WHEN type IN ('object', 'array') THEN json(value) ELSE json_quote(value) END, atom,
        CASE type WHEN 'true' THEN 'integer' WHEN 'false' THEN 'integer' WHEN 'array' THEN 'text'
            WHEN 'object' THEN CASE WHEN json_type(value, '$."$blob"') IS NOT NULL THEN 'blob'
                                    WHEN json_type(value, '$."$ref"') IS NOT NULL THEN 'reference' ELSE 'text' END
            ELSE type END
        """

    /// A side's value from the `shownColumns` at `offset`: a real as its double (JSON text would keep 15 digits,
    /// and "1.0" would read back as the integer 1), anything else from its JSON.
    private static func shownValue(_ row: Row, _ offset: Int) -> (JSONValue?, String?) {
        guard let type = row[offset + 2].string else { return (nil, nil) }
        if type == "real", case .real(let d) = row[offset + 1] { return (.number(d), type) }
        return (row[offset].string.map(JSONValue.init(jsonText:)), type)
    }

    /// The columns whose values differ between two fields objects, each with both values and their types. Values
    /// compare by JSON type and exact value (a REAL by its double, text by its bytes): the integer 1 and the real
    /// 1.0 differ; key order does not matter.
    static func differingColumns(_ db: Connection, _ local: String, _ cloud: String) throws -> [VerifyReport.Column] {
        let (local, cloud) = (try readable(db, local), try readable(db, cloud))
        let exact = "CASE WHEN type IN ('object', 'array') THEN json(value) ELSE atom END"
        return try db.query("""
            SELECT k.key, l.*, c.*
            FROM (SELECT key FROM json_each(?1) UNION SELECT key FROM json_each(?2)) k
            LEFT JOIN (SELECT key AS lk, \(shownColumns) FROM json_each(?1)) l ON l.lk = k.key
            LEFT JOIN (SELECT key AS ck, \(shownColumns) FROM json_each(?2)) c ON c.ck = k.key
            WHERE (SELECT type FROM json_each(?1) WHERE key = k.key) IS NOT (SELECT type FROM json_each(?2) WHERE key = k.key)
               OR (SELECT \(exact) FROM json_each(?1) WHERE key = k.key) IS NOT (SELECT \(exact) FROM json_each(?2) WHERE key = k.key)
            ORDER BY k.key
            """, [local, cloud]).map { row in
            let (l, lt) = shownValue(row, 2), (c, ct) = shownValue(row, 6)
            return VerifyReport.Column(column: row[0].string ?? "", local: l, cloud: c, localType: lt, cloudType: ct)
        }
    }

    /// Fields as verify reads them: a record's fields that are not JSON (another program wrote them; the import
    /// sets such a record aside) show no columns, rather than failing the comparison of every other row.
    static func readable(_ db: Connection, _ fields: String) throws -> String {
        try db.scalar("SELECT json_valid(?)", [fields])?.int64 == 1 ? fields : "{}"
    }

    /// Every column of one side's fields.
    static func columns(_ db: Connection, _ fields: String, local: Bool) throws -> [VerifyReport.Column] {
        try db.query("SELECT key, key, \(shownColumns) FROM json_each(?) ORDER BY key", [try readable(db, fields)])
            .map { row in
            let (value, type) = shownValue(row, 2)
            return VerifyReport.Column(column: row[0].string ?? "", local: local ? value : nil,
                                       cloud: local ? nil : value, localType: local ? type : nil,
                                       cloudType: local ? nil : type)
        }
    }
}
