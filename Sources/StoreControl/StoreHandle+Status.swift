import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreConfig
import StoreMirror
import StoreSQLite

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

    public struct Cloud: Sendable, Codable {
        public var url: String
        public var container: String
        public var zone: String
        /// Whether the cloud answered; nil when it was not asked (a store in local mode never contacts the cloud
        /// unless the status is asked to check it).
        public var reachable: Bool?
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
            disagreements.append("the store file \(settings.path) does not exist; if it was moved, run "
                                 + "'storectl config set stores.\(settings.name).path NEW_PATH'")
        }
        var account: StatusReport.Account?
        var cloud: StatusReport.Cloud?
        if let settingsCloud = settings.cloud, mode != StoreMode.cloud.rawValue && !checkCloud {
            account = .init(status: "notChecked",
                            reason: "the store is in local mode and never contacts the cloud; run 'storectl status "
                                + "--check-cloud' or 'storectl account status' to check",
                            account: settingsCloud.account, bound: bound)
            cloud = .init(url: CloudConnector.redacted(settingsCloud.url), container: settingsCloud.container,
                          zone: settingsCloud.zone, reachable: nil)
        } else if let settingsCloud = settings.cloud {
            let report = CloudConnector.accountStatus(settings: settingsCloud, environment: environment)
            account = .init(status: report.status.rawValue, reason: report.reason, account: report.account, bound: bound,
                            owner: report.owner)
            let reachable = report.status == .available || report.status == .noAccount || report.status == .restricted
            cloud = .init(url: CloudConnector.redacted(settingsCloud.url), container: settingsCloud.container,
                          zone: settingsCloud.zone, reachable: reachable)
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
        return report
    }
}
