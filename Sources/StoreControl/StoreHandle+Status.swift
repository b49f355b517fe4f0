import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreConfig
import StoreMirror
import StoreSQLite

/// One reason a store's sync would not work now, as `status` lists it (JSON: a `problems` entry). `status` exits
/// with the code of its first problem, so a script can rely on 0.
public struct StatusProblem: Sendable, Codable, Equatable {
    /// The store it is about.
    public var store: String
    /// The sysexits code the problem makes `status` exit with (the code `sync` meets it with).
    public var code: Int32
    /// The class of `code`: `no_input`, `unavailable`, `temporary`, `data`, `config`, ...
    public var kind: String
    /// What is wrong, and where.
    public var message: String
    /// What to do: a command to paste, when there is one.
    public var hint: String?

    public init(store: String, code: ExitCode, message: String, hint: String?) {
        self.store = store
        self.code = code.rawValue
        self.kind = code.kind
        self.message = message
        self.hint = hint
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(store, forKey: .store)
        try c.encode(code, forKey: .code)
        try c.encode(kind, forKey: .kind)
        try c.encode(message, forKey: .message)
        try c.encode(hint, forKey: .hint)
    }
}

/// Everything `storectl status` reports about one store. The JSON form is stable.
public struct StatusReport: Sendable, Codable {
    public struct History: Sendable, Codable {
        /// Whether tracking is on and its triggers are intact.
        public var enabled: Bool
        /// `ok`, `drift`, `triggers-missing` or `not-initialised`.
        public var state: String
        /// What drifted, in words.
        public var drift: [String]
        /// The newest history seq.
        public var lastSeq: Int64

        enum CodingKeys: String, CodingKey {
            case enabled, state, drift
            case lastSeq = "last_seq"
        }
    }

    public struct Tokens: Sendable, Codable {
        /// The last history seq exported to the cloud.
        public var export: Int64
        /// The server change token of the last import.
        public var server: String?
    }

    public struct Account: Sendable, Codable {
        public var status: String
        public var reason: String
        public var account: String?
        /// The account the store is bound to, if it ever synced.
        public var bound: String?
        /// Who owns the container, when the backend tells (PostgreSQL: the role that owns its schema).
        public var owner: String? = nil
    }

    /// The zone's share as the store's account sees it: `{"owner": "alice", "permission": "read-only",
    /// "since": "2026-12-04T10:00:00Z"}`; `permission` is `owner`, `read-write`, `read-only` or `none`.
    public struct Share: Sendable, Codable, Equatable {
        /// The account that owns the zone; null when the zone does not exist yet.
        public var owner: String?
        public var permission: String
        /// When the share was added (participants only).
        public var since: String?

        public init(_ access: ZoneAccess) {
            owner = access.owner
            permission = access.level.rawValue
            since = access.since.map { ISOTime.string(unixMilliseconds: Int64($0 * 1000), fractional: false) }
        }
    }

    public struct Cloud: Sendable, Codable {
        public var url: String
        public var container: String
        public var zone: String
        /// Whether the cloud answered; nil when it was not asked (a store in local mode never contacts the cloud
        /// unless the status is asked to check it).
        public var reachable: Bool?
        /// False when the check found no container at all (a container file moved away, a PostgreSQL schema
        /// dropped); nil when it was not asked.
        public var containerExists: Bool? = nil
        /// The hot standby of `cloud.replica_url`, when one is configured and the cloud was checked: whether sync
        /// reads from it, its lag, or why not.
        public var replica: PostgresStandbyStatus? = nil
        /// What the store's account may do in the zone (its owner, or a participant's permission), when the cloud
        /// was checked and answered.
        public var share: Share? = nil

        enum CodingKeys: String, CodingKey {
            case url, container, zone, reachable, replica, share
            case containerExists = "container_exists"
        }
    }

    public var store: String
    public var path: String
    public var exists: Bool
    /// The mode the store's meta records (or the config's, when the store is not initialised).
    public var mode: String
    public var configMode: String
    public var history: History
    /// Rows with changes not yet exported.
    public var pendingExport: Int64
    /// ISO-8601 time of the last completed sync round, if any.
    public var lastSync: String?
    public var tokens: Tokens
    public var account: Account?
    public var cloud: Cloud?
    /// Every disagreement between config.yaml and the store, with the command that fixes it.
    public var disagreements: [String]
    /// Every reason the store's sync would not work now, in the order `status` takes the exit code from.
    public var problems: [StatusProblem] = []
    /// Why the last sync waited for a data migration (also one of `disagreements`); `status` exits 75 then.
    public var schemaWait: SchemaWait?
    /// Whether the store has finished its first import from the cloud.
    public var initialSyncComplete: Bool
    /// When an export, and an import, last succeeded (ISO 8601).
    public var lastExportAt: String?
    public var lastImportAt: String?
    /// The last failed sync round, unless a round succeeded after it.
    public var lastError: SyncErrorRecord?
    /// Whether a `storectl watch` process serves the store, and which.
    public var watched: Bool
    public var watcher: WatchLock.WatcherInfo?
    /// What keeps the store from being converged although nothing is pending: records waiting for a parent or set
    /// aside, tombstones not yet sent, rows too large to send, and records of types the store does not track.
    public var unsettled = UnsettledReport()

    enum CodingKeys: String, CodingKey {
        case store, path, exists, mode, history, tokens, account, cloud, disagreements, watched, watcher, unsettled
        case problems
        case configMode = "config_mode"
        case pendingExport = "pending_export"
        case lastSync = "last_sync"
        case initialSyncComplete = "initial_sync_complete"
        case lastExportAt = "last_export_at"
        case lastImportAt = "last_import_at"
        case lastError = "last_error"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(store, forKey: .store)
        try c.encode(path, forKey: .path)
        try c.encode(exists, forKey: .exists)
        try c.encode(mode, forKey: .mode)
        try c.encode(configMode, forKey: .configMode)
        try c.encode(history, forKey: .history)
        try c.encode(pendingExport, forKey: .pendingExport)
        try c.encodeIfPresent(lastSync, forKey: .lastSync)
        try c.encode(tokens, forKey: .tokens)
        try c.encodeIfPresent(account, forKey: .account)
        try c.encodeIfPresent(cloud, forKey: .cloud)
        try c.encode(disagreements, forKey: .disagreements)
        try c.encode(problems, forKey: .problems)
        // The sync state: every key always present, null when it has no value.
        try c.encode(initialSyncComplete, forKey: .initialSyncComplete)
        try c.encode(lastExportAt, forKey: .lastExportAt)
        try c.encode(lastImportAt, forKey: .lastImportAt)
        try c.encode(lastError, forKey: .lastError)
        try c.encode(watched, forKey: .watched)
        try c.encode(watcher, forKey: .watcher)
        try c.encode(unsettled, forKey: .unsettled)
    }
}

extension StoreHandle {
    /// Gathers the status. Contacts the cloud only to read the account status, and for a store in local mode
    /// only when `checkCloud` is true; never creates anything.
    /// - Throws: `StoreError` when the store file exists but cannot be read.
    public func status(checkCloud: Bool = false) throws -> StatusReport {
        var disagreements: [String] = []
        var history = StatusReport.History(enabled: false, state: "not-initialised", drift: [], lastSeq: 0)
        var mode = settings.mode.rawValue
        var pending: Int64 = 0
        var lastSync: String?
        var tokens = StatusReport.Tokens(export: 0, server: nil)
        var bound: String?
        var unsettled = UnsettledReport()
        var schemaWait: SchemaWait?
        if exists {
            let db = try database()
            if try db.tableExists("_storectl_meta") {
                let state = try trackingState()
                history.state = state.name
                history.drift = state.details
                history.enabled = state.name == "ok" || state.name == "drift"
                history.lastSeq = try db.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0
                if let stored = try MirrorState.meta(db, .mode) {
                    mode = stored
                    if stored != settings.mode.rawValue {
                        disagreements.append("config.yaml says mode: \(settings.mode.rawValue) but the store is in \(stored) mode; run 'storectl mode \(settings.mode.rawValue)' or 'storectl mode \(stored)'")
                    }
                }
                if try db.tableExists("_storectl_consumers") {
                    pending = try MirrorState.pendingExportCount(db)
                    tokens.export = try MirrorState.exportToken(db)
                }
                if try db.tableExists("_storectl_tokens"), let cloud = settings.cloud {
                    tokens.server = try MirrorState.serverToken(db, zone: cloud.zone)
                }
                if let ms = try MirrorState.meta(db, .lastSyncAt).flatMap(Double.init) {
                    // The ISO 8601 format style gives what ISO8601DateFormatter gave (`2024-05-01T12:00:00Z`)
                    // without starting the ICU-backed formatter machinery.
                    lastSync = ISOTime.string(unixMilliseconds: Int64(ms), fractional: false)
                }
                bound = try MirrorState.meta(db, .boundAccount)
                if let cloud = settings.cloud, let moved = try targetChange(db: db, cloud: cloud) {
                    disagreements.append(moved.summary + "; " + (moved.hint ?? ""))
                }
                if let bound, let configured = settings.cloud?.account, bound != configured {
                    disagreements.append("the store is bound to account '\(bound)' but config.yaml names '\(configured)'; run 'storectl sync --rebind' to switch accounts")
                }
                if state.name != "ok" {
                    disagreements.append(state.name == "drift" ? "the tracked tables changed since the triggers were installed; run 'storectl migrate'"
                                         : "history triggers are missing; run 'storectl migrate --force'")
                }
                schemaWait = try SchemaGate.wait(db)
                if let schemaWait { disagreements.append(schemaWait.text) }
                unsettled = try MirrorState.unsettled(db)
                for record in unsettled.setAside {
                    disagreements.append("record \(record.recordName) (\(record.recordType), seq \(record.seq)) is set "
                                         + "aside: \(record.reason); \(record.hint)")
                }
                for record in unsettled.waitingForParent {
                    disagreements.append("record \(record.recordName) (\(record.recordType), seq \(record.seq)) waits "
                                         + "for a parent record that has not arrived")
                }
                for row in unsettled.unsent {
                    disagreements.append("row \(row.key) of '\(row.entity)' is not sent: \(row.reason)")
                }
            } else {
                disagreements.append("the store is not initialised; run 'storectl init'")
            }
        } else {
            disagreements.append("the store file \(settings.path) does not exist; \(missingStoreHint)")
        }
        var account: StatusReport.Account?
        var cloud: StatusReport.Cloud?
        var checkedAccount: AccountStatusReport?
        var keyProblem: ZoneKeyError?
        if let settingsCloud = settings.cloud, mode != StoreMode.cloud.rawValue && !checkCloud {
            account = .init(status: "notChecked",
                            reason: "the store is in local mode and never contacts the cloud; run 'storectl status "
                                + "--check-cloud' or 'storectl account status' to check",
                            account: settingsCloud.account, bound: bound)
            cloud = .init(url: CloudConnector.redacted(settingsCloud.url), container: settingsCloud.container,
                          zone: settingsCloud.zone, reachable: nil)
        } else if let settingsCloud = settings.cloud {
            let (report, container) = accountStatusAndContainer(settingsCloud)
            checkedAccount = report
            account = .init(status: report.status.rawValue, reason: report.reason, account: report.account, bound: bound,
                            owner: report.owner)
            // A bound store's container that is gone is not reachable, whatever the account could do there.
            let bindingMissing = report.containerMissing && boundContainer() != nil
            let reachable = !bindingMissing
                && (report.status == .available || report.status == .noAccount || report.status == .restricted)
            cloud = .init(url: CloudConnector.redacted(settingsCloud.url), container: settingsCloud.container,
                          zone: settingsCloud.zone, reachable: reachable, containerExists: !report.containerMissing,
                          replica: CloudConnector.replicaStatus(settings: settingsCloud, environment: environment))
            if report.status == .available, let sharing = container as? any CloudSharing,
               let access = try? sharing.zoneAccess(settingsCloud.zone)
            {
                cloud?.share = .init(access)
            }
            // A passphrase that does not open the zone's key: sync would be refused (77). Read only.
            if report.status == .available, let container, mode == StoreMode.cloud.rawValue {
                do {
                    _ = try encryptedCloud(container)
                } catch let error as ZoneKeyError {
                    keyProblem = error
                } catch {}
            }
        }
        let sync = try syncState()
        var report = StatusReport(store: settings.name, path: settings.path, exists: exists, mode: mode,
                                  configMode: settings.mode.rawValue, history: history, pendingExport: pending,
                                  lastSync: lastSync, tokens: tokens, account: account, cloud: cloud,
                                  disagreements: disagreements, initialSyncComplete: sync.initialSyncComplete,
                                  lastExportAt: sync.lastExportAt, lastImportAt: sync.lastImportAt,
                                  lastError: sync.lastError, watched: sync.watcher != nil, watcher: sync.watcher)
        report.unsettled = unsettled
        report.schemaWait = schemaWait
        report.problems = try statusProblems(report, account: checkedAccount, tracking: history.state)
        if let keyProblem {
            report.problems.append(StatusProblem(store: settings.name, code: keyProblem.exitCode,
                                                 message: keyProblem.summary, hint: keyProblem.hint))
        }
        return report
    }

    /// Every reason the store's sync would not work now, first problem first: the store file, then (in cloud mode)
    /// the target, the triggers, the account and the container, then a data migration waited for, the last sync
    /// that failed, and records set aside or rows that cannot be sent. A store in local mode never contacts the
    /// cloud, so its account is not a problem of it.
    func statusProblems(_ report: StatusReport, account: AccountStatusReport?, tracking: String) throws
        -> [StatusProblem]
    {
        var problems: [StatusProblem] = []
        func add(_ code: ExitCode, _ message: String, _ hint: String?) {
            problems.append(StatusProblem(store: settings.name, code: code, message: message, hint: hint))
        }
        func add(_ error: any DiagnosedError) { add(error.exitCode, error.summary, error.hint) }
        guard report.exists else {
            add(missingStoreError())
            return problems
        }
        let inCloud = report.mode == StoreMode.cloud.rawValue
        if inCloud, let cloud = settings.cloud {
            let db = try database()
            if let moved = try targetChange(db: db, cloud: cloud) {
                add(moved)
            } else if let bound = report.account?.bound, bound != (cloud.account ?? "") {
                add(.config, "store '\(settings.name)' is bound to account '\(bound)' but \(config.path) names "
                        + "'\(cloud.account ?? "")'",
                    "run 'storectl sync --rebind' to sync into the new account (local rows are kept and uploaded)")
            }
            if tracking == "drift" {
                add(.config, "store '\(settings.name)': the tracked tables changed since the history triggers were "
                        + "made, and sync refuses to run over stale triggers", "run 'storectl migrate'")
            } else if tracking != "ok" {
                add(.config, "store '\(settings.name)': the history triggers are missing, and sync refuses to run "
                        + "without them", "run 'storectl migrate --force'")
            }
            if let account {
                if account.containerMissing, boundContainer() != nil {
                    add(boundContainerMissingError(cloud))
                } else if account.status != .available {
                    add(AccountUnavailableError(report: account, storeName: settings.name))
                } else if let share = report.cloud?.share, share.permission == ZoneAccess.Level.none.rawValue {
                    add(ZoneAccess(zone: cloud.zone, owner: share.owner, account: cloud.account ?? "", level: .none)
                            .noShareError(container: cloud.container))
                }
            }
        } else if inCloud {
            add(.config, "store '\(settings.name)' is in cloud mode but \(config.path) has no "
                    + "stores.\(settings.name).cloud section",
                "add stores.\(settings.name).cloud, or run 'storectl mode local --no-final-sync'")
        }
        if let wait = report.schemaWait {
            let file = wait.file.isEmpty ? "FILE" : wait.file
            add(.tempFail, "the last sync waited for a data migration: \(wait.text)",
                "run 'storectl migrate --sql \(file) --schema-version \(wait.version)', then 'storectl sync'")
        }
        if inCloud, let error = report.lastError, report.schemaWait == nil {
            add(ExitCode(error.code), "the last sync failed at \(error.at): \(error.message)",
                "run 'storectl sync' to try again" + (error.hint.map { "; when it failed it said: \($0)" } ?? ""))
        }
        for record in report.unsettled.setAside {
            add(.dataError, "record \(record.recordName) (\(record.recordType), seq \(record.seq)) is set aside: "
                    + record.reason, record.hint)
        }
        for row in report.unsettled.unsent where row.share != nil {
            add(.dataError, "row \(row.key) of '\(row.entity)' is changed here and not sent: \(row.reason)",
                "see how it differs with 'storectl verify', then put it back to the cloud's values with 'storectl "
                    + "sync --discard-local'; or ask the zone's owner for read-write access")
        }
        for row in report.unsettled.unsent where row.share == nil {
            add(.dataError, "row \(row.key) of '\(row.entity)' is not sent: \(row.reason)",
                row.bytes != nil ? "make the row smaller, or raise stores.\(settings.name).cloud.max_record_size"
                    : row.keyHoldsNull ? "give the row a key without NULL (declare the key columns NOT NULL)"
                    : "give the row a key of valid UTF-8 text")
        }
        return problems
    }
}
