import FoundationEssentials
import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// A zone's schema version against the store's: a data migration (`storectl migrate --sql FILE --schema-version N`)
/// is applied once per zone, not once per device.
///
/// Each store has a schema version (meta `schema_version`, 0 until a migration file sets it) and so does its zone
/// (`CloudDatabase.schemaVersion`). Before a sync exports or imports anything:
/// - **the zone is ahead** (another device migrated): this store neither imports (values of the new shape would
///   be transformed again by its own migration) nor exports (values of the old shape would land over the new
///   ones); it waits, with the command to run (`SchemaBehindError`). The container refuses its saves too, under
///   the zone's lock, and an import that fetched records written after a raise is rolled back (`recheck`).
/// - **the store is ahead** (it migrated first): it raises the zone to its version, atomically, if it has every
///   record other devices saved (the migration transformed them all), and its migration's changes are then sent as
///   any change. If other devices saved records it has not seen, those were never transformed: it waits for one of
///   them to migrate (`SchemaUnseenError`).
/// - **both at one version** after this store migrated (another device raised the zone first): the rows that only
///   the migration changed take their migrated values as their last synced state (the record map's base), so the
///   export does not send them over what the zone holds, and the import brings the zone's values, newer edits
///   included. Rows edited here before the migration keep their edits, merged by the merge policy.
public enum SchemaGate {
    /// The author of the rows `migrate --sql` changes: their history rows tell a migration's own changes from edits.
    public static let migrationAuthor = "migrate"

    /// The store's last data migration (`MetaKey.dataMigration`), or nil when it never ran one.
    /// - Throws: `SQLiteError`.
    public static func localMigration(_ db: Connection) throws -> ZoneSchemaVersion? {
        try MirrorState.meta(db, .dataMigration).flatMap {
            try? JSONDecoder().decode(ZoneSchemaVersion.self, from: Data($0.utf8))
        }
    }

    /// The store's schema version: the last `migrate --sql` it ran (a data migration or not), 0 when none. Its
    /// values are of that shape: it is what every save carries and what the zone's version is compared with.
    /// - Throws: `SQLiteError`.
    public static func schemaVersion(_ db: Connection) throws -> Int {
        Int(try MirrorState.meta(db, .schemaVersion) ?? "0") ?? 0
    }

    /// Records a data migration that `migrate --sql` just ran: the zone learns of it at the next sync. Runs inside
    /// the migration's transaction.
    /// - Throws: `SQLiteError`.
    public static func recordDataMigration(_ db: Connection, _ migration: ZoneSchemaVersion) throws {
        try MirrorState.setMeta(db, .dataMigration, CloudContract.schemaPayload(migration))
        try MirrorState.setMeta(db, .schemaVersionUnsynced, String(migration.version))
    }

    /// What the gate found, for reports.
    public enum Outcome: Sendable, Equatable {
        /// Store and zone at the same version, nothing to do.
        case same(Int)
        /// This store raised the zone to its version.
        case raised(Int)
        /// The zone was at this store's version already: this many rows took their migrated values as synced.
        case adopted(version: Int, rows: Int)
    }

    /// Compares the store's schema version with its zone's, raises the zone or adopts its version as described on
    /// the type, and throws when the store must wait.
    /// - Throws: `SchemaBehindError`, `SchemaUnseenError`, `CloudError`, `SQLiteError`.
    @discardableResult
    /// `known`: the zone's version when it was read along with the zone (`ZoneInfo.schemaVersion`) in this round.
    public static func check(_ db: Connection, cloud: any CloudDatabase, zone: String, device: String,
                             entities: [EntityMap], known: SchemaVersionRead = .notRead) throws -> Outcome
    {
        do {
            let outcome = try decide(db, cloud: cloud, zone: zone, device: device, entities: entities, known: known)
            if try MirrorState.meta(db, .schemaWait) != nil {
                try db.transaction { try MirrorState.setMeta(db, .schemaWait, nil) }
            }
            return outcome
        } catch let error as SchemaBehindError {
            try recordWait(db, SchemaWait(version: error.zoneVersion?.version ?? error.local + 1,
                                          file: error.zoneVersion?.file ?? "", reason: .zoneAhead))
            throw error
        } catch let error as SchemaUnseenError {
            try recordWait(db, SchemaWait(version: error.local, file: try localMigration(db)?.file ?? "",
                                          reason: .unmigratedRecords))
            throw error
        } catch let error as SchemaMismatchError {
            try recordWait(db, SchemaWait(version: error.zoneVersion.version, file: error.zoneVersion.file,
                                          reason: .differentFile))
            throw error
        }
    }

    private static func recordWait(_ db: Connection, _ wait: SchemaWait) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let text = String(decoding: try encoder.encode(wait), as: UTF8.self)
        try db.transaction { try MirrorState.setMeta(db, .schemaWait, text) }
    }

    /// Why the last sync waited, as `status` and `doctor` report it; nil when it did not.
    /// - Throws: `SQLiteError`.
    public static func wait(_ db: Connection) throws -> SchemaWait? {
        try MirrorState.meta(db, .schemaWait).flatMap { try? JSONDecoder().decode(SchemaWait.self, from: Data($0.utf8)) }
    }

    private static func decide(_ db: Connection, cloud: any CloudDatabase, zone: String, device: String,
                               entities: [EntityMap], known: SchemaVersionRead) throws -> Outcome
    {
        let schema = try schemaVersion(db)
        let current = try requireNotBehind(db, cloud: cloud, zone: zone, known: known)
        let zoneVersion = current?.version ?? 0
        guard let migration = try localMigration(db) else { return .same(schema) }
        let unsynced = try MirrorState.meta(db, .schemaVersionUnsynced) != nil
        if migration.version <= zoneVersion {
            guard unsynced else { return .same(schema) }
            // Raised by this very store, whose sync stopped before it noted it: its migration's changes are the
            // zone's to receive, not to take back.
            if let current, current.version == migration.version, current.device == device {
                try db.transaction { try MirrorState.setMeta(db, .schemaVersionUnsynced, nil) }
                return .raised(migration.version)
            }
            return .adopted(version: migration.version, rows: try adopt(db, entities: entities))
        }
        // A record set aside or waiting here was seen but not applied: the migration never transformed it.
        let unsettled = try MirrorState.unsettled(db)
        let unapplied = unsettled.setAside.count + unsettled.waitingForParent.count
        if unapplied > 0 {
            throw SchemaUnseenError(zone: zone, container: cloud.container, local: migration.version,
                                    zoneVersion: zoneVersion, records: Int64(unapplied), setAsideHere: true)
        }
        let seen = try MirrorState.serverToken(db, zone: zone).flatMap(ServerChangeToken.init(rawValue:))?.seq ?? 0
        switch try cloud.raiseSchemaVersion(zone: zone, to: migration, device: device, seenUpTo: seen) {
        case .raised:
            try db.transaction { try MirrorState.setMeta(db, .schemaVersionUnsynced, nil) }
            return .raised(migration.version)
        case .alreadyAt(let v) where v.version > schema:
            throw SchemaBehindError(zone: zone, container: cloud.container, local: schema, zoneVersion: v)
        case .alreadyAt(let v) where v.device == device:
            try db.transaction { try MirrorState.setMeta(db, .schemaVersionUnsynced, nil) }
            return .raised(v.version)
        case .alreadyAt(let v):
            return .adopted(version: v.version, rows: try adopt(db, entities: entities))
        case .unseenChanges(let count):
            throw SchemaUnseenError(zone: zone, container: cloud.container, local: migration.version,
                                    zoneVersion: zoneVersion, records: count, setAsideHere: false)
        }
    }

    /// The zone's schema version, after checking that this store is not behind it: a later version, or the same
    /// version reached with another file (a different transform: the values would not match), is refused before
    /// anything is changed. `sync --reupload` and `--rebind` call it before they reset anything.
    /// - Throws: `SchemaBehindError`, `SchemaMismatchError`, `CloudError`, `SQLiteError`.
    @discardableResult
    public static func requireNotBehind(_ db: Connection, cloud: any CloudDatabase, zone: String,
                                        known: SchemaVersionRead = .notRead) throws -> ZoneSchemaVersion?
    {
        let schema = try schemaVersion(db)
        let current: ZoneSchemaVersion?
        if case .read(let version) = known { current = version } else { current = try cloud.schemaVersion(zone: zone) }
        guard let current else { return nil }
        if current.version > schema {
            throw SchemaBehindError(zone: zone, container: cloud.container, local: schema, zoneVersion: current)
        }
        if current.version == schema, !current.sha256.isEmpty,
           let mine = try MirrorState.meta(db, .schemaVersionSHA256), !mine.isEmpty, mine != current.sha256
        {
            throw SchemaMismatchError(zone: zone, container: cloud.container, zoneVersion: current, localSHA256: mine)
        }
        return current
    }

    /// After the zone reached this store's version elsewhere, what the migration alone did here gives way to what
    /// the zone holds (the raising device's migration, and the edits made since), in one transaction:
    /// - a synced row whose only changes since the last export are the migration's own takes its current values as
    ///   its last synced state (`base`): the export does not send them, the import brings the zone's;
    /// - a synced row the migration alone deleted forgets its record, so the deletion is not sent over the zone's
    ///   row (which the raising device's migration kept, or an edit changed since) and the import brings it back;
    /// - a row the migration alone inserted into a table keyed by rowid is removed before it is ever sent: the zone
    ///   has the raising device's (a natural key names the same record on every device, and merges).
    /// Rows edited here before the migration keep their edits, merged by the merge policy. Returns how many rows it
    /// changed.
    static func adopt(_ db: Connection, entities: [EntityMap]) throws -> Int {
        try HistoryTracker(db: db).transaction(author: migrationAuthor) { _ in
            let token = try MirrorState.exportToken(db)
            var rows = 0
            for e in entities {
                let onlyMigration = { (pk: String) in
                    "EXISTS (SELECT 1 FROM _storectl_history h WHERE h.entity = ?1 AND h.pk = \(pk) "
                        + "AND h.seq > \(token) AND h.author = ?2) AND NOT EXISTS (SELECT 1 FROM _storectl_history h "
                        + "WHERE h.entity = ?1 AND h.pk = \(pk) AND h.seq > \(token) AND h.author NOT IN (?2, ?3))"
                }
                let arguments: [any SQLBindable] = [e.name, migrationAuthor, MirrorState.importAuthor]
                let map = RecordMap(db)
                let others = Array(arguments.dropFirst())
                rows += try map.rebase(entity: e.name, localSQL: e.localRecordsSQL,
                                       fields: "json_patch(coalesce(r.extra, '{}'), l.fields)",
                                       condition: onlyMigration("r.pk"), others)
                rows += try adoptMigratedColumns(db, e, token: token)
                rows += try map.removeRowless(entity: e.name, localSQL: e.localRecordsSQL,
                                              condition: onlyMigration("r.pk"), others)
                guard e.isSurrogate else { continue }
                let pks = try db.query("""
                    SELECT l.pk FROM (\(e.localRecordsSQL)) l
                    WHERE NOT EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = ?1 AND r.pk = l.pk)
                      AND \(onlyMigration("l.pk"))
                    """, arguments).compactMap { $0[0].string }
                let key = quoteIdentifier(e.primaryKey[0])
                for pk in pks {
                    try db.run("DELETE FROM main.\(quoteIdentifier(e.name)) WHERE \(key) = json_extract(?, '$[0]')", [pk])
                    rows += db.changes
                }
            }
            // The migration's own updates are the zone's from now on: merges no longer count them as local changes.
            let last = try db.scalar("SELECT coalesce(max(seq), 0) FROM _storectl_history")?.int64 ?? 0
            try MirrorState.setMeta(db, .schemaAdoptedThrough, String(last))
            try MirrorState.setMeta(db, .schemaVersionUnsynced, nil)
            return rows
        }
    }

    /// The history seq up to which a data migration's own updates were adopted from the zone (0: none).
    /// - Throws: `SQLiteError`.
    public static func adoptedThrough(_ db: Connection) throws -> Int64 {
        Int64(try MirrorState.meta(db, .schemaAdoptedThrough) ?? "0") ?? 0
    }

    /// A synced row edited here (before the migration) and changed by the migration: the columns only the
    /// migration changed take their current values as synced, the columns edited here keep the base they had, so
    /// that the merge sends the edits and takes the zone's values (edits since on other devices included) for the
    /// rest. A row inserted or deleted here keeps its whole change. Returns how many rows it changed.
    static func adoptMigratedColumns(_ db: Connection, _ e: EntityMap, token: Int64) throws -> Int {
        let others = "h.entity = ?1 AND h.pk = r.pk AND h.seq > \(token) AND h.author NOT IN (?2, ?3)"
        let rows = try db.query("""
            SELECT r.pk, r.base, \(FieldHashes.sql("json_patch(coalesce(r.extra, '{}'), l.fields)")),
                   -- `'' ||`: plain text, so that each name stays a JSON string inside the array (the subtype of
                   -- json_quote's result would make json_group_array embed it as JSON)
                   (SELECT json_group_array(DISTINCT '' || json_quote(j.value))
                    FROM _storectl_history h, json_each(coalesce(h.changed, '[]')) j WHERE \(others) AND h.op = 'U')
            FROM _storectl_records r JOIN (\(e.localRecordsSQL)) l ON l.pk = r.pk
            WHERE r.entity = ?1 AND r.deleted = 0 AND typeof(r.base) = 'blob'
              AND EXISTS (SELECT 1 FROM _storectl_history h WHERE h.entity = ?1 AND h.pk = r.pk
                          AND h.seq > \(token) AND h.author = ?2)
              AND EXISTS (SELECT 1 FROM _storectl_history h WHERE \(others))
              AND NOT EXISTS (SELECT 1 FROM _storectl_history h WHERE \(others) AND h.op <> 'U')
            """, [e.name, migrationAuthor, MirrorState.importAuthor])
        guard !rows.isEmpty else { return 0 }
        let hasher = FieldHashes.Hasher()
        let map = RecordMap(db)
        var changed = 0
        for row in rows {
            guard let pk = row[0].string, case .blob(let old) = row[1], case .blob(let now) = row[2],
                  let list = row[3].string,
                  let names = try? JSONDecoder().decode([String].self, from: Data(list.utf8))
            else { continue }
            let edited = Set(try names.map { name in try Array(name.utf8).withUnsafeBytes { try hasher.nameHash($0) } })
            let size = FieldHashes.entrySize
            func entries(_ blob: [UInt8], keepEdited: Bool) -> [ArraySlice<UInt8>] {
                stride(from: 0, to: blob.count - blob.count % size, by: size).compactMap { i in
                    let entry = blob[i..<(i + size)]
                    let name = entry.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                    return edited.contains(name) == keepEdited ? entry : nil
                }
            }
            // Both blobs are sorted by their bytes (name hash, then value hash, big-endian): so is the merge.
            let merged = (entries(old, keepEdited: true) + entries(now, keepEdited: false))
                .sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 }
            try map.setBase(entity: e.name, pk: pk, base: .blob(merged))
            changed += 1
        }
        return changed
    }

    /// Inside an import, after its pages were fetched: the zone must still be at most at this store's version (a
    /// raise between the check before the sync and the fetch would have let records of the new shape in).
    /// - Throws: `SchemaBehindError` (the import is rolled back), `CloudError`.
    /// `seen`: the version every fetched page read in its own snapshot, the highest of them, when each did.
    static func recheck(_ db: Connection, cloud: any CloudDatabase, zone: String, local: Int,
                        seen: SchemaVersionRead = .notRead) throws {
        let current: ZoneSchemaVersion?
        if case .read(let version) = seen { current = version } else { current = try cloud.schemaVersion(zone: zone) }
        if let current, current.version > local {
            throw SchemaBehindError(zone: zone, container: cloud.container, local: local, zoneVersion: current)
        }
    }
}

/// Why a store's last sync waited for a data migration.
public struct SchemaWait: Sendable, Codable, Equatable {
    public enum Reason: String, Sendable, Codable {
        /// The zone is at a later version: run its migration here.
        case zoneAhead = "zone_ahead"
        /// This store migrated first, but other devices saved records it never transformed: one of them must
        /// migrate and sync.
        case unmigratedRecords = "unmigrated_records"
        /// The zone reached this store's version with another file.
        case differentFile = "different_file"
    }

    /// The version to run (`zone_ahead`), or this store's (`unmigrated_records`).
    public var version: Int
    /// The migration file as the device that raised the zone named it, or "" when unknown.
    public var file: String
    public var reason: Reason

    /// In words, with the command to run.
    public var text: String {
        let file = self.file.isEmpty ? "FILE" : self.file
        switch reason {
        case .zoneAhead:
            return "the zone is at schema version \(version) and this store is not: nothing is imported or exported "
                + "until it runs 'storectl migrate --sql \(file) --schema-version \(version)'"
        case .unmigratedRecords:
            return "this store migrated to schema version \(version) before it had applied every record of the old "
                + "version: nothing is imported or exported until a device that has them runs the same migration "
                + "(version \(version)) and syncs"
        case .differentFile:
            return "the zone reached schema version \(version) with another migration file (\(file)) than this store "
                + "ran for that version: nothing is imported or exported; compare the two files"
        }
    }
}

/// The zone is at a later schema version than the store: another device ran a data migration this store has not
/// run. Nothing is imported or exported until it does.
public struct SchemaBehindError: DiagnosedError, Equatable {
    public var zone: String
    public var container: String
    /// The store's version.
    public var local: Int
    /// The zone's version, with the file that brought it there.
    public var zoneVersion: ZoneSchemaVersion?

    public var exitCode: ExitCode { .tempFail }
    public var summary: String {
        let version = zoneVersion?.version ?? local + 1
        let by = zoneVersion.map { " (raised by device \($0.device)" + ($0.file.isEmpty ? "" : " running \($0.file)")
            + ($0.sha256.isEmpty ? "" : ", sha256 \($0.sha256.prefix(12))") + ")" } ?? ""
        return "zone '\(zone)' of container '\(container)' is at schema version \(version)\(by), and this store is at "
            + "version \(local): its changes wait here, and the zone's records wait in the cloud, until this store "
            + "runs the same data migration; nothing was imported or exported"
    }
    public var hint: String? {
        let file = zoneVersion.flatMap { $0.file.isEmpty ? nil : $0.file } ?? "FILE"
        return "run 'storectl migrate --sql \(file) --schema-version \(zoneVersion?.version ?? local + 1)' here, "
            + "then this command again"
    }
}

/// The store migrated to a schema version the zone has not reached, but other devices saved records since this
/// store last imported: they are of the old shape and its migration never transformed them.
public struct SchemaUnseenError: DiagnosedError, Equatable {
    public var zone: String
    public var container: String
    public var local: Int
    public var zoneVersion: Int
    /// How many records other devices saved since this store's last import.
    public var records: Int64

    /// The records are set aside or waiting here (seen but never applied), not saved by others since.
    public var setAsideHere = false

    public var exitCode: ExitCode { .tempFail }
    public var summary: String {
        if setAsideHere {
            return "this store is at schema version \(local) and zone '\(zone)' of container '\(container)' at version "
                + "\(zoneVersion), but \(records) record(s) of the zone are set aside or waiting here: they were never "
                + "applied, so this store's migration never changed them; nothing was imported or exported"
        }
        return "this store is at schema version \(local) and zone '\(zone)' of container '\(container)' at version "
            + "\(zoneVersion), but other devices saved \(records) record(s) there since this store last imported: "
            + "they were written at version \(zoneVersion) after this store migrated, so its migration never "
            + "changed them; nothing was imported or exported"
    }
    public var hint: String? {
        if setAsideHere {
            return "see them with 'storectl doctor' and fix what keeps them out, or let a device that applied them "
                + "run the migration and sync; then run this command again here"
        }
        return "on a device that has synced those records, run the same migration (version \(local)) and sync it: it "
            + "raises the zone; then run this command again here"
    }
}

/// The zone reached this store's schema version with another migration file: the two transforms may differ, so
/// this store's values would not match the zone's.
public struct SchemaMismatchError: DiagnosedError, Equatable {
    public var zone: String
    public var container: String
    public var zoneVersion: ZoneSchemaVersion
    /// SHA-256 of the file this store ran for that version.
    public var localSHA256: String

    public var exitCode: ExitCode { .dataError }
    public var summary: String {
        "zone '\(zone)' of container '\(container)' reached schema version \(zoneVersion.version) with "
            + (zoneVersion.file.isEmpty ? "a migration file" : zoneVersion.file)
            + " (sha256 \(zoneVersion.sha256.prefix(12))), but this store ran another file for that version (sha256 "
            + "\(localSHA256.prefix(12))): their values may differ; nothing was imported or exported"
    }
    public var hint: String? {
        "compare the two files; every device must run the same file for a version (a fix goes into a file of the "
            + "next version)"
    }
}
