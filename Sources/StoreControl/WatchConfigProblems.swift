import StoreBase
import StoreConfig

/// The stores `watch --all` cannot serve because their own config section is wrong (an unset variable, a bad
/// URL, an unknown key). Each is reported with an `error` event and tried again after a growing delay (a `retry`
/// event before each wait): the config is read again then, and a store that is fine now is served. The other
/// stores are served all along.
struct WatchConfigProblems {
    private struct Entry {
        var backoff: WatchBackoff
        var retryAt: Double
    }

    private let options: WatchOptions
    private let output: any WatchOutput
    private var entries: [String: Entry] = [:]

    init(options: WatchOptions, output: any WatchOutput) {
        self.options = options
        self.output = output
    }

    /// The stores with a problem.
    var stores: Set<String> { Set(entries.keys) }

    /// Whether a store's next attempt is due at `now` (monotonic seconds).
    func isDue(_ now: Double) -> Bool {
        entries.values.contains { $0.retryAt <= now }
    }

    /// Takes the problems of a config just read (at the start or on a reload): each is reported, and stores that
    /// are fine now are forgotten. A store that stays wrong keeps its growing delay.
    mutating func track(_ problems: [StoreConfigProblem], now: Double) {
        var next: [String: Entry] = [:]
        for problem in problems {
            var backoff = entries[problem.store]?.backoff
                ?? WatchBackoff(initial: options.initialBackoff, cap: options.maxBackoff)
            let retryAt = report(problem, backoff: &backoff, now: now)
            next[problem.store] = Entry(backoff: backoff, retryAt: retryAt)
        }
        entries = next
    }

    /// After the config was read again for the stores whose attempt is due: reports each of them that is still
    /// wrong, with its next delay.
    /// - Returns: whether one of the stores is fine now (the config must be reloaded to serve it).
    mutating func retry(_ config: Config, now: Double) -> Bool {
        var fixed = false
        for (name, entry) in entries where entry.retryAt <= now {
            guard let problem = config.problem(of: name) else {
                fixed = true
                continue
            }
            var backoff = entry.backoff
            let retryAt = report(problem, backoff: &backoff, now: now)
            entries[name] = Entry(backoff: backoff, retryAt: retryAt)
        }
        return fixed
    }

    /// After the config could not be read again at all (its shared part is wrong now): each due store waits
    /// longer, with `error` as its reason.
    mutating func retry(failedWith error: any Error, now: Double) {
        for (name, entry) in entries where entry.retryAt <= now {
            var backoff = entry.backoff
            let body = WatchErrorBody(error, store: name)
            let retryAt = reportRetry(store: name, body: body, backoff: &backoff, now: now)
            entries[name] = Entry(backoff: backoff, retryAt: retryAt)
        }
    }

    /// An `error` event for the problem, then (unless the watcher runs once) a `retry` event.
    /// - Returns: when to try again (monotonic seconds).
    private func report(_ problem: StoreConfigProblem, backoff: inout WatchBackoff, now: Double) -> Double {
        let body = WatchErrorBody(problem.error, store: problem.store)
        let ms = WatchTime.nowMilliseconds()
        output.event(.error(ErrorEvent(store: problem.store, at: WatchTime.iso(ms), error: body)))
        return reportRetry(store: problem.store, body: body, backoff: &backoff, now: now)
    }

    private func reportRetry(store: String, body: WatchErrorBody, backoff: inout WatchBackoff, now: Double)
        -> Double
    {
        if options.once { return Double.infinity }
        let delay = backoff.next()
        let ms = WatchTime.nowMilliseconds()
        output.event(.retry(RetryEvent(store: store, at: WatchTime.iso(ms), attempt: backoff.attempt,
                                       delaySeconds: delay, nextAttemptAt: WatchTime.iso(ms + Int64(delay * 1000)),
                                       reason: body.message, code: body.code)))
        return now + delay
    }
}
