import FoundationEssentials
import StoreBase
import StoreConfig
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How serious a log line is.
public enum WatchLogLevel: String, Sendable {
    case info
    case warning = "warn"
    case error
}

/// Where a watcher reports: events (stdout) and log lines (stderr). Called from every store's thread, so an
/// implementation writes each call whole.
public protocol WatchOutput: Sendable {
    /// One event: a JSON line with `--json`, a line of words without.
    func event(_ event: WatchEvent)
    /// One log line; `store` is nil for the watcher as a whole.
    func log(_ level: WatchLogLevel, store: String?, _ message: String)
}

/// The settings of `storectl watch` that do not come from the config.
public struct WatchOptions: Sendable {
    /// Seconds between two polls of the cloud for remote changes (`--interval`).
    public var interval: Double = 10
    /// One round per store, then return (`--once`).
    public var once = false
    /// The first retry's delay bound and the cap of all delays, in seconds (`--max-backoff`).
    public var initialBackoff = 1.0
    public var maxBackoff = 300.0
    /// A local change starts a round once the store has been quiet this long...
    public var debounce = 0.1
    /// ...or this long after the first change of a burst, whichever comes first.
    public var maxDebounce = 3.0
    /// A save another device made (a PostgreSQL notification) starts an import this long after it was heard, so
    /// that the few batches of one export are taken in one round.
    public var remoteDebounce = 0.05
    /// ...and at least this long after the store's last round ended: a device that hears many saves a second takes
    /// several in each import, rather than one import per save (each import has a cost of its own, whatever it
    /// brings).
    public var remoteGap = 0.25
    /// How often the store is checked for local changes (`PRAGMA data_version`, one read of the WAL index).
    public var checkEvery = 0.05
    /// Seconds a running `on_remote_change` command may still take when the watcher stops.
    public var hookGrace = 5.0
    /// At most this many changes are listed in one `import` event (`count` is always the whole number).
    public var maxChangesPerEvent = 1000
    /// Where to write the metrics in Prometheus' text format after each round (`--metrics-file`), if anywhere.
    public var metricsFile: String?

    public init() {}
}

/// Which stores a watcher serves.
public enum WatchSelection: Sendable, Equatable {
    /// Every store of the config that has a `cloud:` section (`--all`).
    case all
    /// One store (`--store NAME`, or the only store when nil).
    case store(String?)
}

/// `storectl watch`: keeps stores in cloud mode in sync by themselves, and reports what arrives.
///
/// Each store is served by a thread of its own that owns the store's connection and, for each round, the cloud's:
/// no connection ever crosses threads. A round is `StoreHandle.sync` (export, then import). A store syncs soon
/// after its history grows (checked with `PRAGMA data_version`, a burst of writes debounced into one round), and
/// polls the cloud every interval (a PostgreSQL container also wakes it with `LISTEN/NOTIFY`). A failed round is
/// retried after an exponential delay with jitter, up to a cap. A store switched to local mode by another process
/// stops contacting the cloud; one switched to cloud mode starts syncing.
///
///     let watcher = Watcher(selection: .all, options: WatchOptions(), environment: env, output: out) {
///         try ConfigLoader.load(path: "config.yaml", environment: env)
///     }
///     let code = try watcher.run()   // until requestStop()
public final class Watcher: Sendable {
    public let selection: WatchSelection
    public let options: WatchOptions
    private let environment: [String: String]
    private let output: any WatchOutput
    private let loadConfig: @Sendable () throws -> Config
    private let requests = Mutex(Requests())
    /// The metrics file's contents, kept for the watcher's life (a config reload keeps the counters).
    private let metrics: WatchMetrics?

    private struct Requests {
        var stop = false
        var reload = false
    }

    /// - Parameter loadConfig: reads the config; called at the start and on each `requestReload()`.
    public init(selection: WatchSelection, options: WatchOptions, environment: [String: String],
                output: any WatchOutput, loadConfig: @escaping @Sendable () throws -> Config)
    {
        self.selection = selection
        self.options = options
        self.environment = environment
        self.output = output
        self.loadConfig = loadConfig
        self.metrics = options.metricsFile.map { WatchMetrics(path: $0, output: output) }
    }

    /// Asks the watcher to stop: rounds in progress finish, then `run()` returns. Safe from any thread.
    public func requestStop() {
        requests.withLock { $0.stop = true }
    }

    /// Asks the watcher to read the config again (SIGHUP). Safe from any thread.
    public func requestReload() {
        requests.withLock { $0.reload = true }
    }

    /// Serves the stores until `requestStop()` (or, with `once`, until each store did one round).
    ///
    /// With `.all`, a store whose own config section is wrong is reported and tried again with a growing delay
    /// (see `WatchConfigProblems`) while the others are served.
    /// - Returns: 0, or with `once` the exit code of the first store whose round failed (78 when a store's config
    ///   section is wrong).
    /// - Throws: the config's errors; `StoreError` exit 75 when another watcher serves one of the stores, 78 when
    ///   no selected store has a `cloud:` section, 73 or 74 when the metrics file cannot be written.
    public func run() throws -> ExitCode {
        var config = try loadConfig()
        var names = try storeNames(in: config, quiet: false)
        var problems = WatchConfigProblems(options: options, output: output)
        var locks: [String: WatchLock] = [:]
        do {
            for name in names {
                let settings = try config.store(named: name)
                locks[name] = try WatchLock.acquire(store: name, storePath: settings.path, environment: environment)
            }
        } catch {
            locks.removeAll()
            throw error
        }
        // A metrics file that cannot be written stops the watcher before it starts, not silently later.
        try metrics?.start(stores: names)
        var workers = try start(names, config: config, locks: locks)
        output.log(.info, store: nil, "watching \(names.count) store(s): \(names.joined(separator: ", "))"
                   + (options.once ? " (one round each)" : ", polling the cloud every "
                      + WatchTime.seconds(options.interval)))
        problems.track(configProblems(config), now: monotonicNow())
        var trimmedAt = monotonicNow()
        while true {
            if monotonicNow() - trimmedAt >= 30 {
                // Memory freed by the rounds goes back to the system, so that the process stays flat for hours.
                MemoryTuning.returnFreeMemory()
                trimmedAt = monotonicNow()
            }
            let (stop, reload) = requests.withLock { r -> (Bool, Bool) in
                defer { r.reload = false }
                return (r.stop, r.reload)
            }
            if stop { break }
            if options.once, workers.allSatisfy({ $0.isFinished }) { break }
            // A worker whose store moved (and config.yaml names the new path) asks to be started there.
            let follow = workers.contains { $0.followRequested }
            // A store whose config section was wrong is tried again: once it is fine, the config is reloaded.
            var fixed = false
            if !options.once, problems.isDue(monotonicNow()) {
                do {
                    fixed = problems.retry(try loadConfig(), now: monotonicNow())
                } catch {
                    problems.retry(failedWith: error, now: monotonicNow())
                }
            }
            if reload || follow || fixed, !options.once {
                let next: Config
                do {
                    next = try loadConfig()
                    _ = try storeNames(in: next, quiet: true)
                } catch {
                    let body = WatchErrorBody(error, store: nil)
                    output.log(.error, store: nil, "cannot reload the config, keeping the one in use: \(body.message)"
                               + (body.hint.map { "; hint: \($0)" } ?? ""))
                    continue
                }
                for worker in workers { worker.requestStop() }
                for worker in workers { worker.join() }
                config = next
                names = (try? storeNames(in: config, quiet: false)) ?? []
                problems.track(configProblems(config), now: monotonicNow())
                for name in locks.keys where !names.contains(name) { locks[name] = nil }
                var served: [String] = []
                for name in names {
                    do {
                        let settings = try config.store(named: name)
                        let path = Path.standardized(settings.path)
                        if let held = locks[name], Path.standardized(held.storePath) != path {
                            // The store is at another path now (moved): lock that path, keeping the lock of the
                            // store's identity, then let go of the old path's.
                            locks[name] = nil
                            locks[name] = try WatchLock.acquire(store: name, storePath: settings.path,
                                                                environment: environment, keeping: held)
                            output.log(.info, store: name, "store '\(name)' is at \(path) now (it was at "
                                       + "\(held.storePath)): serving it there")
                        } else if locks[name] == nil {
                            locks[name] = try WatchLock.acquire(store: name, storePath: settings.path,
                                                                environment: environment)
                        }
                    } catch {
                        locks[name] = nil
                        output.log(.error, store: name, "not watched: \(WatchErrorBody(error, store: name).message)")
                        continue
                    }
                    served.append(name)
                }
                metrics?.retain(served)
                workers = try start(served, config: config, locks: locks)
                output.log(.info, store: nil, "config reloaded from \(config.path): watching \(served.count) store(s)"
                           + (served.isEmpty ? "" : ": " + served.joined(separator: ", ")))
                continue
            }
            usleep(50_000)
        }
        for worker in workers { worker.requestStop() }
        for worker in workers { worker.join() }
        output.log(.info, store: nil, "stopped")
        if let failure = workers.compactMap({ $0.failure }).first { return failure }
        return options.once && !problems.stores.isEmpty ? .config : .ok
    }

    /// The problems of the stores the selection serves whose config section is wrong (`.all` only: a store named
    /// alone fails the watcher with its error).
    private func configProblems(_ config: Config) -> [StoreConfigProblem] {
        selection == .all ? config.problems : []
    }

    /// The stores to serve: those the selection names that have a `cloud:` section.
    private func storeNames(in config: Config, quiet: Bool) throws -> [String] {
        switch selection {
        case .store(let name):
            let settings = try config.store(named: name)
            _ = try StoreHandle(config: config, storeName: settings.name, environment: environment).cloudSettings()
            return [settings.name]
        case .all:
            var names: [String] = []
            for store in config.stores {
                if store.cloud == nil {
                    if !quiet {
                        output.log(.info, store: store.name, "not watched: it has no cloud: section in \(config.path)")
                    }
                } else {
                    names.append(store.name)
                }
            }
            guard !names.isEmpty || !config.problems.isEmpty else {
                throw StoreError(.config, "no store in \(config.path) has a cloud: section, so there is nothing to watch",
                                 hint: "add a cloud: section to a store (see docs/config-reference.md)")
            }
            return names
        }
    }

    private func start(_ names: [String], config: Config, locks: [String: WatchLock]) throws -> [StoreWorker] {
        var workers: [StoreWorker] = []
        for name in names {
            guard let lock = locks[name] else { continue }
            do {
                workers.append(try StoreWorker(store: name, config: config, lock: lock, options: options,
                                               environment: environment, output: output, metrics: metrics))
            } catch {
                for worker in workers { worker.requestStop() }
                for worker in workers { worker.join() }
                throw error
            }
        }
        return workers
    }
}

/// One store's thread, as the supervisor sees it.
final class StoreWorker: Sendable {
    let store: String
    private let control = Mutex(Control())
    private let thread = Mutex<DedicatedThread?>(nil)

    struct Control {
        var stop = false
        var finished = false
        var failure: ExitCode?
        /// The store moved and config.yaml names its new path: the supervisor restarts the worker there.
        var follow = false
    }

    init(store: String, config: Config, lock: WatchLock, options: WatchOptions, environment: [String: String],
         output: any WatchOutput, metrics: WatchMetrics?) throws
    {
        self.store = store
        let started = try DedicatedThread(name: "watch " + store) { [self] in
            // Everything that touches the store or the cloud is made here, on this thread, and stays on it.
            do {
                let loop = try StoreLoop(store: store, config: config, lock: lock, options: options,
                                         environment: environment, output: output, worker: self, metrics: metrics)
                loop.run()
            } catch {
                let body = WatchErrorBody(error, store: store)
                output.log(.error, store: store, "not watched: \(body.message)")
                self.fail(ExitCode(body.code))
            }
            self.control.withLock { $0.finished = true }
        }
        thread.withLock { $0 = started }
    }

    var stopRequested: Bool { control.withLock { $0.stop } }
    var isFinished: Bool { control.withLock { $0.finished } }
    var failure: ExitCode? { control.withLock { $0.failure } }

    var followRequested: Bool { control.withLock { $0.follow } }

    func requestStop() { control.withLock { $0.stop = true } }
    func requestFollow() { control.withLock { $0.follow = true } }
    func fail(_ code: ExitCode) { control.withLock { $0.failure = $0.failure ?? code } }
    func join() { thread.withLock { $0 }?.join() }
}
