import FoundationEssentials
import StoreBase
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One run of `cloud.on_remote_change`: what the import that triggered it changed.
public struct RemoteChangeJob: Sendable, Equatable {
    public var store: String
    /// The history token after the import.
    public var token: Int64
    /// How many rows changed.
    public var count: Int
    /// The tables that changed, sorted.
    public var entities: [String]
    public var serverToken: String?
    public var transaction: Int64?

    /// The variables the command gets, on top of the watcher's own environment.
    public var environment: [String: String] {
        var env = [
            "STORECTL_STORE": store,
            "STORECTL_TOKEN": String(token),
            "STORECTL_COUNT": String(count),
            "STORECTL_ENTITIES": entities.joined(separator: ","),
            "STORECTL_AUTHOR": "cloud-import",
        ]
        if let serverToken { env["STORECTL_SERVER_TOKEN"] = serverToken }
        if let transaction { env["STORECTL_TRANSACTION"] = String(transaction) }
        return env
    }
}

/// Runs `cloud.on_remote_change` after imports: on a thread of its own, one run at a time, in order, each with a
/// timeout, its output logged line by line. Sync never waits for it: a failing, slow or hung command only delays
/// the commands queued after it.
public final class RemoteChangeHook: Sendable {
    /// The shell command (run with `/bin/sh -c`).
    public let command: String
    /// Seconds a run may take before its process group is stopped (SIGTERM, then SIGKILL 2 s later).
    public let timeout: Double
    /// The folder the command runs in (the config file's folder).
    public let directory: String
    private let environment: [String: String]
    private let log: @Sendable (WatchLogLevel, String) -> Void
    private let state = Mutex(State())
    private let thread = Mutex<DedicatedThread?>(nil)

    /// At most this many runs wait; beyond it the oldest waiting run is dropped, with a log line.
    public static let maxQueued = 100
    /// At most this many lines of a run's output are logged.
    public static let maxLoggedLines = 200

    private struct State {
        var queue: [RemoteChangeJob] = []
        var stopping = false
        /// When the running command must stop because the watcher stops, as a monotonic deadline.
        var stopDeadline: Double?
    }

    public init(command: String, timeout: Double, directory: String, environment: [String: String],
                log: @escaping @Sendable (WatchLogLevel, String) -> Void) throws
    {
        self.command = command
        self.timeout = timeout
        self.directory = directory
        self.environment = environment
        self.log = log
        let started = try DedicatedThread(name: "hook") { [self] in self.loop() }
        thread.withLock { $0 = started }
    }

    /// Queues a run.
    public func enqueue(_ job: RemoteChangeJob) {
        let dropped: RemoteChangeJob? = state.withLock { s in
            guard !s.stopping else { return nil }
            s.queue.append(job)
            return s.queue.count > Self.maxQueued ? s.queue.removeFirst() : nil
        }
        if let dropped {
            log(.warning, "on_remote_change: \(Self.maxQueued) runs are waiting; dropped the one for history token "
                + "\(dropped.token) (read the changes with 'storectl history --after TOKEN')")
        }
    }

    /// Stops: runs still waiting are not started; a running command gets `grace` seconds, then is stopped.
    /// Returns when the hook's thread has ended.
    public func stop(grace: Double) {
        let waiting: Int = state.withLock { s in
            s.stopping = true
            s.stopDeadline = monotonicNow() + grace
            let n = s.queue.count
            s.queue.removeAll()
            return n
        }
        if waiting > 0 {
            log(.warning, "on_remote_change: \(waiting) queued run(s) not started because the watcher stops")
        }
        thread.withLock { $0 }?.join()
    }

    private func loop() {
        while true {
            let next: RemoteChangeJob?? = state.withLock { s in
                if s.stopping { return .some(nil) }
                return s.queue.isEmpty ? nil : .some(s.queue.removeFirst())
            }
            switch next {
            case .none:
                usleep(50_000)
            case .some(.none):
                return
            case .some(.some(let job)):
                run(job)
            }
        }
    }

    /// Runs the command once for `job` and logs how it went.
    func run(_ job: RemoteChangeJob) {
        let start = monotonicNow()
        let outcome: HookOutcome
        do {
            outcome = try HookProcess.run(
                command: command, directory: directory, environment: environment.merging(job.environment) { $1 },
                timeout: timeout, stopDeadline: { self.state.withLock { $0.stopDeadline } },
                maxLines: Self.maxLoggedLines, line: { text in self.log(.info, "on_remote_change: " + text) })
        } catch {
            log(.error, "on_remote_change: cannot start /bin/sh: \(error)")
            return
        }
        let took = WatchTime.seconds(monotonicNow() - start)
        switch outcome {
        case .exited(0):
            log(.info, "on_remote_change: done in \(took) (history token \(job.token), \(job.count) change(s))")
        case .exited(let code):
            log(.warning, "on_remote_change: exited with status \(code) after \(took); sync goes on")
        case .signalled(let signal):
            log(.warning, "on_remote_change: killed by signal \(signal) after \(took); sync goes on")
        case .timedOut:
            log(.warning, "on_remote_change: still running after \(WatchTime.seconds(timeout)) "
                + "(on_remote_change_timeout), stopped; sync goes on")
        case .stopped:
            log(.warning, "on_remote_change: stopped because the watcher stops")
        }
    }
}

/// How a hook run ended.
enum HookOutcome: Equatable {
    case exited(Int32)
    case signalled(Int32)
    case timedOut
    case stopped
}

/// Starts `/bin/sh -c COMMAND` with posix_spawn and watches it.
enum HookProcess {
    struct SpawnError: Error, CustomStringConvertible {
        var call: String
        var code: Int32
        var description: String { "\(call): \(String(cString: strerror(code)))" }
    }

    /// Runs `command` in `directory` with exactly `environment`, its stdin from /dev/null and its stdout and
    /// stderr to `line` (at most `maxLines` lines, each cut at 2,000 bytes). Stops its process group when
    /// `timeout` passes or `stopDeadline()` does.
    static func run(command: String, directory: String, environment: [String: String], timeout: Double,
                    stopDeadline: () -> Double?, maxLines: Int, line: (String) -> Void) throws -> HookOutcome
    {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw SpawnError(call: "pipe", code: errno) }
        let (readEnd, writeEnd) = (fds[0], fds[1])
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        defer { close(readEnd) }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 1)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 2)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // Its own process group (so that a timeout stops the command's children too), no blocked signals (the
        // watcher blocks SIGINT, SIGTERM and SIGHUP for its signal thread), and default dispositions for the
        // signals the watcher ignores.
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGXFSZ, SIGINT, SIGTERM, SIGHUP] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF
                                                     | POSIX_SPAWN_SETPGROUP))

        // The folder change happens in the shell, on a line of its own, so the command text stays as written.
        let script = "cd -- '\(directory.replacing("'", with: "'\\''"))' || exit 70\n" + command
        let argv = ["/bin/sh", "-c", script]
        let envp = environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        let cArgv: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        let cEnvp: [UnsafeMutablePointer<CChar>?] = envp.map { strdup($0) } + [nil]
        defer { for p in cArgv + cEnvp { free(p) } }
        var pid: pid_t = 0
        // The arrays are passed as pointers to their NULL-terminated storage.
        let rc = posix_spawn(&pid, "/bin/sh", &actions, &attributes, cArgv, cEnvp)
        close(writeEnd)
        guard rc == 0 else { throw SpawnError(call: "posix_spawn", code: rc) }

        let start = monotonicNow()
        var outcome: HookOutcome?
        var exitStatus: Int32?
        var pending: [UInt8] = []
        var logged = 0
        var open = true
        var signalledAt: Double?
        var exitedAt: Double?
        func emit(_ bytes: ArraySlice<UInt8>) {
            if logged < maxLines {
                var text = String(decoding: bytes.prefix(2000), as: UTF8.self)
                if bytes.count > 2000 { text += "..." }
                line(text)
            } else if logged == maxLines {
                line("(more output not logged)")
            }
            logged += 1
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            if open {
                var fd = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
                if poll(&fd, 1, 50) > 0 {
                    let n = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
                    if n > 0 {
                        pending += buffer[0..<n]
                        while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                            emit(pending[..<newline])
                            pending.removeSubrange(...newline)
                        }
                    } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                        open = false
                    }
                }
            } else {
                usleep(20_000)
            }
            if exitStatus == nil {
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid {
                    exitStatus = status
                    exitedAt = monotonicNow()
                }
            }
            let now = monotonicNow()
            // Done when the shell exited and its output ended (a background child that keeps the pipe open is
            // given half a second).
            if exitStatus != nil, !open || now - (exitedAt ?? now) > 0.5 { break }
            if outcome == nil {
                if now - start > timeout {
                    outcome = .timedOut
                } else if let deadline = stopDeadline(), now > deadline {
                    outcome = .stopped
                }
                if outcome != nil {
                    kill(-pid, SIGTERM)
                    signalledAt = now
                }
            } else if let signalledAt, now - signalledAt > 2 {
                kill(-pid, SIGKILL)
                if exitStatus != nil { break }
            }
        }
        if !pending.isEmpty { emit(pending[...]) }
        if let outcome { return outcome }
        let status = exitStatus ?? 0
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which are macros.
        if status & 0x7f == 0 { return .exited((status >> 8) & 0xff) }
        return .signalled(status & 0x7f)
    }
}
