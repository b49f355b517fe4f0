import Synchronization

/// The serial owner of one connection: the `Sendable` way to use a database from many tasks.
///
/// Each call runs with exclusive access to the connection, so statements from different tasks never interleave.
/// This is storectl's answer to Core Data's "one context per thread".
///
///     let queue = try DatabaseQueue(path: "notes.sqlite")
///     let count = try queue.write { db in try db.scalar("SELECT count(*) FROM notes")?.int64 }
public final class DatabaseQueue: @unchecked Sendable {
    // The connection is reached only while `lock` is held, which is what makes this type Sendable.
    private let lock = Mutex(())
    private let connection: Connection

    /// Opens the database at `path` and takes ownership of the connection.
    /// - Throws: `SQLiteError`.
    public init(path: String, mode: Connection.OpenMode = .readWriteCreate, busyTimeout: Int32 = 5000) throws {
        self.connection = try Connection(path: path, mode: mode, busyTimeout: busyTimeout)
    }

    /// Runs `body` with exclusive use of the connection. The connection must not escape the closure.
    /// - Throws: the body's error.
    public func read<T: Sendable>(_ body: (Connection) throws -> T) throws -> T {
        try lock.withLock { _ in try body(connection) }
    }

    /// Runs `body` in an IMMEDIATE transaction with exclusive use of the connection.
    /// - Throws: the body's error, after rolling back.
    public func write<T: Sendable>(_ body: (Connection) throws -> T) throws -> T {
        try lock.withLock { _ in try connection.transaction(.immediate) { try body(connection) } }
    }
}
