import StoreBase
import StoreConfig
import StoreSQLite

extension StoreHandle {
    /// Checks every column that `entities:` names (`unique:`, `keep: newest(...)`, `tombstone:`) against the store's
    /// tables, so that a misspelt column is a config error naming its key (exit 78), never failed SQL later. Tables
    /// that do not exist are left to the tracking check, which names them. Does nothing when the store file does
    /// not exist yet.
    /// - Throws: `StoreError` (exit 78).
    public func checkEntityColumns() throws {
        guard exists else { return }
        let db = try database()
        for entity in settings.entities where try db.tableExists(entity.name) {
            let columns = try db.columns(of: entity.name).map(\.name)
            let known = Set(columns.map { $0.lowercased() })
            let path = "stores.\(settings.name).entities.\(entity.name)"
            func check(_ column: String, _ key: String) throws {
                guard !known.contains(column.lowercased()) else { return }
                let near = Suggest.closest(column, in: columns).map { "did you mean '\($0)'? " } ?? ""
                throw StoreError(.config, "\(path).\(key): table \(entity.name) has no column '\(column)'",
                                 hint: near + "its columns are \(columns.joined(separator: ", ")); fix \(path).\(key) "
                                     + "in \(config.path)")
            }
            for (i, column) in (entity.unique ?? []).enumerated() { try check(column, "unique[\(i)]") }
            switch entity.keep {
            case .newest(let column)?, .oldest(let column)?: try check(column, "keep")
            default: break
            }
            for (i, column) in (entity.tombstone ?? []).enumerated() { try check(column, "tombstone[\(i)]") }
        }
    }
}
