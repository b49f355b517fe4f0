import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// The only writer of the outgoing queue (`_storectl_outgoing`, `OutgoingEntry`): the deletes and saves the next
/// export sends besides the history's changes.
///
/// At most one delete and one save per record name: queuing one replaces the one of its kind. A save names its
/// local row (`record_type`, `pk`); a row keeps at most one save, under the name it has now.
struct Outgoing {
    typealias Reason = OutgoingEntry.Reason

    /// A queued delete: the tombstone of record `recordName`, last seen with `changeTag`.
    struct Delete: Equatable {
        var recordName: String
        var recordType: String
        var changeTag: String?
        var reason: Reason
        /// The local row that stands for the record under a new name (a child renamed for its new parent, whose
        /// old record is this delete), when the row is that record still, not a new row.
        var pk: String? = nil
    }

    let db: Connection

    init(_ db: Connection) { self.db = db }

    // MARK: Deletes

    /// Queues the tombstone of record `name` (last seen with `tag`) for the next export. `pk`: the local row that
    /// carries the record on under another name (`Delete.pk`).
    func delete(_ name: String, type: String, tag: String?, reason: Reason, pk: String? = nil) throws {
        precondition(reason.kind == .delete, "\(reason) is not a reason to delete")
        try db.run("""
            INSERT OR REPLACE INTO _storectl_outgoing(record_name, record_type, kind, pk, change_tag, reason, created_at)
            VALUES (?, ?, 'delete', ?, ?, ?, \(StoreFormat.nowMillisecondsSQL))
            """, [name, type, pk, tag, reason.rawValue])
    }

    /// The queued deletes, by record name.
    func deletes() throws -> [Delete] {
        try db.query("""
            SELECT record_name, record_type, change_tag, reason, pk FROM _storectl_outgoing WHERE kind = 'delete'
            ORDER BY record_name
            """).map {
            Delete(recordName: $0[0].string ?? "", recordType: $0[1].string ?? "", changeTag: $0[2].string,
                   reason: $0[3].string.flatMap(Reason.init(rawValue:)) ?? .leftByCrash, pk: $0[4].string)
        }
    }

    /// Whether the queue holds the delete of record `name` for `reason`.
    func holdsDelete(_ name: String, reason: Reason) throws -> Bool {
        try db.scalar("SELECT 1 FROM _storectl_outgoing WHERE record_name = ? AND kind = 'delete' AND reason = ?",
                      [name, reason.rawValue]) != nil
    }

    /// Takes the delete of record `name` out of the queue (sent, or no longer needed).
    func remove(_ name: String) throws {
        try db.run("DELETE FROM _storectl_outgoing WHERE record_name = ? AND kind = 'delete'", [name])
    }

    /// Forgets the queued deletes of these reasons.
    func forgetDeletes(_ reasons: [Reason]) throws {
        try db.execute("DELETE FROM _storectl_outgoing WHERE kind = 'delete' AND reason IN ("
                       + reasons.map { quoteLiteral($0.rawValue) }.joined(separator: ", ") + ")")
    }

    /// Forgets every queued delete (a new zone or account: there is nothing to delete there).
    func clearDeletes() throws {
        try db.execute("DELETE FROM _storectl_outgoing WHERE kind = 'delete'")
    }

    // MARK: Saves not sent

    /// Queues the row `pk` of `entity` (record `name`), which this export could not send, for the next one: it is
    /// looked at again until it goes. `detail` says why in words, with the figures.
    func unsent(entity: String, pk: String, name: String, reason: Reason, bytes: Int?, detail: String) throws {
        precondition(reason.kind == .save, "\(reason) is not a reason a save waits")
        try db.cached("DELETE FROM _storectl_outgoing WHERE kind = 'save' AND record_type = ? AND pk = ?")
            .forEach([entity, pk]) { _ in }
        try db.cached("""
            INSERT OR REPLACE INTO _storectl_outgoing(record_name, record_type, kind, pk, reason, detail, bytes,
                                                      created_at)
            VALUES (?, ?, 'save', ?, ?, ?, ?, \(StoreFormat.nowMillisecondsSQL))
            """).forEach([name, entity, pk, reason.rawValue, detail, bytes]) { _ in }
    }

    /// Takes out of the queue the saves of the rows `pks` of `entity`, which this export sent.
    func sent(entity: String, pks: [String]) throws {
        guard !pks.isEmpty, try db.scalar("""
            SELECT EXISTS (SELECT 1 FROM _storectl_outgoing WHERE kind = 'save' AND record_type = ?)
            """, [entity])?.int64 == 1 else { return }
        let statement = try db.cached("DELETE FROM _storectl_outgoing WHERE kind = 'save' AND record_type = ? AND pk = ?")
        for pk in pks { try statement.forEach([entity, pk]) { _ in } }
    }

    /// The SQL selecting `(entity, pk)` of every row waiting to be sent.
    static let unsentRowsSQL = "SELECT record_type, pk FROM main._storectl_outgoing WHERE kind = 'save'"

    // MARK: Older stores

    /// Moves the rows of the two tables sync tables version 1 kept outgoing records in into the queue, and drops
    /// them: the tombstones of `_storectl_outbox` (their reason, stored in words, becomes its code; words of no
    /// known reason were a decision storectl made) and the rows of `_storectl_unsent` (under the record name the
    /// record map gives their row). Runs inside `SyncTables.install`'s transaction.
    static func adoptVersion1Tables(_ db: Connection) throws {
        if try db.tableExists("_storectl_outbox") {
            let code = "CASE reason " + Reason.allCases.filter { $0.kind == .delete }.map {
                "WHEN \(quoteLiteral($0.text)) THEN \(quoteLiteral($0.rawValue))"
            }.joined(separator: " ") + " ELSE \(quoteLiteral(Reason.leftByCrash.rawValue)) END"
            try db.execute("""
                INSERT OR REPLACE INTO _storectl_outgoing(record_name, record_type, kind, change_tag, reason, detail,
                                                          created_at)
                SELECT record_name, record_type, 'delete', change_tag, \(code), reason, created_at FROM _storectl_outbox;
                DROP TABLE _storectl_outbox;
                """)
        }
        if try db.tableExists("_storectl_unsent") {
            try db.execute("""
                INSERT OR IGNORE INTO _storectl_outgoing(record_name, record_type, kind, pk, reason, detail, bytes,
                                                         created_at)
                SELECT coalesce(r.record_name, u.entity || ':unsent:' || u.pk), u.entity, 'save', u.pk,
                       CASE WHEN u.reason = \(quoteLiteral(Reason.keyNotUTF8.text)) THEN \(quoteLiteral(Reason.keyNotUTF8.rawValue))
                            ELSE \(quoteLiteral(Reason.tooLarge.rawValue)) END,
                       u.reason, u.bytes, \(StoreFormat.nowMillisecondsSQL)
                FROM _storectl_unsent u LEFT JOIN _storectl_records r ON r.entity = u.entity AND r.pk = u.pk;
                DROP TABLE _storectl_unsent;
                """)
        }
    }
}
