import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// The only writer of the inbox (`_storectl_inbox`, `InboxEntry`): cloud records that cannot be applied yet.
///
/// One row per record name, in one state: waiting for a parent, held back until the import settles, or set aside
/// with a reason. Putting a record in replaces what the inbox held for its name (a newer version, or a new
/// outcome of the same version); taking it out names the state it leaves, so that a record that moved on to
/// another state meanwhile stays where it went.
struct Inbox {
    typealias State = InboxEntry.State

    let db: Connection

    init(_ db: Connection) { self.db = db }

    // MARK: Putting records in

    /// Puts `record` in the inbox in `state` (with the reason and fix of a set-aside record). An oversized record
    /// is kept without its fields (`keepFields` false): it is fetched again when it is tried again. The attempts
    /// count up while the record stays in one state, and start again at 1 when it changes state.
    func put(_ record: CloudRecord, _ state: State, problem: RecordProblem? = nil, keepFields: Bool = true) throws {
        let statement = try db.cached("""
            INSERT INTO _storectl_inbox(record_name, record_type, fields, change_tag, seq, deleted, modified_by,
                                        modified_at, state, reason, hint, first_seen, last_tried, attempts)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12, 1)
            ON CONFLICT(record_name) DO UPDATE SET record_type = excluded.record_type, fields = excluded.fields,
                change_tag = excluded.change_tag, seq = excluded.seq, deleted = excluded.deleted,
                modified_by = excluded.modified_by, modified_at = excluded.modified_at, state = excluded.state,
                reason = excluded.reason, hint = excluded.hint, last_tried = excluded.last_tried,
                first_seen = CASE WHEN state = excluded.state THEN first_seen ELSE excluded.first_seen END,
                attempts = CASE WHEN state = excluded.state THEN attempts + 1 ELSE 1 END
            """)
        try statement.bind([record.recordName, record.recordType, keepFields ? record.fields : "", record.changeTag,
                            record.seq, record.deleted, record.modifiedBy, record.modifiedAt, state.rawValue,
                            problem?.reason, problem?.hint, HistoryTracker.nowMilliseconds()])
        try statement.step()
    }

    /// Notes one more attempt at the set-aside record `name` that changed nothing (too large still).
    func tried(_ name: String) throws {
        try db.run("UPDATE _storectl_inbox SET last_tried = ?, attempts = attempts + 1 WHERE record_name = ?",
                   [HistoryTracker.nowMilliseconds(), name])
    }

    // MARK: Taking records out

    /// Takes record `name` out of the inbox when it is in `state` (in any state when nil).
    func remove(_ name: String, from state: State? = nil) throws {
        if let state {
            try db.run("DELETE FROM _storectl_inbox WHERE record_name = ? AND state = ?", [name, state.rawValue])
        } else {
            try db.run("DELETE FROM _storectl_inbox WHERE record_name = ?", [name])
        }
    }

    /// The statement that takes out of `states` the records whose names `select` (SQL returning one column of
    /// record names, with the caller's parameters) returns: a page applied set-based.
    static func removeSQL(from states: [State], namesSelectedBy select: String) -> String {
        """
        DELETE FROM main._storectl_inbox WHERE state IN (\(list(states))) AND record_name IN (\(select))
        """
    }

    /// The names of the records in `state`.
    func names(_ state: State) throws -> [String] {
        try db.query("SELECT record_name FROM _storectl_inbox WHERE state = ?", [state.rawValue]).compactMap { $0[0].string }
    }

    /// The records in `state`, in the order the cloud gave them (its seq); held-back tombstones come first.
    func records(_ state: State, zone: String) throws -> [CloudRecord] {
        let order = state == .held ? "deleted DESC, seq" : "seq"
        return try db.query("""
            SELECT \(StoredRecord.columns) FROM _storectl_inbox WHERE state = ? ORDER BY \(order)
            """, [state.rawValue]).map { StoredRecord.decode($0, zone: zone) }
    }

    /// The records in `state`, taken out of the inbox: the caller applies them (or puts them back).
    func take(_ state: State, zone: String) throws -> [CloudRecord] {
        let records = try records(state, zone: zone)
        if !records.isEmpty { try db.run("DELETE FROM _storectl_inbox WHERE state = ?", [state.rawValue]) }
        return records
    }

    /// Empties the inbox, or takes every record in `state` out (a new zone or account: every record is fetched
    /// again).
    func clear(_ state: State? = nil) throws {
        if let state {
            try db.run("DELETE FROM main._storectl_inbox WHERE state = ?", [state.rawValue])
        } else {
            try db.execute("DELETE FROM main._storectl_inbox")
        }
    }

    // MARK: Reading

    /// Whether any record is in `state`.
    func has(_ state: State) throws -> Bool {
        try db.scalar("SELECT EXISTS (SELECT 1 FROM _storectl_inbox WHERE state = ?)", [state.rawValue])?.int64 == 1
    }

    /// Whether record `name` is in one of `states`.
    func holds(_ name: String, in states: [State]) throws -> Bool {
        try db.scalar("SELECT 1 FROM _storectl_inbox WHERE record_name = ? AND state IN (\(Self.list(states)))", [name])
            != nil
    }

    /// How many records are in each state.
    func counts() throws -> [State: Int64] {
        var out: [State: Int64] = [:]
        for row in try db.query("SELECT state, count(*) FROM _storectl_inbox GROUP BY state") {
            if let state = row[0].string.flatMap(State.init(rawValue:)) { out[state] = row[1].int64 ?? 0 }
        }
        return out
    }

    /// `states` as an SQL list of literals.
    private static func list(_ states: [State]) -> String {
        states.map { quoteLiteral($0.rawValue) }.joined(separator: ", ")
    }

    // MARK: Older stores

    /// Moves the rows of the two tables sync tables version 1 kept waiting records in into the inbox, and drops
    /// them: parked records (`_storectl_pending`, live, no reason) wait for their parent, set-aside ones
    /// (`_storectl_quarantine`) keep their reason, fix and attempts. A record in both keeps its newer version.
    /// Runs inside `SyncTables.install`'s transaction.
    static func adoptVersion1Tables(_ db: Connection) throws {
        if try db.tableExists("_storectl_pending") {
            try db.execute("""
                INSERT OR IGNORE INTO _storectl_inbox(record_name, record_type, fields, change_tag, seq, state,
                                                      first_seen, last_tried)
                SELECT record_name, record_type, fields, change_tag, seq, 'waiting', \(StoreFormat.nowMillisecondsSQL),
                       \(StoreFormat.nowMillisecondsSQL)
                FROM _storectl_pending;
                DROP TABLE _storectl_pending;
                """)
        }
        if try db.tableExists("_storectl_quarantine") {
            try db.execute("""
                INSERT INTO _storectl_inbox(record_name, record_type, fields, change_tag, seq, deleted, state, reason,
                                            hint, first_seen, last_tried, attempts)
                SELECT record_name, record_type, fields, change_tag, seq, deleted, 'set_aside', reason, hint,
                       first_seen, last_tried, attempts
                FROM _storectl_quarantine WHERE true
                ON CONFLICT(record_name) DO UPDATE SET record_type = excluded.record_type, fields = excluded.fields,
                    change_tag = excluded.change_tag, seq = excluded.seq, deleted = excluded.deleted,
                    state = excluded.state, reason = excluded.reason, hint = excluded.hint,
                    first_seen = excluded.first_seen, last_tried = excluded.last_tried, attempts = excluded.attempts
                WHERE excluded.seq >= _storectl_inbox.seq;
                DROP TABLE _storectl_quarantine;
                """)
        }
    }
}
