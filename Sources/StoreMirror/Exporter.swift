import Dispatch
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// What an export did.
public struct ExportReport: Sendable, Codable, Equatable {
    /// Records created or updated in the cloud.
    public var saved = 0
    /// Tombstones saved in the cloud.
    public var deleted = 0
    /// Conflicts met and resolved by the merge policy.
    public var conflictsResolved = 0
    /// Whether this was a baseline of every row rather than the history since the export token.
    public var baseline = false
    /// The export token after the export.
    public var token: Int64 = 0

    public init() {}
}

/// Raised when an export would delete more of the zone than `max_delete_fraction` allows.
public struct MassDeleteError: DiagnosedError {
    public var deletes: Int
    public var liveRecords: Int64
    public var fraction: Double
    public var emptyStore: Bool
    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        if emptyStore {
            return "refusing to push an empty store over a zone that holds \(liveRecords) record(s)"
        }
        let pct = liveRecords > 0 ? Int((Double(deletes) / Double(liveRecords) * 100).rounded()) : 100
        return "refusing to delete \(deletes) of the zone's \(liveRecords) record(s) (\(pct)%), more than "
            + "max_delete_fraction \(fraction)"
    }
    public var details: [String] { ["  nothing was sent to the cloud; local rows and history are unchanged"] }
    public var hint: String? {
        "if the deletions are intended, run again with --allow-mass-delete; otherwise restore the rows locally"
    }
}

/// Pushes local changes to the cloud.
struct Exporter {
    let db: Connection
    let cloud: any CloudDatabase
    let options: MirrorOptions
    let entities: [EntityMap]
    let device: String
    /// Where background saves run, one at a time and in order (the cloud is one connection).
    private let saveQueue = DispatchQueue(label: "storectl.export.save")

    private struct Pending {
        var entity: EntityMap
        var pk: String
        var save: RecordSave
        var base: String?
        /// Whether `save.fields` is a merge that the local row does not hold yet.
        var isMerge = false
    }

    func run(baseline: Bool, progress: (Int, Int?) -> Void) throws -> ExportReport {
        var report = ExportReport()
        report.baseline = baseline
        let after = baseline ? 0 : try MirrorState.exportToken(db)
        let upto = try MirrorState.lastHistorySeq(db)
        let ordered = EntityMap.parentFirst(entities)

        // Coalesce the history after the token: one row per changed key, in SQL.
        try db.execute("CREATE TEMP TABLE IF NOT EXISTS _storectl_changes(entity TEXT NOT NULL, pk TEXT NOT NULL, "
                       + "PRIMARY KEY (entity, pk)) WITHOUT ROWID")
        try db.execute("DELETE FROM temp._storectl_changes")
        if !baseline {
            try db.run("""
                INSERT INTO temp._storectl_changes(entity, pk)
                SELECT DISTINCT entity, pk FROM main._storectl_history WHERE seq > ?1 AND seq <= ?2 AND author <> ?3
                """, [after, upto, MirrorState.importAuthor])
        }

        // SQLite reuses the rowid of a deleted last row. A row at the key of a deleted record is a new row and must
        // not bring the deleted record back (other devices map that name to another row): it gets a new name,
        // stored before anything is saved, so that a replay after a crash uses the same one.
        try db.transaction {
            for e in ordered where e.isSurrogate {
                // Incrementally, only the changed keys are looked at (the changes drive the loop).
                let scope = baseline ? "" : """
                    AND (r.entity, r.pk) IN (SELECT c.entity, c.pk FROM temp._storectl_changes c
                        CROSS JOIN _storectl_records m WHERE c.entity = \(quoteLiteral(e.name))
                        AND m.entity = c.entity AND m.pk = c.pk AND m.deleted = 1)
                    """
                try db.execute("""
                    UPDATE _storectl_records AS r SET record_name = \(e.surrogateName("json_extract(r.pk, '$[0]')"))
                        || '.' || lower(hex(randomblob(6))), change_tag = NULL, base = NULL, deleted = 0
                    WHERE r.entity = \(quoteLiteral(e.name)) AND r.deleted = 1 \(scope)
                      AND EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "r.pk")))
                    """)
            }
        }

        // The mass-delete breaker.
        var deletes = 0
        for e in ordered {
            deletes += Int(try db.scalar(deletionCountSQL(e, baseline: baseline))?.int64 ?? 0)
        }
        if deletes > 0 && !options.allowMassDelete, let zone = try cloud.zoneInfo(options.zone), zone.liveRecords > 0 {
            let liveLocal = try ordered.reduce(Int64(0)) { sum, e in
                sum + (try db.scalar("SELECT count(*) FROM main.\(e.quotedName)")?.int64 ?? 0)
            }
            if Double(deletes) > options.maxDeleteFraction * Double(zone.liveRecords) || liveLocal == 0 {
                throw MassDeleteError(deletes: deletes, liveRecords: zone.liveRecords,
                                      fraction: options.maxDeleteFraction, emptyStore: liveLocal == 0)
            }
        }

        let total = baseline
            ? try ordered.reduce(0) { $0 + Int(try db.scalar("SELECT count(*) FROM main.\($1.quotedName)")?.int64 ?? 0) }
            : Int(try db.scalar("SELECT count(*) FROM temp._storectl_changes")?.int64 ?? 0)
        var done = 0
        for e in ordered {
            var lastKey: [Value]? = nil
            // Two batches are in progress at once: while the cloud saves one (on a thread of its own, through the
            // container's own connection), this thread reads the next page and records the previous batch's
            // outcomes in the store. The saves stay in order, one at a time; only the local work overlaps them.
            var inFlight: SaveFlight? = nil
            defer { inFlight?.wait() }
            while true {
                let tPage = Trace.start()
                let (batch, nextKey) = try page(e, baseline: baseline, after: lastKey)
                Trace.add("export.page", tPage)
                if batch.isEmpty && nextKey == nil { break }
                let flight = batch.isEmpty ? nil : startSave(batch)
                let previous = inFlight
                inFlight = flight  // waited for by the defer if what follows throws
                if let previous { try finish(previous, next: flight, report: &report) }
                done += batch.count
                progress(done, total)
                guard let nextKey else { break }
                lastKey = nextKey
            }
            if let previous = inFlight {
                inFlight = nil
                try finish(previous, next: nil, report: &report)
            }
            if baseline {
                // Rows the record map knows but the table no longer has: their deletions travel too.
                let rows = try db.query("""
                    SELECT r.pk, r.record_name, r.change_tag FROM _storectl_records r
                    WHERE r.entity = ?1 AND r.deleted = 0
                      AND NOT EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "r.pk")))
                    """, [e.name])
                var batch: [Pending] = []
                for row in rows {
                    batch.append(Pending(entity: e, pk: row[0].string ?? "[]",
                                         save: RecordSave(recordName: row[1].string ?? "", recordType: e.name,
                                                          fields: "{}", deleted: true, expectedTag: row[2].string),
                                         base: nil))
                    if batch.count >= options.batchSize {
                        try send(batch, report: &report)
                        batch = []
                    }
                }
                try send(batch, report: &report)
            }
        }

        Failpoint.hit("export.before-commit")
        try db.transaction {
            try MirrorState.setExportToken(db, upto)
            if baseline {
                try MirrorState.setMeta(db, "baseline_container", cloud.container + "/" + options.zone)
                try MirrorState.setMeta(db, "history_gap", nil)
            }
            try MirrorState.setMeta(db, "last_export_at", String(Int64(Date().timeIntervalSince1970 * 1000)))
        }
        Failpoint.hit("export.after-commit")
        report.token = upto
        return report
    }

    private func deletionCountSQL(_ e: EntityMap, baseline: Bool) -> String {
        if baseline {
            return """
                SELECT count(*) FROM _storectl_records r WHERE r.entity = \(quoteLiteral(e.name)) AND r.deleted = 0
                AND r.change_tag IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "r.pk")))
                """
        }
        // CROSS JOIN keeps the changes as the outer loop: the cost follows the changes, not the record map.
        return """
            SELECT count(*) FROM temp._storectl_changes c CROSS JOIN _storectl_records r
            WHERE c.entity = \(quoteLiteral(e.name)) AND r.entity = c.entity AND r.pk = c.pk AND r.deleted = 0
              AND r.change_tag IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "c.pk")))
            """
    }

    /// One page of rows to export, and the key to continue after (nil at the end).
    private func page(_ e: EntityMap, baseline: Bool, after: [Value]?) throws -> ([Pending], [Value]?) {
        let limit = options.batchSize
        let statement: Statement
        var args: [any SQLBindable] = [e.name]
        if baseline {
            let keys = e.primaryKey.map { "t.\(quoteIdentifier($0))" }
            var whereClause = ""
            if let after {
                let params = after.indices.map { "?\($0 + 2)" }
                whereClause = "WHERE (\(keys.joined(separator: ", "))) > (\(params.joined(separator: ", ")))"
                args += after
            }
            statement = try db.cached("""
                SELECT \(e.pkJSON("t")), coalesce(r.record_name, \(e.derivedName("t"))), r.change_tag, r.base, r.deleted, 1,
                       \(e.fieldsJSON("t")),
                       \(keys.joined(separator: ", "))
                FROM main.\(e.quotedName) t
                LEFT JOIN _storectl_records r ON r.entity = ?1 AND r.pk = \(e.pkJSON("t"))
                \(whereClause) ORDER BY \(keys.joined(separator: ", ")) LIMIT \(limit)
                """)
        } else {
            let pk0 = quoteIdentifier(e.primaryKey[0])
            var whereClause = ""
            if let after {
                whereClause = "AND c.pk > ?2"
                args += after
            }
            statement = try db.cached("""
                SELECT c.pk, coalesce(r.record_name, CASE WHEN t.\(pk0) IS NOT NULL THEN \(e.derivedName("t")) END),
                       r.change_tag, r.base, r.deleted, t.\(pk0) IS NOT NULL, \(e.fieldsJSON("t")), c.pk
                FROM temp._storectl_changes c
                LEFT JOIN main.\(e.quotedName) t ON \(e.pkMatches("t", json: "c.pk"))
                LEFT JOIN _storectl_records r ON r.entity = ?1 AND r.pk = c.pk
                WHERE c.entity = ?1 \(whereClause) ORDER BY c.pk LIMIT \(limit)
                """)
        }
        var batch: [Pending] = []
        var rows = 0
        var lastKey: [Value] = []
        var orphans: [String] = []
        let keyCount = baseline ? e.primaryKey.count : 1
        try statement.forEach(args) { row in
            rows += 1
            // Only the last row's key is kept: it is where the next page starts.
            if rows == limit { lastKey = (0..<keyCount).map { row.column(7 + $0) } }
            let pk = row.string(0) ?? "[]"
            guard let name = row.string(1) else { return }
            let tag = row.string(2)
            let base = row.string(3)
            let mappedDeleted = row.int64(4) == 1
            let present = row.int64(5) == 1
            let fields = row.string(6) ?? "{}"
            if present {
                if !mappedDeleted && tag != nil && base == fields { return }  // nothing really changed
                batch.append(Pending(entity: e, pk: pk,
                                     save: RecordSave(recordName: name, recordType: e.name, fields: fields,
                                                      deleted: false, expectedTag: tag),
                                     base: base))
            } else if !mappedDeleted && tag != nil {
                batch.append(Pending(entity: e, pk: pk,
                                     save: RecordSave(recordName: name, recordType: e.name, fields: "{}",
                                                      deleted: true, expectedTag: tag),
                                     base: base))
            } else if !mappedDeleted {
                // Named, then deleted before anything reached the cloud.
                orphans.append(pk)
            }
        }
        for pk in orphans {
            try db.run("DELETE FROM _storectl_records WHERE entity = ? AND pk = ? AND change_tag IS NULL", [e.name, pk])
        }
        return (batch, rows < limit ? nil : lastKey)
    }

    /// A batch being saved by the cloud on a thread of its own.
    private final class SaveFlight: @unchecked Sendable {
        let batch: [Pending]
        private let done = DispatchSemaphore(value: 0)
        private var result: Result<[SaveOutcome], any Error> = .success([])
        private var waited = false

        init(batch: [Pending]) { self.batch = batch }

        /// Runs `save` on `queue`, a serial queue: saves run one at a time, in the order they were started.
        func start(on queue: DispatchQueue, _ save: @escaping @Sendable () throws -> [SaveOutcome]) {
            queue.async {
                self.result = Result { try save() }
                self.done.signal()
            }
        }

        /// Waits for the save to end (once; later calls return at once).
        func wait() {
            if waited { return }
            done.wait()
            waited = true
        }

        /// The outcomes, after waiting for them.
        func outcomes() throws -> [SaveOutcome] {
            wait()
            return try result.get()
        }
    }

    /// The cloud, handed to the save thread: the exporter uses it from one thread at a time.
    private struct CloudBox: @unchecked Sendable {
        let cloud: any CloudDatabase
    }

    /// Starts saving `batch` in the background.
    private func startSave(_ batch: [Pending]) -> SaveFlight {
        Failpoint.hit("export.before-save")
        let flight = SaveFlight(batch: batch)
        let box = CloudBox(cloud: cloud)
        let zone = options.zone, device = device, saves = batch.map(\.save)
        flight.start(on: saveQueue) {
            let tSave = Trace.start()
            defer { Trace.add("export.cloud-save", tSave) }
            return try box.cloud.save(zone: zone, saves, device: device)
        }
        return flight
    }

    /// Records the outcomes of `flight` and resolves its conflicts; a retry waits for `next` first, so that only
    /// one save talks to the cloud at a time.
    private func finish(_ flight: SaveFlight, next: SaveFlight?, report: inout ExportReport) throws {
        let outcomes: [SaveOutcome]
        do {
            outcomes = try flight.outcomes()
        } catch {
            next?.wait()
            throw error
        }
        Failpoint.hit("export.after-save")
        let retry = try record(flight.batch, outcomes: outcomes, report: &report)
        if !retry.isEmpty {
            next?.wait()
            try send(retry, report: &report, round: 2)
        }
    }

    /// Saves a batch, resolves its conflicts, and records the outcome in one local transaction per round.
    private func send(_ batch: [Pending], report: inout ExportReport, round firstRound: Int = 1) throws {
        var work = batch
        var round = firstRound - 1
        while !work.isEmpty {
            round += 1
            if round > 5 {
                throw StoreError(.tempFail, "records kept changing in the cloud while they were being saved",
                                 hint: "run 'storectl sync' again")
            }
            Failpoint.hit("export.before-save")
            let tSave = Trace.start()
            let outcomes = try cloud.save(zone: options.zone, work.map(\.save), device: device)
            Trace.add("export.cloud-save", tSave)
            Failpoint.hit("export.after-save")
            work = try record(work, outcomes: outcomes, report: &report)
        }
    }

    /// Records the outcomes of one save in one local transaction, resolving conflicts by the merge policy.
    /// Returns what must be saved again (merges, and saves whose server record vanished).
    private func record(_ work: [Pending], outcomes: [SaveOutcome], report: inout ExportReport) throws -> [Pending] {
        let codec = FieldCodec(db: db)
        let tLocal = Trace.start()
        defer { Trace.add("export.local-commit", tLocal) }
        var retry: [Pending] = []
        var conflicts: [ConflictReport] = []
        // Local rows changed here (merges, the server's side of a conflict) are the cloud's changes.
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            let applier = try RecordApplier(db: db, entities: Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) }),
                                            policy: options.mergePolicy)
            let upsert = try db.cached(Self.mapUpsertSQL)
            for (item, outcome) in zip(work, outcomes) {
                switch outcome {
                case .saved(let tag, _):
                    try record(item, tag: tag, applier: applier, upsert: upsert)
                    if item.save.deleted { report.deleted += 1 } else { report.saved += 1 }
                case .conflict(let server):
                    if let server, server.modifiedBy == device, server.deleted == item.save.deleted,
                       item.save.deleted || server.fields == item.save.fields
                    {
                        // Our own earlier write, saved before a crash: nothing to resolve.
                        try record(item, tag: server.changeTag, applier: applier, upsert: upsert)
                        if item.save.deleted { report.deleted += 1 } else { report.saved += 1 }
                        continue
                    }
                    if let server, server.deleted, item.save.deleted {
                        // Deleted on both sides: nothing to resolve.
                        try record(item, tag: server.changeTag, applier: applier, upsert: upsert)
                        continue
                    }
                    guard let server else {
                        var again = item
                        again.save.expectedTag = nil
                        retry.append(again)
                        continue
                    }
                    let local = try applier.localChanges(item.entity, pk: item.pk)
                    let localColumns = local?.columns ?? item.entity.fieldColumns
                    let resolution = try options.mergePolicy.resolve(
                        localFields: item.save.deleted ? nil : item.save.fields, localChanged: localColumns,
                        server: server.deleted ? nil : server.fields, base: item.base,
                        columns: item.entity.fieldColumns, codec: codec)
                    report.conflictsResolved += 1
                    switch resolution {
                    case .fail:
                        report.conflictsResolved -= 1
                        conflicts.append(ConflictReport(entity: item.entity.name, recordName: item.save.recordName,
                                                        localColumns: localColumns, serverDeleted: server.deleted))
                    case .takeServer:
                        _ = try applier.apply(server, respectLocalChanges: false)
                    case .saveMerged(let fields, let deleted):
                        var again = item
                        again.save = RecordSave(recordName: item.save.recordName, recordType: item.entity.name,
                                                fields: fields, deleted: deleted, expectedTag: server.changeTag)
                        again.base = server.deleted ? nil : server.fields
                        again.isMerge = true
                        retry.append(again)
                    }
                }
            }
        }
        Failpoint.hit("export.after-batch-commit")
        if !conflicts.isEmpty { throw ConflictError(conflicts: conflicts) }
        return retry
    }

    /// Records a successful save in the record map; a merged save also makes the local row match.
    private func record(_ item: Pending, tag: String, applier: RecordApplier, upsert: Statement) throws {
        if item.save.deleted {
            try markSaved(item, tag: tag, base: nil, upsert: upsert)
            if try applier.rowExists(item.entity, pk: item.pk) {
                // A merge decided on deletion while the row still exists locally.
                try db.run("DELETE FROM main.\(item.entity.quotedName) WHERE \(item.entity.pkMatches("main.\(item.entity.quotedName)", json: "?1"))",
                           [item.pk])
            }
        } else if item.isMerge {
            // The saved fields are a merge: bring the local row to them.
            let merged = CloudRecord(zone: options.zone, recordName: item.save.recordName, recordType: item.entity.name,
                                     fields: item.save.fields, changeTag: tag, seq: 0, deleted: false,
                                     modifiedBy: device, modifiedAt: 0)
            _ = try applier.apply(merged, respectLocalChanges: false)
        } else {
            try markSaved(item, tag: tag, base: item.save.fields, upsert: upsert)
        }
    }

    /// The record-map upsert of a saved record.
    private static let mapUpsertSQL = """
        INSERT INTO _storectl_records(entity, pk, record_name, change_tag, base, deleted)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6)
        ON CONFLICT(entity, pk) DO UPDATE SET record_name = excluded.record_name,
            change_tag = excluded.change_tag, base = excluded.base, deleted = excluded.deleted
        """

    /// Records the saved tag and base in the record map, with `upsert` (`mapUpsertSQL`, prepared once per batch;
    /// each value bound in place, a hot path of a million rows).
    private func markSaved(_ item: Pending, tag: String, base: String?, upsert s: Statement) throws {
        do {
            try s.bind(.text(item.entity.name), at: 1)
            try s.bind(.text(item.pk), at: 2)
            try s.bind(.text(item.save.recordName), at: 3)
            try s.bind(.text(tag), at: 4)
            try s.bind(base.map { .text($0) } ?? .null, at: 5)
            try s.bind(.integer(item.save.deleted ? 1 : 0), at: 6)
            try s.step()
        } catch let error as SQLiteError where error.isConstraint {
            try? s.reset()
            // The name was attached to another key (an old mapping): move it.
            try RecordApplier.setMap(db, entity: item.entity.name, pk: item.pk, name: item.save.recordName, tag: tag,
                                     base: base, deleted: item.save.deleted)
        }
    }
}
