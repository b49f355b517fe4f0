import FoundationEssentials
import StoreBase
import StoreHistory
import StoreMirror
import StoreSQLite

/// Where a store's sync stands, for scripts (`status --json`): the first import, the last successes of each
/// direction, the last error, and the `watch` process serving it.
public struct SyncStateReport: Sendable, Equatable {
    /// Whether the store has finished its first import from the cloud (it holds a server change token for its
    /// zone). False again after `--rebind` or `--reupload` until the next import.
    public var initialSyncComplete: Bool
    /// When an export last succeeded (ISO 8601), if ever.
    public var lastExportAt: String?
    /// When an import last succeeded (ISO 8601), if ever.
    public var lastImportAt: String?
    /// The last failed round, unless a round succeeded after it.
    public var lastError: SyncErrorRecord?
    /// The `storectl watch` process serving the store, if one does.
    public var watcher: WatchLock.WatcherInfo?
}

extension StoreHandle {
    /// The meta key of the last failed round (a JSON `SyncErrorRecord`).
    static let lastErrorMetaKey = MetaKey.lastSyncError

    /// Reads the sync state. Never contacts the cloud; never writes.
    /// - Throws: `SQLiteError` when the store cannot be read.
    public func syncState() throws -> SyncStateReport {
        var state = SyncStateReport(initialSyncComplete: false, lastExportAt: nil, lastImportAt: nil, lastError: nil,
                                    watcher: WatchLock.holder(storePath: settings.path, environment: environment))
        var lastSuccess: Int64 = 0
        if exists {
            let db = try database()
            if try db.tableExists("_storectl_meta") {
                if let zone = settings.cloud?.zone, try db.tableExists("_storectl_tokens") {
                    state.initialSyncComplete = try MirrorState.serverToken(db, zone: zone) != nil
                }
                func time(_ key: MetaKey) throws -> (Int64, String)? {
                    guard let ms = try MirrorState.meta(db, key).flatMap(Int64.init) else { return nil }
                    return (ms, WatchTime.iso(ms))
                }
                state.lastExportAt = try time(.lastExportAt)?.1
                state.lastImportAt = try time(.lastImportAt)?.1
                lastSuccess = try time(.lastSyncAt)?.0 ?? 0
                if let text = try MirrorState.meta(db, Self.lastErrorMetaKey),
                   let record = try? JSONDecoder().decode(SyncErrorRecord.self, from: Data(text.utf8))
                {
                    state.lastError = record
                }
            }
        }
        // The watcher's own record wins when it is newer: it is kept even when the store was locked.
        if let fromWatcher = state.watcher?.lastError,
           fromWatcher.atMilliseconds >= state.lastError?.atMilliseconds ?? 0
        {
            state.lastError = fromWatcher
        }
        if let error = state.lastError, error.atMilliseconds < lastSuccess { state.lastError = nil }
        return state
    }

    /// Records a failed round in the store's meta (best effort: a store that cannot be written is left alone).
    func recordSyncError(_ record: SyncErrorRecord) {
        guard let db = try? database(), (try? db.tableExists("_storectl_meta")) == true else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(record) else { return }
        try? db.transaction { try MirrorState.setMeta(db, Self.lastErrorMetaKey, String(decoding: data, as: UTF8.self)) }
    }
}
