import FoundationEssentials
import StoreBase
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Who serves a store: the lock files a `storectl watch` process holds for it.
///
/// There are two: `<store file>.watch.lock`, next to the store file, and `<store id>.lock` in the runtime folder
/// (`$XDG_RUNTIME_DIR/storectl`, else `/tmp/storectl-<uid>`), which belongs to the store's identity (meta
/// `store_id`) rather than to the path it was reached by: a symbolic link, a hard link, or the new path of a moved
/// store all lead to the same identity lock, so one store has one watcher. A store file with no id yet (not
/// initialised) has only the first.
///
/// Each file is locked with an open-file-description lock (`F_OFD_SETLK`): the kernel drops it when the process
/// ends, however it ends, so a watcher killed with SIGKILL never leaves a stale lock, and a second watcher (or a
/// second store entry of the same process) is refused. The files hold one JSON object: the process id, when it
/// started, and the last error of the store's rounds (so that `status` shows it even when the store itself was
/// locked and could not record it). `status` tests the locks with `F_OFD_GETLK`, which takes nothing.
public final class WatchLock: Sendable {
    /// The lock file next to the store file.
    public let path: String
    /// The store file the lock was taken for.
    public let storePath: String
    /// The store id whose identity lock this watcher holds, if the store had one.
    public var storeID: String? { identity?.storeID }
    private let file: LockFile
    private let identity: IdentityLock?
    /// What the files hold; the lock serialises rewrites from the store's worker thread.
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

    /// The folder of the identity locks: `$XDG_RUNTIME_DIR/storectl`, else `/tmp/storectl-<uid>`.
    public static func runtimeDirectory(environment: [String: String]) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") {
            return Path.join(runtime, "storectl")
        }
        return "/tmp/storectl-\(getuid())"
    }

    /// The identity lock file of the store with id `storeID`.
    public static func path(forStoreID storeID: String, environment: [String: String]) -> String {
        Path.join(runtimeDirectory(environment: environment), storeID + ".lock")
    }

    // Linux's open-file-description locks (<bits/fcntl-linux.h>: F_OFD_GETLK 36, F_OFD_SETLK 37), which Swift's
    // Glibc module does not export. Other systems use classic record locks (held per process).
    #if os(Linux)
    private static let getLock: Int32 = 36
    private static let setLock: Int32 = 37
    #else
    private static let getLock: Int32 = F_GETLK
    private static let setLock: Int32 = F_SETLK
    #endif

    /// Takes the locks of store `store` (its file at `storePath`) for this process: the one next to the file, and
    /// the one of the store's identity.
    /// - Parameter previous: a lock this process holds for the same store at another path (the store moved): its
    ///   identity lock is kept rather than taken again.
    /// - Throws: `StoreError` exit 75 when another watcher holds either (naming its pid), 73 when a file cannot be
    ///   made.
    public static func acquire(store: String, storePath: String, environment: [String: String] = [:],
                               keeping previous: WatchLock? = nil) throws -> WatchLock
    {
        // The identity first: a watcher of a store another watcher serves (by any path) is refused before it takes
        // the lock next to the file, which the other may be about to take as it follows the store there.
        var identity: IdentityLock?
        if let id = StoreHandle.storeID(atPath: storePath) {
            if let held = previous?.identity, held.storeID == id {
                identity = held
            } else {
                let folder = runtimeDirectory(environment: environment)
                try makeRuntimeDirectory(folder, store: store)
                let lock = try LockFile.take(Path.join(folder, id + ".lock"), store: store, storePath: storePath,
                                             identity: id)
                identity = IdentityLock(storeID: id, file: lock)
            }
        }
        // A failure here drops a newly taken identity lock (and releases it); a kept one stays with `previous`.
        let file = try LockFile.take(Self.path(forStore: storePath), store: store, storePath: storePath)
        let lock = WatchLock(path: file.path, storePath: storePath, file: file, identity: identity,
                             content: WatcherInfo(pid: getpid(), startedAt: WatchTime.now(), lockFile: file.path,
                                                  lastError: nil))
        lock.write()
        return lock
    }

    /// Makes the runtime folder (mode 0700) and checks that it is a folder of this user that nobody else can write.
    private static func makeRuntimeDirectory(_ folder: String, store: String) throws {
        _ = mkdir(Path.parent(folder), 0o700)
        _ = mkdir(folder, 0o700)
        var st = stat()
        guard lstat(folder, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid(),
              (st.st_mode & 0o022) == 0
        else {
            throw WatchLockError(.cantCreate, store: store, "store '\(store)': the watch lock folder \(folder) is "
                                 + "not a folder of this user that only it can write",
                                 hint: "remove \(folder) (or set XDG_RUNTIME_DIR to a private folder), then run this again")
        }
    }

    private init(path: String, storePath: String, file: LockFile, identity: IdentityLock?, content: WatcherInfo) {
        self.path = path
        self.storePath = storePath
        self.file = file
        self.identity = identity
        self.content = Mutex(content)
    }

    deinit {
        file.release()
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
        file.write(info)
        if let identity {
            var copy = info
            copy.lockFile = identity.file.path
            identity.file.write(copy)
        }
    }

    /// The watcher serving the store file at `storePath`, or nil when none does: the lock next to the file, else
    /// the lock of the store's identity (a watcher that reached the store by another path). Takes no lock.
    public static func holder(storePath: String, environment: [String: String] = [:]) -> WatcherInfo? {
        if let info = LockFile.holder(Self.path(forStore: storePath)) { return info }
        guard let id = StoreHandle.storeID(atPath: storePath) else { return nil }
        return LockFile.holder(path(forStoreID: id, environment: environment))
    }

    /// One locked file.
    final class LockFile: Sendable {
        let path: String
        private let fd: Int32
        private let released = Mutex(false)

        private init(path: String, fd: Int32) {
            self.path = path
            self.fd = fd
        }

        deinit { release() }

        /// Unlinks and unlocks the file, once. Unlinked before it is unlocked: a watcher starting now either finds
        /// the file still locked, or opens a new one (and an open of the old one is detected by its inode).
        func release() {
            let first = released.withLock { done -> Bool in
                defer { done = true }
                return !done
            }
            guard first else { return }
            unlink(path)
            close(fd)
        }

        /// Locks the file at `path`.
        /// - Parameter identity: the store id, when the file is an identity lock (for the messages).
        static func take(_ path: String, store: String, storePath: String, identity: String? = nil) throws -> LockFile {
            // A watcher that ends unlinks its file; a file opened just before that is not the one on the path any
            // more, so the open is tried again.
            for _ in 0..<10 {
                let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
                guard fd >= 0 else {
                    if errno == ENOENT, identity == nil {
                        throw WatchLockError(.noInput, store: store, "store '\(store)': \(storePath) does not exist "
                                             + "(nor its folder \(Path.parent(storePath)))",
                                             hint: "if the file was moved, point the config at its new place: "
                                                + "'storectl config set stores.\(store).path NEW_PATH'")
                    }
                    let reason = String(cString: strerror(errno))
                    throw WatchLockError(.cantCreate, store: store,
                                         "store '\(store)': cannot create the watch lock file \(path) (\(reason))",
                                         hint: "check the permissions of the folder \(Path.parent(path))")
                }
                var request = flock()
                request.l_type = Int16(F_WRLCK)
                request.l_whence = Int16(SEEK_SET)
                if fcntl(fd, setLock, &request) != 0 {
                    let holder = read(fd: fd)
                    close(fd)
                    let pid = holder?.pid.map { "pid \($0)" } ?? "another process"
                    let since = holder?.startedAt.map { ", since \($0)" } ?? ""
                    let why = identity.map { "  two watchers on one store (id \($0)), whatever path they reach it by, "
                        + "would sync it twice; the lock file is \(path)" }
                        ?? "  two watchers on one store would sync it twice; the lock file is \(path)"
                    throw WatchLockError(.tempFail, store: store,
                                         "store '\(store)' is already served by storectl watch (\(pid)\(since))",
                                         details: [why],
                                         hint: holder?.pid.map { "stop that watcher first (kill \($0)), then run this again" }
                                            ?? "stop the other watcher first, then run this again")
                }
                var opened = stat()
                var onPath = stat()
                if fstat(fd, &opened) == 0, stat(path, &onPath) == 0, opened.st_ino == onPath.st_ino,
                   opened.st_dev == onPath.st_dev
                {
                    return LockFile(path: path, fd: fd)
                }
                close(fd)
            }
            throw WatchLockError(.tempFail, store: store, "store '\(store)': the watch lock file \(path) keeps being "
                                 + "replaced", hint: "retry; check that no other program deletes files next to it")
        }

        func write(_ info: WatcherInfo) {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            guard let data = try? encoder.encode(info) else { return }
            let bytes = [UInt8](data) + [UInt8(ascii: "\n")]
            _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
            _ = ftruncate(fd, off_t(bytes.count))
        }

        static func read(fd: Int32) -> WatcherInfo? {
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

        /// The watcher holding the lock file at `path`, or nil. Takes no lock.
        static func holder(_ path: String) -> WatcherInfo? {
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

    /// The identity lock of one store id, shared by the `WatchLock`s of one store as it moves.
    final class IdentityLock: Sendable {
        let storeID: String
        let file: LockFile

        init(storeID: String, file: LockFile) {
            self.storeID = storeID
            self.file = file
        }
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
