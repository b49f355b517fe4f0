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

/// A sync target: where a store's records live.
public struct CloudTarget: Sendable, Codable, Equatable, CustomStringConvertible {
    /// The URL, with any password removed.
    public var url: String
    public var container: String
    public var zone: String

    public init(url: String, container: String, zone: String) {
        self.url = Redaction.connectionString(url)
        self.container = container
        self.zone = zone
    }

    public var description: String { "container '\(container)', zone '\(zone)' at \(url)" }
}

/// What `storectl migrate --cloud` is asked to do.
public struct CloudMoveOptions: Sendable {
    /// The new `cloud.url` (a relative `file:` path is relative to the config's folder, as in config.yaml).
    public var url: String
    /// The new `cloud.container`; nil keeps it.
    public var container: String?
    /// The new `cloud.zone`; nil keeps it.
    public var zone: String?
    /// The new `cloud.account`; nil keeps it.
    public var account: String?
    /// The environment variable that holds the new account's secret (written as `secret: ${NAME}`); nil keeps it.
    public var secretVariable: String?
    /// Move without the last sync with the old target (when it is gone).
    public var noFinalSync = false
    /// Let the export into the new target through the mass-delete breaker.
    public var allowMassDelete = false

    public init(url: String) { self.url = url }
}

/// What `storectl migrate --cloud` did. The JSON form is stable.
public struct CloudMoveReport: Sendable, Codable {
    public var store: String
    public var from: CloudTarget
    public var to: CloudTarget
    /// The last sync with the old target (nil when skipped).
    public var finalSync: SyncReport?
    /// What the new target already held that this store took in first.
    public var imported: ImportReport?
    /// The export into the new target: a baseline of every row, pending changes included.
    public var exported: ExportReport?
    /// How the new target compared with the store after the export.
    public var verified: VerifyReport?
    /// The config.yaml keys that changed, with their new values (secrets as the `${VAR}` written).
    public var config: [String: String]
    public var steps: [PlanStep]
}

/// config.yaml names another sync target than the one the store synced with.
public struct TargetChangedError: DiagnosedError {
    public var store: String?
    public var bound: CloudTarget
    public var configured: CloudTarget
    public var exitCode: ExitCode { .config }
    public var summary: String {
        "store '\(store ?? "?")' syncs with \(bound), but config.yaml now names \(configured): a new sync target, "
            + "not a purge; this store's tokens and record tags belong to the old one"
    }
    public var details: [String] { ["  nothing was synced, and nothing was changed"] }
    public var hint: String? {
        let parts = ["--cloud \(configured.url)"] + (bound.container != configured.container
            ? ["--container \(configured.container)"] : []) + (bound.zone != configured.zone ? ["--zone \(configured.zone)"] : [])
        return "to move the store there, put the old cloud settings back in config.yaml and run "
            + "'storectl migrate \(parts.joined(separator: " "))' (it exports everything, checks it, then switches "
            + "config.yaml); or run 'storectl sync --rebind' to upload this store into the new target as a new baseline"
    }
}

extension StoreHandle {
    /// Meta keys of a switch that `migrate --cloud` staged in the store before its config edit.
    enum StagedSwitch {
        static let target = MetaKey.switchTarget
        static let exportToken = MetaKey.switchExportToken
        static let serverToken = MetaKey.switchServerToken
        static let snapshot = MetaKey.switchSnapshot
        static let table = "_storectl_switch_records"
    }

    /// The target a store's meta says it syncs with, or nil when it never bound one.
    static func boundTarget(_ db: Connection) throws -> CloudTarget? {
        guard let container = try MirrorState.meta(db, .boundContainer) else { return nil }
        return CloudTarget(url: try MirrorState.meta(db, .boundURL) ?? "", container: container,
                           zone: try MirrorState.meta(db, .boundZone) ?? "default")
    }

    /// The key a target is compared by.
    static func targetKey(_ t: CloudTarget) -> String { [t.url, t.container, t.zone].joined(separator: "\n") }

    /// Refuses a target that changed behind the store's back (`cloud.url`, `container` or `zone` edited by hand):
    /// it is a new target, not a purge. With `rebind`, forgets the old target's tags and tokens (the record names
    /// stay) so that the next export is a baseline into the new one. Finishes first a switch that `migrate --cloud`
    /// staged and whose config edit landed.
    /// - Throws: `TargetChangedError` (78).
    func checkTarget(db: Connection, cloud: CloudSettings, rebind: Bool) throws {
        let configured = CloudTarget(url: cloud.url, container: cloud.container, zone: cloud.zone)
        if try activateStagedSwitch(db: db, configured: configured) { return }
        guard let changed = try targetChange(db: db, cloud: cloud) else { return }
        guard rebind else { throw changed }
        try db.transaction {
            try MirrorState.resetSyncState(db, zone: cloud.zone)
            try db.run("DELETE FROM _storectl_tokens WHERE name LIKE 'server:%'")
        }
    }

    /// The target change config.yaml makes, when its `url`, `container` or `zone` is not the target the store
    /// synced with (and the account is the same: another account is its own refusal, answered by `--rebind`).
    /// A switch staged by `migrate --cloud` for the configured target is not a change. Reads only.
    public func targetChange(db: Connection, cloud: CloudSettings) throws -> TargetChangedError? {
        guard try db.tableExists("_storectl_meta"), let bound = try Self.boundTarget(db) else { return nil }
        let configured = CloudTarget(url: cloud.url, container: cloud.container, zone: cloud.zone)
        if try MirrorState.meta(db, StagedSwitch.target) == Self.targetKey(configured) { return nil }
        // A store bound before the URL was recorded: the URL is learnt now; the container and zone still count.
        let urlChanged = !bound.url.isEmpty && bound.url != configured.url
        guard urlChanged || bound.container != configured.container || bound.zone != configured.zone else { return nil }
        if let account = try MirrorState.meta(db, .boundAccount), account != (cloud.account ?? "") { return nil }
        // Only the URL changed, and the zone there is the very zone this store synced with: the container was
        // moved (a container file put elsewhere, a database renamed), and config.yaml now points at it.
        if urlChanged, bound.container == configured.container, bound.zone == configured.zone,
           containerMoved(db: db, cloud: cloud)
        {
            return nil
        }
        return TargetChangedError(store: settings.name, bound: bound, configured: configured)
    }

    /// Whether the container at the configured URL holds the zone this store last imported from: the same epoch
    /// (a zone purged or made again has a new one). Reads only; false when it cannot be read.
    func containerMoved(db: Connection, cloud: CloudSettings) -> Bool {
        guard let raw = try? MirrorState.serverToken(db, zone: cloud.zone), let token = ServerChangeToken(rawValue: raw),
              let backend = try? CloudConnector.open(settings: cloud, environment: environment, createIfMissing: false),
              let zone = try? backend.zoneInfo(cloud.zone, countLive: false)
        else { return false }
        return zone.epoch == token.epoch
    }

    /// `storectl migrate --cloud URL`: moves the store's sync target (another backend, container or zone).
    ///
    /// The steps, each of which leaves the old setup working when it fails (or is killed):
    /// 1. the last sync with the old target, so that this store holds everything it has (`--no-final-sync` skips);
    /// 2. the account on the new target (69/75 when not available; a missing container is created);
    /// 3. a snapshot of the store (backup API), which takes in what the new target already holds (other stores of
    ///    the account that moved first) and exports a baseline of every row there, pending changes included;
    /// 4. verify: the new target must hold exactly the snapshot's content;
    /// 5. the switch is staged in the store (the new record tags and tokens, beside the old ones);
    /// 6. config.yaml: `cloud.url`, `container`, `zone` (and `account`, `secret`) in ONE atomic edit. This is the
    ///    commit point: from here the new target is the store's;
    /// 7. the staged switch is activated: tokens reset to the new target's, record tags replaced.
    /// A kill between 6 and 7 is finished by the next command that opens the store for sync.
    /// - Throws: `StoreError`, `AccountUnavailableError`, `CloudError`, sync errors; nothing is switched then.
    public func moveCloud(_ options: CloudMoveOptions, log: (String) -> Void = { _ in },
                          progress: (String, Int, Int?) -> Void = { _, _, _ in }) throws -> CloudMoveReport
    {
        var steps: [PlanStep] = []
        func step(_ name: String, _ detail: String) {
            steps.append(PlanStep(step: name, detail: detail))
            log("\(name): \(detail)")
        }
        try requireExists()
        let old = try cloudSettings()
        let new = try targetSettings(options)
        let from = CloudTarget(url: old.url, container: old.container, zone: old.zone)
        let to = CloudTarget(url: new.url, container: new.container, zone: new.zone)
        var report = CloudMoveReport(store: settings.name, from: from, to: to, finalSync: nil, imported: nil,
                                     exported: nil, verified: nil, config: [:], steps: [])
        guard Self.targetKey(from) != Self.targetKey(to) || old.account != new.account
            || old.secret?.value != new.secret?.value
        else {
            step("target", "store '\(settings.name)' already syncs with \(to); nothing to do")
            report.steps = steps
            return report
        }
        let db = try database()
        try requireTracking()
        try checkIdentity()
        try db.transaction { try Self.dropStagedSwitch(db) }

        // 1. The last sync with the old target.
        if try storeMode() == .cloud && !options.noFinalSync {
            var sync = SyncOptions()
            sync.allowMassDelete = options.allowMassDelete
            report.finalSync = try self.sync(sync, progress: progress)
            step("final sync", "with \(from): \(report.finalSync?.exported.saved ?? 0) saved, "
                 + "\(report.finalSync?.imported.applied ?? 0) applied")
        } else {
            step("final sync", options.noFinalSync ? "skipped (--no-final-sync)" : "skipped: the store is in local mode")
        }
        Failpoint.hit("cloud-move.after-final-sync")

        // 2. The account on the new target, before anything is written there.
        let (status, opened) = CloudConnector.accountStatusAndContainer(settings: new, environment: environment)
        guard status.status == .available else { throw AccountUnavailableError(report: status) }
        var target: any CloudDatabase
        do {
            target = try opened ?? CloudConnector.open(settings: new, environment: environment, createIfMissing: false)
            _ = try target.zoneInfo(new.zone, countLive: false)
        } catch let error as CloudError where error.kind == .containerMissing {
            // A new container (a PostgreSQL schema, or a container file) is made with the account as its owner.
            target = try CloudConnector.initialize(settings: new, environment: environment).database
            step("container", "created container '\(new.container)' at \(to.url)")
        }
        step("account", "\(status.account ?? "?") is available on \(to)")
        Failpoint.hit("cloud-move.after-account")

        // 3. A snapshot of the store, moved to the new target: what is there first, then every row.
        let snapshotPath = Path.join(Path.parent(settings.path), "." + Path.lastComponent(settings.path)
                                     + ".storectl-cloud-move")
        try Self.removeDatabaseFiles(snapshotPath)
        var keepSnapshot = false
        defer { if !keepSnapshot { try? Self.removeDatabaseFiles(snapshotPath) } }
        let snapshot = try Connection(path: snapshotPath, mode: .readWriteCreate, wal: false)
        let upTo: Int64
        let fingerprint: [String]
        do {
            let reader = try Connection(path: settings.path, mode: .readOnly, wal: false)
            try reader.execute("BEGIN")
            upTo = try reader.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0
            fingerprint = try Self.syncFingerprint(reader, zone: old.zone)
            try reader.backup(into: snapshot)
            try reader.execute("COMMIT")
        }
        try snapshot.transaction {
            try MirrorState.resetSyncState(snapshot, zone: new.zone)
            try snapshot.run("DELETE FROM _storectl_tokens WHERE name LIKE 'server:%'")
            try MirrorState.setMeta(snapshot, .historyGap, nil)
            try MirrorState.setMeta(snapshot, .storePath, snapshotPath)
        }
        var mirrorOptions = try self.mirrorOptions()
        mirrorOptions.zone = new.zone
        mirrorOptions.allowMassDelete = options.allowMassDelete
        // What the new target holds is taken in first, except records the old target has a later version of (a
        // target this store's account used before and left: its records are stale).
        let filter = try TakeInFilter(base: target, db: snapshot)
        if report.finalSync != nil { try filter.learn(old: try CloudConnector.open(settings: old, environment: environment), zone: old.zone) }
        // Fields encrypted in the old zone are sealed in the new one too, under a key of its own.
        let sealedTarget = try movedEncryptedCloud(filter, zone: new.zone)
        let mirror = try Mirror(db: snapshot, cloud: sealedTarget, options: mirrorOptions)
        try target.registerDevice(storeID: mirror.device, name: settings.name)
        if sealedTarget.sealsFields {
            try sealedTarget.prepare(write: true, device: mirror.device, logN: scryptLogN)
        }
        report.imported = try mirror.importChanges { progress("import", $0, $1) }
        report.exported = try mirror.exportChanges(baseline: true) { progress("export", $0, $1) }
        try Self.copySeedMarkers(snapshot, to: target, zone: new.zone, device: mirror.device)
        step("export", "into \(to): \(report.imported?.applied ?? 0) record(s) it held taken in first, then a baseline "
             + "of \(report.exported?.saved ?? 0) record(s) saved, \(report.exported?.deleted ?? 0) deleted")
        Failpoint.hit("cloud-move.after-export")

        // 4. Verify: the new target holds what the snapshot holds.
        let verified = try Self.compare(db: snapshot, store: settings.name,
                                        cloud: sealedTarget.over(target), url: new.url, zone: new.zone, limit: 100)
        report.verified = verified
        guard verified.unexplainedCount == 0 else {
            throw CloudMoveVerifyError(store: settings.name, target: to, report: verified)
        }
        step("verify", "the new target holds every row: " + verified.tables.map { "\($0.table) \($0.matching)" }
            .joined(separator: ", "))
        Failpoint.hit("cloud-move.after-verify")

        // 5. Stage the switch in the store, beside the old target's state.
        let serverToken = try MirrorState.serverToken(snapshot, zone: new.zone)
        try db.execute("ATTACH DATABASE \(quoteLiteral(snapshotPath)) AS switch_snapshot")
        defer { try? db.execute("DETACH DATABASE switch_snapshot") }
        try db.transaction {
            guard try Self.syncFingerprint(db, zone: old.zone) == fingerprint else {
                throw StoreError(.tempFail, "store '\(settings.name)' synced with \(from) while it was being moved",
                                 hint: "run the same command again; the old setup is unchanged")
            }
            try RecordMap(db).copy(from: "switch_snapshot._storectl_records", into: "main." + StagedSwitch.table)
            try MirrorState.setMeta(db, StagedSwitch.target, Self.targetKey(to))
            try MirrorState.setMeta(db, StagedSwitch.exportToken, String(upTo))
            try MirrorState.setMeta(db, StagedSwitch.serverToken, serverToken)
            try MirrorState.setMeta(db, StagedSwitch.snapshot, snapshotPath)
        }
        try db.execute("DETACH DATABASE switch_snapshot")
        keepSnapshot = true
        step("stage", "the new target's record tags and tokens are staged in the store")
        Failpoint.hit("cloud-move.after-stage")

        // 6. config.yaml, in one atomic edit: the commit point.
        var edits: [(key: String, value: String)] = [("stores.\(settings.name).cloud.url", options.url)]
        if new.container != old.container { edits.append(("stores.\(settings.name).cloud.container", new.container)) }
        if new.zone != old.zone { edits.append(("stores.\(settings.name).cloud.zone", new.zone)) }
        if let account = options.account { edits.append(("stores.\(settings.name).cloud.account", account)) }
        if let variable = options.secretVariable {
            edits.append(("stores.\(settings.name).cloud.secret", "${\(variable)}"))
        }
        try ConfigEditor.edit(path: config.path, displayPath: nil,
                              environment: environment) { bytes, display in
            var text = bytes
            for edit in edits {
                text = try ConfigEditor.render(bytes: text, key: edit.key, value: edit.value, displayPath: display).bytes
            }
            return text
        }
        // The URL as printed (steps, --json): its passwords redacted, as everywhere else.
        let shown = edits.map { edit in
            let url = edit.key.hasSuffix(".cloud.url")
            return (key: edit.key, value: url ? Redaction.connectionString(edit.value) : edit.value)
        }
        for edit in shown { report.config[edit.key] = edit.value }
        step("config", shown.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + " (one atomic edit)")
        Failpoint.hit("cloud-move.after-config")

        // 7. Activate.
        _ = try activateStagedSwitch(db: db, configured: to, cloud: new)
        step("switch", "tokens reset and record tags replaced: the store now syncs with \(to)")
        report.steps = steps
        return report
    }

    /// The settings of the new target: the current `cloud:` with the options' URL, container, zone and account.
    /// - Throws: `StoreError` 64 for a bad URL, 78 for a secret variable that is not set.
    func targetSettings(_ options: CloudMoveOptions) throws -> CloudSettings {
        var new = try cloudSettings()
        var url = options.url
        if url.hasPrefix("file:"), !url.hasPrefix("file:/") {
            url = "file:" + Path.standardized(Path.join(config.directory, String(url.dropFirst("file:".count))))
        }
        _ = try CloudConnector.backend(of: url)
        new.url = url
        // An explicit move creates the new container when it does not exist yet (the account becomes its owner).
        new.createIfMissing = true
        if let container = options.container { new.container = container }
        if let zone = options.zone { new.zone = zone }
        if let account = options.account { new.account = account }
        if let variable = options.secretVariable {
            guard let value = environment[variable], !value.isEmpty else {
                throw StoreError(.config, "the environment variable \(variable) (--secret-env) is not set",
                                 hint: "export \(variable) with the new account's secret, then run the command again")
            }
            new.secret = Secret(value: value, isLiteral: false)
        }
        return new
    }

    /// What says whether the store synced meanwhile: its export token, its server token, its last export and
    /// import times.
    static func syncFingerprint(_ db: Connection, zone: String) throws -> [String] {
        [String(try MirrorState.exportToken(db)), try MirrorState.serverToken(db, zone: zone) ?? "",
         try MirrorState.meta(db, .lastExportAt) ?? "", try MirrorState.meta(db, .lastImportAt) ?? ""]
    }

    /// The seeds this store knows were made get their markers in the new zone too, so that no device seeds again.
    static func copySeedMarkers(_ db: Connection, to cloud: any CloudDatabase, zone: String, device: String) throws {
        let names = try StoreMeta.entries(db, .seedDone).map(\.name)
        for name in names { _ = try cloud.createMarker(zone: zone, name: "seed:" + name, device: device, payload: "{}") }
    }

    /// Forgets a staged switch (one whose config edit never landed).
    static func dropStagedSwitch(_ db: Connection) throws {
        if let snapshot = try MirrorState.meta(db, StagedSwitch.snapshot) { try? removeDatabaseFiles(snapshot) }
        try db.execute("DROP TABLE IF EXISTS main.\(StagedSwitch.table)")
        for key in [StagedSwitch.target, StagedSwitch.exportToken, StagedSwitch.serverToken, StagedSwitch.snapshot] {
            try MirrorState.setMeta(db, key, nil)
        }
    }

    /// Activates the switch `migrate --cloud` staged, when config.yaml names its target (the config edit, the
    /// commit point, landed). Returns whether it did. In one transaction: the record map becomes the new target's,
    /// the rows the snapshot took in from the new target are copied in (as `cloud-import`, unless changed here
    /// since), the export token goes to the snapshot's, the server tokens to the new target's.
    /// - Throws: `StoreError` when the staged snapshot is gone; `SQLiteError`.
    func activateStagedSwitch(db: Connection, configured: CloudTarget, cloud: CloudSettings? = nil) throws -> Bool {
        guard try db.tableExists("_storectl_meta"), let staged = try MirrorState.meta(db, StagedSwitch.target),
              staged == Self.targetKey(configured)
        else { return false }
        let settings = try cloud ?? cloudSettings()
        guard let snapshot = try MirrorState.meta(db, StagedSwitch.snapshot),
              FileManager.default.fileExists(atPath: snapshot)
        else {
            throw StoreError(.software, "the switch of store '\(self.settings.name)' to \(configured) was staged, "
                             + "but its snapshot is gone", hint: "run 'storectl migrate --cloud \(configured.url)' "
                             + "again with the old cloud settings back in config.yaml")
        }
        let upTo = Int64(try MirrorState.meta(db, StagedSwitch.exportToken) ?? "0") ?? 0
        let serverToken = try MirrorState.meta(db, StagedSwitch.serverToken)
        try db.execute("ATTACH DATABASE \(quoteLiteral(snapshot)) AS switch_snapshot")
        defer { try? db.execute("DETACH DATABASE switch_snapshot") }
        let entities = try Mirror.entityMaps(db)
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            try db.deferForeignKeys()
            try Self.copyTakenInRows(db, entities: entities, after: upTo)
            try RecordMap(db).replace(with: "main." + StagedSwitch.table)
            try MirrorState.forgetWaitingForParent(db)
            try db.execute("""
                DELETE FROM main._storectl_tokens WHERE name LIKE 'server:%';
                """)
            if let serverToken {
                try db.run("INSERT INTO _storectl_tokens(name, value) VALUES (?, ?)", ["server:" + configured.zone,
                                                                                       serverToken])
            }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            try db.run("""
                INSERT INTO _storectl_consumers(name, token, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
                ON CONFLICT(name) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
                """, [MirrorState.exportConsumer, upTo, now])
            // The highest seq this store saved into the new target is the snapshot's: the one of the old target,
            // under the same container id and zone, would make the new zone look behind (`ZoneBehindError`).
            let ownSeq = MetaKey.ownSeq(container: configured.container, zone: configured.zone).rawValue
            try db.run("DELETE FROM main._storectl_meta WHERE key = ?", [ownSeq])
            try db.run("""
                INSERT INTO main._storectl_meta(key, value)
                SELECT key, value FROM switch_snapshot._storectl_meta WHERE key = ?
                """, [ownSeq])
            try MirrorState.setMeta(db, .baselineContainer, configured.container + "/" + configured.zone)
            try MirrorState.setMeta(db, .historyGap, nil)
            try MirrorState.setMeta(db, .boundAccount, settings.account ?? "")
            try MirrorState.setMeta(db, .boundContainer, configured.container)
            try MirrorState.setMeta(db, .boundZone, configured.zone)
            try MirrorState.setMeta(db, .boundURL, configured.url)
            try db.execute("DROP TABLE main.\(StagedSwitch.table)")
            for key in [StagedSwitch.target, StagedSwitch.exportToken, StagedSwitch.serverToken,
                        StagedSwitch.snapshot]
            {
                try MirrorState.setMeta(db, key, nil)
            }
            Failpoint.hit("cloud-move.before-activate-commit")
        }
        try db.execute("DETACH DATABASE switch_snapshot")
        try? Self.removeDatabaseFiles(snapshot)
        return true
    }

    /// Copies into the store the rows the snapshot took in from the new target (history after `after` by the
    /// import in the snapshot), except rows changed here since the snapshot: those are exported with their new
    /// values by the next sync.
    static func copyTakenInRows(_ db: Connection, entities: [EntityMap], after: Int64) throws {
        let author = quoteLiteral(MirrorState.importAuthor)
        for e in EntityMap.parentFirst(entities) {
            let table = quoteIdentifier(e.name)
            let touched = """
                SELECT DISTINCT s.pk FROM switch_snapshot._storectl_history s
                WHERE s.entity = \(quoteLiteral(e.name)) AND s.seq > \(after) AND s.author = \(author)
                  AND NOT EXISTS (SELECT 1 FROM main._storectl_history h WHERE h.entity = s.entity AND h.pk = s.pk
                                  AND h.seq > \(after) AND h.author <> \(author))
                """
            let keys = e.primaryKey.map(quoteIdentifier)
            let columns = e.columns.map(quoteIdentifier)
            let match = { (alias: String) in
                e.primaryKey.enumerated().map { i, c in
                    "\(alias).\(quoteIdentifier(c)) = json_extract(k.pk, '$[\(i)]')"
                }.joined(separator: " AND ")
            }
            // Gone in the snapshot: deleted by the new target.
            try db.execute("""
                DELETE FROM main.\(table) WHERE EXISTS (SELECT 1 FROM (\(touched)) k WHERE \(match("main.\(table)"))
                    AND NOT EXISTS (SELECT 1 FROM switch_snapshot.\(table) t WHERE \(match("t"))))
                """)
            let updates = e.columns.filter { !e.primaryKey.contains($0) }.map { "\(quoteIdentifier($0)) = excluded.\(quoteIdentifier($0))" }
            try db.execute("""
                INSERT INTO main.\(table)(\(columns.joined(separator: ", ")))
                SELECT \(columns.map { "t.\($0)" }.joined(separator: ", ")) FROM switch_snapshot.\(table) t
                WHERE EXISTS (SELECT 1 FROM (\(touched)) k WHERE \(match("t")))
                ON CONFLICT(\(keys.joined(separator: ", "))) DO \(updates.isEmpty ? "NOTHING" : "UPDATE SET " + updates.joined(separator: ", "))
                """)
        }
    }
}

/// The new target does not hold what the store holds after the export: nothing was switched.
public struct CloudMoveVerifyError: DiagnosedError {
    public var store: String?
    public var target: CloudTarget
    public var report: VerifyReport
    public var exitCode: ExitCode { .software }
    public var summary: String {
        "after the export, \(target) does not hold what store '\(store ?? "?")' holds: "
            + "\(report.unexplainedCount) row(s) differ"
    }
    public var details: [String] {
        report.differences.filter { $0.pending == nil }.prefix(20).map { d in
            "  \(d.table) \(d.key?.display ?? d.recordName): \(d.state)"
                + (d.columns.isEmpty ? "" : " (" + d.columns.map(\.column).joined(separator: ", ") + ")")
        } + ["  nothing was switched: config.yaml and the store still name the old target, which keeps working"]
    }
    public var hint: String? {
        "compare them with 'storectl verify' once the cause is fixed, then run the same command again"
    }
}

/// The new target, as the snapshot's import reads it: records the old target holds a later version of are left
/// out (the new target is one the account used before and left, and those records are stale). Everything else
/// goes straight to the target.
final class TakeInFilter: CloudDatabase {
    let base: any CloudDatabase
    /// The snapshot, whose temp table holds when the old target last changed each record.
    private let db: Connection
    private let lookup: Statement
    /// How many records were left out.
    private(set) var staleRecords = 0

    init(base: any CloudDatabase, db: Connection) throws {
        self.base = base
        self.db = db
        try db.execute("""
            CREATE TEMP TABLE IF NOT EXISTS _storectl_old_target(record_name TEXT PRIMARY KEY, modified_at REAL)
                WITHOUT ROWID;
            DELETE FROM temp._storectl_old_target;
            """)
        lookup = try db.prepare("SELECT modified_at FROM temp._storectl_old_target WHERE record_name = ?")
    }

    /// Reads when the old target last changed each record of `zone`.
    func learn(old: any CloudDatabase, zone: String) throws {
        guard try old.zoneInfo(zone, countLive: false) != nil else { return }
        let insert = try db.prepare("INSERT OR REPLACE INTO temp._storectl_old_target VALUES (?, ?)")
        var token: ServerChangeToken?
        while true {
            let batch = try old.fetchChanges(zone: zone, since: token, limit: 1000, excludingDevice: nil)
            try db.transaction {
                for r in batch.records {
                    try insert.bind([r.recordName, r.modifiedAt])
                    while try insert.step() {}
                    try insert.reset()
                }
            }
            token = batch.token
            if !batch.moreComing { break }
        }
    }

    private func isStale(_ record: CloudRecord) throws -> Bool {
        try lookup.bind([record.recordName])
        defer { try? lookup.reset() }
        guard try lookup.step(), let changedThere = lookup.column(0).double else { return false }
        return changedThere > record.modifiedAt
    }

    var container: String { base.container }
    var displayURL: String { base.displayURL }
    func accountStatus() -> AccountStatusReport { base.accountStatus() }
    func zoneInfo(_ zone: String, countLive: Bool) throws -> ZoneInfo? { try base.zoneInfo(zone, countLive: countLive) }
    func roundZoneInfo(_ zone: String, device: String) throws -> ZoneInfo? { try base.roundZoneInfo(zone, device: device) }
    func ensureZone(_ zone: String) throws -> ZoneInfo { try base.ensureZone(zone) }
    func fetchChanges(zone: String, since token: ServerChangeToken?, limit: Int, excludingDevice: String?) throws
        -> ChangeBatch
    {
        var batch = try base.fetchChanges(zone: zone, since: token, limit: limit, excludingDevice: excludingDevice)
        let before = batch.records.count
        batch.records = try batch.records.filter { !(try isStale($0)) }
        staleRecords += before - batch.records.count
        return batch
    }
    /// Its filter reads the snapshot's connection, which the import uses meanwhile.
    var fetchesConcurrently: Bool { false }
    func fetchRecord(zone: String, recordName: String) throws -> CloudRecord? {
        try base.fetchRecord(zone: zone, recordName: recordName)
    }
    func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, schemaVersion: Int?,
              atomic: Bool) throws
        -> [SaveOutcome]
    {
        try base.save(zone: zone, saves, device: device, mark: mark, schemaVersion: schemaVersion, atomic: atomic)
    }
    func schemaVersion(zone: String) throws -> ZoneSchemaVersion? { try base.schemaVersion(zone: zone) }
    func raiseSchemaVersion(zone: String, to target: ZoneSchemaVersion, device: String, seenUpTo: Int64) throws
        -> SchemaRaise
    {
        try base.raiseSchemaVersion(zone: zone, to: target, device: device, seenUpTo: seenUpTo)
    }
    func exportState(zone: String, device: String) throws -> DeviceExportState? {
        try base.exportState(zone: zone, device: device)
    }
    func fetchDeviceRecords(zone: String, device: String, after seq: Int64, limit: Int) throws
        -> (records: [DeviceRecord], moreComing: Bool)
    {
        try base.fetchDeviceRecords(zone: zone, device: device, after: seq, limit: limit)
    }
    func createMarker(zone: String, name: String, device: String, payload: String) throws
        -> (created: Bool, marker: Marker)
    {
        try base.createMarker(zone: zone, name: name, device: device, payload: payload)
    }
    func marker(zone: String, name: String) throws -> Marker? { try base.marker(zone: zone, name: name) }
    func purgeZone(_ zone: String) throws { try base.purgeZone(zone) }
    func registerDevice(storeID: String, name: String) throws { try base.registerDevice(storeID: storeID, name: name) }
    func devices() throws -> [DeviceInfo] { try base.devices() }
}
