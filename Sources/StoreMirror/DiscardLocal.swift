import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// What `storectl sync --discard-local` did to the rows changed here and not sent.
public struct DiscardReport: Sendable, Codable, Equatable {
    /// One row, and what became of it: `restored` (put back to its record's values, inserted again when it had
    /// been deleted here), `deleted` (made here, the cloud has no live record of it) or `kept` (changed again while
    /// the cloud's values were fetched, or whose record is set aside: left as it is, still not sent).
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
    /// The file that keeps the discarded rows' local values (one JSON object a line: `entity`, `key`, `action`,
    /// `local`, the row's columns as they were, null for a row deleted here); nil when nothing was discarded.
    public var savedTo: String?

    public init() {}
}

extension Mirror {
    /// Puts every row changed here and not sent back to the cloud's values: a row whose record is live takes the
    /// record's values (and comes back if it was deleted here), a row the cloud holds no live record of is
    /// deleted. The records are fetched first; one write transaction (author `cloud-import`, user triggers
    /// suspended) then applies them and moves the export token past the discarded changes, so nothing of them is
    /// ever sent. A row changed again meanwhile is kept. The local values are written to a file first
    /// (`keepLocalValues`).
    /// - Throws: `CloudError`, `SQLiteError`.
    public func discardLocalChanges() throws -> DiscardReport {
        let upTo = try db.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        let applier = try RecordApplier(db: db, entities: byName, policy: .serverWins)
        let map = RecordMap(db)
        let notSent = try MirrorState.localChangesNotSent(db)
        // Records of rows deleted here whose keys rows of this store's own took since (`RecordMap.keepGone`). A
        // live one goes back to its key when the row there is one of this store's own (discarded with the rest):
        // it is restored in place, as the row was before, and a row that still references that key (foreign keys
        // off) is its child again. Any other comes back as a row of its own.
        let changedKeys = Set(notSent.map { $0.entity + "\u{0}" + $0.key })
        var moveBack: [String: (gonePK: String, name: String, record: CloudRecord)] = [:]
        var gone: [(entity: EntityMap, pk: String, record: CloudRecord?)] = []
        for entity in entities {
            for entry in try map.goneEntries(entity: entity.name) {
                let record = try cloud.fetchRecord(zone: options.zone, recordName: entry.recordName)
                if let record, !record.deleted, record.rejection == nil,
                   let key = try map.keyBeforeGone(entry.pk),
                   changedKeys.contains(entity.name + "\u{0}" + key), moveBack[entity.name + "\u{0}" + key] == nil,
                   try map.entry(entity: entity.name, pk: key)?.changeTag == nil
                {
                    moveBack[entity.name + "\u{0}" + key] = (entry.pk, entry.recordName, record)
                } else {
                    gone.append((entity, entry.pk, record))
                }
            }
        }
        var work: [(entity: EntityMap, pk: String, name: String?, record: CloudRecord?)] = []
        for row in notSent {
            guard let entity = byName[row.entity] else { continue }
            if let back = moveBack[row.entity + "\u{0}" + row.key] {
                work.append((entity, row.key, back.name, back.record))
                continue
            }
            let entry = try map.entry(entity: row.entity, pk: row.key)
            let record = try entry.flatMap { $0.changeTag == nil ? nil : try cloud.fetchRecord(zone: options.zone,
                                                                                          recordName: $0.recordName) }
            work.append((entity, row.key, entry?.recordName, record))
        }
        let order = Dictionary(uniqueKeysWithValues: EntityMap.parentFirst(entities).enumerated().map { ($1.name, $0) })
        let restore = work.filter { $0.record.map { !$0.deleted } ?? false }
            .sorted { (order[$0.entity.name] ?? 0) < (order[$1.entity.name] ?? 0) }
        let remove = work.filter { $0.record.map(\.deleted) ?? true }
        var report = DiscardReport()
        if !work.isEmpty { report.savedTo = try keepLocalValues(remove.map { ($0, "deleted") } + restore.map { ($0, "restored") }) }
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
                    // A record set aside (saved by an account that may not write the zone) is not the cloud's value:
                    // the row is left as it is, like one changed again.
                    if try item.record?.rejection != nil || changedAgain(item.entity.name, item.pk) {
                        report.kept += 1
                        note(item, "kept")
                        let first = try db.scalar("""
                            SELECT min(seq) FROM _storectl_history WHERE entity = ? AND pk = ? AND seq > ? AND author <> ?
                            """, [item.entity.name, item.pk, try MirrorState.exportToken(db), MirrorState.importAuthor])?
                            .int64 ?? upTo
                        keptFrom = min(keptFrom ?? first, first)
                        continue
                    }
                    if let back = moveBack[item.entity.name + "\u{0}" + item.pk] {
                        // The row of this store's own at the key gives its entry back to the record.
                        try map.removeUnsaved(entity: item.entity.name, pk: item.pk)
                        try map.moveGone(entity: item.entity.name, from: back.gonePK, to: item.pk, name: back.name)
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
            try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                for item in gone.sorted(by: { (order[$0.entity.name] ?? 0) < (order[$1.entity.name] ?? 0) }) {
                    try map.forget(entity: item.entity.name, pk: item.pk)
                    guard let record = item.record, !record.deleted, record.rejection == nil else { continue }
                    _ = try applier.apply(record, respectLocalChanges: false)
                    report.restored += 1
                    if report.rows.count < 1000 {
                        let key = try map.keyBeforeGone(item.pk) ?? item.pk
                        report.rows.append(.init(entity: item.entity.name, key: key, action: "restored"))
                    }
                }
            }
            // The export token moves past the discarded changes, never past a kept row's first change.
            let target = keptFrom.map { $0 - 1 } ?? upTo
            if target > (try MirrorState.exportToken(db)) { try MirrorState.setExportToken(db, target) }
        }
        return report
    }

    /// Writes the local values of the rows about to be discarded to a file beside the store
    /// (`<store>.discarded-<time>.jsonl`, durably, before anything is changed) and returns its path: what
    /// `--discard-local` puts back is never lost, only set aside.
    /// - Throws: `StoreError` when the file cannot be written (nothing was changed then), `SQLiteError`.
    private func keepLocalValues(_ rows: [((entity: EntityMap, pk: String, name: String?, record: CloudRecord?), String)])
        throws -> String
    {
        var lines: [String] = []
        for (item, action) in rows {
            let e = item.entity
            let local = try db.scalar("SELECT \(e.rowJSON("t")) FROM main.\(e.quotedName) t WHERE "
                                          + e.pkMatches("t", json: "?1"), [item.pk])?.string
            let line = try db.scalar("SELECT json_object('entity', ?1, 'key', json(?2), 'action', ?3, 'local', json(?4))",
                                     [e.name, item.pk, action, local])?.string ?? ""
            lines.append(line)
        }
        let stamp = ISOTime.string(unixMilliseconds: Int64(Date().timeIntervalSince1970 * 1000), fractional: false)
            .replacingText(":", with: "")
        let path = db.path + ".discarded-" + stamp + ".jsonl"
        // The file takes the store file's permissions: it holds the store's rows.
        var st = stat()
        let mode = stat(db.path, &st) == 0 ? st.st_mode & 0o777 : 0o600
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode)
        if fd >= 0 { close(fd) }
        do {
            try AtomicFile.write(Array((lines.joined(separator: "\n") + "\n").utf8), to: path)
        } catch {
            throw StoreError(.cantCreate, "cannot keep the local values of the rows to discard in \(path): \(error)",
                             hint: "free some space or fix the permissions of the store's folder; nothing was changed")
        }
        return path
    }
}
