import FoundationEssentials
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// What an import did.
public struct ImportReport: Sendable, Codable, Equatable {
    /// Records applied to local rows (inserted or updated).
    public var applied = 0
    /// Local rows deleted because of tombstones.
    public var deleted = 0
    /// Records skipped: the device's own echoes and repeats.
    public var skipped = 0
    /// Records waiting for a parent that has not arrived yet.
    public var waitingForParent = 0
    /// Records of tables this store does not track (kept in the cloud; fetched again when the table is tracked).
    public var unknownType = 0
    /// Records set aside because they cannot be applied as they are (see `status` and `doctor`).
    public var setAside = 0
    /// Records set aside earlier that applied this time.
    public var recovered = 0
    /// Children of deleted parents, deleted or cut loose here by the schema's ON DELETE action (a delete wins).
    public var orphans = 0
    /// The server change token after the import.
    public var token: String?
    /// Duplicates of `unique:` keys resolved inside the import.
    public var dedup = DedupReport()
    /// The records this import set aside (or found still set aside), each with its seq, reason and fix.
    public var setAsideRecords: [SetAsideRecord] = []
    /// The records that wait for a parent record that has not arrived.
    public var waitingRecords: [UnsettledReport.Waiting] = []

    public init() {}
}

/// A record set aside: it cannot be applied as it is, so it waits in the inbox (`Inbox`), tried again on every
/// import, while every other record flows.
public struct SetAsideRecord: Sendable, Codable, Equatable {
    public var recordName: String
    public var recordType: String
    public var seq: Int64
    public var reason: String
    public var hint: String
    public var attempts: Int
}

/// Fetches the cloud's changes, then applies them in ONE local transaction with author `cloud-import`; the server
/// token advances in that same transaction.
///
/// No network round trip is made while that transaction is open (an app's write would wait on it): the pages of
/// changes, and every single record the import may need to look up, are fetched first into the connection's
/// temporary database (`ImportStaging`); the transaction applies what was fetched.
///
/// The phases, in order: fetch every page (the next one while this one is staged) and the lookups; then, in the
/// transaction: try again the records set aside before; apply every page (a page in a savepoint, and a page that
/// fails record by record, each failing record set aside with its reason); apply the parked children whose parents
/// arrived (breaking cycles of references); apply the orphan rule (a delete wins: the children of a deleted parent
/// go too, or are cut loose, following the schema's ON DELETE action); dedup; the new token.
struct Importer {
    let db: Connection
    let cloud: any CloudDatabase
    let options: MirrorOptions
    let entities: [EntityMap]
    let device: String
    /// Only records of these types (a catch-up for tables tracked since the token moved past their records).
    var onlyTypes: Set<String>?

    func run(progress: (Int, Int?) -> Void) throws -> ImportReport {
        var token = onlyTypes == nil
            ? try MirrorState.serverToken(db, zone: options.zone).flatMap(ServerChangeToken.init(rawValue:)) : nil
        var report = ImportReport()
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        var unknown: [String: Int] = [:]
        var tCommit = 0.0

        // Fetch: every page, then every record a lookup inside the transaction may need.
        let staging = try ImportStaging(db: db)
        defer { try? staging.clear() }
        let fetchedPages = try staging.fetchChanges(cloud: cloud, zone: options.zone, after: token,
                                                    limit: options.pageSize, device: device, onlyTypes: onlyTypes)
        token = fetchedPages.token
        let fetched = fetchedPages.fetched
        let tPrefetch = Trace.start()
        try staging.prefetchLookups(cloud: cloud, zone: options.zone, entities: byName)
        Trace.add("import.prefetch", tPrefetch)
        // Records fetched after another device raised the zone's schema version are of a shape this store has not
        // migrated to: nothing of them is applied, and the import waits (`SchemaGate`).
        if fetched > 0 {
            try SchemaGate.recheck(db, cloud: cloud, zone: options.zone, local: try SchemaGate.schemaVersion(db),
                                   seen: staging.schemaVersionSeen)
        }

        // Apply: what was fetched, in one write transaction, with no network call.
        do {
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            // A child may arrive in the same import as its parent, in any order: check at commit.
            try db.deferForeignKeys()
            try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                let applier = try RecordApplier(db: db, entities: byName, policy: options.mergePolicy,
                                                dedupEntities: Set(options.uniqueRules.keys),
                                                uniqueRules: options.uniqueRules)
                try applier.resetNotes()
                applier.cloudWins = options.readOnly
                try RecordMap(db).forgetGone(arriving: ImportStaging.table, entities: entities.map(\.name))
                // Set-aside records tried again are held back like the pages' records (a swap set aside together
                // settles together).
                applier.defersUntilSettled = true
                let tRetry = Trace.start()
                if onlyTypes == nil { try retrySetAside(applier, staging: staging, report: &report) }
                Trace.add("import.retry-set-aside", tRetry)
                for record in staging.rejected {
                    try setAside(record, RecordProblem(
                        reason: record.rejection ?? "",
                        hint: record.rejectionHint ?? "the container holds a save by an account that may not write the zone: whoever can "
                            + "write the container itself wrote it; the zone's owner can save the record again, or "
                            + "check who can write the container"), keepFields: false)
                    report.setAside += 1
                }
                let pages = try PageApplier(db: db, applier: applier)
                var done = 0
                for page in 0..<staging.pages {
                    let tApply = Trace.start()
                    if page == 0 { Failpoint.hit("import.before-apply") }
                    let tRead = Trace.start()
                    let staged = try staging.headers(page: page)
                    Trace.add("import.page.read", tRead)
                    var records: [ImportStaging.Header] = []
                    for header in staged {
                        if byName[header.recordType] == nil {
                            unknown[header.recordType, default: 0] += 1
                            report.unknownType += 1
                        } else if header.size > options.maxRecordSize {
                            try setAside(try staging.record(header, zone: options.zone), RecordProblem(
                                reason: "the record is \(header.size) bytes, more than max_record_size "
                                    + "(\(options.maxRecordSize))",
                                hint: "raise cloud.max_record_size in the config, or make the row smaller on the "
                                    + "device that saved it"), keepFields: false)
                            report.setAside += 1
                        } else {
                            records.append(header)
                        }
                    }
                    try applyPage(records, staging: staging, applier: applier, pages: pages, report: &report)
                    Trace.add("import.apply", tApply)
                    done += staged.count
                    progress(done, nil)
                }
                let tSettle = Trace.start()
                defer { Trace.add("import.settle", tSettle) }
                try drainInbox(applier, staging: staging, entities: byName, report: &report)
                if applier.mergesOnlyCloudRows {
                    // A read-only participant sends nothing: the tombstones of its merges and of the orphan rule
                    // served this import; the writers, which decide the same, send theirs.
                    try Outgoing(db).forgetDeletes([.duplicate, .parentDeleted])
                }
                if !options.uniqueRules.isEmpty {
                    // Dedup in the same transaction, so that no reader ever sees the duplicate. Its deletes and
                    // re-points carry their own author, so that the next export sends them.
                    let author = Deduplicator.importAuthor(cloudRowsOnly: applier.mergesOnlyCloudRows)
                    report.dedup = try HistoryTracker(db: db).transaction(author: author) { _ in
                        try Deduplicator(db: db, entities: entities, rules: options.uniqueRules,
                                         ownRowsGiveWay: options.readOnly).run(touchedOnly: true)
                    }
                }
            }
            let tEnd = Trace.start()
            defer { Trace.add("import.finish", tEnd) }
            if onlyTypes == nil {
                try MirrorState.setServerToken(db, zone: options.zone, token?.rawValue)
                try rememberUnknown(unknown)
            }
            try MirrorState.setMeta(db, .lastImportAt, String(Int64(Date().timeIntervalSince1970 * 1000)))
            try MirrorState.passImportedHistory(db, readOnly: options.readOnly)
            let unsettled = try MirrorState.unsettled(db)
            report.setAsideRecords = unsettled.setAside
            report.waitingRecords = unsettled.waitingForParent
            Failpoint.hit("import.before-commit")
            tCommit = Trace.start()
        }
        } catch let error as SQLiteError where error.extendedCode == 787 {
            throw try foreignKeyBroken(error)
        }
        Trace.add("import.commit", tCommit)
        Failpoint.hit("import.after-commit")
        report.token = token?.rawValue
        return report
    }

    /// Applies a page in a savepoint; when a record of it fails, the page is rolled back and applied again record
    /// by record, each in its own savepoint, and the failing ones are set aside.
    private func applyPage(_ records: [ImportStaging.Header], staging: ImportStaging, applier: RecordApplier,
                           pages: PageApplier, report: inout ImportReport) throws
    {
        guard !records.isEmpty else { return }
        let conflictsBefore = applier.conflicts.count
        let hadSetAside = try Inbox(db).has(.setAside)
        func apply(_ header: ImportStaging.Header, into page: inout ImportReport) throws {
            count(try applier.apply(try staging.record(header, zone: options.zone)), into: &page)
        }
        do {
            let counts = try db.transaction { () throws -> ImportReport in
                var page = ImportReport()
                let plain = options.applyPagesInBulk
                    ? try pages.apply(records) { try apply($0, into: &page) }
                    : try records.reduce(into: PageApplier.Counts()) { _, header in try apply(header, into: &page) }
                page.applied += plain.applied
                page.deleted += plain.deleted
                page.skipped += plain.skipped
                if hadSetAside {
                    for record in records { try Inbox(db).remove(record.recordName, from: .setAside) }
                }
                return page
            }
            add(counts, to: &report)
            return
        } catch is RecordProblem {
        } catch let error as SQLiteError where error.isAboutValues {
        }
        applier.conflicts.removeLast(applier.conflicts.count - conflictsBefore)
        for header in records {
            try applyOne(try staging.record(header, zone: options.zone), applier: applier, report: &report)
        }
    }

    /// The import's commit met a foreign key its rows break (checked at commit): the records reference rows this
    /// store does not have, which no import brings when the parent table is not tracked. Nothing was applied; the
    /// error names the foreign keys to untracked tables, and the fix.
    private func foreignKeyBroken(_ error: SQLiteError) throws -> StoreError {
        let tracked = Set(entities.map(\.name))
        var untracked: [String] = []
        for e in entities {
            for fk in try db.foreignKeys(of: e.name) where !tracked.contains(fk.parentTable) {
                untracked.append("\(e.name)(\(fk.columns.joined(separator: ", "))) references '\(fk.parentTable)', "
                                 + "which is not tracked")
            }
        }
        return StoreError(.dataError, "the import would leave rows of this store referencing rows it does not have "
                            + "(\(error.message)); nothing of it was applied",
                          details: untracked.map { "  " + $0 },
                          hint: untracked.isEmpty
                            ? "run 'storectl cloud check' to see the tables' foreign keys; give this store the rows "
                                + "they reference, then run 'storectl sync' again"
                            : "add the referenced tables to the store's 'entities:' (or give this store the rows "
                                + "they reference), then run 'storectl sync' again")
    }

    /// The one drain of the inbox, once the pages are applied, in one order:
    /// 1. the records waiting for a parent whose parents came (a child moved to a new parent must be under it
    ///    before its old parent's tombstone cascades);
    /// 2. the held-back records, settled together (`applyHeldBack`);
    /// 3. the records waiting again: their parents may have been held back;
    /// 4. the orphans (`Orphans`): children of rows this import deleted, waiting children whose parent is gone for
    ///    good, merged duplicates whose winner came.
    ///
    /// Set-aside records are not drained here: the import tries them before its pages, held back like the pages'
    /// records (a swap set aside together settles together). Every loop of the drain follows the engine's one
    /// retry rule (`Rounds`). A conflict under `merge_policy: error` stops the import after the step that met it
    /// (unless `stopsAtConflicts` is false: a restored copy taking its own records back meets none it reports).
    func drainInbox(_ applier: RecordApplier, staging: ImportStaging, entities: [String: EntityMap],
                    report: inout ImportReport, stopsAtConflicts: Bool = true) throws
    {
        func stopAtConflicts() throws {
            if stopsAtConflicts && !applier.conflicts.isEmpty { throw ConflictError(conflicts: applier.conflicts) }
        }
        applier.defersUntilSettled = false
        try retryParked(applier, report: &report)
        try applyHeldBack(applier, report: &report)
        try stopAtConflicts()
        try retryParked(applier, report: &report)
        // A waiting record that met a conflict now is reported by this import, as the others were.
        try stopAtConflicts()
        report.orphans = try Orphans(db: db, lookups: staging, zone: options.zone, entities: entities,
                                     applier: applier).resolve { record, problem in
            try setAside(record, problem)
            report.setAside += 1
        }
        report.waitingForParent = Int(try Inbox(db).counts()[.waiting] ?? 0)
    }

    /// Settles the held-back records (`RecordApplier.defersUntilSettled`) together (docs/sync-guarantees.md,
    /// "UNIQUE values that move between rows").
    private func applyHeldBack(_ applier: RecordApplier, report: inout ImportReport) throws {
        let held = try applier.takeDeferred(zone: options.zone)
        guard !held.isEmpty else { return }
        // UNIQUE values that live rows move between them (a swap, a shift, a reorder) are freed first: applied one
        // by one, each record would meet a row whose own record moves the value away, and merge distinct rows.
        // With the values free, the tombstones go first (their deletions free values too), then the live records,
        // then the records waiting for them (children moved to a new parent).
        let before = report
        let conflictsBefore = applier.conflicts.count
        applier.settling = true
        defer {
            applier.settling = false
            applier.keptRows = []
            applier.blockedRows = []
            applier.unfreeableRows = []
            applier.lateTombstones = []
            applier.unfreeableTombstones = []
            applier.settleValues = [:]
        }
        // A freed value another row took meanwhile: the settle is done again with the row that kept its value
        // (by the merge policy) not freed, or, when its record could not be applied, blocking the records that
        // would take its value (they are set aside with it). Each round settles one more row.
        // Each failed round keeps one more row as it is (`Rounds`): a round that would add none cannot fail.
        var rounds = Rounds<[Set<String>]>()
        while rounds.another([applier.keptRows, applier.blockedRows]) {
            do {
                try db.transaction {
                    let freed = try applier.freeMovingUniqueValues(held)
                    if freed.isEmpty && applier.blockedRows.isEmpty && applier.unfreeableRows.isEmpty {
                        for record in held { try applyOne(record, applier: applier, report: &report) }
                        return
                    }
                    try applyInFreedOrder(held, applier: applier, report: &report)
                    try applier.restoreFreedValues(freed)
                    try applier.realignChildren(of: freed)
                }
                return
            } catch let taken as RecordApplier.FreedValueTaken {
                report = before
                applier.conflicts.removeLast(applier.conflicts.count - conflictsBefore)
                if taken.recordSetAside { applier.blockedRows.insert(taken.row) } else { applier.keptRows.insert(taken.row) }
            }
        }
        // Not reached: each failed round keeps one more row as it is, and a round that frees nothing cannot fail.
        throw StoreError(.software, "the held-back records of the import did not settle",
                         hint: "run 'storectl sync' again: nothing of this import was kept, the records are still in the cloud")
    }

    /// The held-back records, once the values they move are freed: tombstones first, as without freeing (their
    /// deletions free values too), then the live records, then the records that waited for them, then the
    /// tombstones of rows whose values the live records took (the children that moved from those rows are under
    /// their new rows by now). A tombstone whose row's value could not be freed is set aside, with the record that
    /// takes the value (`RecordApplier.unfreeableTombstones`).
    private func applyInFreedOrder(_ held: [CloudRecord], applier: RecordApplier, report: inout ImportReport) throws {
        let late = applier.lateTombstones
        let unfreeable = applier.unfreeableTombstones
        for record in held where record.deleted && unfreeable.contains(record.recordName) {
            try setAside(record, RecordProblem(
                reason: "its row holds a UNIQUE value that another record of the import takes, and the table accepts "
                    + "no placeholder to free it meanwhile (a CHECK constraint): deleting the row first would delete "
                    + "the children that moved from it to the other row",
                hint: "relax the CHECK on that column (or let it accept NULL), then run 'storectl sync' again: "
                    + "set-aside records are tried on every sync"))
            report.setAside += 1
        }
        for record in held where record.deleted && !late.contains(record.recordName)
            && !unfreeable.contains(record.recordName)
        {
            try applyOne(record, applier: applier, report: &report)
        }
        for record in held where !record.deleted { try applyOne(record, applier: applier, report: &report) }
        try retryParked(applier, report: &report)
        for record in held where record.deleted && late.contains(record.recordName) {
            try applyOne(record, applier: applier, report: &report)
        }
    }

    /// Applies the parked records whose parents came; those that fail are set aside.
    private func retryParked(_ applier: RecordApplier, report: inout ImportReport) throws {
        _ = try applier.retryPending(zone: options.zone) { record, problem in
            try setAside(record, problem)
            report.setAside += 1
        }
    }

    /// Applies one record in a savepoint of its own; a record that fails is set aside.
    func applyOne(_ record: CloudRecord, applier: RecordApplier, report: inout ImportReport) throws {
        do {
            let outcome = try db.transaction { try applier.apply(record) }
            var one = ImportReport()
            count(outcome, into: &one)
            add(one, to: &report)
            try Inbox(db).remove(record.recordName, from: .setAside)
        } catch let problem as RecordProblem {
            try setAside(record, problem)
            report.setAside += 1
        } catch let error as SQLiteError where error.isAboutValues {
            try setAside(record, Self.problem(for: error, record: record))
            report.setAside += 1
        }
    }

    /// The reason a record fails in SQLite, in words, with the fix.
    static func problem(for error: SQLiteError, record: CloudRecord) -> RecordProblem {
        RecordProblem(reason: "it cannot be stored in table '\(record.recordType)': \(error.message)",
                      hint: "make the table accept the value (a column type, a constraint), then run "
                          + "'storectl sync' again: set-aside records are tried on every sync")
    }

    private func count(_ outcome: RecordApplier.Outcome, into report: inout ImportReport) {
        switch outcome {
        case .applied: report.applied += 1
        case .deleted: report.deleted += 1
        case .skipped: report.skipped += 1
        case .pending, .deferred, .conflict: break
        case .unknownType: report.unknownType += 1
        }
    }

    private func add(_ page: ImportReport, to report: inout ImportReport) {
        report.applied += page.applied
        report.deleted += page.deleted
        report.skipped += page.skipped
        report.unknownType += page.unknownType
    }

    /// Sets a record aside with its reason. An oversized record keeps no copy of its fields: it is fetched again
    /// when it is tried again.
    func setAside(_ record: CloudRecord, _ problem: RecordProblem, keepFields: Bool = true) throws {
        try Inbox(db).put(record, .setAside, problem: problem, keepFields: keepFields)
    }

    /// Tries the records set aside before: a parent may have arrived, a column been added, a constraint changed.
    private func retrySetAside(_ applier: RecordApplier, staging: ImportStaging, report: inout ImportReport) throws {
        let inbox = Inbox(db)
        for var record in try inbox.records(.setAside, zone: options.zone) {
            if record.fields.isEmpty {
                // Kept without its fields (too large): its current version, fetched before the transaction.
                switch try staging.lookup(record.recordName) {
                case .found(let current): record = current
                case .absent:
                    try inbox.remove(record.recordName, from: .setAside)
                    continue
                case .unknown:
                    continue  // not fetched by this import: the next one fetches it
                }
                record.zone = options.zone
                if record.fields.utf8.count > options.maxRecordSize {
                    try inbox.tried(record.recordName)
                    continue
                }
            }
            guard entities.contains(where: { $0.name == record.recordType }) else { continue }
            do {
                let outcome = try db.transaction { try applier.apply(record) }
                // (A record held back or parked by this attempt is in the inbox in that state now.)
                try inbox.remove(record.recordName, from: .setAside)
                // A held-back record is applied (or set aside again) with the others at the end of the import.
                if case .deferred = outcome {} else { report.recovered += 1 }
            } catch let problem as RecordProblem {
                try setAside(record, problem)
            } catch let error as SQLiteError where error.isAboutValues {
                try setAside(record, Self.problem(for: error, record: record))
            }
        }
    }

    /// Remembers the record types met that this store does not track, with how many records of each: when one of
    /// them becomes a tracked table, its records are fetched from the start (`Mirror.catchUp`).
    private func rememberUnknown(_ unknown: [String: Int]) throws {
        guard !unknown.isEmpty else { return }
        for (type, count) in unknown {
            try StoreMeta.add(db, .unknownType(type), count)
        }
    }
}

/// The orphan rule, the same on every store: a child whose parent is deleted follows the parent (a delete wins).
/// By the schema's `ON DELETE` action: `SET NULL` (or `SET DEFAULT`) cuts the child loose, anything else
/// (`CASCADE`, `NO ACTION`, `RESTRICT`) deletes it. Either is a local change, exported like any other, so the
/// child goes (or is cut loose) on every device too; a child record that never became a local row is deleted in
/// the cloud through the outbox.
///
/// It runs inside the import's write transaction, so it never asks the cloud: what it must know of a record that
/// is not here (a parent's tombstone, a child's record, where a merged duplicate went) comes from what the import
/// fetched before (`ImportStaging`). A parent this import cannot tell about is not here yet: its child waits.
struct Orphans {
    let db: Connection
    let lookups: ImportStaging
    let zone: String
    let entities: [String: EntityMap]
    let applier: RecordApplier

    /// Resolves every orphan that this import made or brought; returns how many rows and records it handled.
    /// `setAside` receives the records of children whose parent is not here yet: they wait, reported.
    ///
    /// Each round takes the orphan rows (the children of the rows the last round deleted, down a tree of any
    /// depth), then the waiting records whose parent is gone for good, then the merged duplicates whose winner
    /// came; the rows those delete have children too, so the rounds go on until one handles nothing, or meets a
    /// state it met before (`Rounds`).
    func resolve(setAside: (CloudRecord, RecordProblem) throws -> Void = { _, _ in }) throws -> Int {
        var handled = 0
        var rounds = Rounds<Set<String>>()
        while true {
            let rows = try orphanRows()
            let waiting = try applier.parkedRecords(zone: zone).map(\.recordName)
            guard rounds.another(Set(rows.map { $0.0.name + "\u{0}" + $0.2 } + waiting.map { "\u{1}" + $0 })) else { break }
            for (child, fk, pk, parentGone) in rows {
                if parentGone {
                    try HistoryTracker(db: db).transaction(author: MirrorState.cascadeAuthor) { _ in
                        try cutLoose(child, fk: fk, pk: pk)
                    }
                } else {
                    try wait(child, fk: fk, pk: pk, setAside: setAside)
                }
            }
            let more = rows.count + (try parkedOrphans()) + (try strandedDuplicates())
            if more == 0 { break }
            handled += more
        }
        return handled
    }

    /// Local rows whose record was merged elsewhere into another as a duplicate (its tombstone named the winner)
    /// and kept until the winner arrives: merged into the winner now that it is here, or deleted when the winner
    /// itself is deleted (a merged duplicate follows the row it became).
    private func strandedDuplicates() throws -> Int {
        var handled = 0
        // The aliases (few) drive the join: each is looked up in the record map by name.
        let rows = try db.query("""
            SELECT r.entity, r.pk, r.record_name, a.target FROM _storectl_aliases a
            CROSS JOIN _storectl_records r ON \(RecordMap.named("a.record_name", "r")) WHERE r.deleted = 0
            """)
        for row in rows {
            guard let table = row[0].string, let entity = entities[table], let pk = row[1].string,
                  let name = row[2].string, var target = row[3].string, try applier.rowExists(entity, pk: pk)
            else { continue }
            if let winner = try db.scalar("SELECT pk FROM _storectl_records WHERE \(RecordMap.named("?1")) AND +entity = ? "
                                            + "AND deleted = 0", [target, table])?.string,
               winner != pk, try applier.rowExists(entity, pk: winner)
            {
                try applier.repoint(entity, from: pk, to: winner)
                try applier.deleteRow(entity, pk: pk)
                try RecordMap(db).markDeleted(name: name)
                handled += 1
                continue
            }
            var gone = false
            // Down the chain of merges, to its end or to a name met before (`Rounds`).
            var rounds = Rounds<String>()
            while rounds.another(target) {
                // What the import fetched; a target it does not know keeps the row waiting for the next import.
                let known = try lookups.lookup(target)
                guard case .found(let record) = known else {
                    if case .absent = known { gone = true }
                    break
                }
                guard record.deleted else { break }
                guard let next = try RecordApplier.aliasTarget(db, tombstone: record.fields, of: target)
                else { gone = true; break }
                target = next
            }
            if gone {
                try applier.deleteRow(entity, pk: pk)
                try RecordMap(db).markDeleted(name: name)
                handled += 1
            }
        }
        return handled
    }

    /// Rows whose parent this import deleted (the parent is gone), and rows applied by this import whose parent is
    /// missing: gone when its record is a tombstone, else not here yet.
    private func orphanRows() throws -> [(EntityMap, ForeignKeyInfo, String, Bool)] {
        var result: [(EntityMap, ForeignKeyInfo, String, Bool)] = []
        for child in entities.values {
            for fk in child.foreignKeys {
                guard let parent = entities[fk.parentTable] else { continue }
                let parentColumns = fk.parentColumns.compactMap { $0 }
                guard parentColumns.count == fk.columns.count else { continue }
                let set = fk.columns.map { "c.\(quoteIdentifier($0)) IS NOT NULL" }.joined(separator: " AND ")
                let match = zip(fk.columns, parentColumns).map { "p.\(quoteIdentifier($1)) = c.\(quoteIdentifier($0))" }
                    .joined(separator: " AND ")
                let missing = "NOT EXISTS (SELECT 1 FROM main.\(parent.quotedName) p WHERE \(match))"
                let deletedMatch = zip(fk.columns, parentColumns).map {
                    "c.\(quoteIdentifier($0)) = json_extract(d.row, \(quoteLiteral(jsonPath($1))))"
                }.joined(separator: " AND ")
                // The parent's record name, when the key names it (a natural key referenced whole).
                let names = !parent.isSurrogate && parentColumns == parent.primaryKey
                    ? "\(quoteLiteral(parent.name + ":")) || json_array("
                        + fk.columns.map { EntityMap.jsonValue("c.\(quoteIdentifier($0))") }.joined(separator: ", ") + ")"
                    : "NULL"
                let rows = try db.query("""
                    SELECT \(child.pkJSON("c")), 1, NULL FROM temp._storectl_deleted_parents d
                    CROSS JOIN main.\(child.quotedName) c
                    WHERE d.entity = ?2 AND \(deletedMatch) AND \(missing)
                    UNION
                    SELECT \(child.pkJSON("c")), 0, \(names) FROM temp._storectl_applied a
                    CROSS JOIN main.\(child.quotedName) c
                    WHERE a.entity = ?1 AND \(child.pkMatches("c", json: "a.pk")) AND \(set) AND \(missing)
                    """, [child.name, parent.name])
                var seen: Set<String> = []
                for row in rows {
                    guard let pk = row[0].string, seen.insert(pk).inserted else { continue }
                    var gone = row[1].int64 == 1
                    if !gone, let name = row[2].string { gone = try parentIsGone(name, type: parent.name, absentIsGone: false) }
                    result.append((child, fk, pk, gone))
                }
            }
        }
        return result
    }

    /// A child applied by this import whose parent is not here (yet): the row is taken out again and its record
    /// set aside, to be applied once the parent has arrived.
    private func wait(_ child: EntityMap, fk: ForeignKeyInfo, pk: String,
                      setAside: (CloudRecord, RecordProblem) throws -> Void) throws
    {
        guard let name = try db.scalar("SELECT record_name FROM _storectl_records WHERE entity = ? AND pk = ?",
                                       [child.name, pk])?.string
        else {
            try HistoryTracker(db: db).transaction(author: MirrorState.cascadeAuthor) { _ in
                try cutLoose(child, fk: fk, pk: pk)
            }
            return
        }
        // The record map keeps no values (`FieldHashes`): the record to wait is the one this import applied (it
        // fetched it, or had it waiting). Should the import not know it, it waits without its fields, fetched
        // again by the next import, as a record too large to keep.
        let known = try lookups.lookup(name)
        let tag = try db.scalar("SELECT change_tag FROM _storectl_records WHERE \(RecordMap.named("?1"))", [name])?.string
        try applier.deleteRow(child, pk: pk)
        try RecordMap(db).remove(name: name)
        try db.run("DELETE FROM temp._storectl_applied WHERE entity = ? AND pk = ?", [child.name, pk])
        var record: CloudRecord
        switch known {
        case .found(let found): record = found
        case .absent: return  // deleted from the cloud: nothing to wait for
        case .unknown:
            record = CloudRecord(zone: zone, recordName: name, recordType: child.name, fields: "", changeTag: tag ?? "",
                                 seq: 0, deleted: false, modifiedBy: "", modifiedAt: 0)
        }
        record.zone = zone
        guard !record.deleted else { return }  // deleted in the cloud since: nothing to wait for
        try setAside(record, RecordProblem(
            reason: "its parent in '\(fk.parentTable)' (\(fk.columns.joined(separator: ", "))) is not here yet",
            hint: "it is applied by the first sync after its parent arrives; if the parent was never saved, "
                + "save it on the device that made this record"))
    }

    private func cutLoose(_ child: EntityMap, fk: ForeignKeyInfo, pk: String) throws {
        let action = fk.onDelete.uppercased()
        if action == "SET NULL" || action == "SET DEFAULT" {
            let sets = fk.columns.map { column -> String in
                let value = action == "SET NULL" ? "NULL"
                    : (try? db.columns(of: child.name).first { $0.name == column }?.defaultSQL) ?? nil ?? "NULL"
                return "\(quoteIdentifier(column)) = \(value)"
            }.joined(separator: ", ")
            try db.run("UPDATE main.\(child.quotedName) SET \(sets) WHERE \(child.pkMatches("main.\(child.quotedName)", json: "?1"))",
                       [pk])
        } else {
            try applier.deleteRow(child, pk: pk)
        }
    }

    /// Parked child records whose parent is gone for good (deleted here, or absent from the cloud): by the same
    /// rule, the child is deleted in the cloud (or applied cut loose, for SET NULL).
    private func parkedOrphans() throws -> Int {
        var handled = 0
        for record in try applier.parkedRecords(zone: zone) {
            guard let entity = entities[record.recordType] else { continue }
            let decoded = try applier.codec.decodeRecord(record.fields, columns: entity.fieldColumns)
            var gone: [String] = []
            var waiting = false
            for (column, value) in decoded.values {
                guard case .ref(let name?) = value, let ref = entity.reference(for: column),
                      try applier.parentKey(parent: ref.parent, recordName: name) == nil else { continue }
                if try parentIsGone(name, type: ref.parent, absentIsGone: false) { gone.append(column) } else { waiting = true }
            }
            guard !gone.isEmpty, !waiting else { continue }
            let loose = gone.allSatisfy { column in
                entity.foreignKeys.first { $0.columns == [column] }.map { ["SET NULL", "SET DEFAULT"]
                    .contains($0.onDelete.uppercased()) } ?? false
            }
            try Inbox(db).remove(record.recordName, from: .waiting)
            if loose {
                var values = decoded.values
                for column in gone { values[column] = .value(.null) }
                var cut = record
                cut.fields = try applier.codec.encode(values)
                if try applier.apply(cut) == .applied, let key = try keyOf(cut, entity) {
                    // The record still names the parent: the local row differs from it, and the next export
                    // sends the row as it is now.
                    try markChanged(entity, pk: key, columns: gone)
                    try RecordMap(db).setSynced(name: record.recordName, tag: record.changeTag, fields: record.fields)
                }
            } else {
                if let entry = try RecordMap(db).entry(named: record.recordName), !entry.deleted,
                   entry.entity == entity.name, try applier.rowExists(entity, pk: entry.pk)
                {
                    // The row is here, at an older version of the record (another device moved it under the parent
                    // since): it follows the parent too, here as everywhere else.
                    try applier.deleteRow(entity, pk: entry.pk)
                    try RecordMap(db).markDeleted(name: record.recordName)
                }
                try applier.outbox(record.recordName, type: record.recordType, tag: record.changeTag,
                                   reason: .parentDeleted)
            }
            handled += 1
        }
        return handled
    }

    private func keyOf(_ record: CloudRecord, _ entity: EntityMap) throws -> String? {
        try db.scalar("SELECT pk FROM _storectl_records WHERE \(RecordMap.named("?1"))", [record.recordName])?.string
    }

    /// Whether the parent record `name` is deleted: the record map says so, or the cloud has its tombstone (fetched
    /// by this import: in its pages, or looked up before its transaction). A record
    /// the cloud does not hold at all is not gone (unless `absentIsGone`): it may simply not be saved yet (its
    /// device exports a table's rows in key order, so a child can come first).
    private func parentIsGone(_ name: String, type: String, absentIsGone: Bool) throws -> Bool {
        if try db.scalar("SELECT 1 FROM _storectl_aliases WHERE record_name = ?", [name]) != nil { return false }
        if try Inbox(db).holds(name, in: [.setAside, .waiting]) { return false }
        // A waiting record this import sent after its own deleted parent (`parkedOrphans`): gone too, so that a
        // chain of waiting records follows its head in one import, not one level per sync.
        if try Outgoing(db).holdsDelete(name, reason: .parentDeleted) { return true }
        if let deleted = try db.scalar("SELECT deleted FROM _storectl_records WHERE \(RecordMap.named("?1"))", [name])?.int64 {
            if deleted == 1 { return true }
        }
        // What the import fetched before its transaction (or brought in its pages); a parent it cannot tell about
        // is not here yet, and its child waits.
        switch try lookups.lookup(name) {
        case .found(let record):
            // A tombstone that names where its record went (a merged duplicate) is no deletion of the parent.
            return record.deleted && !record.fields.contains("\"$alias\"")
        case .absent: return absentIsGone
        case .unknown: return false
        }
    }

    /// Writes a history row that makes the row a pending local change of `columns`.
    private func markChanged(_ entity: EntityMap, pk: String, columns: [String]) throws {
        try MirrorState.markChanged(db, entity: entity.name, pk: pk, columns: columns, author: MirrorState.cascadeAuthor)
    }
}
