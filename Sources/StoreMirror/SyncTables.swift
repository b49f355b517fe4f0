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
///   of held-back records; one outgoing queue (`_storectl_outgoing`) of saves and deletes by record name, with
///   a reason that is a code, instead of `_storectl_outbox` (tombstones) and `_storectl_unsent` (rows too large).
///   The rows of the old tables move into them, in the install's transaction.
/// - 3 (store format 6): the record map keeps a record's name (`stored_name`) only when it is not `entity:pk`,
///   the name every natural-keyed row's record has (`EntityMap.naturalName`); `record_name` is a generated column
///   that reads either, and the name index holds only the names kept. A UUID-keyed row's entry no longer holds its
///   key three times. An older map is rebuilt in this shape, in the install's transaction (`RecordMap.adoptStoredNames`).
public enum SyncTables {
    /// The version of the engine's tables this storectl installs.
    public static let version = 3

    /// Every table, in the order they are made.
    static let all: [any SyncTable.Type] = [
        RecordMapEntry.self, RecordAlias.self, RenameMark.self, InboxEntry.self, OutgoingEntry.self,
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
            // A record map before version 3 keeps every name: it is rebuilt keeping only those not derived.
            if try db.tableExists(RecordMapEntry.tableName),
               try !db.columns(of: RecordMapEntry.tableName).contains(where: { $0.name == "stored_name" })
            {
                try RecordMap(db).adoptStoredNames()
            }
            for table in all { try db.execute(table.createSQL) }
            try Inbox.adoptVersion1Tables(db)
            try Outgoing.adoptVersion1Tables(db)
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
///
/// The record's name is kept (`stored_name`) only when it is not `entity:pk` (a natural-keyed row's record,
/// `EntityMap.naturalName`); `record_name` is generated from the two and is what every reader reads. A name is
/// found by `RecordMap.named`: a kept one through the partial index, a derived one through the primary key.
struct RecordMapEntry: SyncTable {
    static let tableName = "_storectl_records"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_records(
            entity TEXT NOT NULL,
            pk TEXT NOT NULL,
            stored_name TEXT,
            change_tag TEXT,
            base TEXT,
            deleted INTEGER NOT NULL DEFAULT 0,
            extra TEXT,
            record_name TEXT GENERATED ALWAYS AS (coalesce(stored_name, entity || ':' || pk)) VIRTUAL,
            PRIMARY KEY (entity, pk)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX IF NOT EXISTS _storectl_records_name ON _storectl_records(stored_name)
            WHERE stored_name IS NOT NULL;
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

    init(entity: String, pk: String, recordName: String, changeTag: String?, base: Value?, deleted: Bool,
         extra: String? = nil)
    {
        self.entity = entity
        self.pk = pk
        self.recordName = recordName
        self.changeTag = changeTag
        self.base = base
        self.deleted = deleted
        self.extra = extra
    }

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

/// The outgoing queue (`_storectl_outgoing`): what the next export must send besides the history's changes, by
/// record name, each a save or a delete with a reason (`Reason`). Written by `Outgoing` only.
///
/// - A delete is the tombstone of a record that no local row stands for (a row deleted while another took its
///   rowid, a child of a deleted parent, the losing copy of a duplicate, an own record a crash left behind).
/// - A save is a local row an export could not send (too large for `max_record_size`, a key that is not valid
///   UTF-8): every export looks at it again until it goes.
///
/// Stores of sync tables version 1 kept the two in `_storectl_outbox` and `_storectl_unsent`; the install of
/// version 2 moves their rows here.
struct OutgoingEntry: SyncTable {
    static let tableName = "_storectl_outgoing"
    static let createSQL = """
        CREATE TABLE IF NOT EXISTS _storectl_outgoing(
            record_name TEXT NOT NULL,
            record_type TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('save', 'delete')),
            pk TEXT,
            change_tag TEXT,
            reason TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '',
            bytes INTEGER,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (record_name, kind)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS _storectl_outgoing_saves ON _storectl_outgoing(record_type, pk) WHERE kind = 'save';
        """

    enum Kind: String {
        case save, delete
    }

    /// Why a record is queued. The reason decides what the export does with it, never its wording (`detail`).
    enum Reason: String, CaseIterable {
        /// Delete: a row deleted here while another row was inserted at its rowid: a delete a user made.
        case reusedRowid = "reused_rowid"
        /// Delete: a child whose key now names a new parent inserted at the old parent's rowid.
        case newParent = "new_parent"
        /// Delete: a child whose parent was deleted (a delete wins).
        case parentDeleted = "parent_deleted"
        /// Delete: the losing copy of a duplicate (a UNIQUE value two records hold), merged into the winner.
        case duplicate
        /// Delete: a record this store saved before a crash, which no local row stands for.
        case leftByCrash = "left_by_crash"
        /// Save: the row's record is larger than `max_record_size`.
        case tooLarge = "too_large"
        /// Save: the row's key is text that is not valid UTF-8.
        case keyNotUTF8 = "key_not_utf8"
        /// Save: the row's key holds a NULL (SQLite allows one outside a rowid or WITHOUT ROWID key) as another
        /// row's does: every row with the same NULL key has the same record name, which stands for the first.
        case keyNull = "key_null"

        var kind: Kind {
            switch self {
            case .tooLarge, .keyNotUTF8, .keyNull: return .save
            default: return .delete
            }
        }

        /// Whether a tombstone stands for a delete a user made (the merge policy decides against a newer record),
        /// rather than a decision storectl made (sent over a newer record).
        var isUserDelete: Bool { self == .reusedRowid }

        /// The words for a delete queued for this reason (`status`, `doctor`).
        var text: String {
            switch self {
            case .reusedRowid: return "its row was deleted and its rowid reused by a new row"
            case .newParent: return "its row belongs to a new parent inserted at the old parent's rowid"
            case .parentDeleted: return "its parent was deleted"
            case .duplicate: return "the losing copy of a duplicate, merged into the winner"
            case .leftByCrash: return "saved by this store before a crash, and no local row stands for it"
            case .tooLarge: return "its record is larger than max_record_size"
            case .keyNotUTF8: return "its key is text that is not valid UTF-8"
            case .keyNull: return "its key holds NULL, as another row's does: one record stands for the first of them"
            }
        }

        /// The reason of a tombstone an older storectl queued, from its words; a text of no known reason was a
        /// decision storectl made, never a user's delete.
        init(storedText text: String) {
            self = Self.allCases.first { $0.kind == .delete && $0.text == text } ?? .leftByCrash
        }
    }
}
