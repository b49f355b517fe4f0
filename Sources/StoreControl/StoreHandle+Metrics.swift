import StoreBase
import StoreConfig
import StoreHistory
import StoreMirror
import StoreSQLite

/// What one store's gauges say, read from the store itself: the same values for `watch --metrics-file` and
/// `status --metrics` (docs/watch.md, "Metrics").
public struct StoreGauges: Sendable, Equatable {
    /// The store's name (the `store` label).
    public var store: String
    /// Whether the store file exists and could be read as a storectl store (`storectl_store_up`).
    public var up: Bool
    /// Whether the store's meta says cloud mode (`storectl_cloud_mode`).
    public var cloudMode: Bool
    /// When the last sync round succeeded, in Unix seconds; nil when it never did.
    public var lastSuccessSeconds: Double?
    /// Rows with local changes not yet exported (`status`'s `pending_export`).
    public var pendingExportRows: Int64
    /// Records set aside because they cannot be applied as they are.
    public var setAsideRecords: Int64
    /// Records waiting for a parent record that has not arrived.
    public var waitingForParentRecords: Int64
    /// Whether the last round failed and none succeeded since (`status`'s `last_error` is not null).
    public var failing: Bool

    /// The gauges of a store that cannot be read (missing file, not initialised, unreadable).
    public static func down(_ store: String) -> StoreGauges {
        StoreGauges(store: store, up: false, cloudMode: false, lastSuccessSeconds: nil, pendingExportRows: 0,
                    setAsideRecords: 0, waitingForParentRecords: 0, failing: false)
    }
}

extension StoreHandle {
    /// Reads the store's gauges. Never contacts the cloud; never writes.
    ///
    /// A store whose file is missing or was never initialised is `StoreGauges.down`.
    /// - Throws: `SQLiteError` or `StoreError` when the store file exists but cannot be read.
    public func gauges() throws -> StoreGauges {
        var gauges = StoreGauges.down(settings.name)
        guard exists else { return gauges }
        let db = try database()
        guard try db.tableExists("_storectl_meta") else { return gauges }
        gauges.up = true
        gauges.cloudMode = try MirrorState.meta(db, .mode) == StoreMode.cloud.rawValue
        if let ms = try MirrorState.meta(db, .lastSyncAt).flatMap(Double.init) {
            gauges.lastSuccessSeconds = ms / 1000
        }
        if try db.tableExists("_storectl_consumers") {
            gauges.pendingExportRows = try MirrorState.pendingExportCount(db)
        }
        let unsettled = try MirrorState.unsettledCounts(db)
        gauges.setAsideRecords = unsettled.quarantined
        gauges.waitingForParentRecords = unsettled.pending
        gauges.failing = try syncState().lastError != nil
        return gauges
    }
}
