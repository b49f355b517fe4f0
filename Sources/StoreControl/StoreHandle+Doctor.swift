import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite

/// One problem `storectl doctor` found, with the command that fixes it.
public struct DoctorFinding: Sendable, Codable, Equatable {
    /// Which check found it: `store`, `history`, `mode`, `account`, `binding`, `cloud`, `zone`, `duplicates`,
    /// `retention`.
    public var check: String
    /// What is wrong, in one sentence.
    public var problem: String
    /// The command (or edit) that fixes it.
    public var fix: String
    /// 65 for a problem with the data or the store, 69 for a problem with the account or the cloud.
    public var exitCode: Int32

    public init(check: String, problem: String, fix: String, exitCode: ExitCode) {
        self.check = check
        self.problem = problem
        self.fix = fix
        self.exitCode = exitCode.rawValue
    }
}

/// What `storectl doctor` found for one store. The JSON form is stable.
public struct DoctorReport: Sendable, Codable, Equatable {
    public var store: String
    public var path: String
    /// The checks that ran, in order (a check that could not run is absent, e.g. `duplicates` without a store).
    public var checks: [String]
    public var findings: [DoctorFinding]
    /// Whether nothing was found.
    public var healthy: Bool { findings.isEmpty }

    /// 0 when healthy; 66 when the store file is missing; 65 when any finding is a data problem; otherwise 69
    /// (account or cloud problems).
    public var exitCode: ExitCode {
        if findings.isEmpty { return .ok }
        if findings.contains(where: { $0.exitCode == ExitCode.noInput.rawValue }) { return .noInput }
        return findings.contains { $0.exitCode == ExitCode.dataError.rawValue } ? .dataError : .unavailable
    }

    enum CodingKeys: String, CodingKey { case store, path, checks, findings, healthy }

    public init(store: String, path: String, checks: [String], findings: [DoctorFinding]) {
        self.store = store
        self.path = path
        self.checks = checks
        self.findings = findings
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        store = try c.decode(String.self, forKey: .store)
        path = try c.decode(String.self, forKey: .path)
        checks = try c.decode([String].self, forKey: .checks)
        findings = try c.decode([DoctorFinding].self, forKey: .findings)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(store, forKey: .store)
        try c.encode(path, forKey: .path)
        try c.encode(checks, forKey: .checks)
        try c.encode(findings, forKey: .findings)
        try c.encode(healthy, forKey: .healthy)
    }
}

extension StoreHandle {
    /// `storectl doctor`: diagnoses the store without changing anything (not the store, not the config, not the
    /// cloud). Every finding names the command that fixes it.
    ///
    /// Checks: the store file; history tracking (off, stale triggers, drift, a history gap); the mode in
    /// config.yaml against the store's; the account and the cloud (in cloud mode); the bound account and
    /// container; a zone purged elsewhere; duplicates of `unique:` keys; history kept beyond `history.retention`; a
    /// last sync that failed (in cloud mode, until a sync succeeds); and, when nothing else is wrong, the rows
    /// against the zone's records (`data`: a difference no pending change explains).
    /// - Throws: `StoreError` only when the store file exists but is not a SQLite database or cannot be opened.
    public func doctor() throws -> DoctorReport {
        var run = DoctorRun(store: self)
        run.checkHistorySetting()
        guard let db = try run.checkStoreFile() else { return run.report }
        try run.checkTriggers()
        try run.checkIdentity()
        let storedMode = try run.checkMode(db)
        try run.checkRecords(db)
        try run.checkDuplicates(db)
        try run.checkRetention(db)
        try run.checkCloud(db, storedMode: storedMode)
        return run.report
    }
}

/// One run of `storectl doctor`: the checks in the order they run, each a function that records its name and
/// what it finds.
private struct DoctorRun {
    let store: StoreHandle
    var checks: [String] = []
    var findings: [DoctorFinding] = []

    init(store: StoreHandle) { self.store = store }

    var name: String { store.settings.name }
    var settings: StoreSettings { store.settings }
    var configPath: String { store.config.path }
    var report: DoctorReport {
        DoctorReport(store: name, path: settings.path, checks: checks, findings: findings)
    }

    mutating func add(_ check: String, _ problem: String, _ fix: String, _ code: ExitCode) {
        findings.append(DoctorFinding(check: check, problem: problem, fix: fix, exitCode: code))
    }

    /// Commands are written plainly; the CLI adds --config and --store as the user invoked it.
    func command(_ words: String) -> String { "storectl \(words)" }

    /// History tracking, as configured: it cannot be turned off.
    mutating func checkHistorySetting() {
        checks.append("history")
        if !settings.history.tracking {
            add("history", "stores.\(name).history.tracking is false, but history tracking cannot be turned off "
                + "(it is what lets data survive a mode switch)",
                "set stores.\(name).history.tracking: true in \(configPath)", .dataError)
        }
    }

    /// The store file exists and is initialised; the connection to it, or nil when the checks stop here.
    mutating func checkStoreFile() throws -> Connection? {
        checks.append("store")
        guard store.exists else {
            add("store", "the store file \(settings.path) does not exist (stores.\(name).path in \(configPath))",
                settings.mode == .local ? store.missingStoreHint
                    : command("config set stores.\(name).path NEW_PATH") + " if the file was moved "
                        + "('storectl migrate --to' moves a store and its config together)", .noInput)
            return nil
        }
        let db = try store.database()
        guard try db.tableExists("_storectl_meta") else {
            add("store", "the store is not initialised: it has no history tracking", command("init"), .dataError)
            return nil
        }
        // A move that did not finish: the store file refuses writes, or the old file is still there.
        if let movedTo = try MirrorState.meta(db, .movedTo) {
            add("store", "\(settings.path) refuses writes: a move of the store to \(movedTo) did not finish",
                command("migrate --to \(movedTo)") + " (finishes the move: config.yaml then names \(movedTo))",
                .dataError)
        } else if let old = try MirrorState.meta(db, .movedFrom), Path.standardized(old) != Path.standardized(settings.path),
                  FileManager.default.fileExists(atPath: old)
        {
            add("store", "a move of the store from \(old) did not finish: the old file is still there",
                command("migrate --to \(settings.path)") + " (removes \(old) when it holds nothing \(settings.path) lacks)",
                .dataError)
        }
        return db
    }

    /// The history triggers match the schema and are all there.
    mutating func checkTriggers() throws {
        let tracking = try store.historyTracker().inspect()
        switch tracking.state {
        case .ok, .notInitialized:
            break
        case .drift(let details):
            add("history", "the schema changed since the history triggers were generated: "
                + details.joined(separator: "; "), command("migrate"), .dataError)
        case .triggersMissing(let tables):
            add("history", "history tracking is lost: the triggers of "
                + tables.map { "'\($0)'" }.joined(separator: ", ") + " are missing",
                command("migrate --force") + " (then 'storectl sync' re-baselines)", .dataError)
        }
    }

    /// A copy of another store file: sync refuses it, so doctor reports it.
    mutating func checkIdentity() throws {
        checks.append("identity")
        if let copy = try store.copiedStore() {
            add("identity", copy.summary, command("init --new-identity")
                + " (the copy keeps its rows and their record names), or remove one of the two files", .dataError)
        }
    }

    /// The mode: config.yaml against the store. Returns the store's.
    mutating func checkMode(_ db: Connection) throws -> StoreMode? {
        checks.append("mode")
        let storedMode = try MirrorState.meta(db, .mode).flatMap(StoreMode.init(rawValue:))
        if let storedMode, storedMode != settings.mode {
            add("mode", "\(configPath) says mode: \(settings.mode.rawValue) but the store is in "
                + "\(storedMode.rawValue) mode", command("mode \(settings.mode.rawValue)")
                + " (or 'storectl mode \(storedMode.rawValue)' to keep the store's mode)", .dataError)
        }
        return storedMode
    }

    /// Records that did not land: set aside, waiting for a parent, tombstones not sent, rows too large.
    mutating func checkRecords(_ db: Connection) throws {
        checks.append("records")
        if let wait = try SchemaGate.wait(db) {
            let file = wait.file.isEmpty ? "FILE" : wait.file
            let migrate = "migrate --sql \(file) --schema-version \(wait.version)"
            switch wait.reason {
            case .zoneAhead:
                add("schema", "the last sync waited: " + wait.text, command(migrate) + ", then 'storectl sync'",
                    .tempFail)
            case .unmigratedRecords:
                add("schema", "the last sync waited: " + wait.text,
                    "on a device that synced the zone's latest records, run the same migration (version "
                        + "\(wait.version)) and sync it; then '\(command("sync"))' here", .tempFail)
            case .differentFile:
                add("schema", "the last sync was refused: " + wait.text,
                    "compare \(file) with the file this store ran; every device runs the same file for a version",
                    .dataError)
            }
        }
        let unsettled = try MirrorState.unsettled(db)
        for record in unsettled.setAside {
            add("records", "record \(record.recordName) of table '\(record.recordType)' (seq \(record.seq)) is set "
                + "aside: \(record.reason)", record.hint, .dataError)
        }
        for record in unsettled.waitingForParent {
            add("records", "record \(record.recordName) of table '\(record.recordType)' (seq \(record.seq)) waits for "
                + "a parent record that has not arrived", command("sync") + " once the parent's device has synced",
                .dataError)
        }
        if unsettled.outbox > 0 {
            add("records", "\(unsettled.outbox) record(s) must still be deleted in the cloud (duplicates, or children "
                + "of deleted parents)", command("sync"), .dataError)
        }
        for row in unsettled.unsent where row.share != nil {
            add("records", "row \(row.key) of table '\(row.entity)' is changed here and not sent: \(row.reason)",
                command("verify") + " shows how it differs; " + command("sync --discard-local")
                    + " puts it back to the cloud's values (or ask the zone's owner for read-write access)",
                .dataError)
        }
        for row in unsettled.unsent where row.share == nil {
            add("records", "row \(row.key) of table '\(row.entity)' is not sent: \(row.reason)",
                row.bytes != nil ? "make the row smaller, or raise stores.\(name).cloud.max_record_size in \(configPath)"
                    : row.keyHoldsNull ? "give the row a key without NULL (declare the key columns NOT NULL)"
                    : "give the row a key of valid UTF-8 text", .dataError)
        }
    }

    /// Duplicates of unique: keys.
    mutating func checkDuplicates(_ db: Connection) throws {
        let rules = try store.mirrorRules()
        guard !rules.isEmpty else { return }
        checks.append("duplicates")
        for table in rules.keys.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }) {
            guard let rule = rules[table], try db.tableExists(table) else { continue }
            let cols = rule.columns.map(quoteIdentifier)
            let notNull = cols.map { "\($0) IS NOT NULL" }.joined(separator: " AND ")
            let row = try db.query("""
                SELECT count(*), coalesce(sum(n - 1), 0) FROM (
                    SELECT count(*) AS n FROM main.\(quoteIdentifier(table)) WHERE \(notNull)
                    GROUP BY \(cols.joined(separator: ", ")) HAVING count(*) > 1)
                """).first
            let groups = row?[0].int64 ?? 0
            let extra = row?[1].int64 ?? 0
            if groups > 0 {
                add("duplicates", "table '\(table)' has \(extra) duplicate row(s) of its unique key "
                    + "(\(rule.columns.joined(separator: ", "))) in \(groups) group(s)",
                    command("dedupe --entity \(table)"), .dataError)
            }
        }
    }

    /// History kept beyond its retention.
    mutating func checkRetention(_ db: Connection) throws {
        guard let retention = settings.history.retention else { return }
        checks.append("retention")
        let cutoff = HistoryTracker.nowMilliseconds() - Int64(retention.seconds * 1000)
        let old = try db.scalar("SELECT count(*) FROM _storectl_history WHERE ts < ?", [cutoff])?.int64 ?? 0
        guard old > 0 else { return }
        var fix = command("history prune --older-than \(retention.text)")
        let consumers = try store.historyTracker().consumers()
        let oldest = try db.scalar("SELECT min(seq) FROM _storectl_history WHERE ts < ?", [cutoff])?.int64
        if let oldest, let holder = consumers.min(by: { $0.token < $1.token }), holder.token < oldest {
            if holder.name != MirrorState.exportConsumer {
                fix = command("history consumer drop \(holder.name)") + " or advance its token, then " + fix
            } else if try MirrorState.readOnlyShareOwner(db) != nil {
                // A read-only participant's changes are never sent: they hold its history until they are gone.
                fix = command("sync --discard-local") + " (changes made here are never sent from a read-only share), "
                    + "or ask the zone's owner for read-write access; then " + fix
            } else {
                fix = command("sync") + " (the export has not caught up), then " + fix
            }
        }
        add("retention", "\(old) history row(s) are older than history.retention \(retention.text)", fix, .dataError)
    }

    /// The account and the cloud: the binding, then (in cloud mode) the account and the zone.
    mutating func checkCloud(_ db: Connection, storedMode: StoreMode?) throws {
        let inCloud = storedMode == .cloud || settings.mode == .cloud
        guard let cloud = settings.cloud else {
            if inCloud {
                add("account", "the store is in cloud mode but \(configPath) has no stores.\(name).cloud section",
                    "add stores.\(name).cloud, or run '\(command("mode local --no-final-sync"))'", .unavailable)
            }
            return
        }
        try checkBinding(db, cloud: cloud)
        if inCloud {
            // A table that `mode cloud` would refuse now (its schema changed since): its records cannot all land.
            checks.append("tables")
            let check = try CloudCheck.run(db, tables: try Mirror.trackedTables(db), uniqueRules: store.uniqueRules,
                                           encrypted: store.encryptedColumns)
            for entity in check.entities {
                for problem in entity.problems {
                    add("tables", "table '\(entity.name)' cannot be mirrored faithfully: \(problem)",
                        "fix the table as the problem says (" + command("cloud check") + " lists every one)",
                        .dataError)
                }
            }
        }
        var available: Available?
        if inCloud, try store.targetChange(db: db, cloud: cloud) == nil { available = checkAccount(db, cloud: cloud) }
        if let container = available?.container, !findings.contains(where: { $0.check == "schema" }) {
            checkSchemaVersion(db, container: container, zone: cloud.zone)
        }
        if inCloud { try checkLastSync(liveChecked: available != nil) }
        // Compared only when nothing else is wrong: an earlier finding (a failed sync) already says why they differ.
        if let available, findings.isEmpty { checkData(db, cloud: cloud, container: available.container) }
    }

    /// An available account, with the container its check opened (nil when it opened none): the zone and data
    /// checks read the cloud through it rather than opening it again.
    struct Available {
        var container: (any CloudDatabase)?
    }

    /// The zone's schema version, read live: a store behind a data migration another device ran waits until it
    /// runs it too, even before a sync has tried.
    mutating func checkSchemaVersion(_ db: Connection, container: any CloudDatabase, zone: String) {
        do {
            try SchemaGate.requireNotBehind(db, cloud: container, zone: zone)
        } catch let error as any DiagnosedError where error is SchemaBehindError || error is SchemaMismatchError {
            add("schema", error.summary, error.hint ?? command("sync"), error.exitCode)
        } catch {
            // The zone could not be read: the zone and data checks say so.
        }
    }

    /// The last sync round (`storectl sync` or `watch`): a failure not followed by a success is a finding, so a
    /// store whose every sync fails is never called healthy.
    ///
    /// - Parameter liveChecked: the account and the container were checked just now and found available: a last
    ///   error about them (exit 69 or 75) is stale, and the live check is what counts. Any other last error cannot
    ///   be checked again here; its fix is to run `sync`, which says what still fails.
    mutating func checkLastSync(liveChecked: Bool) throws {
        checks.append("sync")
        // Another finding already says why sync fails (and its fix is the one to follow).
        guard findings.isEmpty, let error = try store.syncState().lastError else { return }
        if liveChecked && (error.code == ExitCode.unavailable.rawValue || error.code == ExitCode.tempFail.rawValue) {
            return
        }
        add("sync", "the last sync failed at \(error.at) (exit \(error.code)): \(error.message)",
            command("sync") + " tries again and says what still fails"
                + (error.hint.map { "; when it failed it said: \($0)" } ?? ""),
            error.code == ExitCode.dataError.rawValue ? .dataError : .unavailable)
    }

    /// The account and container the store is bound to, against the config's.
    mutating func checkBinding(_ db: Connection, cloud: CloudSettings) throws {
        let bound = try MirrorState.meta(db, .boundAccount)
        let boundContainer = try MirrorState.meta(db, .boundContainer)
        checks.append("binding")
        if let bound, bound != (cloud.account ?? "") {
            add("binding", "the store is bound to account '\(bound)' but \(configPath) names '\(cloud.account ?? "")'",
                command("sync --rebind") + " to move to the new account (local rows are kept and uploaded), or "
                    + "set stores.\(name).cloud.account back to '\(bound)'", .unavailable)
        } else if let moved = try store.targetChange(db: db, cloud: cloud) {
            // Not a purge and not a missing container: the target was edited by hand.
            add("binding", moved.summary, moved.hint ?? command("migrate --cloud URL"), .unavailable)
        } else if let boundContainer, boundContainer != cloud.container {
            add("binding", "the store is bound to container '\(boundContainer)' but \(configPath) names "
                + "'\(cloud.container)'", command("sync --rebind") + " to move to the new container, or set "
                    + "stores.\(name).cloud.container back to '\(boundContainer)'", .unavailable)
        }
    }

    /// The account's status, and when it is available the zone. Nil unless the account is available.
    mutating func checkAccount(_ db: Connection, cloud: CloudSettings) -> Available? {
        checks.append("account")
        let (report, container) = store.accountStatusAndContainer(cloud)
        if report.containerMissing, store.boundContainer() != nil {
            let missing = store.boundContainerMissingError(cloud)
            add("cloud", missing.summary, missing.hint ?? command("config set stores.\(name).cloud.url NEW_URL"),
                .unavailable)
            return nil
        }
        switch report.status {
        case .available:
            checks.append("zone")
            findings += store.zoneFindings(db: db, cloud: cloud, container: container, command: command)
            return Available(container: container)
        case .noAccount:
            add("account", "account '\(report.account ?? "(none)")' is noAccount: \(report.reason)",
                cloud.account == nil || cloud.secret == nil
                    ? "set stores.\(name).cloud.account and secret in \(configPath)"
                    : command("account add \(cloud.account ?? "")") + " (as an owner of the container)",
                .unavailable)
        case .restricted:
            add("account", "account '\(report.account ?? "(none)")' is restricted: \(report.reason)",
                "check stores.\(name).cloud.secret (and the variable it names: "
                    + "'\(command("config get stores.\(name).cloud.secret"))' prints it as written, never its value); "
                    + "'\(command("account status"))' shows the reason", .unavailable)
        case .couldNotDetermine, .temporarilyUnavailable:
            add("cloud", "the cloud is unreachable (\(report.status.rawValue)): \(report.reason)",
                report.status == .temporarilyUnavailable ? "retry later: " + command("sync")
                    : "check stores.\(name).cloud.url; for a container file run "
                        + command("cloud init"), .unavailable)
        }
        return nil
    }
}

extension DoctorRun {
    /// The store's rows against the zone's live records, compared as `storectl verify` compares them: a row that
    /// differs and that no pending change explains (not exported yet, not imported yet, waiting for its parent,
    /// set aside) is a finding, so a store that differs from the cloud is never called healthy.
    mutating func checkData(_ db: Connection, cloud: CloudSettings, container: (any CloudDatabase)?) {
        checks.append("data")
        do {
            let backend = try container
                ?? CloudConnector.open(settings: cloud, environment: store.environment, createIfMissing: false)
            let report = try StoreHandle.compare(db: db, store: name, cloud: try store.encryptedCloud(backend), url: cloud.url,
                                                 zone: cloud.zone, limit: 3)
            guard report.unexplainedCount > 0 else { return }
            // A row that differs shows its first differing column, so that a change of type alone (1 and 1.0) or
            // of a last digit (0.1 and 0.10000000000000002) reads as the difference it is.
            let named = report.differences.filter { $0.pending == nil }.map { d in
                var text = "\(d.table) \(d.key?.display ?? d.recordName) \(d.stateInWords)"
                if d.state == "differs", let c = d.columns.first {
                    text += " (\(c.column): \(c.shown(local: true)) here, \(c.shown(local: false)) in the cloud"
                        + (d.columns.count > 1 ? ", ..." : "") + ")"
                }
                return text
            }
            let more = report.unexplainedCount > named.count ? ", ..." : ""
            add("data", "\(report.unexplainedCount) row(s) of this store differ from zone '\(cloud.zone)' and no "
                    + "pending change explains them (\(named.joined(separator: ", "))\(more)): a change reached one "
                    + "side and not the other",
                command("verify") + " names each row with its values here and in the cloud; change the row here "
                    + "(or in the cloud's other stores) to the value it should hold, then " + command("sync"),
                .dataError)
        } catch {
            findings.append(DoctorFinding.cloudUnreadable(store.explainMissingContainer(error), command: command))
        }
    }
}

extension DoctorFinding {
    /// The finding for a cloud that could not be read, with the error's hint when it has one.
    fileprivate static func cloudUnreadable(_ error: any Error, command: (String) -> String) -> DoctorFinding {
        let diagnosed = error as? any DiagnosedError
        // A passphrase that does not open the zone's key is what sync would be refused for (77).
        if let key = error as? ZoneKeyError {
            return DoctorFinding(check: "encryption", problem: key.summary, fix: key.hint ?? "", exitCode: key.exitCode)
        }
        return DoctorFinding(check: "cloud", problem: "the cloud could not be read: \(diagnosed?.summary ?? "\(error)")",
                             fix: diagnosed?.hint ?? command("cloud check"), exitCode: .unavailable)
    }
}

extension StoreHandle {
    /// A zone purged or deleted elsewhere since this store last imported.
    /// - Parameter container: the container the account check opened; nil opens it here.
    fileprivate func zoneFindings(db: Connection, cloud: CloudSettings, container: (any CloudDatabase)?,
                                  command: (String) -> String) -> [DoctorFinding] {
        do {
            let backend = try container
                ?? CloudConnector.open(settings: cloud, environment: environment, createIfMissing: false)
            if let sharing = backend as? any CloudSharing {
                let access = try sharing.zoneAccess(cloud.zone)
                if access.level == .none {
                    let error = access.noShareError(container: cloud.container)
                    return [DoctorFinding(check: "zone", problem: error.summary, fix: error.hint ?? "",
                                          exitCode: .noPermission)]
                }
            }
            if try backend.zoneInfo(cloud.zone, countLive: false) != nil,
               try MirrorState.unrecordedOwnSaves(db, cloud: backend, zone: cloud.zone)
            {
                return [DoctorFinding(check: "zone",
                                      problem: "the cloud holds records this store saved that its record map does "
                                          + "not reflect (an export was interrupted, or the store file is an older "
                                          + "copy of itself)", fix: command("sync") + " reconciles them first",
                                      exitCode: .dataError)]
            }
            if try MirrorState.meta(db, .ownRecordsUnchecked) != nil
                || (try HistoryTracker(db: db).formatVersion()) < 2,  // format 1 (format 2 kept the marks)
               try MirrorState.meta(db, .baselineContainer) != nil
            {
                // Store format 1 kept no marks of its exports: whether this file is an older copy of itself shows
                // only when its own records are compared with the cloud's, which the next sync does once.
                return [DoctorFinding(check: "zone",
                                      problem: "the store was written by store format 1, which kept no marks of its "
                                          + "exports: its own records in the cloud are not compared with its rows "
                                          + "yet (an older copy of the store shows only then)",
                                      fix: command("sync") + " compares them once", exitCode: .dataError)]
            }
            guard let raw = try MirrorState.serverToken(db, zone: cloud.zone),
                  let token = ServerChangeToken(rawValue: raw)
            else { return [] }
            let zone = try backend.zoneInfo(cloud.zone)
            if zone == nil || zone?.epoch != token.epoch {
                return [DoctorFinding(check: "zone",
                                      problem: "zone '\(cloud.zone)' was purged or deleted in the cloud since this "
                                          + "store last synced; no local row was deleted",
                                      fix: command("sync --reupload"), exitCode: .unavailable)]
            }
            return []
        } catch {
            return [DoctorFinding.cloudUnreadable(explainMissingContainer(error), command: command)]
        }
    }
}
