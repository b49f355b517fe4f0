import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// One persistent table of the sync engine's state inside a store: its name and the SQL that makes it.
///
/// Every such table is declared here, next to the type of its rows, and made by `SyncTables.install`; no other
/// code creates one. The history format's own tables (`_storectl_meta`, `_storectl_history`, ...) are
/// `StoreFormat`'s.
protocol SyncTable {
    /// The table's name in the store.
    static var tableName: String { get }
    /// `CREATE TABLE IF NOT EXISTS ...` and its indexes; safe to run again.
    static var createSQL: String { get }
}

/// The sync engine's persistent tables, installed together and versioned (meta `sync_tables`).
///
/// Versions:
/// - 1: every table in one install: the record map, its aliases and rename marks (`RecordMap` is their only
///   writer), the parked and set-aside records, the outbox of tombstones, and the rows too large to send. Stores
///   made before had the last two made on the fly by the first export that needed them, and a record map
///   without `extra` (store format 1); both are brought to this shape by the same install.
/// - 2 (store format 4): one inbox (`_storectl_inbox`) for every record that cannot be applied yet, with its state,
///   instead of `_storectl_pending` (parked), `_storectl_quarantine` (set aside) and the import's temporary table
///   of held-back records. The rows of the two old tables move into it, in the install's transaction.
public enum SyncTables {
    /// The version of the engine's tables this storectl installs.
    public static let version = 2

    /// Every table, in the order they are made.
    static let all: [any SyncTable.Type] = [
        RecordMapEntry.self, RecordAlias.self, RenameMark.self, InboxEntry.self, OutboxEntry.self, UnsentRow.self,
    ]

    /// The names of the engine's tables.
    public static var names: [String] { all.map { $0.tableName } }

    /// Creates the engine's tables, or brings those of an older store to this version, in one transaction. A store
    /// already at this version costs one meta read.
    /// - Throws: `SQLiteError`.
    static func install(_ db: Connection) throws {
        if try current(db) { return }
        try db.transaction {
            if try current(db) { return }
            // A record map of store format 1 lacks `extra` (the fields of the last synced record that the local
            // table does not have): it gains it before its index is made.
            if try db.tableExists(RecordMapEntry.tableName),
               try !db.columns(of: RecordMapEntry.tableName).contains(where: { $0.name == "extra" })
            {
                try db.execute("ALTER TABLE \(RecordMapEntry.tableName) ADD COLUMN extra TEXT")
            }
            for table in all { try db.execute(table.createSQL) }
            try Inbox.adoptVersion1Tables(db)
            try StoreMeta.set(db, .syncTables, String(version))
        }
    }

    private static func current(_ db: Connection) throws -> Bool {
        guard try db.tableExists("_storectl_meta") else { return false }
        return try StoreMeta.value(db, .syncTables) == String(version)
    }
}

// MARK: The record map

/// A row of the record map (`_storectl_records`): which record a local row is, the change tag last synced, a
/// fingerprint of the fields as last synced (`base`, `FieldHashes`), whether the record is a tombstone here, and
/// the fields of the last synced record that the local table lacks (`extra`). Written by `RecordMap` only.
struct RecordMapEntry: SyncTable {
    static let tableName = "_storectl_records"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_records(
            entity TEXT NOT NULL,
            pk TEXT NOT NULL,
            record_name TEXT NOT NULL,
            change_tag TEXT,
            base TEXT,
            deleted INTEGER NOT NULL DEFAULT 0,
            extra TEXT,
            PRIMARY KEY (entity, pk)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX IF NOT EXISTS _storectl_records_name ON _storectl_records(record_name);
        CREATE INDEX IF NOT EXISTS _storectl_records_extra ON _storectl_records(entity) WHERE extra IS NOT NULL;
        """
    /// The columns `init(_:)` decodes, in order.
    static let columns = "entity, pk, record_name, change_tag, base, deleted, extra"

    var entity: String
    /// The local primary key as a JSON array (`[1]`, `["a-uuid"]`).
    var pk: String
    var recordName: String
    var changeTag: String?
    /// The fields as last synced (`FieldHashes`), or nil when never synced.
    var base: Value?
    var deleted: Bool
    var extra: String?

    /// Decodes a row selected with `columns`, from `offset`.
    init(_ row: Statement, offset: Int = 0) {
        entity = row.string(offset) ?? ""
        pk = row.string(offset + 1) ?? "[]"
        recordName = row.string(offset + 2) ?? ""
        changeTag = row.string(offset + 3)
        base = row.column(offset + 4).isNull ? nil : row.column(offset + 4)
        deleted = row.int64(offset + 5) == 1
        extra = row.string(offset + 6)
    }
}

/// A record merged elsewhere into another as a duplicate (`_storectl_aliases`): its name stands for `target`.
/// Written by `RecordMap` only.
struct RecordAlias: SyncTable {
    static let tableName = "_storectl_aliases"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_aliases(
            record_name TEXT PRIMARY KEY,
            entity TEXT NOT NULL,
            target TEXT NOT NULL
        ) WITHOUT ROWID;
        """
}

/// A key an export renamed because its rowid was reused (`_storectl_renamed`), with the last history seq that
/// rename looked at: a replay of that history after a crash must not rename it again. Dropped once the export
/// token passes `upto`. Written by `RecordMap` only.
struct RenameMark: SyncTable {
    static let tableName = "_storectl_renamed"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_renamed(
            entity TEXT NOT NULL,
            pk TEXT NOT NULL,
            upto INTEGER NOT NULL,
            PRIMARY KEY (entity, pk)
        ) WITHOUT ROWID;
        """
}

// MARK: Records that wait

/// The one decoding of a cloud record kept in the store because it cannot be applied yet (`InboxEntry`).
enum StoredRecord {
    /// The columns `decode` reads, in order.
    static let columns = "record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at"

    /// The record a row selected with `columns` stands for, in `zone`.
    static func decode(_ row: Row, zone: String) -> CloudRecord {
        CloudRecord(zone: zone, recordName: row[0].string ?? "", recordType: row[1].string ?? "",
                    fields: row[2].string ?? "{}", changeTag: row[3].string ?? "", seq: row[4].int64 ?? 0,
                    deleted: row[5].int64 == 1, modifiedBy: row[6].string ?? "", modifiedAt: row[7].double ?? 0)
    }
}

/// The inbox (`_storectl_inbox`): every cloud record that cannot be applied yet, one row per record name, in one
/// of three states (`State`). Written by `Inbox` only.
///
/// A record is in one state at a time: a newer version of it, or a new outcome, replaces the row (its attempts
/// count again from 1 when the state changes). Stores of sync tables version 1 kept the first and the last state
/// in two tables (`_storectl_pending`, `_storectl_quarantine`) and the second in a temporary one; the install of
/// version 2 moves their rows here.
struct InboxEntry: SyncTable {
    static let tableName = "_storectl_inbox"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_inbox(
            record_name TEXT PRIMARY KEY,
            record_type TEXT NOT NULL,
            fields TEXT NOT NULL,
            change_tag TEXT NOT NULL,
            seq INTEGER NOT NULL,
            deleted INTEGER NOT NULL DEFAULT 0,
            modified_by TEXT NOT NULL DEFAULT '',
            modified_at REAL NOT NULL DEFAULT 0,
            state TEXT NOT NULL CHECK (state IN ('waiting', 'held', 'set_aside')),
            reason TEXT,
            hint TEXT,
            first_seen INTEGER NOT NULL,
            last_tried INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 1
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS _storectl_inbox_state ON _storectl_inbox(state, seq);
        """

    /// Why a record waits.
    enum State: String, CaseIterable {
        /// A live record whose parent is not here yet: applied by the first import after the parent arrives.
        case waiting
        /// Held back until every other record of the import is in (`RecordApplier.defersUntilSettled`): only ever
        /// inside an import's write transaction, which applies or sets aside each of them before it commits.
        case held
        /// Cannot be applied as it is (`RecordProblem`: the reason and the fix); tried again on every import. An
        /// oversized record is kept without its fields (`fields = ''`) and fetched again.
        case setAside = "set_aside"
    }
}

// MARK: What goes out

/// The tombstone of a record no local row stands for (`_storectl_outbox`), sent by the next export.
struct OutboxEntry: SyncTable {
    static let tableName = "_storectl_outbox"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_outbox(
            record_name TEXT PRIMARY KEY,
            record_type TEXT NOT NULL,
            change_tag TEXT,
            reason TEXT NOT NULL,
            created_at INTEGER NOT NULL
        ) WITHOUT ROWID;
        """

    /// Why a tombstone is in the outbox. The reason decides how the export treats a newer record it meets.
    enum Reason: String {
        /// A row deleted here while another row was inserted at its rowid: a delete a user made.
        case reusedRowid = "its row was deleted and its rowid reused by a new row"
        /// A child whose key now names a new parent inserted at the old parent's rowid.
        case newParent = "its row belongs to a new parent inserted at the old parent's rowid"
        /// A child whose parent was deleted (a delete wins).
        case parentDeleted = "its parent was deleted"
        /// The losing copy of a duplicate (a UNIQUE value two records hold), merged into the winner.
        case duplicate = "the losing copy of a duplicate, merged into the winner"
        /// A record this store saved before a crash, which no local row stands for.
        case leftByCrash = "saved by this store before a crash, and no local row stands for it"

        /// Whether the tombstone stands for a delete a user made (the merge policy decides against a newer
        /// record), rather than a decision storectl made (sent over a newer record).
        var isUserDelete: Bool { self == .reusedRowid }
    }

    var recordName: String
    var recordType: String
    var changeTag: String?
    /// The stored reason text (`Reason.rawValue`, or a text an older storectl wrote).
    var reason: String

    static let selectSQL = "SELECT record_name, record_type, change_tag, reason FROM _storectl_outbox ORDER BY record_name"

    init(_ row: Row) {
        recordName = row[0].string ?? ""
        recordType = row[1].string ?? ""
        changeTag = row[2].string
        reason = row[3].string ?? ""
    }

    /// Queues the tombstone of record `name` (last seen with `tag`) for the next export.
    static func add(_ db: Connection, _ name: String, type: String, tag: String?, reason: Reason) throws {
        try db.run("""
            INSERT INTO _storectl_outbox(record_name, record_type, change_tag, reason, created_at)
            VALUES (?, ?, ?, ?, \(StoreFormat.nowMillisecondsSQL))
            ON CONFLICT(record_name) DO UPDATE SET change_tag = excluded.change_tag, reason = excluded.reason
            """, [name, type, tag, reason.rawValue])
    }

    /// Takes record `name` out of the outbox.
    static func remove(_ db: Connection, _ name: String) throws {
        try db.run("DELETE FROM _storectl_outbox WHERE record_name = ?", [name])
    }
}

/// A row an export could not send (too large), with the reason (`_storectl_unsent`): looked at again by every
/// export until it is sent.
struct UnsentRow: SyncTable {
    static let tableName = "_storectl_unsent"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_unsent(
            entity TEXT NOT NULL,
            pk TEXT NOT NULL,
            bytes INTEGER,
            reason TEXT NOT NULL,
            PRIMARY KEY (entity, pk)
        ) WITHOUT ROWID;
        """
}
