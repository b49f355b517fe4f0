import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Phase timings for profiling, printed to stderr at exit when `STORECTL_TRACE=1`.
///
///     let t = Trace.start(); defer { Trace.add("export.save", t) }
public enum Trace {
    public static let enabled = ProcessInfo.processInfo.environment["STORECTL_TRACE"] == "1"
    private static let totals = Mutex<[String: (Double, Int)]>([:])

    /// A start time (0 when tracing is off).
    public static func start() -> Double { enabled ? Date().timeIntervalSince1970 : 0 }

    /// Adds the time since `start` to `phase`.
    public static func add(_ phase: String, _ start: Double) {
        guard enabled else { return }
        add(seconds: Date().timeIntervalSince1970 - start, to: phase)
    }

    /// Adds `seconds` to `phase`.
    public static func add(seconds: Double, to phase: String) {
        guard enabled else { return }
        totals.withLock { t in
            let current = t[phase] ?? (0, 0)
            t[phase] = (current.0 + seconds, current.1 + 1)
        }
    }

    /// Forgets the totals so far (a benchmark traces only the part it measures).
    public static func reset() {
        totals.withLock { $0.removeAll() }
    }

    /// Prints the totals.
    public static func report() {
        guard enabled else { return }
        let lines = totals.withLock { t in
            t.sorted { $0.key < $1.key }.map { key, value in
                // `trace: NAME  SECONDS s  CALLS calls`, seconds with three decimals (storectl-bench reads these).
                let millis = Int((value.0 * 1000).rounded())
                let fraction = String(millis % 1000)
                let seconds = "\(millis / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
                let name = key.count < 28 ? key + String(repeating: " ", count: 28 - key.count) : key
                let calls = String(value.1)
                return "trace: \(name) " + String(repeating: " ", count: max(0, 9 - seconds.count)) + seconds
                    + " s  " + String(repeating: " ", count: max(0, 8 - calls.count)) + calls + " calls"
            }
        }
        StandardStream.err(lines.joined(separator: "\n") + "\n")
    }
}
