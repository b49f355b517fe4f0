import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite

/// Options of `mode cloud`, `mode local` and `sync`.
public struct SyncOptions: Sendable {
    /// Print the plan; change nothing.
    public var dryRun = false
    /// `mode cloud --no-sync`: switch without the first export and import.
    public var noSync = false
    /// `mode local --no-final-sync`: switch without the final export.
    public var noFinalSync = false
    /// Bind the store to the configured account even though it is bound to another one.
    public var rebind = false
    /// Let an export through the mass-delete breaker.
    public var allowMassDelete = false
    /// Forget record names and tokens and upload every row again (after a zone was purged elsewhere).
    public var reupload = false
    /// PostgreSQL: sync into a container that this role does not own, owned by this role (`--accept-owner ROLE`).
    public var acceptOwner: String?
    /// `sync --discard-local`: export nothing; put every row changed here and not sent back to the cloud's values.
    public var discardLocal = false

    public init() {}
}

/// One step of a mode switch, as `--dry-run` and the report list them.
public struct PlanStep: Sendable, Codable, Equatable {
    public var step: String
    public var detail: String
}

/// What `mode` did (or, with --dry-run, would do).
public struct ModeReport: Sendable, Codable {
    public var store: String
    public var from: String
    public var to: String
    public var dryRun: Bool
    public var steps: [PlanStep]
    public var sync: SyncReport?
    /// `mode cloud --dry-run` (and `--expect-plan`): the plan, with its id.
    public var plan: SwitchPlan?
    /// `mode cloud`: how the store compared with its zone after the switch.
    public var verified: VerifyReport?

    public init(store: String, from: String, to: String, dryRun: Bool, steps: [PlanStep], sync: SyncReport?,
                plan: SwitchPlan? = nil, verified: VerifyReport? = nil)
    {
        self.store = store
        self.from = from
        self.to = to
        self.dryRun = dryRun
        self.steps = steps
        self.sync = sync
        self.plan = plan
        self.verified = verified
    }
}

extension StoreHandle {
    /// The cloud settings. `create_if_missing` holds only for a store never bound to a container: a bound store
    /// whose container is gone never gets a new, empty one by accident (`StoreHandle+Binding`).
    /// - Throws: `StoreError` (exit 78) when the store has no `cloud:` section.
    public func cloudSettings() throws -> CloudSettings {
        guard var cloud = settings.cloud else {
            throw StoreError(.config, "store '\(settings.name)' has no cloud: section in \(config.path)",
                             hint: "add stores.\(settings.name).cloud with container, url and account")
        }
        if cloud.createIfMissing, boundContainer() != nil { cloud.createIfMissing = false }
        return cloud
    }

    /// The mirror options from the config.
    public func mirrorOptions(_ options: SyncOptions = SyncOptions()) throws -> MirrorOptions {
        let cloud = try cloudSettings()
        var m = MirrorOptions(zone: cloud.zone, mergePolicy: MergePolicy(rawValue: cloud.mergePolicy.rawValue) ?? .propertyLocalWins)
        m.maxDeleteFraction = cloud.maxDeleteFraction
        m.maxDeleteCount = cloud.maxDeleteCount
        m.maxRecordSize = cloud.maxRecordSize
        m.allowMassDelete = options.allowMassDelete
        m.uniqueRules = try mirrorRules()
        // Tuning knobs for large stores and tests: records per cloud save and per fetched page.
        let env = environment
        if let n = env["STORECTL_BATCH_SIZE"].flatMap(Int.init), n > 0 { m.batchSize = n }
        if let n = env["STORECTL_PAGE_SIZE"].flatMap(Int.init), n > 0 { m.pageSize = n }
        return m
    }

    /// The mode the store's meta records, or nil when the store is not initialised.
    public func storeMode() throws -> StoreMode? {
        guard exists else { return nil }
        let db = try database()
        guard try db.tableExists("_storectl_meta") else { return nil }
        return try MirrorState.meta(db, .mode).flatMap(StoreMode.init(rawValue:))
    }

    /// Checks the account before anything changes. A missing container file with `create_if_missing: true` is
    /// created first (registering the configured account as its owner), unless `dryRun`.
    /// - Throws: `AccountUnavailableError` (exit 69 or 75).
    public func requireAvailableAccount(dryRun: Bool = false) throws -> AccountStatusReport {
        let cloud = try cloudSettings()
        // A PostgreSQL role may authenticate without cloud.secret (PGPASSWORD, .pgpass, peer or trust).
        let isFile: Bool
        if case .file = try CloudConnector.backend(of: cloud.url) { isFile = true } else { isFile = false }
        if cloud.account == nil || (isFile && cloud.secret == nil) {
            throw AccountUnavailableError(report: AccountStatusReport(
                status: .noAccount, reason: "no account or secret is configured (stores.\(settings.name).cloud.account/secret)",
                account: cloud.account))
        }
        if !dryRun, cloud.createIfMissing, case .file(let path) = try CloudConnector.backend(of: cloud.url),
           !FileManager.default.fileExists(atPath: path)
        {
            _ = try CloudConnector.initialize(settings: cloud, environment: environment)
        }
        checkedCloud = nil
        checkedSealed = nil
        // The container the check opens is kept for the openMirror() that follows, rather than opened again.
        // A PostgreSQL session is kept from round to round, and its account check with it (`SessionCheck`).
        let (report, opened) = sessionCloud.map { ($0.accountStatus(), $0) }
            ?? CloudConnector.accountStatusAndContainer(settings: cloud, environment: environment)
        sessionCloud = report.status == .available ? opened as? PostgresCloudDatabase : nil
        // A bound store's container that is gone is said as such, whatever the account could do.
        if report.containerMissing, boundContainer() != nil { throw boundContainerMissingError(cloud) }
        if report.status != .available { throw AccountUnavailableError(report: report, storeName: settings.name) }
        if !dryRun {
            // The container itself must exist before anything changes (a PostgreSQL container is made by
            // `storectl cloud init`).
            do {
                checkedCloud = try opened ?? CloudConnector.open(settings: cloud, environment: environment)
            } catch {
                throw explainMissingContainer(error)
            }
        }
        return report
    }

    /// What the account may do in the store's zone, checked on the container `requireAvailableAccount` opened:
    /// an account without a share of an existing zone is refused (exit 77, naming the zone, its owner and what to
    /// ask for) before anything is written. Returns a few words for `mode cloud`'s account step.
    /// - Throws: `CloudError`.
    func requireZoneShare() throws -> String {
        guard let cloud = settings.cloud, let access = try checkedZoneAccess() else { return "" }
        switch access.level {
        case .none: throw access.noShareError(container: cloud.container)
        case .owner: return ""
        case .readOnly, .readWrite:
            return ", \(access.level.rawValue) participant of zone '\(cloud.zone)' owned by '\(access.owner ?? "?")'"
        }
    }

    /// What the account may do in the store's zone, asked of the container `requireAvailableAccount` opened; nil
    /// for a backend that does not know shares.
    /// - Throws: `CloudError`.
    func checkedZoneAccess() throws -> ZoneAccess? {
        guard let cloud = settings.cloud, let sharing = checkedCloud as? any CloudSharing else { return nil }
        return try sharing.zoneAccess(cloud.zone)
    }

    /// Opens the sync engine for this store: checks the binding and registers the device.
    /// - Throws: `StoreError` (78) for an account mismatch without `rebind`; `CloudError`.
    public func openMirror(_ options: SyncOptions = SyncOptions()) throws -> Mirror {
        try openMirror(options, trackingVerified: false)
    }

    /// `openMirror`, skipping the trigger check when the caller has just made it (`enableCloud`'s step 3).
    func openMirror(_ options: SyncOptions, trackingVerified: Bool) throws -> Mirror {
        let cloud = try cloudSettings()
        let db = try database()
        if !trackingVerified { try requireTracking() }
        try checkIdentity()
        let backend: any CloudDatabase
        do {
            backend = try checkedCloud ?? CloudConnector.open(settings: cloud, environment: environment)
        } catch {
            throw explainMissingContainer(error)
        }
        checkedCloud = nil
        // Fields encrypted on the device: the zone's key opens before anything is written (77 if it does not).
        let sealed = try checkedSealed.flatMap { $0.base === backend ? $0 : nil } ?? encryptedCloud(backend)
        checkedSealed = nil
        let mirror = try Mirror(db: db, cloud: sealed, options: try mirrorOptions(options), entities: try entityMaps(db))
        if options.reupload || options.rebind {
            // A store behind its zone's data migration must not reset anything first (its sync will wait).
            do {
                try SchemaGate.requireNotBehind(db, cloud: backend, zone: cloud.zone)
            } catch let error as CloudError where error.kind == .zoneNotFound {}
        }
        try checkOwner(db: db, cloud: backend, settings: cloud, accept: options.acceptOwner)
        try bind(db: db, cloud: cloud, rebind: options.rebind)
        if options.reupload {
            try db.transaction { try MirrorState.resetSyncState(db, zone: cloud.zone) }
        }
        try backend.registerDevice(storeID: mirror.device, name: settings.name)
        try prepareZoneKey(sealed, mirror: mirror)
        if try !Seeder.pendingMarkers(db).isEmpty {
            _ = try mirror.checkZone()
            _ = try Seeder.reconcileMarkers(db, cloud: backend, zone: cloud.zone, device: mirror.device)
        }
        return mirror
    }

    /// The tracked tables' maps (`Mirror.entityMaps`), read again only when the schema, the tracked list or the
    /// store id (`init --new-identity` under a running watcher) changed since this handle last read them.
    func entityMaps(_ db: Connection) throws -> [EntityMap] {
        let version = try db.scalar("PRAGMA schema_version")?.int64 ?? -1
        let tracked = try Mirror.trackedTables(db)
        let storeID = try MirrorState.meta(db, .storeID) ?? ""
        if let read = entityMapsRead, read.schemaVersion == version, read.tracked == tracked, read.storeID == storeID {
            return read.maps
        }
        let maps = try Mirror.entityMaps(db)
        entityMapsRead = (version, tracked, storeID, maps)
        return maps
    }

    /// Records the account and container the store syncs with; refuses another account unless `rebind`.
    func bind(db: Connection, cloud: CloudSettings, rebind: Bool) throws {
        // A url, container or zone changed by hand is a new target, not a purge (StoreHandle+CloudMove).
        try checkTarget(db: db, cloud: cloud, rebind: rebind)
        let bound = try MirrorState.meta(db, .boundAccount)
        let boundContainer = try MirrorState.meta(db, .boundContainer)
        let account = cloud.account ?? ""
        if let bound, bound != account || (boundContainer != nil && boundContainer != cloud.container) {
            guard rebind else {
                throw StoreError(.config,
                                 "store '\(settings.name)' is bound to account '\(bound)' in container '\(boundContainer ?? "?")',"
                                 + " but the config names account '\(account)' in '\(cloud.container)'",
                                 hint: "to sync this store into the new account, run 'storectl sync --rebind' (or 'storectl mode "
                                 + "cloud --rebind' for a store in local mode): local rows "
                                 + "are kept and uploaded as a new baseline; nothing is deleted")
            }
            try db.transaction { try MirrorState.resetSyncState(db, zone: cloud.zone) }
        }
        // Written when something changed: a round that writes nothing takes no write lock from the app.
        let binding: [(MetaKey, String)] = [(.boundAccount, account), (.boundContainer, cloud.container),
                                            (.boundZone, cloud.zone), (.boundURL, Redaction.connectionString(cloud.url))]
        if try binding.contains(where: { try MirrorState.meta(db, $0.0) != $0.1 }) {
            try db.transaction {
                for (key, value) in binding { try MirrorState.setMeta(db, key, value) }
            }
        }
    }

    /// `storectl mode local`: a final export (unless `noFinalSync`), then `mode: local`. Data, history, the
    /// record map and the tokens all stay.
    public func disableCloud(_ options: SyncOptions, log: (String) -> Void = { _ in },
                             progress: (String, Int, Int?) -> Void = { _, _, _ in }) throws -> ModeReport
    {
        var steps: [PlanStep] = []
        func step(_ name: String, _ detail: String) {
            steps.append(PlanStep(step: name, detail: detail))
            log("\(name): \(detail)")
        }
        let current = try storeMode()
        let previous: String = current?.rawValue ?? "uninitialised"
        let wasCloud = current == .cloud
        if options.dryRun {
            if wasCloud && !options.noFinalSync {
                step("export", "final export of the pending change(s)")
            }
            step("mode", "write mode: local into the store and into \(config.path)")
            return ModeReport(store: settings.name, from: previous, to: "local", dryRun: true, steps: steps, sync: nil)
        }
        _ = try ensureInitialized()
        var report: SyncReport?
        if wasCloud && !options.noFinalSync, try requireAvailableAccount().status == .available,
           let access = try checkedZoneAccess(), !access.canWrite
        {
            // A removed share, or a read-only one: nothing can be sent, and the store keeps every row and its history.
            step("export", "skipped: account '\(access.account)' " + (access.level == .none ? "has no share of"
                    : "has a read-only share of") + " zone '\(access.zone)' (owned by '\(access.owner ?? "?")'); "
                    + "changes not sent stay in history")
            checkedCloud = nil
        } else if wasCloud && !options.noFinalSync {
            let mirror = try openMirror(options)
            let exported = try mirror.exportChanges { progress("export", $0, $1) }
            step("export", "final export: \(exported.saved) saved, \(exported.deleted) deleted")
            report = SyncReport(exported: exported, imported: ImportReport())
        } else if wasCloud {
            step("export", "skipped (--no-final-sync); pending changes stay in history for the next sync")
        }
        try writeMode(.local)
        step("mode", "local")
        return ModeReport(store: settings.name, from: previous, to: "local", dryRun: false, steps: steps, sync: report)
    }

    /// `storectl sync`: one round of export and import.
    /// - Throws: `StoreError` (78) when the store is in local mode: a local store never contacts the cloud.
    public func sync(_ options: SyncOptions, progress: (String, Int, Int?) -> Void = { _, _, _ in }) throws
        -> SyncReport
    {
        try requireExists()
        guard try storeMode() == .cloud else {
            throw StoreError(.config, "store '\(settings.name)' is in local mode, and a store in local mode never contacts the cloud",
                             hint: "run 'storectl mode cloud' to enable sync")
        }
        // Nothing changed here or in the container since the last full round left nothing to do.
        if !options.discardLocal, let quiet = quietRound(options) { return quiet }
        let dataVersion = dataVersionBeforeRound()
        do {
            // A target edited by hand is said as such, before its account is looked at.
            if !options.rebind, let moved = try targetChange(db: try database(), cloud: try cloudSettings()) {
                throw moved
            }
            _ = try requireAvailableAccount()
            try requireZoneKey()
            let mirror = try openMirror(options)
            if options.reupload || options.rebind {
                // After a reset, take in what other devices uploaded first: the baseline then saves only what is
                // missing or changed here, and never puts this store's older copy over their rows.
                _ = try mirror.importChanges { progress("import", $0, $1) }
            }
            if options.discardLocal { return try mirror.syncDiscardingLocal(progress: progress) }
            var report = try mirror.sync(progress: progress)
            let resealed = try finishReencryption(mirror) { looked, _ in progress("reseal", looked, nil) }
            if resealed > 0 { report.resealed = resealed }
            takeQuietMark(after: report, mirror: mirror, dataVersion: dataVersion, options: options)
            return report
        } catch {
            let error = explainMissingContainer(error)
            // A passphrase that does not open the zone's key leaves the store as it was, byte for byte: `status`
            // finds it again by opening the key itself.
            if error is ZoneKeyError { throw error }
            // `status` (last_error) and `doctor` say so until a sync succeeds, as they do for `watch`.
            recordSyncError(SyncErrorRecord(at: WatchTime.nowMilliseconds(), error: WatchErrorBody(error, store: settings.name)))
            throw error
        }
    }

    /// Writes the mode into the store's meta, then into config.yaml (only that scalar changes).
    func writeMode(_ mode: StoreMode) throws {
        let db = try database()
        try db.transaction { try MirrorState.setMeta(db, .mode, mode.rawValue) }
        Failpoint.hit("mode.after-meta")
        if settings.mode != mode {
            try ConfigEditor.set(path: config.path, displayPath: nil, key: "stores.\(settings.name).mode",
                                 value: mode.rawValue, environment: environment)
        }
        Failpoint.hit("mode.after-config")
    }

    /// Dedup rules from `entities:`.
    public var uniqueRules: [String: [String]] {
        var rules: [String: [String]] = [:]
        for e in settings.entities { if let u = e.unique { rules[e.name] = u } }
        return rules
    }
}

/// The account is not available: exit 69, or 75 when it may be available later.
public struct AccountUnavailableError: DiagnosedError {
    public var report: AccountStatusReport
    /// The store whose account it is, when known: the hint then names the command that shows its secret's source.
    public var storeName: String? = nil
    public var exitCode: ExitCode { report.status.exitCode }
    public var accountStatus: String? { report.status.rawValue }
    public var summary: String {
        "account '\(report.account ?? "(none)")' is \(report.status.rawValue): \(report.reason)"
    }
    public var details: [String] { ["  nothing was changed: not the config, not the store, not the cloud"] }
    public var hint: String? {
        switch report.status {
        case .temporarilyUnavailable: return "retry later"
        case .noAccount: return report.account.map { "an owner of the container adds it with 'storectl account add \($0)'; or configure "
                + "cloud.account and cloud.secret" } ?? "configure cloud.account and cloud.secret"
        case .restricted:
            // The name of the variable a secret comes from is no secret: `config get` prints it as written.
            let show = storeName.map { " ('storectl config get stores.\($0).cloud.secret' prints where it comes from)" }
            return "check the secret" + (show ?? "") + " and that the account is enabled and can write the container"
        case .couldNotDetermine: return "check cloud.url; for a container file run 'storectl cloud init'"
        case .available: return nil
        }
    }
}

/// `cloud check` found tables that cannot be mirrored.
public struct CloudCheckError: DiagnosedError {
    public var report: CloudCheckReport
    public var exitCode: ExitCode { .dataError }
    public var summary: String { "\(report.problemCount) table problem(s) stop the cloud mirror" }
    public var details: [String] {
        report.entities.flatMap { e in e.problems.map { "  \(e.name): \($0)" } }
    }
    public var hint: String? { "fix the tables, or narrow `entities:` to the tables that can be mirrored; see 'storectl cloud check'" }
}
