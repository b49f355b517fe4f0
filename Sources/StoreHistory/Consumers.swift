import StoreBase
import StoreSQLite

/// A registered reader of the history, with the last seq it processed.
public struct HistoryConsumer: Sendable, Equatable {
    public var name: String
    /// The last seq the consumer has processed. Prune never removes a row above the lowest token.
    public var token: Int64
    /// Unix milliseconds.
    public var createdAt: Int64
    /// Unix milliseconds.
    public var updatedAt: Int64

    public init(name: String, token: Int64, createdAt: Int64, updatedAt: Int64) {
        self.name = name
        self.token = token
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// What `HistoryTracker.prune(before:olderThan:)` removed.
public struct PruneReport: Sendable, Equatable {
    /// How many history rows were removed.
    public var removed: Int
    /// The lowest and highest seq removed, when any was.
    public var firstSeq: Int64?
    public var lastSeq: Int64?
    /// The highest seq prune was allowed to remove: the lowest consumer token, and always below the newest row.
    public var limit: Int64
    /// The consumer holding the lowest token, when consumers limited the prune.
    public var heldBy: String?
    /// How many history rows remain.
    public var remaining: Int64

    public init(removed: Int, firstSeq: Int64?, lastSeq: Int64?, limit: Int64, heldBy: String?, remaining: Int64) {
        self.removed = removed
        self.firstSeq = firstSeq
        self.lastSeq = lastSeq
        self.limit = limit
        self.heldBy = heldBy
        self.remaining = remaining
    }
}

extension HistoryTracker {
    /// Registers the consumer `name`, starting at `token` (default: the newest seq, so it sees changes from now on).
    ///
    /// Returns the consumer and whether it was created; an existing consumer is left as it is.
    /// - Parameter allowReserved: names starting with `cloud-` belong to the sync engine; only it passes true.
    /// - Throws: `StoreError` exit 64 for an empty or reserved name; `SQLiteError`.
    @discardableResult
    public func addConsumer(_ name: String, token: Int64? = nil, allowReserved: Bool = false) throws
        -> (consumer: HistoryConsumer, created: Bool)
    {
        try checkConsumerName(name, allowReserved: allowReserved)
        return try db.transaction(.immediate) {
            if let existing = try consumer(name) { return (existing, false) }
            let now = Self.nowMilliseconds()
            let start = try token ?? latestSeq()
            try db.run("INSERT INTO _storectl_consumers(name, token, created_at, updated_at) VALUES (?, ?, ?, ?)",
                       [name, start, now, now])
            return (HistoryConsumer(name: name, token: start, createdAt: now, updatedAt: now), true)
        }
    }

    /// Every consumer, sorted by name.
    /// - Throws: `SQLiteError`.
    public func consumers() throws -> [HistoryConsumer] {
        try db.query("SELECT name, token, created_at, updated_at FROM _storectl_consumers ORDER BY name").map {
            HistoryConsumer(name: $0[0].string ?? "", token: $0[1].int64 ?? 0, createdAt: $0[2].int64 ?? 0,
                            updatedAt: $0[3].int64 ?? 0)
        }
    }

    /// The consumer `name`, or nil.
    /// - Throws: `SQLiteError`.
    public func consumer(_ name: String) throws -> HistoryConsumer? {
        try db.query("SELECT name, token, created_at, updated_at FROM _storectl_consumers WHERE name = ?", [name])
            .first.map {
                HistoryConsumer(name: $0[0].string ?? "", token: $0[1].int64 ?? 0, createdAt: $0[2].int64 ?? 0,
                                updatedAt: $0[3].int64 ?? 0)
            }
    }

    /// Removes the consumer `name`. Returns false when there was none.
    /// - Parameter allowReserved: names starting with `cloud-` belong to the sync engine; only it passes true.
    /// - Throws: `StoreError` exit 64 for a reserved name; `SQLiteError`.
    @discardableResult
    public func dropConsumer(_ name: String, allowReserved: Bool = false) throws -> Bool {
        try checkConsumerName(name, allowReserved: allowReserved)
        try db.run("DELETE FROM _storectl_consumers WHERE name = ?", [name])
        return db.changes > 0
    }

    /// Sets the token of consumer `name`, creating the consumer when it does not exist. Call it in the same
    /// transaction as the work the token acknowledges.
    /// - Throws: `SQLiteError`.
    public func setConsumerToken(_ name: String, _ token: Int64) throws {
        let now = Self.nowMilliseconds()
        try db.run("""
            INSERT INTO _storectl_consumers(name, token, created_at, updated_at) VALUES (?, ?, ?, ?)
            ON CONFLICT(name) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
            """, [name, token, now, now])
    }

    /// Moves consumer `name`'s token forward to `token` (what `storectl history consumer advance` does when the
    /// consumer has processed the history up to there). The newest seq is the highest token there is; a token never
    /// moves back, because the history before it may be pruned already.
    /// - Returns: the consumer before and after.
    /// - Throws: `StoreError` exit 64 for an unknown or reserved consumer, a token above the newest seq or below the
    ///   consumer's own; `SQLiteError`.
    @discardableResult
    public func advanceConsumer(_ name: String, to token: Int64) throws -> (before: HistoryConsumer, after: HistoryConsumer) {
        try checkConsumerName(name, allowReserved: false)
        return try db.transaction(.immediate) {
            guard let before = try consumer(name) else {
                let names = try consumers().map(\.name).filter { !$0.hasPrefix(StoreFormat.reservedConsumerPrefix) }
                let hint = Suggest.closest(name, in: names).map { "did you mean '\($0)'?" }
                    ?? "add it first with 'storectl history consumer add \(name) --token \(token)'"
                throw StoreError(.usage, "no consumer named '\(name)'", hint: hint)
            }
            let latest = try latestSeq()
            guard token <= latest else {
                throw StoreError(.usage, "token \(token) is after the newest seq \(latest)",
                                 hint: "'storectl history consumer advance \(name) \(latest)' moves it to the newest seq")
            }
            guard token >= before.token else {
                throw StoreError(.usage, "consumer '\(name)' is at token \(before.token); a token never moves back "
                                    + "(the history before it may be pruned)",
                                 hint: "'storectl history consumer drop \(name)' and add it again to start over")
            }
            try setConsumerToken(name, token)
            let after = try consumer(name) ?? before
            return (before, after)
        }
    }

    /// Removes history rows that every consumer has processed and that match `before` or `olderThan`.
    ///
    /// A row is removed only when its seq is at or below the LOWEST consumer token (the sync engine's
    /// `cloud-export` included) and below the newest row, which is always kept so that a seq is never reused.
    /// - Parameters:
    ///   - before: remove rows with a seq lower than this.
    ///   - olderThan: remove rows recorded more than this many seconds ago.
    /// - Throws: `StoreError` exit 64 when neither criterion is given; `SQLiteError`.
    @discardableResult
    public func prune(before: Int64? = nil, olderThan: Double? = nil) throws -> PruneReport {
        guard before != nil || olderThan != nil else {
            throw StoreError(.usage, "prune needs a limit: a token (before) or an age (older than)",
                             hint: "e.g. 'storectl history prune --older-than 30d'")
        }
        return try db.transaction(.immediate) {
            let newest = try latestSeq()
            var limit = newest - 1
            var heldBy: String?
            if let lowest = try consumers().min(by: { $0.token < $1.token }), lowest.token < limit {
                limit = lowest.token
                heldBy = lowest.name
            }
            if let before, before - 1 < limit {
                limit = before - 1
                heldBy = nil
            }
            var sql = "FROM _storectl_history WHERE seq <= ?"
            var arguments: [any SQLBindable] = [limit]
            if let olderThan {
                sql += " AND ts < ?"
                arguments.append(Self.nowMilliseconds() - Int64(olderThan * 1000))
            }
            let range = try db.query("SELECT count(*), min(seq), max(seq) " + sql, arguments).first
            try db.run("DELETE " + sql, arguments)
            let removed = db.changes
            let remaining = try db.scalar("SELECT count(*) FROM _storectl_history")?.int64 ?? 0
            return PruneReport(removed: removed, firstSeq: range?[1].int64, lastSeq: range?[2].int64,
                               limit: max(limit, 0), heldBy: heldBy, remaining: remaining)
        }
    }

    private func checkConsumerName(_ name: String, allowReserved: Bool) throws {
        guard !name.isEmpty else {
            throw StoreError(.usage, "a consumer name cannot be empty", hint: "e.g. 'storectl history consumer add search-indexer'")
        }
        if !allowReserved && name.hasPrefix(StoreFormat.reservedConsumerPrefix) {
            throw StoreError(.usage, "consumer names starting with '\(StoreFormat.reservedConsumerPrefix)' "
                                + "are reserved for the sync engine",
                             hint: "choose another name, e.g. 'my-\(name)'")
        }
    }
}
