import StoreBase
import Synchronization

/// How long sync rounds took, as a Prometheus histogram: a count per bucket, the sum and the count.
public struct RoundHistogram: Sendable, Equatable {
    /// The upper bounds of the buckets, in seconds: a quiet round takes about a millisecond, a full round on a
    /// container file a few, a baseline of a large store minutes. `+Inf` is implied.
    public static let bounds: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                                          30, 60, 300]

    /// Observations per bucket (not cumulative), one more than `bounds` for `+Inf`.
    public private(set) var buckets = [Int](repeating: 0, count: RoundHistogram.bounds.count + 1)
    /// The sum of every observed duration, in seconds.
    public private(set) var sum = 0.0
    /// How many rounds were observed.
    public private(set) var count = 0

    public init() {}

    /// Adds one round that took `seconds`.
    public mutating func observe(_ seconds: Double) {
        let value = max(0, seconds)
        let index = Self.bounds.firstIndex { value <= $0 } ?? Self.bounds.count
        buckets[index] += 1
        sum += value
        count += 1
    }

    /// The cumulative counts, one per bound and the last for `+Inf`, as the exposition format wants them.
    public var cumulative: [Int] {
        var total = 0
        return buckets.map { n in
            total += n
            return total
        }
    }
}

/// What a watcher counted about one store's rounds since it started.
public struct RoundCounts: Sendable, Equatable {
    /// Rounds by result: `ok`, or the failure's `ExitCode.kind` (`temporary`, `unavailable`, `config`, ...).
    public var byResult: [String: Int] = ["ok": 0]
    /// How long the rounds took.
    public var durations = RoundHistogram()

    public init() {}
}

/// storectl's metrics in the Prometheus text exposition format (version 0.0.4), which node_exporter's textfile
/// collector reads: a `# HELP` and a `# TYPE` line for every family, then its samples, sorted by store.
///
///     let text = MetricsText.render(gauges: [try handle.gauges()], rounds: nil)
public enum MetricsText {
    /// One family of samples.
    struct Family {
        var name: String
        var type: String
        var help: String
        var samples: [(suffix: String, labels: [(String, String)], value: String)] = []
    }

    /// The text for `gauges` (one per store), and with `rounds` (a watcher's counts by store) the round counter and
    /// the duration histogram. Stores that are not up have only `storectl_store_up` and
    /// `storectl_last_success_timestamp_seconds` (0).
    public static func render(gauges: [StoreGauges], rounds: [String: RoundCounts]?) -> String {
        let stores = gauges.sorted { $0.store < $1.store }
        let up = stores.filter(\.up)
        func gauge(_ name: String, _ help: String, _ list: [StoreGauges], _ value: (StoreGauges) -> String) -> Family {
            Family(name: name, type: "gauge", help: help,
                   samples: list.map { ("", [("store", $0.store)], value($0)) })
        }
        var families = [
            gauge("storectl_store_up", "Whether the store file exists and was read as a storectl store (1) or not (0).",
                  stores) { $0.up ? "1" : "0" },
            gauge("storectl_cloud_mode", "Whether the store is in cloud mode (1) or in local mode (0), as its meta "
                  + "records.", up) { $0.cloudMode ? "1" : "0" },
            gauge("storectl_last_success_timestamp_seconds", "When the store's last sync round succeeded, in Unix "
                  + "seconds (0: never).", stores) { number($0.lastSuccessSeconds ?? 0) },
            gauge("storectl_pending_export_rows", "Rows with local changes not yet exported to the cloud.", up) {
                String($0.pendingExportRows)
            },
            gauge("storectl_set_aside_records", "Records from the cloud set aside because they cannot be applied as "
                  + "they are (see storectl status).", up) { String($0.setAsideRecords) },
            gauge("storectl_waiting_for_parent_records", "Records from the cloud waiting for a parent record that "
                  + "has not arrived.", up) { String($0.waitingForParentRecords) },
            gauge("storectl_sync_failing", "Whether the last sync round failed and none succeeded since (1) or "
                  + "not (0).", up) { $0.failing ? "1" : "0" },
        ]
        if let rounds {
            let names = rounds.keys.sorted()
            var total = Family(name: "storectl_rounds_total", type: "counter",
                               help: "Sync rounds the watcher ran since it started, by result: ok, or the failure's "
                                   + "kind (temporary, unavailable, config, ...).")
            var durations = Family(name: "storectl_round_duration_seconds", type: "histogram",
                                   help: "How long the watcher's sync rounds took, in seconds, since it started.")
            for store in names {
                guard let counts = rounds[store] else { continue }
                for result in counts.byResult.keys.sorted() {
                    total.samples.append(("", [("store", store), ("result", result)],
                                          String(counts.byResult[result] ?? 0)))
                }
                let cumulative = counts.durations.cumulative
                for (i, n) in cumulative.enumerated() {
                    let le = i < RoundHistogram.bounds.count ? number(RoundHistogram.bounds[i]) : "+Inf"
                    durations.samples.append(("_bucket", [("store", store), ("le", le)], String(n)))
                }
                durations.samples.append(("_sum", [("store", store)], number(counts.durations.sum)))
                durations.samples.append(("_count", [("store", store)], String(counts.durations.count)))
            }
            families += [total, durations]
        }
        var text = ""
        for family in families {
            text += "# HELP \(family.name) \(escapeHelp(family.help))\n# TYPE \(family.name) \(family.type)\n"
            for sample in family.samples {
                let labels = sample.labels.map { "\($0.0)=\"\(escapeLabel($0.1))\"" }.joined(separator: ",")
                text += "\(family.name)\(sample.suffix){\(labels)} \(sample.value)\n"
            }
        }
        return text
    }

    /// A sample value: an integer without a fraction, otherwise Swift's shortest exact form (`0.0025`,
    /// `1714557600.123`), both of which Prometheus' parser (Go's `ParseFloat`) reads.
    static func number(_ value: Double) -> String {
        guard value.isFinite else { return value.isNaN ? "NaN" : value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return String(value)
    }

    /// "label_value can be any sequence of UTF-8 characters, but the backslash (\), double-quote ("), and line
    /// feed (\n) characters have to be escaped as \\, \", and \n, respectively."
    static func escapeLabel(_ value: String) -> String {
        var out = ""
        for c in value {
            switch c {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case "\n": out += "\\n"
            default: out.append(c)
            }
        }
        return out
    }

    /// "docstring can be any sequence of UTF-8 characters, but the backslash and line feed characters have to be
    /// escaped as \\ and \n, respectively."
    static func escapeHelp(_ value: String) -> String {
        value.replacing("\\", with: "\\\\").replacing("\n", with: "\\n")
    }
}

/// The metrics file of `storectl watch --metrics-file PATH`: every store's gauges, and the rounds counted since
/// the watcher started (a restart starts the counters again, as Prometheus expects of a counter).
///
/// The file is replaced whole after each round (a temporary file in the same folder, renamed over it), so that
/// node_exporter's textfile collector never reads half a file. Store threads call it; one write at a time.
public final class WatchMetrics: Sendable {
    /// The file's path, as given.
    public let path: String
    private let output: any WatchOutput
    private let state = Mutex(State())

    private struct State {
        var gauges: [String: StoreGauges] = [:]
        var rounds: [String: RoundCounts] = [:]
        /// The last write's error, reported once until a write works again.
        var writeError: String?
    }

    public init(path: String, output: any WatchOutput) {
        self.path = path
        self.output = output
    }

    /// Writes the file at the start: the round counters and histograms of `stores` at zero (their gauges follow
    /// once each store's thread has read them).
    /// - Throws: `StoreError` 73 or 74 when the file cannot be written.
    public func start(stores: [String]) throws {
        try state.withLock { s in
            for store in stores where s.rounds[store] == nil { s.rounds[store] = RoundCounts() }
            try replace(s)
        }
    }

    /// Records a store's current gauges and writes the file (errors are logged).
    func update(_ gauges: StoreGauges?, store: String) {
        state.withLock { s in
            if let gauges { s.gauges[store] = gauges }
            if s.rounds[store] == nil { s.rounds[store] = RoundCounts() }
            replaceLogging(&s)
        }
    }

    /// Counts one finished round of `store` (`result` is `ok` or the failure's kind), then records its gauges
    /// (nil: they could not be read, the last ones stay) and writes the file (errors are logged).
    func roundFinished(store: String, result: String, seconds: Double, gauges: StoreGauges?) {
        state.withLock { s in
            var counts = s.rounds[store] ?? RoundCounts()
            counts.byResult[result, default: 0] += 1
            counts.durations.observe(seconds)
            s.rounds[store] = counts
            if let gauges { s.gauges[store] = gauges }
            replaceLogging(&s)
        }
    }

    /// Forgets the stores the watcher no longer serves (after a config reload).
    func retain(_ stores: [String]) {
        state.withLock { s in
            s.gauges = s.gauges.filter { stores.contains($0.key) }
            s.rounds = s.rounds.filter { stores.contains($0.key) }
        }
    }

    private func replace(_ s: State) throws {
        let text = MetricsText.render(gauges: Array(s.gauges.values), rounds: s.rounds)
        // Not fsynced: the file says how things are now, and the next round writes it again.
        try AtomicFile.write(Array(text.utf8), to: path, durable: false)
    }

    private func replaceLogging(_ s: inout State) {
        do {
            try replace(s)
            if s.writeError != nil {
                s.writeError = nil
                output.log(.info, store: nil, "the metrics file \(path) is written again")
            }
        } catch {
            let message = WatchErrorBody(error, store: nil).message
            if s.writeError != message {
                s.writeError = message
                output.log(.warning, store: nil, "cannot write the metrics file: \(message)")
            }
        }
    }
}
