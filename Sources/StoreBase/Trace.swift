import Foundation
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
        let elapsed = Date().timeIntervalSince1970 - start
        totals.withLock { t in
            let current = t[phase] ?? (0, 0)
            t[phase] = (current.0 + elapsed, current.1 + 1)
        }
    }

    /// Prints the totals.
    public static func report() {
        guard enabled else { return }
        let lines = totals.withLock { t in
            t.sorted { $0.key < $1.key }.map { String(format: "trace: %-28@ %9.3f s  %8d calls", $0.key as NSString, $0.value.0, $0.value.1) }
        }
        FileHandle.standardError.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    }
}
