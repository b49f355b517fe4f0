import FoundationEssentials
import StoreBase
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Who serves a store: the lock file `<store file>.watch.lock` that a `storectl watch` process holds.
///
/// The file is locked with an open-file-description lock (`F_OFD_SETLK`): the kernel drops it when the process
/// ends, however it ends, so a watcher killed with SIGKILL never leaves a stale lock, and a second watcher (or a
/// second store entry of the same process) is refused. The file holds one JSON object: the process id, when it
/// started, and the last error of the store's rounds (so that `status` shows it even when the store itself was
/// locked and could not record it). `status` tests the lock with `F_OFD_GETLK`, which takes nothing.
public final class WatchLock: Sendable {
    /// The lock file's path.
    public let path: String
    private let fd: Int32
    /// What the file holds; the lock serialises rewrites from the store's worker thread.
    private let content: Mutex<WatcherInfo>

    /// What the lock file says about the watcher that holds it.
    public struct WatcherInfo: Sendable, Codable, Equatable {
        public var pid: Int32?
        /// ISO 8601 time the watcher started serving the store.
        public var startedAt: String?
        /// The lock file.
        public var lockFile: String
        /// The last failed round of this watcher, if a later round did not succeed.
        public var lastError: SyncErrorRecord?

        enum CodingKeys: String, CodingKey {
            case pid
            case startedAt = "started_at"
            case lockFile = "lock_file"
            case lastError = "last_error"
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(pid, forKey: .pid)
            try c.encode(startedAt, forKey: .startedAt)
            try c.encode(lockFile, forKey: .lockFile)
            try c.encode(lastError, forKey: .lastError)
        }
    }

    /// The lock file of the store file at `storePath`.
    public static func path(forStore storePath: String) -> String { storePath + ".watch.lock" }

    // Linux's open-file-description locks (<bits/fcntl-linux.h>: F_OFD_GETLK 36, F_OFD_SETLK 37), which Swift's
    // Glibc module does not export. Other systems use classic record locks (held per process).
    #if os(Linux)
    private static let getLock: Int32 = 36
    private static let setLock: Int32 = 37
    #else
    private static let getLock: Int32 = F_GETLK
    private static let setLock: Int32 = F_SETLK
    #endif

    /// Takes the lock of store `store` (its file at `storePath`) for this process.
    /// - Throws: `StoreError` exit 75 when another watcher holds it (naming its pid), 73 when the file cannot be
    ///   made.
    public static func acquire(store: String, storePath: String) throws -> WatchLock {
        let path = Self.path(forStore: storePath)
        // A watcher that ends unlinks its file; a file opened just before that is not the one on the path any
        // more, so the open is tried again.
        for _ in 0..<10 {
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                if errno == ENOENT {
                    throw WatchLockError(.noInput, store: store, "store '\(store)': \(storePath) does not exist "
                                         + "(nor its folder \(Path.parent(storePath)))",
                                         hint: "if the file was moved, point the config at its new place: "
                                            + "'storectl config set stores.\(store).path NEW_PATH'")
                }
                let reason = String(cString: strerror(errno))
                throw WatchLockError(.cantCreate, store: store,
                                     "store '\(store)': cannot create the watch lock file \(path) (\(reason))",
                                     hint: "check the permissions of the store's folder \(Path.parent(storePath))")
            }
            var request = flock()
            request.l_type = Int16(F_WRLCK)
            request.l_whence = Int16(SEEK_SET)
            if fcntl(fd, setLock, &request) != 0 {
                let holder = read(fd: fd)
                close(fd)
                let pid = holder?.pid.map { "pid \($0)" } ?? "another process"
                let since = holder?.startedAt.map { ", since \($0)" } ?? ""
                throw WatchLockError(.tempFail, store: store,
                                     "store '\(store)' is already served by storectl watch (\(pid)\(since))",
                                     details: ["  two watchers on one store would sync it twice; the lock file is \(path)"],
                                     hint: holder?.pid.map { "stop that watcher first (kill \($0)), then run this again" }
                                        ?? "stop the other watcher first, then run this again")
            }
            var opened = stat()
            var onPath = stat()
            if fstat(fd, &opened) == 0, stat(path, &onPath) == 0, opened.st_ino == onPath.st_ino,
               opened.st_dev == onPath.st_dev
            {
                let lock = WatchLock(path: path, fd: fd, content: WatcherInfo(
                    pid: getpid(), startedAt: WatchTime.now(), lockFile: path, lastError: nil))
                lock.write()
                return lock
            }
            close(fd)
        }
        throw WatchLockError(.tempFail, store: store, "store '\(store)': the watch lock file \(path) keeps being replaced",
                             hint: "retry; check that no other program deletes files next to the store")
    }

    private init(path: String, fd: Int32, content: WatcherInfo) {
        self.path = path
        self.fd = fd
        self.content = Mutex(content)
    }

    deinit {
        // Unlinked before it is unlocked: a watcher starting now either finds the file still locked, or opens a
        // new one (and an open of the old one is detected by its inode).
        unlink(path)
        close(fd)
    }

    /// Records the last error of the store's rounds (nil after a round succeeded).
    public func record(lastError: SyncErrorRecord?) {
        content.withLock { info in
            guard info.lastError != lastError else { return }
            info.lastError = lastError
            write(info)
        }
    }

    private func write() {
        content.withLock { write($0) }
    }

    private func write(_ info: WatcherInfo) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(info) else { return }
        let bytes = [UInt8](data) + [UInt8(ascii: "\n")]
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        _ = ftruncate(fd, off_t(bytes.count))
    }

    private static func read(fd: Int32) -> WatcherInfo? {
        var bytes = [UInt8](repeating: 0, count: 64 * 1024)
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        let data = Data(bytes[0..<n])
        // A watcher rewriting the file at this moment may leave a partial object: then the pid is unknown.
        if let info = try? JSONDecoder().decode(WatcherInfo.self, from: data) { return info }
        if let line = data.split(separator: UInt8(ascii: "\n")).first,
           let info = try? JSONDecoder().decode(WatcherInfo.self, from: Data(line))
        {
            return info
        }
        return nil
    }

    /// The watcher serving the store file at `storePath`, or nil when none does. Takes no lock.
    public static func holder(storePath: String) -> WatcherInfo? {
        let path = Self.path(forStore: storePath)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var probe = flock()
        probe.l_type = Int16(F_WRLCK)
        probe.l_whence = Int16(SEEK_SET)
        // "If the lock could be placed, fcntl() does not actually place it, but returns F_UNLCK in the l_type
        // field of lock and leaves the other fields of the structure unchanged."
        guard fcntl(fd, getLock, &probe) == 0, probe.l_type != Int16(F_UNLCK) else { return nil }
        var info = read(fd: fd) ?? WatcherInfo(pid: nil, startedAt: nil, lockFile: path, lastError: nil)
        if info.pid == nil, probe.l_pid > 0 { info.pid = probe.l_pid }
        info.lockFile = path
        return info
    }
}

/// A failed sync round, as `status` and the watch lock file keep it.
public struct SyncErrorRecord: Sendable, Codable, Equatable {
    /// When it failed: ISO 8601 UTC with milliseconds.
    public var at: String
    /// The same instant in unix milliseconds, to compare with the last successes.
    public var atMilliseconds: Int64
    public var code: Int32
    public var kind: String
    public var message: String
    public var hint: String?

    public init(at ms: Int64, error: WatchErrorBody) {
        self.at = WatchTime.iso(ms)
        self.atMilliseconds = ms
        self.code = error.code
        self.kind = error.kind
        self.message = error.message
        self.hint = error.hint
    }

    enum CodingKeys: String, CodingKey {
        case at, code, kind, message, hint
        case atMilliseconds = "at_ms"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(at, forKey: .at)
        try c.encode(atMilliseconds, forKey: .atMilliseconds)
        try c.encode(code, forKey: .code)
        try c.encode(kind, forKey: .kind)
        try c.encode(message, forKey: .message)
        try c.encode(hint, forKey: .hint)
    }
}

/// A store's watch lock cannot be taken: exit 75 when another watcher holds it.
public struct WatchLockError: DiagnosedError, Equatable {
    public var exitCode: ExitCode
    public var summary: String
    public var details: [String]
    public var hint: String?
    public var store: String?

    init(_ exitCode: ExitCode, store: String, _ summary: String, details: [String] = [], hint: String?) {
        self.exitCode = exitCode
        self.store = store
        self.summary = summary
        self.details = details
        self.hint = hint
    }
}
