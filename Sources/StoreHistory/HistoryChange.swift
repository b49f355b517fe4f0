import StoreBase
import StoreSQLite

/// One history row: one change to one row of one tracked table.
public struct HistoryChange: Sendable, Equatable {
    /// What happened to the row.
    public enum Operation: String, Sendable, Equatable {
        case insert = "I"
        case update = "U"
        case delete = "D"
    }

    /// The history sequence number: monotonic, never reused. A consumer's token is the last seq it processed.
    public var seq: Int64
    /// The transaction id from `_storectl_context`, or nil for a writer that did not name itself.
    public var tx: Int64?
    /// The author from `_storectl_context`, or `external`.
    public var author: String
    /// When, in unix milliseconds.
    public var timestamp: Int64
    /// The table.
    public var entity: String
    /// The primary key as stored: the canonical JSON array of the key columns in key order, e.g. `[1]`.
    public var pk: String
    /// The primary key values, decoded (a blob comes back as `.blob`).
    public var primaryKey: [Value]
    /// Insert, update or delete.
    public var op: Operation
    /// For an update: the columns whose value really changed, in table order.
    public var changed: [String]?
    /// For a delete: the old values of the tombstone columns, by column name.
    public var tombstone: [String: Value]?
    /// `changed` as stored: a JSON array of column names (nil when `changed` is nil).
    public var changedJSON: String?
    /// `tombstone` as stored: a JSON object, blobs as `{"$blob": "HEX"}` (nil when `tombstone` is nil).
    public var tombstoneJSON: String?

    public init(seq: Int64, tx: Int64?, author: String, timestamp: Int64, entity: String, pk: String,
                primaryKey: [Value], op: Operation, changed: [String]?, tombstone: [String: Value]?,
                changedJSON: String? = nil, tombstoneJSON: String? = nil)
    {
        self.changedJSON = changedJSON
        self.tombstoneJSON = tombstoneJSON
        self.seq = seq
        self.tx = tx
        self.author = author
        self.timestamp = timestamp
        self.entity = entity
        self.pk = pk
        self.primaryKey = primaryKey
        self.op = op
        self.changed = changed
        self.tombstone = tombstone
    }
}

/// The changes one transaction made, in seq order.
///
/// A transaction named through `_storectl_context` groups all its changes under one `tx`. A writer that did not
/// name itself (author `external`, tx nil) gets one transaction per change, because nothing in the history can
/// tell which of its changes were committed together.
public struct HistoryTransaction: Sendable, Equatable {
    /// The transaction id, or nil for an unnamed writer's single change.
    public var tx: Int64?
    /// Who made it.
    public var author: String
    /// The time of its first change, in unix milliseconds.
    public var timestamp: Int64
    /// Its changes, in seq order.
    public var changes: [HistoryChange]

    public init(tx: Int64?, author: String, timestamp: Int64, changes: [HistoryChange]) {
        self.tx = tx
        self.author = author
        self.timestamp = timestamp
        self.changes = changes
    }

    /// The token after this transaction: the seq of its last change.
    public var token: Int64 { changes.last?.seq ?? 0 }

    /// Groups changes (in seq order) into transactions: consecutive changes with the same non-nil tx.
    public static func group(_ changes: [HistoryChange]) -> [HistoryTransaction] {
        var result: [HistoryTransaction] = []
        for change in changes {
            if let tx = change.tx, let last = result.last, last.tx == tx, last.author == change.author {
                result[result.count - 1].changes.append(change)
            } else {
                result.append(HistoryTransaction(tx: change.tx, author: change.author, timestamp: change.timestamp,
                                                 changes: [change]))
            }
        }
        return result
    }
}

extension HistoryTracker {
    /// The changes after `token`, in seq order, optionally filtered.
    ///
    /// It reads by a range scan on `seq` (the rowid), so its cost is the number of changes after the token, not
    /// the size of the history.
    /// - Parameters:
    ///   - token: return changes with a seq greater than this (0: from the start).
    ///   - author: only this author's changes.
    ///   - excludeAuthor: no changes of this author (the export reads history excluding `cloud-import`).
    ///   - entity: only this table's changes.
    ///   - limit: at most this many changes.
    /// - Throws: `SQLiteError`.
    public func changes(after token: Int64 = 0, author: String? = nil, excludeAuthor: String? = nil,
                        entity: String? = nil, limit: Int? = nil) throws -> [HistoryChange]
    {
        var result: [HistoryChange] = []
        try scan(after: token, author: author, excludeAuthor: excludeAuthor, entity: entity) { change in
            if let limit, result.count >= limit { return false }
            result.append(change)
            return true
        }
        return result
    }

    /// The transactions after `token`, with their changes, optionally filtered.
    ///
    /// `limit` counts changes, but a transaction is never split: the last one is completed even past the limit,
    /// so the returned token always ends on a transaction boundary.
    ///
    /// With `decode: false` each change keeps only the JSON the triggers stored (`pk`, `changedJSON`,
    /// `tombstoneJSON`; `primaryKey` is empty, `changed` and `tombstone` are nil): for callers that copy the JSON
    /// out as it is (`storectl history --json`), at half the cost.
    /// - Throws: `SQLiteError`.
    public func transactions(after token: Int64 = 0, author: String? = nil, excludeAuthor: String? = nil,
                             entity: String? = nil, limit: Int? = nil, decode: Bool = true) throws
        -> [HistoryTransaction]
    {
        var result: [HistoryChange] = []
        try scan(after: token, author: author, excludeAuthor: excludeAuthor, entity: entity,
                 decode: decode) { change in
            if let limit, result.count >= limit {
                guard let last = result.last, let tx = last.tx, change.tx == tx, change.author == last.author else {
                    return false
                }
            }
            result.append(change)
            return true
        }
        return HistoryTransaction.group(result)
    }

    /// Calls `body` for each matching change after `token` until it returns false.
    ///
    /// One statement reads the changes and, through `json_each`, the elements of their key and changed-column
    /// arrays: a change comes back as `max(1, keys) x max(1, changed)` rows in a row (json_each walks an array in
    /// order, and the history is the outer loop, read in seq order without a sort). Only tombstones, which deletes
    /// alone carry, are decoded with a statement of their own.
    private func scan(after token: Int64, author: String?, excludeAuthor: String?, entity: String?,
                      decode: Bool = true, _ body: (HistoryChange) throws -> Bool) throws
    {
        var sql = decode ? """
            SELECT h.seq, h.tx, h.author, h.ts, h.entity, h.pk, h.op, h.changed, h.tombstone,
                   k.key, k.type, k.atom, CASE WHEN k.type = 'object' THEN json_extract(k.value, '$."$blob"') END,
                   c.key, c.atom
            FROM _storectl_history h LEFT JOIN json_each(h.pk) k LEFT JOIN json_each(h.changed) c
            WHERE h.seq > ?
            """ : """
            SELECT h.seq, h.tx, h.author, h.ts, h.entity, h.pk, h.op, h.changed, h.tombstone
            FROM _storectl_history h WHERE h.seq > ?
            """
        var arguments: [any SQLBindable] = [token]
        if let author {
            sql += " AND h.author = ?"
            arguments.append(author)
        }
        if let excludeAuthor {
            sql += " AND h.author IS NOT ?"
            arguments.append(excludeAuthor)
        }
        if let entity {
            sql += " AND h.entity = ?"
            arguments.append(entity)
        }
        sql += " ORDER BY h.seq"
        // A statement of its own (not the connection's cache), because tombstones are decoded with cached ones.
        let statement = try db.prepare(sql)
        try statement.bind(arguments)
        var current: HistoryChange?
        var firstKeyIndex: Int64?
        while try statement.step() {
            let seq = statement.int64(0) ?? 0
            if let change = current, change.seq != seq {
                current = nil
                if try !body(change) { break }
            }
            if current == nil {
                let opText = statement.string(6) ?? ""
                guard let op = HistoryChange.Operation(rawValue: opText) else {
                    throw StoreError(.dataError, "history row \(seq) in \(db.path) has an unknown op '\(opText)'",
                                     hint: "history rows are written only by storectl's triggers; check what else "
                                         + "writes to _storectl_history")
                }
                let changedJSON = statement.string(7)
                let tombstoneJSON = statement.string(8)
                current = HistoryChange(
                    seq: seq, tx: statement.int64(1), author: statement.string(2) ?? "",
                    timestamp: statement.int64(3) ?? 0, entity: statement.string(4) ?? "",
                    pk: statement.string(5) ?? "[]", primaryKey: [], op: op,
                    changed: decode ? changedJSON.map { _ in [] } : nil,
                    tombstone: decode ? try tombstoneJSON.map { try decodeObject($0) } : nil,
                    changedJSON: changedJSON, tombstoneJSON: tombstoneJSON)
                if !decode { continue }
                firstKeyIndex = statement.int64(9)
            }
            let keyIndex = statement.int64(9)
            let changedIndex = statement.int64(13)
            // A new key element starts each run of the changed columns; the changed columns are read in the first.
            if keyIndex != nil, changedIndex == nil || changedIndex == 0 {
                current?.primaryKey.append(Self.element(type: statement.string(10), atom: statement.column(11),
                                                        blobHex: statement.string(12)))
            }
            if changedIndex != nil, keyIndex == firstKeyIndex, let name = statement.string(14) {
                current?.changed?.append(name)
            }
        }
        if let change = current { _ = try body(change) }
        try statement.reset()
    }

    /// A JSON array element as a value: `{"$blob": "HEX"}` is a blob, `true`/`false` are 1/0.
    private static func element(type: String?, atom: Value, blobHex: String?) -> Value {
        switch type {
        case "object":
            if let hex = blobHex, let bytes = Hex.bytes(hex) { return .blob(bytes) }
            return atom
        case "true": return .integer(1)
        case "false": return .integer(0)
        default: return atom
        }
    }

    /// Decodes a JSON object written by the triggers (a tombstone).
    func decodeObject(_ json: String) throws -> [String: Value] {
        var result: [String: Value] = [:]
        for row in try db.query("""
            SELECT key, type, atom, CASE WHEN type = 'object' THEN json_extract(value, '$."$blob"') END
            FROM json_each(?)
            """, [json])
        {
            result[row[0].string ?? ""] = Self.element(type: row[1].string, atom: row[2], blobHex: row[3].string)
        }
        return result
    }
}
