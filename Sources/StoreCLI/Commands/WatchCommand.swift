import StoreBase
import StoreConfig
import StoreControl
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `storectl watch`: keep stores in cloud mode in sync by themselves, and report what arrives.
struct WatchCommand: Command {
    static let name = "watch"
    static let abstract = "Keep stores in cloud mode in sync, and report remote changes as they arrive."
    static let arguments = "[--store <name> | --all] [--interval <seconds>] [--once] [--metrics-file <path>]"
    static let discussion = """
        Syncs a store soon after its history grows (a burst of writes is one round), and polls the cloud for
        remote changes every --interval seconds (a PostgreSQL container also wakes the watcher at once). A failed
        round is retried after a growing delay with jitter, up to --max-backoff; each retry is logged with its
        reason and the time of the next attempt. A store switched to local mode stops contacting the cloud; one
        switched to cloud mode starts syncing.

        With --json, stdout gets one JSON line per event (type import, export, error, retry or mode; see
        docs/watch.md); without it, one line of words per import, export and mode switch. The log goes to stderr.
        cloud.on_remote_change runs a command after each import that changed something.

        With --metrics-file PATH, the watcher writes its metrics in Prometheus' text format after each round (a
        temporary file in the same folder, renamed over PATH, as node_exporter's textfile collector expects): per
        store, the last success, pending exports, records set aside, rounds by result and their durations.

        SIGINT or SIGTERM: the rounds in progress finish, then the watcher exits 0; a second signal exits at
        once (every store stays consistent). SIGHUP reads the config again. Only one watcher may serve a store:
        a second one is refused with exit 75.
        """
    static let examples = [
        "storectl watch                          # the only store of the config",
        "storectl watch --all --json             # every store with a cloud: section, events as JSON lines",
        "storectl --store notes watch --interval 5",
        "storectl watch --all --once             # one round for each store, for cron and CI",
        "storectl watch --all --metrics-file /var/lib/prometheus/node-exporter/storectl.prom",
    ]
    static let options = [
        OptionSpec("all", help: "Serve every store of the config that has a cloud: section."),
        OptionSpec("interval", value: "seconds", help: "Seconds between two polls of the cloud (default 10)."),
        OptionSpec("once", help: "Do one round for each store, then exit."),
        OptionSpec("max-backoff", value: "seconds", help: "The longest delay between two retries, in seconds (default 300)."),
        OptionSpec("metrics-file", value: "path", help: "Write Prometheus metrics to this file after each round "
                   + "(replaced atomically, for node_exporter's textfile collector)."),
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        if args.flag("all"), let store = context.global.storeName {
            throw UsageError("--all and --store \(store) cannot be used together",
                             hint: "use --all for every store, or --store NAME for one")
        }
        var options = WatchOptions()
        options.once = args.flag("once")
        if let interval = try seconds(args, "interval") { options.interval = interval }
        if let cap = try seconds(args, "max-backoff") { options.maxBackoff = cap }
        if let path = args.value("metrics-file") {
            guard !path.isEmpty else {
                throw UsageError("--metrics-file expects a file path", hint: "for example --metrics-file storectl.prom")
            }
            options.metricsFile = path
        }
        let selection: WatchSelection = args.flag("all") ? .all : .store(context.global.storeName)
        let config = try context.loadConfig()
        if selection == .store(nil), config.storeNames.count > 1 {
            let names = config.storeNames
            throw UsageError("\(context.configDisplayPath) has \(names.count) stores (\(names.joined(separator: ", "))); "
                             + "choose one with --store NAME, or serve them all with --all",
                             hint: "run '\(context.command("watch --all"))', or '"
                                + "\(context.invocation.command("watch", store: names[0]))'")
        }
        let output = WatchConsoleOutput(console: context.console, json: context.global.json,
                                        invocation: context.invocation)

        // Before any thread starts: only the signal thread receives the signals, and the threads share two malloc
        // arenas, so that the process's memory stays flat over hours of rounds.
        ProcessSignals.block([SIGINT, SIGTERM, SIGHUP])
        MemoryTuning.limitMallocArenas(2)
        // A reader of stdout that went away must not kill the process in the middle of a round.
        signal(SIGPIPE, SIG_IGN)
        let configLoader = ConfigReader(context: context)
        let watcher = Watcher(selection: selection, options: options, environment: context.environment,
                              output: output, loadConfig: { try configLoader.load() })
        let signals = Mutex(0)
        try ProcessSignals.listen([SIGINT, SIGTERM, SIGHUP]) { received in
            let name = received == SIGHUP ? "SIGHUP" : received == SIGINT ? "SIGINT" : "SIGTERM"
            if received == SIGHUP {
                output.log(.info, store: nil, "\(name): reading the config again")
                watcher.requestReload()
                return
            }
            let count = signals.withLock { n -> Int in
                n += 1
                return n
            }
            if count == 1 {
                output.log(.info, store: nil, "\(name): finishing the rounds in progress, then exiting "
                           + "(send it again to exit at once)")
                watcher.requestStop()
                Failpoint.releasePauses()
            } else {
                // Every store stays consistent: an unfinished round's local transaction is rolled back by SQLite,
                // and what it had saved to the cloud is recognised as this device's own on the next round.
                output.log(.warning, store: nil, "\(name) again: exiting now; unfinished rounds are rolled back")
                _exit(0)
            }
        }
        return try watcher.run()
    }

    /// A positive number of seconds from `--name`.
    private static func seconds(_ args: ParsedArguments, _ name: String) throws -> Double? {
        guard let raw = args.value(name) else { return nil }
        guard let value = Double(raw), value.isFinite, value > 0, value <= 86_400 else {
            throw UsageError("--\(name) expects a number of seconds above 0 and up to 86400, got '\(raw)'",
                             hint: "for example --\(name) 10 or --\(name) 0.5")
        }
        return value
    }
}

/// Reads the config for the watcher, at the start and on SIGHUP (the path and environment stay those of the
/// command line).
private final class ConfigReader: @unchecked Sendable {
    // @unchecked: the context is only read here, and the watcher calls `load` from one thread at a time.
    private let context: CommandContext
    private var loads = 0
    init(context: CommandContext) { self.context = context }

    /// The config the command line loaded, the first time; the file read again, each time after.
    func load() throws -> Config {
        loads += 1
        if loads == 1 { return try context.loadConfig() }
        return try ConfigLoader.load(path: context.configPath, displayPath: context.configDisplayPath,
                                     environment: context.environment, expandEnvironment: !context.global.noExpandEnv,
                                     isolateStoreErrors: true)
    }
}

/// The watcher's output on the console: events on stdout, the log on stderr, each line written whole.
///
/// Log lines are `TIME LEVEL [STORE] MESSAGE` (ISO 8601 UTC with milliseconds; level info, warn or error; the
/// store is left out for lines about the watcher as a whole). With --quiet, info lines are left out.
final class WatchConsoleOutput: WatchOutput {
    private let console: Console
    private let json: Bool
    private let invocation: Invocation
    private let writing = Mutex(())

    init(console: Console, json: Bool, invocation: Invocation) {
        self.console = console
        self.json = json
        self.invocation = invocation
    }

    func event(_ event: WatchEvent) {
        var event = event
        // The commands a hint names are written as they must be pasted (with --config and --store as needed).
        if case .error(var e) = event, let hint = e.error.hint {
            e.error.hint = invocation.render(hint, store: e.store)
            event = .error(e)
        }
        let isProblem = event.type == "error" || event.type == "retry"
        if json {
            writing.withLock { _ in console.jsonLine(event) }
        } else if !isProblem {
            writing.withLock { _ in console.out("\(WatchTime.now()) [\(event.store)] \(event.summary)") }
        }
        // Problems are always logged; with --json the rest is logged too, for a journal that keeps stderr.
        if isProblem {
            log(event.type == "error" ? .error : .warning, store: event.store, event.summary)
        } else if json {
            log(.info, store: event.store, event.summary)
        }
    }

    func log(_ level: WatchLogLevel, store: String?, _ message: String) {
        if level == .info && console.quiet { return }
        let line = "\(WatchTime.now()) \(level.rawValue) " + (store.map { "[\($0)] " } ?? "") + message
        writing.withLock { _ in console.err(line) }
    }
}
