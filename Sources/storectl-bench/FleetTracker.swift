import Foundation
import StoreBase
import StoreSQLite

#if canImport(Glibc)
import Glibc
#endif

/// What the fleet's apps wrote and where each write arrived: the benchmark's ledger, shared by the writer threads
/// and the thread that reads the watchers' events.
///
/// A change is one committed app transaction writing one row of `notes`. It arrives on device j when an `import`
/// event of j's watcher names its key. That is exact only if nothing else could name the key: so each device
/// writes only rows of its own, and updates only a row whose last change has already reached every other device.
/// Then at most one change per key is in flight, and an import naming the key can only be carrying that change.
/// (An app editing a note it wrote a minute ago is the common case; a row edited twice within the sync delay is
/// not measured here.)
final class FleetTracker: @unchecked Sendable {
    struct Change {
        var device: Int
        var key: String
        var insert: Bool
        /// Whether it was written during the measured window (warm-up writes are not).
        var measured: Bool
        /// Monotonic time of the app's COMMIT returning.
        var committed: Double = .nan
        /// BEGIN IMMEDIATE ... COMMIT, seconds.
        var writeSeconds: Double = .nan
        /// Arrival time on each device (nil until it arrives; the writer's own stays nil).
        var arrivals: [Double?]
        var missing: Int
        /// When the last other device got it.
        var everywhere: Double?
    }

    /// A row as the app last wrote it: what every store must hold at the end.
    struct RowValue: Equatable {
        var title: String
        var body: String
        var updatedAt: Int64
    }

    let devices: Int
    private let lock = NSLock()
    private(set) var changes: [Change] = []
    private var inFlight: [String: Int] = [:]
    /// Each device's rows whose last change reached everyone: the rows its app may update.
    private var settled: [[String]]
    private(set) var expected: [String: RowValue] = [:]
    /// Import changes that named a key with no change in flight (which the one-in-flight rule says cannot happen).
    private(set) var unmatched = 0
    /// Import events whose change list was cut short (a change missing from them is then never seen arriving).
    private(set) var truncatedEvents = 0
    /// `saved` of each export event, with its arrival time.
    private(set) var exports: [(device: Int, saved: Int, at: Double)] = []
    private(set) var imports = 0
    /// Error events, with their device.
    private(set) var errors: [(device: Int, at: Double, message: String)] = []
    private(set) var lastEvent: Double = 0
    private(set) var unparsed = 0

    init(devices: Int) {
        self.devices = devices
        settled = Array(repeating: [], count: devices)
    }

    func withLock<T>(_ body: () throws -> T) rethrows -> T { try lock.withLock(body) }

    /// Picks the next change of `device`'s app: an update of one of its settled rows `updateShare` of the time when
    /// it has one, else an insert of a new row. Registers it in flight before it is written, so that no event
    /// can arrive before the ledger knows it.
    func begin(device: Int, measured: Bool, updateShare: Double, rng: inout SystemRandomNumberGenerator)
        -> (index: Int, key: String, insert: Bool)
    {
        lock.withLock {
            var key: String
            var insert = true
            if !settled[device].isEmpty, Double.random(in: 0..<1, using: &rng) < updateShare {
                let i = Int.random(in: 0..<settled[device].count, using: &rng)
                key = settled[device].remove(at: i)
                insert = false
            } else {
                key = UUID().uuidString.lowercased()
            }
            var arrivals = [Double?](repeating: nil, count: devices)
            arrivals[device] = nil
            changes.append(Change(device: device, key: key, insert: insert, measured: measured, arrivals: arrivals,
                                  missing: devices - 1))
            let index = changes.count - 1
            inFlight[key] = index
            if devices == 1 { finishDelivery(index, at: Mono.now()) }
            return (index, key, insert)
        }
    }

    /// Records the commit of change `index` with the row it wrote.
    func committed(_ index: Int, at: Double, seconds: Double, row: RowValue) {
        lock.withLock {
            changes[index].committed = at
            changes[index].writeSeconds = seconds
            expected[changes[index].key] = row
        }
    }

    /// A write that failed (rolled back): it is no change, and its row is settled again if it was an update.
    func failed(_ index: Int) {
        lock.withLock {
            let change = changes[index]
            inFlight[change.key] = nil
            changes[index].missing = -1
            if !change.insert { settled[change.device].append(change.key) }
        }
    }

    private func finishDelivery(_ index: Int, at: Double) {
        changes[index].everywhere = at
        let change = changes[index]
        inFlight[change.key] = nil
        settled[change.device].append(change.key)
    }

    /// One line of device `device`'s watcher, read at `at`.
    func event(device: Int, line: Substring, at: Double) {
        let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        lock.withLock {
            lastEvent = at
            guard let object, let type = object["type"] as? String else {
                unparsed += 1
                return
            }
            switch type {
            case "import":
                imports += 1
                if object["changes_truncated"] as? Bool == true { truncatedEvents += 1 }
                for change in object["changes"] as? [[String: Any]] ?? [] {
                    guard change["entity"] as? String == "notes",
                          let key = (change["key"] as? [Any])?.first as? String else { continue }
                    guard let index = inFlight[key], changes[index].device != device else {
                        unmatched += 1
                        continue
                    }
                    if changes[index].arrivals[device] == nil {
                        changes[index].arrivals[device] = at
                        changes[index].missing -= 1
                        if changes[index].missing == 0 { finishDelivery(index, at: at) }
                    }
                }
            case "export":
                exports.append((device, object["saved"] as? Int ?? 0, at))
            case "error":
                let error = object["error"] as? [String: Any]
                errors.append((device, at, error?["message"] as? String ?? String(line)))
            default:
                break
            }
        }
    }

    /// How many changes (of those written, failed writes aside) have not reached every other device yet.
    var undelivered: Int {
        lock.withLock { changes.filter { $0.missing > 0 }.count }
    }

    /// Waits until every change reached every device or `deadline` passes; returns whether they all did.
    func waitDelivered(until deadline: Double) -> Bool {
        while Mono.now() < deadline {
            if undelivered == 0 { return true }
            usleep(50_000)
        }
        return undelivered == 0
    }

    /// Waits until no watcher printed anything for `quiet` seconds, or `deadline` passes.
    func waitQuiet(_ quiet: Double, until deadline: Double) {
        while Mono.now() < deadline {
            let last = lock.withLock { lastEvent }
            if Mono.now() - last >= quiet { return }
            usleep(100_000)
        }
    }
}

/// One device's app: writes `rate` changes a second into its store through libsqlite3, each in its own
/// `BEGIN IMMEDIATE ... COMMIT`, as apps on SQLite do, waiting on storectl's lock through the busy timeout.
enum FleetWriter {
    /// Timeout of the app's connection when storectl holds the write lock (a common app setting).
    static let busyTimeoutMilliseconds: Int32 = 10_000
    /// The share of writes that update one of the device's settled rows rather than insert one.
    static let updateShare = 0.3

    /// Writes one change now (warm-up, or a single write).
    static func write(_ db: Connection, tracker: FleetTracker, device: Int, measured: Bool,
                      rng: inout SystemRandomNumberGenerator) -> Bool
    {
        let (index, key, insert) = tracker.begin(device: device, measured: measured, updateShare: updateShare,
                                                 rng: &rng)
        let row = FleetTracker.RowValue(title: "d\(device) \(insert ? "new" : "edit") \(index)",
                                        body: Shape.body, updatedAt: Int64(index))
        let start = Mono.now()
        do {
            try db.execute("BEGIN IMMEDIATE")
            if insert {
                try db.run("INSERT INTO notes(uuid, title, body, updated_at) VALUES (?, ?, ?, ?)",
                           [key, row.title, row.body, row.updatedAt])
            } else {
                try db.run("UPDATE notes SET title = ?, body = ?, updated_at = ? WHERE uuid = ?",
                           [row.title, row.body, row.updatedAt, key])
            }
            try db.execute("COMMIT")
            let end = Mono.now()
            tracker.committed(index, at: end, seconds: end - start, row: row)
            return true
        } catch {
            try? db.execute("ROLLBACK")
            tracker.failed(index)
            Output.note("device \(device): the app's write failed: \(error)")
            return false
        }
    }

    /// Writes from `start` until `end` (monotonic seconds) at `rate` per second, the k-th write at
    /// start + phase + k / rate; a write that falls behind goes at once (writes are never skipped).
    static func run(store: String, device: Int, devices: Int, rate: Double, start: Double, end: Double,
                    tracker: FleetTracker) -> (written: Int, failed: Int, late: Int)
    {
        var written = 0, failed = 0, late = 0
        let db: Connection
        do {
            db = try Connection(path: store, mode: .readWrite, busyTimeout: busyTimeoutMilliseconds,
                                foreignKeys: false)
        } catch {
            Output.note("device \(device): cannot open \(store): \(error)")
            return (0, 1, 0)
        }
        var rng = SystemRandomNumberGenerator()
        // Devices are spread evenly over the first period, so the fleet's writes do not all land at once.
        let phase = Double(device) / Double(devices) / rate
        var k = 0
        while true {
            let due = start + phase + Double(k) / rate
            guard due < end else { break }
            if Mono.now() > due + 0.05 { late += 1 }
            Mono.sleep(until: due)
            if write(db, tracker: tracker, device: device, measured: true, rng: &rng) { written += 1 } else { failed += 1 }
            k += 1
        }
        return (written, failed, late)
    }
}
