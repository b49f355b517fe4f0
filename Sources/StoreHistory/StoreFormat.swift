import StoreSQLite

/// The names and SQL of the store format, version 6.
///
/// Other programs (the sync engine, scripts, any SQLite client) rely on these names exactly: columns and keys may
/// be added in later versions, never changed.
///
/// Versions:
/// - 1: the first format.
/// - 2: the triggers write reals in keys and tombstones with every significant digit (`ValueJSON.key`), and the
///   sync engine's tables gain what replay and schema evolution need. A format-1 store is upgraded in place on its
///   first write by this storectl, after a copy of it is saved beside it (`HistoryTracker.upgradeFormat`).
/// - 3: the update triggers count a column as changed when only its type changed (the integer 1 and the real 1.0,
///   which SQLite's `IS NOT` finds equal, in a column without a declared type; `TriggerSQL`). A format-2 store is
///   upgraded the same way, and its first sync then compares every row once with its last synced record, so that a
///   type change the older triggers missed is exported too.
/// - 4: the sync engine keeps every cloud record it cannot apply yet in one inbox (`_storectl_inbox`, with its
///   state: waiting for a parent, held back, set aside) instead of `_storectl_pending` and `_storectl_quarantine`.
///   The triggers are unchanged. A format-3 store is upgraded the same way (its waiting records move into the
///   inbox); an older storectl refuses a format-4 store instead of making the old tables again beside it.
/// - 5: the update triggers compare the columns outside the primary key as bytes (`COLLATE BINARY`): under a
///   column's `NOCASE` or `RTRIM` collation a change of case or of trailing spaces was not recorded, so never
///   synced (key columns keep their collation, as SQLite's foreign-key actions do). A format-4 store is upgraded
///   the same way, and its first sync compares every row once with its last synced record, so that such a change
///   the older triggers missed is exported too.
/// - 6: the sync engine's record map keeps a record's name only when it is not `entity:pk` (`stored_name`);
///   `record_name` stays, a generated column that reads either, so readers that name the map's columns are
///   unchanged (a positional `SELECT *` sees `stored_name` third and `record_name` last). The triggers
///   are unchanged. A format-5 store is upgraded the same way (its record map is rebuilt in the upgrade's
///   transaction). A storectl of this format refuses a store of a newer one when it opens it; older ones did
///   not check, and fail on a format-6 store when they write the record map (a generated column).
public enum StoreFormat {
    /// The format version this storectl writes, as a number.
    public static let currentVersion = 6
    /// The format version written to meta `format_version`.
    public static let version = String(currentVersion)
    /// The oldest format this storectl upgrades.
    public static let oldestUpgradable = 1

    /// The author recorded for writers that did not name themselves in `_storectl_context`.
    public static let externalAuthor = "external"
    /// Consumer names starting with this prefix belong to the sync engine.
    public static let reservedConsumerPrefix = "cloud-"
    /// The consumer whose token is the sync engine's export token.
    public static let cloudExportConsumer = "cloud-export"
    /// Every storectl trigger's name starts with this prefix.
    public static let triggerPrefix = "_storectl_"

    /// The keys of `_storectl_meta` are `MetaKey`s.

    /// The SQL that creates the format tables. Every statement is `IF NOT EXISTS`, so it can run again.
    public static let createTablesSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS _storectl_context(id INTEGER PRIMARY KEY CHECK (id = 1), author TEXT NOT NULL,
            tx INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS _storectl_history(
            seq INTEGER PRIMARY KEY,
            tx INTEGER,
            author TEXT NOT NULL,
            ts INTEGER NOT NULL,
            entity TEXT NOT NULL,
            pk TEXT NOT NULL,
            op TEXT NOT NULL,
            changed TEXT,
            tombstone TEXT
        );
        CREATE TABLE IF NOT EXISTS _storectl_consumers(name TEXT PRIMARY KEY, token INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS _storectl_tokens(name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
        """

    /// The SQL expression for "now" in unix milliseconds, as the triggers compute it.
    public static let nowMillisecondsSQL = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

    /// The names of the triggers storectl installs on `table`.
    public static func triggerNames(for table: String) -> (insert: String, update: String, updatePK: String,
                                                           delete: String)
    {
        let base = triggerPrefix + table
        return (base + "_ins", base + "_upd", base + "_updpk", base + "_del")
    }

    /// The name of a trigger of the fence `migrate --to` puts on the old file of a moved store: table number
    /// `index`, operation `op` (`i`, `u` or `d`). History triggers end in `_ins`, `_upd`, `_updpk` or `_del`, so the
    /// two never share a name.
    public static func moveFenceTriggerName(index: Int, op: Character) -> String {
        "_storectl_moved_\(index)_\(op)"
    }

    /// Whether `name` is a trigger of a move's fence (not a history trigger: it stays when triggers are regenerated).
    public static func isMoveFence(_ name: String) -> Bool {
        let prefix = "_storectl_moved_"
        guard name.hasPrefix(prefix) else { return false }
        let rest = name.dropFirst(prefix.count).split(separator: "_", omittingEmptySubsequences: false)
        return rest.count == 2 && !rest[0].isEmpty && rest[0].allSatisfy(\.isASCII) && rest[0].allSatisfy(\.isNumber)
            && ["i", "u", "d"].contains(rest[1])
    }

    /// Whether `name` is one of storectl's own tables (`_storectl_*`) or SQLite's (`sqlite_*`).
    public static func isInternalTable(_ name: String) -> Bool {
        let lower = name.lowercased()
        return lower.hasPrefix("_storectl_") || lower.hasPrefix("sqlite_")
    }
}
