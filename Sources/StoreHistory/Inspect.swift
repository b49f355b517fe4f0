import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreSQLite

extension HistoryTracker {
    /// Compares the stored schema description and the installed triggers with the schema as it is now.
    ///
    /// Drift is a stored hash that differs from the current one (a column added, renamed, dropped or retyped, a
    /// table added or dropped), a trigger whose SQL differs from what would be generated, or a storectl trigger
    /// that belongs to nothing. A tracked table missing one of its triggers means tracking is lost.
    /// - Throws: `SQLiteError`.
    public func inspect() throws -> TrackingReport {
        guard try isInitialized() else { return TrackingReport(state: .notInitialized) }
        let gap = try meta(MetaKey.historyGap).flatMap { Int64($0) }
        // The stored description is decoded only when something needs explaining (most calls find no drift).
        let storedText = try meta(MetaKey.schema)
        var decoded: SchemaDescription?? = nil
        func stored() -> SchemaDescription? {
            if let decoded { return decoded }
            let value = storedText.flatMap { try? JSONDecoder().decode(SchemaDescription.self, from: Data($0.utf8)) }
            decoded = .some(value)
            return value
        }
        let storedHash = try meta(MetaKey.schemaHash)
        let storedTracked = Set(try storedTrackedNames())
        let tables = try trackedTables(strict: false)
        let current = SchemaDescription(
            tables: Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0.description) }),
            userTables: try userTables())

        var drift: [String] = []
        var explained: Set<String> = []
        if current.hash != storedHash {
            if let stored = stored() {
                let (lines, tablesExplained) = explainDrift(from: stored, to: current)
                drift += lines
                explained = tablesExplained
            }
            if drift.isEmpty { drift.append("the schema hash changed (\(storedHash ?? "none") -> \(current.hash))") }
        }

        let installed = Dictionary(
            try db.query("""
                SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name LIKE '\\_storectl\\_%' ESCAPE '\\'
                """).compactMap { row -> (String, String)? in
                guard let name = row[0].string else { return nil }
                return (name, row[1].string ?? "")
            }, uniquingKeysWith: { a, _ in a })
        var expected: Set<String> = []
        var missing: [String] = []
        // An older store keeps the triggers of its format until it is upgraded: compare with those.
        let format = min(try formatVersion(), StoreFormat.currentVersion)
        for table in tables where !table.primaryKey.isEmpty {
            let wasTracked = storedTracked.contains(table.name)
            let names = StoreFormat.triggerNames(for: table.name)
            func hadUpdateTrigger() -> Bool { stored()?.tables[table.name]?.columns.contains { $0.pk == 0 } ?? true }
            for trigger in try triggerSQL(for: table, format: format).triggers {
                expected.insert(trigger.name)
                if let sql = installed[trigger.name] {
                    if sql != trigger.sql && !explained.contains(table.name) {
                        drift.append("trigger \(quoteIdentifier(trigger.name)) differs from the one storectl generates")
                    }
                } else if wasTracked && (trigger.name != names.update || hadUpdateTrigger()) {
                    if !missing.contains(table.name) { missing.append(table.name) }
                } else if !explained.contains(table.name) {
                    drift.append("trigger \(quoteIdentifier(trigger.name)) is not installed")
                }
            }
        }
        for name in installed.keys.sorted(by: utf8Less) where !expected.contains(name) && !StoreFormat.isMoveFence(name) {
            drift.append("trigger \(quoteIdentifier(name)) does not belong to a tracked table")
        }
        // A tracked table that is gone takes its triggers with it: that is drift, not lost tracking.
        let state: TrackingState = !missing.isEmpty ? .triggersMissing(missing) : drift.isEmpty ? .ok : .drift(drift)
        return TrackingReport(state: state, drift: drift, missingTriggers: missing, historyGap: gap)
    }

    /// Explains, one line per change, how `current` differs from `stored`; also returns the tables explained.
    private func explainDrift(from stored: SchemaDescription, to current: SchemaDescription)
        -> ([String], Set<String>)
    {
        var lines: [String] = []
        var explained: Set<String> = []
        let storedUser = Set(stored.userTables)
        let currentUser = Set(current.userTables)
        for name in current.userTables.sorted(by: utf8Less) where !storedUser.contains(name) {
            lines.append("table \(quoteIdentifier(name)) added" + (current.tables[name] == nil ? " (not tracked)" : ""))
            explained.insert(name)
        }
        for name in stored.userTables.sorted(by: utf8Less) where !currentUser.contains(name) {
            lines.append("table \(quoteIdentifier(name)) dropped")
            explained.insert(name)
        }
        for name in current.tables.keys.sorted(by: utf8Less) where storedUser.contains(name) {
            guard let now = current.tables[name] else { continue }
            guard let before = stored.tables[name] else {
                lines.append("table \(quoteIdentifier(name)) is now tracked")
                explained.insert(name)
                continue
            }
            let changes = explainTable(before: before, now: now)
            if !changes.isEmpty {
                lines += changes.map { "table \(quoteIdentifier(name)): " + $0 }
                explained.insert(name)
            }
        }
        for name in stored.tables.keys.sorted(by: utf8Less) where current.tables[name] == nil && currentUser.contains(name) {
            lines.append("table \(quoteIdentifier(name)) is no longer tracked")
            explained.insert(name)
        }
        return (lines, explained)
    }

    private func explainTable(before: TableDescription, now: TableDescription) -> [String] {
        var lines: [String] = []
        let beforeNames = before.columns.map(\.name)
        let nowNames = now.columns.map(\.name)
        var renamed: Set<String> = []
        var renamedTo: Set<String> = []
        if beforeNames.count == nowNames.count {
            for (b, n) in zip(before.columns, now.columns)
            where b.name != n.name && !nowNames.contains(b.name) && !beforeNames.contains(n.name) {
                lines.append("column \(quoteIdentifier(b.name)) renamed to \(quoteIdentifier(n.name))")
                renamed.insert(b.name)
                renamedTo.insert(n.name)
            }
        }
        for c in now.columns where !beforeNames.contains(c.name) && !renamedTo.contains(c.name) {
            lines.append("column \(quoteIdentifier(c.name)) added")
        }
        for c in before.columns where !nowNames.contains(c.name) && !renamed.contains(c.name) {
            lines.append("column \(quoteIdentifier(c.name)) dropped")
        }
        for b in before.columns {
            guard let n = now.columns.first(where: { $0.name == b.name }) else { continue }
            if b.type != n.type {
                lines.append("column \(quoteIdentifier(b.name)) type changed from \(quoteLiteral(b.type)) to \(quoteLiteral(n.type))")
            }
        }
        let beforePK = before.columns.filter { $0.pk > 0 }.sorted { $0.pk < $1.pk }.map(\.name)
        let nowPK = now.columns.filter { $0.pk > 0 }.sorted { $0.pk < $1.pk }.map(\.name)
        if beforePK.map({ renamed.contains($0) ? "" : $0 }) != nowPK.map({ renamedTo.contains($0) ? "" : $0 }) {
            lines.append("primary key changed from (\(beforePK.joined(separator: ", "))) to (\(nowPK.joined(separator: ", ")))")
        }
        if before.foreignKeys != now.foreignKeys && lines.isEmpty {
            lines.append("foreign keys changed")
        }
        if before.tombstone != now.tombstone && lines.isEmpty {
            lines.append("tombstone columns changed from (\(before.tombstone.joined(separator: ", "))) "
                         + "to (\(now.tombstone.joined(separator: ", ")))")
        }
        if lines.isEmpty && before != now {
            lines.append("definition changed")
        }
        return lines
    }
}
