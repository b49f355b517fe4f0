internal import CSQLite
import StoreBase

extension Connection {
    /// Copies this connection's `main` database into `destination`'s with SQLite's online backup API, page by page,
    /// and returns how many pages were copied.
    ///
    /// The copy is one consistent snapshot: "If the source database is modified by [another connection] during
    /// the backup, then the backup will be restarted by the next call to sqlite3_backup_step()", unless this
    /// connection holds a read transaction, whose snapshot is then what is copied. Other connections may keep
    /// reading and (in WAL mode) writing the source while it runs.
    ///
    ///     let copy = try Connection(path: "/backups/notes.sqlite", wal: false)
    ///     try store.backup(into: copy) { done, total in print("\(done)/\(total) pages") }
    ///
    /// - Parameters:
    ///   - pagesPerStep: pages copied per step; `progress` is called after each step.
    ///   - busyRetries: how many times a step that meets a lock is retried (25 ms apart) before giving up.
    /// - Throws: `SQLiteError` with the destination's message (SQLITE_BUSY when the locks stayed held).
    @discardableResult
    public func backup(into destination: Connection, pagesPerStep: Int32 = 4096, busyRetries: Int = 200,
                       progress: (_ done: Int, _ total: Int) -> Void = { _, _ in }) throws -> Int
    {
        // "sqlite3_backup_init() ... returns NULL and an error code and message are stored in the destination
        // database connection" when it fails (e.g. a read transaction open on the destination).
        guard let backup = sqlite3_backup_init(destination.handle, "main", handle, "main") else {
            throw destination.lastError(sql: nil)
        }
        var rc: Int32 = SQLITE_OK
        var retries = 0
        var total = 0
        while true {
            rc = sqlite3_backup_step(backup, pagesPerStep)
            total = Int(sqlite3_backup_pagecount(backup))
            progress(total - Int(sqlite3_backup_remaining(backup)), total)
            if rc == SQLITE_OK { continue }
            // "If SQLITE_BUSY or SQLITE_LOCKED is returned ... the call to sqlite3_backup_step() can be retried
            // later."
            if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) && retries < busyRetries {
                retries += 1
                sqlite3_sleep(25)
                continue
            }
            break
        }
        // "sqlite3_backup_finish() ... If an out-of-memory condition or IO error occurred during any prior
        // sqlite3_backup_step() call ... then sqlite3_backup_finish() returns the corresponding error code."
        let finished = sqlite3_backup_finish(backup)
        guard rc == SQLITE_DONE else {
            let message = String(cString: sqlite3_errstr(rc))
            throw SQLiteError(extendedCode: rc, message: "backup of \(path) into \(destination.path) stopped: \(message)",
                              path: destination.path)
        }
        guard finished == SQLITE_OK else { throw destination.lastError(sql: nil) }
        return total
    }

    /// The number of pages of the `main` database.
    /// - Throws: `SQLiteError`.
    public func pageCount() throws -> Int64 {
        try scalar("PRAGMA page_count")?.int64 ?? 0
    }
}
