import Foundation
import StoreBase

#if canImport(Glibc)
import Glibc
#endif

/// Seconds on the monotonic clock: every time the fleet benchmark compares (a write's commit, an event's arrival,
/// the window's ends) comes from this one clock, so the differences are immune to the wall clock being set.
enum Mono {
    static func now() -> Double { monotonicNow() }

    /// Sleeps until `deadline` (monotonic seconds); returns at once when it has passed.
    static func sleep(until deadline: Double) {
        let left = deadline - now()
        guard left > 0 else { return }
        var request = timespec(tv_sec: Int(left), tv_nsec: Int((left - Double(Int(left))) * 1e9))
        var remaining = timespec()
        while nanosleep(&request, &remaining) < 0 && errno == EINTR { request = remaining }
    }
}

/// CPU times from `/proc/PID/stat` (proc(5)), in seconds.
///
/// The kernel counts in clock ticks (`sysconf(_SC_CLK_TCK)`, 100 per second on Linux), so a figure is only as fine
/// as 10 ms per process; the fleet benchmark sums many processes over many seconds, where that is small.
struct ProcStat {
    var pid: Int32
    var ppid: Int32
    /// utime + stime: the process's own CPU.
    var cpu: Double
    /// cutime + cstime: the CPU of its children that exited and were waited for.
    var childrenCPU: Double
    /// When it started, in ticks after boot: with the pid, it tells a process from a later one that reused the pid.
    var startTicks: UInt64
    var command: String

    static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// The stat of `pid`, or nil when it does not exist (any more) or cannot be read.
    static func read(_ pid: Int32) -> ProcStat? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return nil }
        return parse(text)
    }

    /// Parses one `/proc/PID/stat` line. The command, field 2, is in parentheses and may hold spaces and
    /// parentheses itself, so the fields are counted from the last `)`.
    static func parse(_ text: String) -> ProcStat? {
        guard let open = text.firstIndex(of: "("), let close = text.lastIndex(of: ")"),
              let pid = Int32(text[..<open].trimmingCharacters(in: .whitespaces)) else { return nil }
        let command = String(text[text.index(after: open)..<close])
        // After ")": field 3 (state) is index 0, so field k is index k - 3.
        let fields = text[text.index(after: close)...].split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count > 19, let ppid = Int32(fields[1]), let utime = Double(fields[11]),
              let stime = Double(fields[12]), let cutime = Double(fields[13]), let cstime = Double(fields[14]),
              let start = UInt64(fields[19]) else { return nil }
        return ProcStat(pid: pid, ppid: ppid, cpu: (utime + stime) / ticksPerSecond,
                        childrenCPU: (cutime + cstime) / ticksPerSecond, startTicks: start, command: command)
    }

    /// Every process's stat.
    static func all() -> [ProcStat] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return names.compactMap { Int32($0) }.compactMap(read)
    }
}

/// A PostgreSQL server's CPU: the postmaster and every process it forked (backends, the checkpointer, the WAL
/// writer, autovacuum...), read from /proc, so only for a server on this machine.
struct ServerTree {
    let postmaster: Int32

    /// One reading: the postmaster's own CPU, what its exited children used (it waits for each), and each live
    /// child's CPU.
    struct Sample {
        var postmasterOwn: Double
        var exitedChildren: Double
        var postmaster: Double { postmasterOwn + exitedChildren }
        var children: [Int32: (start: UInt64, cpu: Double)]
        var at: Double
    }

    /// The postmaster's children: from /proc/PID/task/PID/children when the kernel has it (only those few stat
    /// files are read then), else from a scan of every process.
    func children() -> [ProcStat] {
        if let text = try? String(contentsOfFile: "/proc/\(postmaster)/task/\(postmaster)/children", encoding: .utf8) {
            return text.split(separator: " ").compactMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
                .compactMap(ProcStat.read).filter { $0.ppid == postmaster }
        }
        return ProcStat.all().filter { $0.ppid == postmaster }
    }

    func sample() -> Sample? {
        guard let root = ProcStat.read(postmaster) else { return nil }
        var children: [Int32: (start: UInt64, cpu: Double)] = [:]
        for p in self.children() { children[p.pid] = (p.startTicks, p.cpu) }
        return Sample(postmasterOwn: root.cpu, exitedChildren: root.childrenCPU, children: children, at: Mono.now())
    }

    /// Where the server's CPU between two samples went: the postmaster itself (accepting connections and forking a
    /// process for each), server processes that exited in between (through the postmaster's children time, less
    /// what they had used before `from`), and the ones alive at `to`.
    static func breakdown(from: Sample, to: Sample) -> (postmaster: Double, exited: Double, alive: Double) {
        var alive = 0.0
        for (pid, now) in to.children {
            if let before = from.children[pid], before.start == now.start {
                alive += now.cpu - before.cpu
            } else {
                alive += now.cpu
            }
        }
        var exited = to.exitedChildren - from.exitedChildren
        for (pid, before) in from.children where to.children[pid]?.start != before.start {
            exited -= before.cpu
        }
        return (to.postmasterOwn - from.postmasterOwn, exited, alive)
    }

    /// CPU seconds the server used between two samples. A child alive at both counts its difference; one born in
    /// between counts whole; one that exited in between shows up in the postmaster's children time with all of
    /// its life, so its CPU before `from` is taken off again.
    static func cpu(from: Sample, to: Sample) -> Double {
        let parts = breakdown(from: from, to: to)
        return parts.postmaster + parts.exited + parts.alive
    }
}

/// A child process the fleet benchmark starts and leaves running: a `storectl watch --json` process whose stdout
/// comes back through a pipe, line by line, to `EventPump`, or pgbench with its output in a file.
final class WatcherProcess {
    let pid: pid_t
    /// The read end of its stdout (-1 when stdout goes to a file).
    let stdout: Int32
    let device: Int

    /// Starts `argv` with stdout into a pipe (or into `stdoutFile`), stderr into `log`, stdin from /dev/null, and
    /// `environment` added. The pipe's read end is close-on-exec, so no other child holds it open and its end of
    /// file is the watcher's.
    init(device: Int, argv: [String], environment: [String: String], log: String, stdoutFile: String? = nil) throws {
        var fds: [Int32] = [-1, -1]
        if stdoutFile == nil {
            guard pipe(&fds) == 0 else {
                throw StoreError(.software, "cannot make a pipe: \(String(cString: strerror(errno)))")
            }
            // Both ends close on exec: the child gets its stdout through dup2 (which clears the flag on the copy).
            // Processes are started from one thread only, so no other spawn sees the ends before this.
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let stdoutFile {
            posix_spawn_file_actions_addopen(&actions, 1, stdoutFile, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        } else {
            posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        }
        posix_spawn_file_actions_addopen(&actions, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        let cEnv: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgs { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, cEnv)
        if stdoutFile == nil { close(fds[1]) }
        guard rc == 0 else {
            if stdoutFile == nil { close(fds[0]) }
            throw StoreError(.software, "cannot start \(argv[0]): \(String(cString: strerror(rc)))")
        }
        self.pid = pid
        self.stdout = fds[0]
        self.device = device
    }

    /// Waits for the process to end by itself and returns its exit status (128 + signal when a signal ended it).
    func wait() -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    /// Asks the watcher to stop (SIGTERM: the round in progress finishes), waits up to `grace` seconds, then kills
    /// it. Returns its exit status (128 + signal when a signal ended it).
    @discardableResult
    func stop(grace: Double = 15) -> Int32 {
        kill(pid, SIGTERM)
        let deadline = Mono.now() + grace
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { break }
            if r < 0 && errno != EINTR { return -1 }
            if Mono.now() > deadline {
                kill(pid, SIGKILL)
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                break
            }
            usleep(20_000)
        }
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}

/// Reads every watcher's stdout on one thread with poll(2), and hands each complete line to `handle` with the
/// monotonic time it was read: the moment the benchmark learnt of the event, which is what an app reacting to
/// `storectl watch` learns too.
final class EventPump: @unchecked Sendable {
    private let fds: [Int32]
    private let devices: [Int]
    private let handle: @Sendable (_ device: Int, _ line: Substring, _ at: Double) -> Void
    private let lock = NSLock()
    private var stopping = false
    private let done = DispatchSemaphore(value: 0)

    init(_ watchers: [WatcherProcess],
         handle: @escaping @Sendable (_ device: Int, _ line: Substring, _ at: Double) -> Void)
    {
        fds = watchers.map(\.stdout)
        devices = watchers.map(\.device)
        self.handle = handle
    }

    func start() {
        let thread = Thread { [self] in run() }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Stops reading once every watcher closed its stdout (after they were stopped), or after `timeout` seconds.
    func finish(timeout: Double = 20) {
        _ = done.wait(timeout: .now() + timeout)
        lock.withLock { stopping = true }
    }

    private func run() {
        var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        var buffers = Array(repeating: [UInt8](), count: fds.count)
        var open = fds.count
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while open > 0 && !lock.withLock({ stopping }) {
            let ready = poll(&polls, nfds_t(polls.count), 200)
            if ready < 0 && errno != EINTR { break }
            guard ready > 0 else { continue }
            for i in polls.indices where polls[i].fd >= 0 && polls[i].revents != 0 {
                let n = chunk.withUnsafeMutableBytes { read(polls[i].fd, $0.baseAddress, $0.count) }
                let at = Mono.now()
                if n <= 0 {
                    if n < 0 && errno == EINTR { continue }
                    close(polls[i].fd)
                    polls[i].fd = -1
                    open -= 1
                    continue
                }
                buffers[i].append(contentsOf: chunk[0..<n])
                while let newline = buffers[i].firstIndex(of: 10) {
                    let line = String(decoding: buffers[i][..<newline], as: UTF8.self)
                    buffers[i].removeSubrange(...newline)
                    handle(devices[i], Substring(line), at)
                }
            }
        }
        for p in polls where p.fd >= 0 { close(p.fd) }
        done.signal()
    }
}

/// Follows the server processes of one client's sessions while they come and go.
///
/// A client that opens a session per piece of work leaves few of its server processes alive at any given
/// moment, so reading them only at a window's two ends would miss most of its CPU. The monitor asks
/// `pg_stat_activity` every `interval` seconds (0.05), through one psql process it keeps (one more session, whose
/// own server process it reports so that it can be taken off), which server processes carry the client's
/// application_name, and reads every server process's CPU from /proc at the same pace, keeping the last value
/// seen of each. A session shorter than the interval can be missed, and a process's last stretch before it
/// exits is not seen: `sessionsSeen` and the forks counted in the same window tell how much that matters.
final class SessionMonitor: @unchecked Sendable {
    struct Seen {
        var start: UInt64
        var cpu: Double
        var firstSeen: Double
    }

    private let tree: ServerTree
    private let appName: String
    private let interval: Double
    private let lock = NSLock()
    private var ours: Set<Int32> = []
    private var seen: [Int32: Seen] = [:]
    private var stopping = false
    private let done = DispatchSemaphore(value: 0)
    private let pid: pid_t
    private let input: Int32
    private let output: Int32
    private var pending: [UInt8] = []
    /// The server process of the monitor's own session.
    private(set) var ownBackend: Int32?
    /// Queries sent so far (each one a transaction of the database, to be taken off its count).
    private(set) var queries = 0

    init(tree: ServerTree, psql: String, url: String, appName: String, interval: Double = 0.05) throws {
        self.tree = tree
        self.appName = appName
        self.interval = interval
        var toChild: [Int32] = [-1, -1], fromChild: [Int32] = [-1, -1]
        guard pipe(&toChild) == 0, pipe(&fromChild) == 0 else {
            throw StoreError(.software, "cannot make a pipe: \(String(cString: strerror(errno)))")
        }
        for fd in toChild + fromChild { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = [psql, "-X", "-q", "-A", "-t", "-d", url]
        var env = ProcessInfo.processInfo.environment
        env["PGAPPNAME"] = appName + "-monitor"
        let cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        let cEnv: [UnsafeMutablePointer<CChar>?] = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in cArgs { free(p) }
            for p in cEnv { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, psql, &actions, nil, cArgs, cEnv)
        close(toChild[0])
        close(fromChild[1])
        guard rc == 0 else {
            close(toChild[1])
            close(fromChild[0])
            throw StoreError(.software, "cannot start \(psql): \(String(cString: strerror(rc)))")
        }
        self.pid = pid
        input = toChild[1]
        output = fromChild[0]
        ownBackend = ask("SELECT pg_backend_pid();").first.flatMap { Int32($0) }
    }

    /// Sends `sql` to the psql process and returns the lines it printed before the marker that follows.
    private func ask(_ sql: String) -> [String] {
        let marker = "--fleet-monitor-end--"
        let text = sql + "\n\\echo " + marker + "\n"
        let sent = text.withCString { write(input, $0, strlen($0)) }
        guard sent > 0 else { return [] }
        lock.withLock { queries += 1 }
        var lines: [String] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            while let newline = pending.firstIndex(of: 10) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                if line == marker { return lines }
                lines.append(line)
            }
            let n = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return lines }
            pending.append(contentsOf: chunk[0..<n])
        }
    }

    func start() {
        let thread = Thread { [self] in
            let query = "SELECT pid FROM pg_stat_activity WHERE application_name = '\(appName)';"
            while !lock.withLock({ stopping }) {
                let next = Mono.now() + interval
                let pids = ask(query).compactMap { Int32($0) }
                let now = Mono.now()
                let children = tree.children()
                lock.withLock {
                    ours.formUnion(pids)
                    for p in children {
                        if let old = seen[p.pid], old.start == p.startTicks {
                            seen[p.pid]?.cpu = p.cpu
                        } else {
                            seen[p.pid] = Seen(start: p.startTicks, cpu: p.cpu, firstSeen: now)
                        }
                    }
                }
                Mono.sleep(until: next)
            }
            done.signal()
        }
        thread.start()
    }

    /// The client's sessions' CPU between two samples of the server: a process alive at `to` counts from its value
    /// there; one that exited before counts its last value seen; either less its value at `from` when it was
    /// alive then. Also: how many sessions were seen, and how many server processes were started in between (by
    /// any client).
    func cpu(from: ServerTree.Sample, to: ServerTree.Sample) -> (cpu: Double, sessions: Int, forks: Int) {
        lock.withLock {
            var total = 0.0, sessions = 0
            for pid in ours {
                let end: (start: UInt64, cpu: Double)
                if let alive = to.children[pid] {
                    end = alive
                } else if let last = seen[pid], last.firstSeen <= to.at {
                    end = (last.start, last.cpu)
                } else {
                    continue
                }
                if let before = from.children[pid], before.start == end.start {
                    total += end.cpu - before.cpu
                } else if let last = seen[pid], last.firstSeen < from.at, last.start == end.start {
                    continue
                } else {
                    total += end.cpu
                }
                sessions += 1
            }
            let forks = seen.values.filter { $0.firstSeen > from.at && $0.firstSeen <= to.at }.count
            return (total, sessions, forks)
        }
    }

    /// The monitor's own server process's CPU between two samples (to take it off the server's).
    func ownCPU(from: ServerTree.Sample, to: ServerTree.Sample) -> Double {
        guard let own = ownBackend, let a = from.children[own], let b = to.children[own], a.start == b.start else {
            return 0
        }
        return b.cpu - a.cpu
    }

    /// Stops polling and ends the psql process (its session reports its counts as it exits). Safe to call twice.
    func stop() {
        guard !lock.withLock({ let was = stopping; stopping = true; return was }) else { return }
        _ = done.wait(timeout: .now() + 5)
        close(input)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        close(output)
    }
}
