import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// What `storectl sync --discard-local` did to the rows changed here and not sent.
public struct DiscardReport: Sendable, Codable, Equatable {
    /// One row, and what became of it: `restored` (put back to its record's values, inserted again when it had
    /// been deleted here), `deleted` (made here, the cloud has no live record of it) or `kept` (changed again while
    /// the cloud's values were fetched: left as it is, still not sent).
    public struct Row: Sendable, Codable, Equatable {
        public var entity: String
        public var key: String
        public var action: String
    }

    public var restored = 0
    public var deleted = 0
    public var kept = 0
    /// The rows, at most 1000, by table and key.
    public var rows: [Row] = []

    public init() {}
}

extension Mirror {
    /// Puts every row changed here and not sent back to the cloud's values: a row whose record is live takes the
    /// record's values (and comes back if it was deleted here), a row the cloud holds no live record of is
    /// deleted. The records are fetched first; one write transaction (author `cloud-import`, user triggers
    /// suspended) then applies them and moves the export token past the discarded changes, so nothing of them is
    /// ever sent. A row changed again meanwhile is kept. The discarded values stay in the store's history.
    /// - Throws: `CloudError`, `SQLiteError`.
    public func discardLocalChanges() throws -> DiscardReport {
        let upTo = try db.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        let applier = try RecordApplier(db: db, entities: byName, policy: .serverWins)
        var work: [(entity: EntityMap, pk: String, name: String?, record: CloudRecord?)] = []
        for row in try MirrorState.localChangesNotSent(db) {
            guard let entity = byName[row.entity] else { continue }
            let entry = try applier.mapEntry(entity: row.entity, pk: row.key)
            let record = try entry.flatMap { $0.tag == nil ? nil : try cloud.fetchRecord(zone: options.zone,
                                                                                          recordName: $0.name) }
            work.append((entity, row.key, entry?.name, record))
        }
        let order = Self.parentsFirst(entities)
        let restore = work.filter { $0.record.map { !$0.deleted } ?? false }
            .sorted { (order[$0.entity.name] ?? 0) < (order[$1.entity.name] ?? 0) }
        let remove = work.filter { $0.record.map(\.deleted) ?? true }
        var report = DiscardReport()
        func note(_ item: (entity: EntityMap, pk: String, name: String?, record: CloudRecord?), _ action: String) {
            if report.rows.count < 1000 { report.rows.append(.init(entity: item.entity.name, key: item.pk, action: action)) }
        }
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            let changedSince = try db.prepare(
                "SELECT 1 FROM _storectl_history WHERE entity = ? AND pk = ? AND seq > ? AND author <> ? LIMIT 1")
            func changedAgain(_ entity: String, _ pk: String) throws -> Bool {
                var found = false
                try changedSince.forEach([entity, pk, upTo, MirrorState.importAuthor]) { _ in found = true }
                return found
            }
            var keptFrom: Int64?
            try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                for item in remove + restore {
                    if try changedAgain(item.entity.name, item.pk) {
                        report.kept += 1
                        note(item, "kept")
                        let first = try db.scalar("""
                            SELECT min(seq) FROM _storectl_history WHERE entity = ? AND pk = ? AND seq > ? AND author <> ?
                            """, [item.entity.name, item.pk, try MirrorState.exportToken(db), MirrorState.importAuthor])?
                            .int64 ?? upTo
                        keptFrom = min(keptFrom ?? first, first)
                        continue
                    }
                    if let record = item.record, !record.deleted {
                        if let name = item.name { try RecordMap(db).forgetTag(name: name) }
                        _ = try applier.apply(record, respectLocalChanges: false)
                        report.restored += 1
                        note(item, "restored")
                    } else {
                        if try applier.rowExists(item.entity, pk: item.pk) { try applier.deleteRow(item.entity, pk: item.pk) }
                        try RecordMap(db).removeUnsaved(entity: item.entity.name, pk: item.pk)
                        report.deleted += 1
                        note(item, "deleted")
                    }
                }
            }
            // The export token moves past the discarded changes, never past a kept row's first change.
            let target = keptFrom.map { $0 - 1 } ?? upTo
            if target > (try MirrorState.exportToken(db)) { try MirrorState.setExportToken(db, target) }
        }
        return report
    }

    /// Each table's depth in its foreign keys (a parent before its children), for applying rows in an order their
    /// references can be met in.
    static func parentsFirst(_ entities: [EntityMap]) -> [String: Int] {
        var depth: [String: Int] = [:]
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        func visit(_ name: String, _ seen: Set<String>) -> Int {
            if let known = depth[name] { return known }
            guard let entity = byName[name], !seen.contains(name) else { return 0 }
            let parents = entity.foreignKeys.map(\.parentTable).filter { $0 != name }
            let d = (parents.map { visit($0, seen.union([name])) }.max() ?? -1) + 1
            depth[name] = d
            return d
        }
        for e in entities { _ = visit(e.name, []) }
        return depth
    }
}
