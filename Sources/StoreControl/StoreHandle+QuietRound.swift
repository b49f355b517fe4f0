import StoreBase
import StoreCloud
import StoreMirror
import StoreSQLite

/// Where a store and its container stood after a full sync round that left nothing to do.
///
/// `storectl watch` syncs each store every interval whether or not anything changed. A round that finds the store
/// and the container exactly as the last full round left them has nothing to export and nothing to import: it
/// writes `last_sync_at` and returns, without the account check's PBKDF2 lookup, the trigger and identity checks,
/// the device registration and the export and import that would find nothing.
///
/// "Exactly as left" is read, never assumed:
/// - the store: no other connection committed (`PRAGMA data_version`, read before the full round's export read
///   history, so a write committed during that round counts as a change), this connection changed no row
///   (`sqlite3_total_changes64`) and no schema (`PRAGMA schema_version`), and the file at the store's path is
///   the one the connection reads;
/// - the container (`CloudDatabase.quietState`): the same file, its meta, the account's registration (secret
///   hash, role, enabled) and the zone's epoch and last seq, which must equal the server token the import
///   recorded, so that a save by any device after that import makes the next round a full one. A container file
///   is opened for each quiet round and closed after it, as for a full round: a connection kept open across
///   rounds would read old `-wal` and `-shm` files removed meanwhile, and delete the new WAL on closing. A
///   PostgreSQL session is kept.
///
/// A round with options (`--reupload`, `--rebind`, `--accept-owner`), one after a failure, after a round that
/// left anything unsettled (a change not exported, a record set aside or waiting for its parent, an outbox entry,
/// an unsent row, a seed marker to claim), or `quietRoundLimit` seconds after the last full round, is a full one.
struct QuietMark {
    /// The container connection the full round used, kept open between rounds; nil for a container file,
    /// opened for each round.
    var cloud: (any CloudDatabase)?
    var state: QuietState
    var local: LocalState
    /// When the full round that took this mark ended (monotonic seconds).
    var since: Double
    /// The export token and server token the full round left, for the reports of quiet rounds.
    var exportToken: Int64

    /// What tells whether the store changed, read on the handle's own connection.
    struct LocalState: Equatable {
        var dataVersion: Int64
        var totalChanges: Int64
        var schemaVersion: Int64
        var file: FileIdentity?

        static func read(_ db: Connection, path: String, dataVersion: Int64? = nil) throws -> LocalState {
            LocalState(dataVersion: try dataVersion ?? Self.dataVersion(db), totalChanges: db.totalChanges,
                       schemaVersion: try db.scalar("PRAGMA schema_version")?.int64 ?? -1,
                       file: FileIdentity(path: path))
        }

        static func dataVersion(_ db: Connection) throws -> Int64 {
            try db.scalar("PRAGMA data_version")?.int64 ?? -1
        }
    }
}

extension StoreHandle {
    /// The longest a run of quiet rounds lasts, in seconds: then a full round checks everything again, registers
    /// the device (its `last_seen`) and takes a new mark.
    public static let quietRoundLimit = 300.0

    /// Whether `options` allow a quiet round: plain rounds only.
    private static func isPlain(_ options: SyncOptions) -> Bool {
        !options.reupload && !options.rebind && options.acceptOwner == nil && !options.dryRun
    }

    /// A round with nothing to do, when the store and the container are as the last full round left them: it
    /// writes `last_sync_at` and reports nothing exported or imported. Nil when a full round is needed; any error
    /// reading the state is left for the full round to meet and report.
    func quietRound(_ options: SyncOptions) -> SyncReport? {
        guard var mark = quietMark else { return nil }
        quietMark = nil
        guard Self.isPlain(options), monotonicNow() - mark.since < Self.quietRoundLimit,
              let zone = settings.cloud?.zone, let db = try? database()
        else { return nil }
        do {
            guard try QuietMark.LocalState.read(db, path: settings.path) == mark.local else { return nil }
            // Read every time, never taken from notifications: a purge, a container put back to an older copy or
            // dropped, a listener that hears nothing (a pooler) send none.
            guard let cloud = try mark.cloud
                    ?? CloudConnector.openForQuietRound(settings: try cloudSettings(), environment: environment),
                  try cloud.quietState(zone: zone, known: mark.state) == mark.state
            else { return nil }
            try db.transaction { try MirrorState.setMeta(db, .lastSyncAt, String(WatchTime.nowMilliseconds())) }
            mark.local.totalChanges = db.totalChanges
        } catch {
            return nil
        }
        quietMark = mark
        var report = SyncReport(exported: ExportReport(), imported: ImportReport())
        report.exported.token = mark.exportToken
        report.imported.token = mark.state.zone?.rawValue
        return report
    }

    /// After a full round: the mark the next rounds compare with, when the round left nothing to do.
    /// - Parameter dataVersion: `PRAGMA data_version` as it was before the round read the store.
    func takeQuietMark(after report: SyncReport, mirror: Mirror, dataVersion: Int64?, options: SyncOptions) {
        quietMark = nil
        guard Self.isPlain(options), let dataVersion, let zone = settings.cloud?.zone,
              report.exported.unsent.isEmpty, report.imported.setAside == 0, report.imported.waitingForParent == 0
        else { return }
        let db = mirror.db
        do {
            let unsettled = try MirrorState.unsettledCounts(db)
            // A read-only participant's changes are never sent: they leave nothing to do.
            guard unsettled == (0, 0, 0, 0), try mirror.options.readOnly || MirrorState.pendingExportCount(db) == 0,
                  try Seeder.pendingMarkers(db).isEmpty
            else { return }
            // The import's token, when the backend can vouch for the rest without a read; else the state read now.
            // A save after the import moves the zone past it, which the next quiet round reads.
            var state = report.imported.token.flatMap(ServerChangeToken.init(rawValue:))
                .flatMap { mirror.cloud.quietState(zone: zone, importedUpTo: $0) }
            if state == nil { state = try mirror.cloud.quietState(zone: zone, known: nil) }
            guard let state, let at = state.zone,
                  try MirrorState.serverToken(db, zone: zone) == at.rawValue
            else { return }
            quietMark = QuietMark(cloud: ((mirror.cloud as? EncryptedCloud)?.base ?? mirror.cloud) is FileCloudDatabase ? nil : mirror.cloud, state: state,
                                  local: try .read(db, path: settings.path, dataVersion: dataVersion),
                                  since: monotonicNow(), exportToken: try MirrorState.exportToken(db))
        } catch {
            quietMark = nil
        }
    }

    /// `PRAGMA data_version` now, before a full round reads the store.
    func dataVersionBeforeRound() -> Int64? {
        (try? database()).flatMap { try? QuietMark.LocalState.dataVersion($0) }
    }
}
