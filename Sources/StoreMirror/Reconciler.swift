import FoundationEssentials
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// What the reconciliation before a sync found and did.
public struct ReconcileReport: Sendable, Codable, Equatable {
    /// `crash`: saves of an interrupted export that the store had not recorded; `restore`: the store file is an
    /// older copy of itself (its own later records were in the cloud).
    public var kind: String
    /// The own records looked at.
    public var records = 0
    /// When `restore`: the time (ms) of the last export the container knew from this store; local changes made
    /// before it count as exported.
    public var restoredAt: Int64?
}

/// Before anything is exported or imported, the store's record map is made to agree with the records this store
/// itself has in the cloud. The container keeps, per device and zone, the mark of each export batch
/// (`ExportMark`): its export serial, the store's history seq when the batch was read, and the time.
///
/// - **After a crash** between a save and the store's own record of it (the serials agree), each own record the
///   map does not reflect is adopted: its tag and fields become the row's base, and the local row takes the
///   record's values for every column that was not changed locally after the batch was read (a merge the crash
///   interrupted lands; a write made since stays). The export that follows sends what changed since: an update
///   goes out as an update of the same record, a delete as its tombstone. Nothing is duplicated or resurrected.
/// - **After a restore** from an older copy (the container holds a later serial than the store): the store's
///   later self exported records this copy never saw. They are imported like anyone else's (its rows created
///   later come back, its deletions apply), local changes made before the time of that later export count as
///   exported, and changes made since are merged by the merge policy like any local change.
struct Reconciler {
    let db: Connection
    let cloud: any CloudDatabase
    let options: MirrorOptions
    let entities: [EntityMap]
    let device: String

    /// `known`: the device's export state when it was read with the zone at the start of this round.
    func run(known: ReadAlong<DeviceExportState> = .notRead) throws -> ReconcileReport? {
        let ownSeq = try MirrorState.ownSeq(db, container: cloud.container, zone: options.zone)
        let exportState: DeviceExportState?
        if case .read(let state) = known { exportState = state } else {
            exportState = try cloud.exportState(zone: options.zone, device: device)
        }
        guard let state = exportState else {
            if try MirrorState.meta(db, .ownRecordsUnchecked) != nil { return try checkOwnRecords() }
            return nil
        }
        if try MirrorState.meta(db, .ownRecordsUnchecked) != nil {
            try db.transaction { try MirrorState.setMeta(db, .ownRecordsUnchecked, nil) }
        }
        guard state.lastSeq > ownSeq else { return nil }
        let serial = try MirrorState.exportSerial(db)
        if serial >= state.mark.serial {
            return try adoptUnrecordedSaves(after: ownSeq, upTo: state.lastSeq)
        }
        return try takeBackLaterRecords(after: ownSeq, state: state)
    }

    private func ownRecords(after: Int64, _ body: ([DeviceRecord]) throws -> Void) throws {
        var seq = after
        while true {
            let (records, more) = try cloud.fetchDeviceRecords(zone: options.zone, device: device, after: seq,
                                                               limit: options.pageSize)
            let current = records.filter { !$0.superseded }
            if !current.isEmpty { try body(current) }
            seq = records.last?.record.seq ?? seq
            if !more { return }
        }
    }

    /// This store's own records after seq `after`, fetched into `staging` before the write transaction opens: the
    /// transaction applies them (`stagedOwnRecords`) with no network call.
    private func stageOwnRecords(after: Int64, superseded: Bool = false) throws -> ImportStaging {
        let staging = try ImportStaging(db: db)
        try staging.fetchDeviceRecords(cloud: cloud, zone: options.zone, device: device, after: after,
                                       limit: options.pageSize, superseded: superseded)
        return staging
    }

    private func stagedOwnRecords(_ staging: ImportStaging, _ body: ([DeviceRecord]) throws -> Void) throws {
        for page in 0..<staging.pages {
            let records = try staging.deviceRecords(page: page, zone: options.zone)
            if !records.isEmpty { try body(records) }
        }
    }

    /// Whether the record map holds an older version of `record` than it (or none): a superseded save is taken
    /// back only then (not when an import of the newer version ran since).
    static func mapIsOlder(_ applier: RecordApplier, than record: CloudRecord) throws -> Bool {
        guard let tag = try RecordMap(applier.db).entry(named: record.recordName)?.changeTag else { return true }
        return CloudContract.seq(ofTag: tag).map { $0 < record.seq } ?? false
    }

    // MARK: After a crash

    private func adoptUnrecordedSaves(after ownSeq: Int64, upTo lastSeq: Int64) throws -> ReconcileReport {
        var report = ReconcileReport(kind: "crash")
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        let exportToken = try MirrorState.exportToken(db)
        let staging = try stageOwnRecords(after: ownSeq, superseded: true)
        defer { try? staging.clear() }
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            try db.deferForeignKeys()
            try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                let applier = try RecordApplier(db: db, entities: byName, policy: .propertyLocalWins)
                try stagedOwnRecords(staging) { records in
                    for own in records {
                        // A save another device has built on since landed too: adopted like the others, so that
                        // the export does not send it again as an edit beside the newer version (the import then
                        // brings that version, as any newer record). Not when the map already holds a version at
                        // least as new (an import of that newer version ran since).
                        if own.superseded, try !Self.mapIsOlder(applier, than: own.record) { continue }
                        try adopt(own.record, historySeq: own.historySeq ?? exportToken, applier: applier)
                        report.records += 1
                    }
                }
                try MirrorState.setOwnSeq(db, container: cloud.container, zone: options.zone, lastSeq)
            }
        }
        return report
    }

    /// Makes the record map reflect one own record saved before a crash, and the local row take its values where
    /// nothing newer was written locally.
    private func adopt(_ record: CloudRecord, historySeq: Int64, applier: RecordApplier) throws {
        guard let entity = applier.entities[record.recordType] else { return }
        let entry = try RecordMap(db).entry(named: record.recordName)
        if let entry, entry.changeTag == record.changeTag { return }
        guard let pk = try localKey(of: record, entity: entity, entry: entry, applier: applier) else {
            // No local row ever stood for it: the store is the authority for its own records, so it goes.
            if !record.deleted {
                try applier.outbox(record.recordName, type: record.recordType, tag: record.changeTag,
                                   reason: .leftByCrash)
            }
            return
        }
        if record.deleted {
            try applier.setMap(entity: entity.name, pk: pk, name: record.recordName, tag: record.changeTag,
                               base: nil, extra: nil, deleted: true)
            return
        }
        let decoded = try applier.codec.decodeRecord(record.fields, columns: entity.fieldColumns)
        let newer = try applier.localChanges(entity, pk: pk, after: historySeq)
        if try applier.rowExists(entity, pk: pk) {
            var values: [String: Value] = [:]
            for (column, value) in decoded.values where !(newer?.changed.contains(column) ?? false) {
                switch value {
                case .value(let v): values[column] = v
                case .ref(let name):
                    guard let name else { values[column] = .null; continue }
                    if let ref = entity.reference(for: column),
                       let key = try applier.parentKey(parent: ref.parent, recordName: name)
                    {
                        values[column] = key
                    }
                }
            }
            try applier.update(entity, pk: pk, values: values)
        } else if newer?.deleted != true {
            // Saved (a merge that revived the row) but never applied here: it lands now.
            var values: [String: Value] = [:]
            for (column, value) in decoded.values {
                switch value {
                case .value(let v): values[column] = v
                case .ref(let name):
                    if let name, let ref = entity.reference(for: column),
                       let key = try applier.parentKey(parent: ref.parent, recordName: name)
                    {
                        values[column] = key
                    } else {
                        values[column] = .null
                    }
                }
            }
            if entity.isSurrogate, let rowid = RecordApplier.rowID(pk) { values[entity.primaryKey[0]] = .integer(rowid) }
            _ = try applier.insert(entity, values: values)
        }
        try applier.setMap(entity: entity.name, pk: pk, name: record.recordName, tag: record.changeTag,
                           base: .text(record.fields), extra: decoded.extra, deleted: false)
    }

    /// The local key an own record stands for: from the record map, from its name (a surrogate-keyed row's name
    /// holds its rowid), or from its fields (a natural key).
    private func localKey(of record: CloudRecord, entity: EntityMap, entry: RecordMapEntry?,
                          applier: RecordApplier) throws -> String?
    {
        if let entry, entry.entity == entity.name { return entry.pk }
        if entity.isSurrogate {
            let prefix = entity.name + "/" + entity.namePrefix
            guard !entity.namePrefix.isEmpty, record.recordName.hasPrefix(prefix) else { return nil }
            let digits = record.recordName.dropFirst(prefix.count)
            guard !digits.isEmpty, digits.count <= 16, digits.allSatisfy(\.isHexDigit),
                  let bits = UInt64(digits, radix: 16) else { return nil }
            let key = "[\(Int64(bitPattern: bits))]"
            // A name the map gives another key (a fresh name after a rowid was reused) is not this one.
            if try db.scalar("SELECT 1 FROM _storectl_records WHERE entity = ? AND pk = ?", [entity.name, key]) != nil {
                return nil
            }
            return key
        }
        guard !record.deleted else { return nil }
        let decoded = try applier.codec.decodeRecord(record.fields, columns: entity.fieldColumns)
        var values: [Value] = []
        for column in entity.primaryKey {
            switch decoded.values[column] {
            case .value(let v)?: values.append(v)
            case .ref(let name?)?:
                guard let ref = entity.reference(for: column),
                      let key = try applier.parentKey(parent: ref.parent, recordName: name) else { return nil }
                values.append(key)
            default: return nil
            }
        }
        return try applier.canonicalKey(entity, values: values)
    }

    // MARK: After an upgrade from a format without export marks

    /// A store upgraded from a format whose exports left no marks in the container cannot tell from them whether
    /// it is behind its own records (restored from a copy, or a crash of the older storectl). Once, its own
    /// records are compared with its record map: those it does not reflect are taken back as after a restore,
    /// with the time of the latest of them as the restore time.
    private func checkOwnRecords() throws -> ReconcileReport? {
        var behind: [CloudRecord] = []
        var lastSeq: Int64 = 0
        try ownRecords(after: 0) { records in
            for own in records {
                lastSeq = max(lastSeq, own.record.seq)
                if try RecordMap(db).entry(named: own.record.recordName)?.changeTag != own.record.changeTag {
                    behind.append(own.record)
                }
            }
        }
        guard !behind.isEmpty else {
            try db.transaction {
                try MirrorState.setOwnSeq(db, container: cloud.container, zone: options.zone, lastSeq)
                try MirrorState.setMeta(db, .ownRecordsUnchecked, nil)
            }
            return nil
        }
        let time = Int64((behind.map(\.modifiedAt).max() ?? 0) * 1000)
        let state = DeviceExportState(mark: ExportMark(serial: try MirrorState.exportSerial(db), historySeq: 0,
                                                       time: time), lastSeq: lastSeq)
        let report = try takeBackLaterRecords(after: 0, state: state, only: Set(behind.map(\.recordName)))
        try db.transaction { try MirrorState.setMeta(db, .ownRecordsUnchecked, nil) }
        return report
    }

    // MARK: After a restore

    /// The later self's last export may have been stopped before it saved every row of this copy's history up to
    /// its time (a crash between two batches): a row changed there that no record of the cloud reflects (its
    /// values differ from the record the map now holds, it has no record, or its deletion never went out) is
    /// still a local change, written again into history (author `rescan`) so that the export sends it. A row
    /// whose record the later self saved holds that record's values by now, and is left alone. So is a row whose
    /// record another device saved since the change the map holds: the later self may have saved the row before
    /// it, and the other device's save is then the newer one (sending the copy's old values again would undo it).
    private func keepUnsavedChanges(after token: Int64, upTo exported: Int64, lookups: ImportStaging) throws {
        for e in entities {
            let keys = try db.query("""
                SELECT DISTINCT pk FROM _storectl_history WHERE seq > ?1 AND seq <= ?2 AND entity = ?3 AND author <> ?4
                """, [token, exported, e.name, MirrorState.importAuthor]).compactMap { $0[0].string }
            for pk in keys {
                let entry = try db.query("""
                    SELECT base, deleted, change_tag, record_name FROM _storectl_records WHERE entity = ? AND pk = ?
                    """, [e.name, pk]).first
                // The record's current version, fetched before the transaction (`unsavedChangeRecords`), or the
                // own record this reconciliation applied.
                if let entry, let tag = entry[2].string, let name = entry[3].string {
                    guard case .found(let record) = try lookups.lookup(name), record.changeTag == tag else { continue }
                }
                let fields = try db.scalar("SELECT \(e.fieldsJSON("t")) FROM main.\(e.quotedName) t WHERE "
                                           + e.pkMatches("t", json: "?1"), [pk])?.string
                let live = entry.map { $0[1].int64 == 0 && $0[2].string != nil } ?? false
                if let fields {
                    let base = live ? entry?[0] : nil
                    let changed = try FieldCodec(db: db).differing(base: base, fields, columns: e.fieldColumns)
                    guard !changed.isEmpty else { continue }
                    try MirrorState.markChanged(db, entity: e.name, pk: pk, columns: changed,
                                                author: MirrorState.rescanAuthor)
                } else if live {
                    // Deleted here, and the cloud still holds its record: the deletion goes out again.
                    try db.run("""
                        INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed, tombstone)
                        SELECT NULL, ?1, \(StoreFormat.nowMillisecondsSQL), entity, pk, 'D', NULL, tombstone
                        FROM _storectl_history WHERE seq > ?2 AND seq <= ?3 AND entity = ?4 AND pk = ?5 AND op = 'D'
                        ORDER BY seq DESC LIMIT 1
                        """, [MirrorState.rescanAuthor, token, exported, e.name, pk])
                }
            }
        }
    }

    /// The rows this copy deleted and inserted again at their rowid in the history its later self exported (after
    /// `token`, up to `exported`; or only inserted there, at the rowid of a row whose deletion was exported
    /// before), each with the name its later self sent it under (`RecordMap.reusedNameSQL`).
    private func renamedByLaterSelf(after token: Int64, upTo exported: Int64) throws
        -> [(entity: EntityMap, pk: String, name: String)]
    {
        var found: [(entity: EntityMap, pk: String, name: String)] = []
        for e in entities where e.isSurrogate {
            for row in try db.query("""
                SELECT g.pk, \(RecordMap.reusedNameSQL(e, pk: "g.pk", insertSeq: "g.inserted")) FROM (
                    SELECT h.pk, max(CASE WHEN h.op = 'I' THEN h.seq END) AS inserted FROM _storectl_history h
                    WHERE h.seq > ?1 AND h.seq <= ?2 AND h.entity = ?3 AND h.author <> ?4
                    GROUP BY h.pk
                    HAVING min(CASE WHEN h.op = 'D' THEN h.seq END) < max(CASE WHEN h.op = 'I' THEN h.seq END)
                        OR max(CASE WHEN h.op = 'I' THEN h.seq END) IS NOT NULL
                           AND EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = ?3 AND r.pk = h.pk
                                       AND r.deleted = 1)) g
                """, [token, exported, e.name, MirrorState.importAuthor])
            {
                if let pk = row[0].string, let name = row[1].string { found.append((e, pk, name)) }
            }
        }
        return found
    }

    /// A row this copy deleted and inserted again at its rowid before it was copied is the record its later self
    /// sent it as, under a name this copy never gave it (`renamedByLaterSelf`): the row takes that record, so that
    /// the export does not send it again under a name of its own (the row stood twice on every store).
    /// - When the cloud holds the version the later self saved from history this copy has too (its own save, by a
    ///   batch read at or before `exported`), it is adopted as after a crash (`adopt`): its tag and fields become
    ///   the base, and the row takes its values but where it was changed here since; those changes, or the row's
    ///   deletion here since, go out as changes of that version.
    /// - When the later self changed it after the copy was taken, or another device changed or deleted it since,
    ///   the version the copy's row stands on is not known here: the
    ///   map names the record at an older version than the cloud's (`CloudContract.olderTag`), with no base. With
    ///   nothing changed here since, the import that follows applies the cloud's version; a change or deletion made
    ///   here since goes out first and meets that version as a conflict, every column counted as changed on both
    ///   sides: the merge policy weighs them (`error` reports it).
    /// - When another row was inserted at the rowid since, the record's row is gone from here: its deletion goes
    ///   out as the export's rename sends it (at the older tag when another device changed it since, so that the
    ///   policy weighs that change too).
    private func adoptLaterSelfsNames(_ renamed: [(entity: EntityMap, pk: String, name: String)], exported: Int64,
                                      lookups: ImportStaging, applier: RecordApplier) throws
    {
        guard !renamed.isEmpty else { return }
        let map = RecordMap(db)
        // The history seq of the batch that saved each of those records, where the later self's save is its
        // current version (an own record).
        let names = Set(renamed.map(\.name))
        var ownBatchSeqs: [String: Int64] = [:]
        try stagedOwnRecords(lookups) { records in
            for own in records where names.contains(own.record.recordName) && !own.superseded {
                ownBatchSeqs[own.record.recordName] = own.historySeq
            }
        }
        for (e, pk, name) in renamed {
            guard case .found(let record) = try lookups.lookup(name), record.recordType == e.name,
                  try map.entry(named: name) == nil
            else { continue }
            let local = try applier.localChanges(e, pk: pk)
            // The later self's version made of history this copy has too: saved by a batch read at or before
            // `exported` (a version saved later holds changes the later self made after the copy was taken).
            let laterSelfs = !record.deleted && record.modifiedBy == device
                && (ownBatchSeqs[name].map { $0 <= exported } ?? false)
            let tag = laterSelfs ? record.changeTag : CloudContract.olderTag(than: record.changeTag)
            if local?.recreated == true {
                if !record.deleted { try applier.outbox(name, type: e.name, tag: tag, reason: .reusedRowid) }
                try applier.setMap(entity: e.name, pk: pk, name: name, tag: record.changeTag, base: nil, extra: nil,
                                   deleted: true)
            } else if laterSelfs {
                try applier.setMap(entity: e.name, pk: pk, name: name, tag: nil, base: nil, extra: nil, deleted: false)
                try adopt(record, historySeq: exported, applier: applier)
            } else {
                try applier.setMap(entity: e.name, pk: pk, name: name, tag: tag, base: nil, extra: nil, deleted: false)
            }
        }
    }

    /// The record names of the rows changed here after `token` up to `exported` (what `keepUnsavedChanges`
    /// compares with the cloud's records).
    private func unsavedChangeRecords(after token: Int64, upTo exported: Int64) throws -> [String] {
        try db.query("""
            SELECT DISTINCT r.record_name FROM _storectl_history h
            CROSS JOIN _storectl_records r ON r.entity = h.entity AND r.pk = h.pk
            WHERE h.seq > ?1 AND h.seq <= ?2 AND h.author <> ?3
            """, [token, exported, MirrorState.importAuthor]).compactMap { $0[0].string }
    }

    private func takeBackLaterRecords(after ownSeq: Int64, state: DeviceExportState, only: Set<String>? = nil) throws
        -> ReconcileReport
    {
        var report = ReconcileReport(kind: "restore")
        report.restoredAt = state.mark.time
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        // Local changes made before the later self's last export were exported by it (history is a prefix of its
        // history up to there).
        let exported = try db.scalar("SELECT max(seq) FROM _storectl_history WHERE ts <= ?", [state.mark.time])?
            .int64 ?? 0
        let token = try MirrorState.exportToken(db)
        // Everything the transaction needs from the cloud, first: the own records, and the records it looks up.
        let staging = try stageOwnRecords(after: ownSeq)
        defer { try? staging.clear() }
        let unsaved = exported > token ? try unsavedChangeRecords(after: token, upTo: exported) : []
        let renamed = exported > token ? try renamedByLaterSelf(after: token, upTo: exported) : []
        try staging.prefetchLookups(cloud: cloud, zone: options.zone, entities: byName,
                                    also: unsaved + renamed.map(\.name))
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            try db.deferForeignKeys()
            if exported > token { try MirrorState.setExportToken(db, exported) }
            try MirrorState.setMeta(db, .restoredAt, String(state.mark.time))
            try UserTriggers.suspended(db, tracked: entities.map(\.name)) {
                let applier = try RecordApplier(db: db, entities: byName, policy: options.mergePolicy,
                                                uniqueRules: options.uniqueRules)
                try applier.resetNotes()
                if exported > token { applier.exportedByLaterSelf = (after: token, upTo: exported) }
                for (e, pk, name) in renamed { applier.laterSelfsNames[e.name, default: [:]][pk] = name }
                let importer = Importer(db: db, cloud: cloud, options: options, entities: entities, device: device)
                var applied = ImportReport()
                // The later self's export order is not an order this copy passed through (a row inserted again
                // under a UNIQUE value is saved before the old row's tombstone): as in an import, tombstones of
                // cascading parents and UNIQUE collisions wait until the other records are in.
                applier.defersUntilSettled = true
                try adoptLaterSelfsNames(renamed, exported: exported, lookups: staging, applier: applier)
                try stagedOwnRecords(staging) { records in
                    for own in records where only?.contains(own.record.recordName) ?? true {
                        try importer.applyOne(own.record, applier: applier, report: &applied)
                        report.records += 1
                    }
                }
                try importer.drainInbox(applier, staging: staging, entities: byName, report: &applied,
                                        stopsAtConflicts: false)
                if exported > token { try keepUnsavedChanges(after: token, upTo: exported, lookups: staging) }
            }
            try MirrorState.setMeta(db, .exportSerial, String(max(try MirrorState.exportSerial(db), state.mark.serial)))
            try MirrorState.setOwnSeq(db, container: cloud.container, zone: options.zone, state.lastSeq)
            try MirrorState.setMeta(db, .restoreDetectedAt, String(HistoryTracker.nowMilliseconds()))
        }
        return report
    }
}
