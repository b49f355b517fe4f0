import StoreConfig
import StoreHistory
import StoreSQLite

extension StoreSettings {
    /// What the history layer needs from this store's settings: the author, the tracked tables (every user table
    /// unless `entities:` names some) and the tombstone columns.
    public var trackingOptions: TrackingOptions {
        var tombstones: [String: [String]] = [:]
        for entity in entities {
            if let columns = entity.tombstone { tombstones[entity.name] = columns }
        }
        return TrackingOptions(author: history.author, entities: entities.isEmpty ? nil : entities.map(\.name),
                               tombstones: tombstones, tracking: history.tracking)
    }
}

extension StoreHandle {
    /// The history tracker of this store, on its connection.
    ///
    /// - Parameter create: create the store file when it is missing (only `storectl init` does).
    /// - Throws: `StoreError` (66 when the file is missing and `create` is false) or `SQLiteError`.
    public func historyTracker(create: Bool = false) throws -> HistoryTracker {
        HistoryTracker(db: try database(create: create), options: settings.trackingOptions)
    }
}
