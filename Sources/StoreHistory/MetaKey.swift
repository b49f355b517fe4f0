import StoreSQLite

/// A key of `_storectl_meta`, the store's own key/value table. Every key storectl reads or writes is declared here,
/// once: a misspelled key cannot compile, and `MetaKey.all` lists them for the format's tests.
///
/// Other programs and older storectl versions read these names: a key may be added, never renamed.
///
///     let mode = try StoreMeta.value(db, .mode)
///     try StoreMeta.set(db, .columns("notes"), json)
public struct MetaKey: Hashable, Sendable, CustomStringConvertible {
    /// The key as stored.
    public let rawValue: String

    private init(_ rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    // MARK: The store format (history tracking)

    /// The store format version, e.g. `'2'`.
    public static let formatVersion = MetaKey("format_version")
    /// The format a store was upgraded from, when it was.
    public static let formatUpgradedFrom = MetaKey("format_upgraded_from")
    /// A random lowercase UUID, set once.
    public static let storeID = MetaKey("store_id")
    /// `local` or `cloud`.
    public static let mode = MetaKey("mode")
    /// FNV-1a 64 (16 lowercase hex digits) of the canonical description of the tracked tables and user tables.
    public static let schemaHash = MetaKey("schema_hash")
    /// A JSON array of the tracked table names, sorted.
    public static let tracked = MetaKey("tracked")
    /// The next transaction id `HistoryTracker.write` hands out (an integer).
    public static let nextTx = MetaKey("next_tx")
    /// Set when tracking was lost and reinstalled with `--force`: the newest history seq at that moment.
    /// Changes made while the triggers were missing were not recorded, so a sync must re-baseline.
    public static let historyGap = MetaKey("history_gap")
    /// Why `history_gap` was set, in words.
    public static let historyGapReason = MetaKey("history_gap_reason")
    /// When the store was initialized, in unix milliseconds.
    public static let createdAt = MetaKey("created_at")
    /// The canonical description of the tracked tables and the user tables, as JSON (for drift details).
    public static let schema = MetaKey("schema")
    /// The absolute path the store file was last opened at (a copied file is told from a moved one by it).
    public static let storePath = MetaKey("store_path")

    // MARK: Sync

    /// The account, container, zone and URL (without secrets) the store is bound to.
    public static let boundAccount = MetaKey("bound_account")
    public static let boundContainer = MetaKey("bound_container")
    public static let boundZone = MetaKey("bound_zone")
    public static let boundURL = MetaKey("bound_url")
    /// `CONTAINER/ZONE` once the store's first export (its baseline) to it completed.
    public static let baselineContainer = MetaKey("baseline_container")
    /// When the last sync, export and import finished, in unix milliseconds.
    public static let lastSyncAt = MetaKey("last_sync_at")
    public static let lastExportAt = MetaKey("last_export_at")
    public static let lastImportAt = MetaKey("last_import_at")
    /// The last sync error, as a JSON document (status shows it).
    public static let lastSyncError = MetaKey("last_sync_error")
    /// The serial of the latest export this store started (`ExportMark.serial`).
    public static let exportSerial = MetaKey("export_serial")
    /// The time of the export mark a restored copy of the store was recognised by.
    public static let restoredAt = MetaKey("restored_at")
    /// When a restored copy was recognised, in unix milliseconds.
    public static let restoreDetectedAt = MetaKey("restore_detected_at")
    /// Set when a store was upgraded from format 1, whose exports left no marks in the container: the next sync
    /// compares the store's own records with its record map once, then removes the key.
    public static let ownRecordsUnchecked = MetaKey("own_records_unchecked")

    /// `hashes` once every base of the record map is a fingerprint (`FieldHashes`); stores made before kept each
    /// row's last synced fields, converted in place the first time storectl opens them for sync.
    public static let recordMapBase = MetaKey("record_map_base")
    /// The version of the sync engine's tables in this store (`SyncTables.version`): they are brought to it in one
    /// transaction the first time this storectl opens the store for sync.
    public static let syncTables = MetaKey("sync_tables")

    /// The container owner this store accepted (a container whose owner changed is refused until accepted again).
    public static let acceptedOwner = MetaKey("accepted_owner")
    /// What the store's account may do in its zone, as the last round found it: `owner`, `read-write`,
    /// `read-only` or `none`, a space, and the zone's owner (`read-only alice`). A read-only share sends nothing.
    public static let zoneAccess = MetaKey("zone_access")
    /// Set while records of the zone sent before a field was encrypted (or sealed with a key rotated since) are
    /// still to be sent again sealed with the zone's current key: the generation and fields, as JSON.
    public static let reencryptPending = MetaKey("reencrypt_pending")
    /// The zone's list of encrypted fields as the store last saw it (record type -> fields, JSON), so that a move
    /// to another target seals them there without reading the old zone.
    public static let zoneEncryptedFields = MetaKey("zone_encrypted_fields")

    // MARK: Moving a store file (`migrate --to`)

    /// On the new file: the path it was moved from, until the config names it.
    public static let movedFrom = MetaKey("moved_from")
    /// On the old file: the path the store moved to.
    public static let movedTo = MetaKey("moved_to")
    /// On the new file, until the move is finished: what the old file held when the copy was taken (its newest
    /// history seq and the row count of every table), so that a rerun can tell which file was written since.
    public static let moveSnapshot = MetaKey("move_snapshot")

    // MARK: Schema versions (`migrate --sql`)

    public static let schemaVersion = MetaKey("schema_version")
    public static let schemaVersionSHA256 = MetaKey("schema_version_sha256")
    public static let schemaVersionAt = MetaKey("schema_version_at")
    /// The last `migrate --sql` that changed rows (a data migration), as JSON: `version`, `file` (as given, a hint
    /// for the zone's other devices) and `sha256`. Its version is what the zone's schema version is compared with;
    /// a file that changed no value (a column dropped, a table rebuilt as it was) leaves it as it was.
    public static let dataMigration = MetaKey("data_migration")
    /// Set by a data migration to the version it reached, until the next sync has either raised the zone to it
    /// (this store migrated first: its migration's changes are sent) or found the zone there already (another
    /// device migrated first: the rows the migration changed take its values as their last synced state, and are
    /// not sent over what the zone holds).
    public static let schemaVersionUnsynced = MetaKey("schema_version_unsynced")
    /// While the last sync waited for a data migration: what `status` and `doctor` show, with the command to run
    /// (JSON: `version`, `file`, `reason`).
    public static let schemaWait = MetaKey("schema_wait")
    /// The history seq up to which the updates of a data migration this store ran after its zone were taken as the
    /// zone's (`SchemaGate.adopt`): merges do not count them as local changes.
    public static let schemaAdoptedThrough = MetaKey("schema_adopted_through")

    // MARK: A switch `migrate --cloud` staged

    public static let switchTarget = MetaKey("switch_target")
    public static let switchExportToken = MetaKey("switch_export_token")
    public static let switchServerToken = MetaKey("switch_server_token")
    public static let switchSnapshot = MetaKey("switch_snapshot")

    // MARK: Keys that name one thing each

    /// A family of keys: a prefix followed by the name of one thing (`columns:notes`).
    public enum Family: String, Sendable, CaseIterable {
        /// The columns of a table the record map's fields were last compared with.
        case columns = "columns:"
        /// A read-only participant's: the columns of a table its rows were last compared with their records (it
        /// never exports, and the export is what records `columns:`).
        case columnsCompared = "columns_compared:"
        /// A seed that ran (or whose rows came from another device).
        case seedDone = "seed_done:"
        /// A seed whose cloud marker is still to be created.
        case seedMarkerPending = "seed_marker_pending:"
        /// A record type met in the cloud that this store does not track, with how many records.
        case unknownType = "unknown_type:"
        /// The newest of this store's own saves in `CONTAINER/ZONE` that the record map reflects.
        case ownSeq = "own_seq:"

        /// The key of `name` in this family.
        public func key(_ name: String) -> MetaKey { MetaKey(rawValue + name) }

        /// SQL that is true for the keys of this family: `key LIKE 'columns:%' ESCAPE '\'`.
        public var sqlMatch: String {
            let escaped = rawValue.map { "\\_%".contains($0) ? "\\\($0)" : String($0) }.joined()
            return "key LIKE '\(escaped)%' ESCAPE '\\'"
        }

        /// SQL for the name part of `key`: `substr(key, 9)` for `columns:`.
        public var sqlName: String { "substr(key, \(rawValue.utf8.count + 1))" }
    }

    public static func columns(_ table: String) -> MetaKey { Family.columns.key(table) }
    public static func columnsCompared(_ table: String) -> MetaKey { Family.columnsCompared.key(table) }
    public static func seedDone(_ seed: String) -> MetaKey { Family.seedDone.key(seed) }
    public static func seedMarkerPending(_ seed: String) -> MetaKey { Family.seedMarkerPending.key(seed) }
    public static func unknownType(_ type: String) -> MetaKey { Family.unknownType.key(type) }
    public static func ownSeq(container: String, zone: String) -> MetaKey {
        Family.ownSeq.key(container + "/" + zone)
    }

    /// Every single key (the families aside), for the format's tests.
    public static let all: [MetaKey] = [
        formatVersion, formatUpgradedFrom, storeID, mode, schemaHash, tracked, nextTx, historyGap, historyGapReason,
        createdAt, schema, storePath, boundAccount, boundContainer, boundZone, boundURL, baselineContainer, lastSyncAt,
        lastExportAt, lastImportAt, lastSyncError, exportSerial, restoredAt, restoreDetectedAt, ownRecordsUnchecked,
        acceptedOwner, zoneAccess, reencryptPending, zoneEncryptedFields, recordMapBase, syncTables, movedFrom, movedTo, moveSnapshot, schemaVersion, schemaVersionSHA256,
        schemaVersionAt, dataMigration, schemaVersionUnsynced, schemaWait, schemaAdoptedThrough, switchTarget,
        switchExportToken, switchServerToken, switchSnapshot,
    ]
}

/// Reads and writes `_storectl_meta`: the one place its SQL lives.
public enum StoreMeta {
    /// The value of `key`, or nil.
    /// - Throws: `SQLiteError`.
    public static func value(_ db: Connection, _ key: MetaKey) throws -> String? {
        try db.scalar("SELECT value FROM _storectl_meta WHERE key = ?", [key.rawValue])?.string
    }

    /// Sets `key` to `value`; nil removes it.
    /// - Throws: `SQLiteError`.
    public static func set(_ db: Connection, _ key: MetaKey, _ value: String?) throws {
        if let value {
            try db.run("INSERT INTO _storectl_meta(key, value) VALUES (?, ?) "
                           + "ON CONFLICT(key) DO UPDATE SET value = excluded.value", [key.rawValue, value])
        } else {
            try db.run("DELETE FROM _storectl_meta WHERE key = ?", [key.rawValue])
        }
    }

    /// Sets `key` to `value` unless it has a value already.
    /// - Throws: `SQLiteError`.
    public static func setIfAbsent(_ db: Connection, _ key: MetaKey, _ value: String) throws {
        try db.run("INSERT OR IGNORE INTO _storectl_meta(key, value) VALUES (?, ?)", [key.rawValue, value])
    }

    /// Adds `amount` to the integer value of `key` (a missing key counts as 0).
    /// - Throws: `SQLiteError`.
    public static func add(_ db: Connection, _ key: MetaKey, _ amount: Int) throws {
        try db.run("""
            INSERT INTO _storectl_meta(key, value) VALUES (?1, ?2)
            ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + CAST(excluded.value AS INTEGER)
            """, [key.rawValue, String(amount)])
    }

    /// The names of the keys of `family` (`notes` for `columns:notes`) with their values, sorted by name.
    /// - Throws: `SQLiteError`.
    public static func entries(_ db: Connection, _ family: MetaKey.Family) throws -> [(name: String, value: String?)] {
        try db.query("SELECT \(family.sqlName), value FROM _storectl_meta WHERE \(family.sqlMatch) ORDER BY key")
            .compactMap { row in row[0].string.map { ($0, row[1].string) } }
    }

    /// Removes every key of `family`.
    /// - Throws: `SQLiteError`.
    public static func removeAll(_ db: Connection, _ family: MetaKey.Family) throws {
        try db.execute("DELETE FROM _storectl_meta WHERE \(family.sqlMatch)")
    }
}
