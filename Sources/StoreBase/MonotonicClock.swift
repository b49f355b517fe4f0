#if canImport(Glibc)
import Glibc
#endif

/// Seconds on the monotonic clock (`CLOCK_MONOTONIC`): for intervals and deadlines, which a wall clock being set
/// must not move.
public func monotonicNow() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}
