/// How long `storectl watch` waits before it tries a failed store again: exponential, with jitter, up to a cap.
///
/// Attempt n waits a random time in [b/2, b], where b = min(cap, initial × 2^(n-1)) ("equal jitter"): the delays
/// of watchers that failed together spread apart, yet each delay is at least the one before it until the cap, so
/// a log of retries shows them growing.
///
///     var backoff = WatchBackoff(initial: 1, cap: 300)
///     let wait = backoff.next()   // 0.5...1 s, then 1...2 s, 2...4 s, ...
///     backoff.reset()             // after a success
public struct WatchBackoff: Sendable {
    /// The first delay's upper bound, in seconds.
    public var initial: Double
    /// No delay is longer than this, in seconds.
    public var cap: Double
    /// The number of failures since the last success.
    public private(set) var attempt = 0

    public init(initial: Double, cap: Double) {
        self.initial = max(0.001, initial)
        self.cap = max(self.initial, cap)
    }

    /// The upper bound of attempt `n`'s delay (n from 1).
    public func bound(attempt n: Int) -> Double {
        // 2^(n-1), without overflowing for large n.
        let doublings = Double(min(max(n - 1, 0), 60))
        return min(cap, initial * Double.pow2(doublings))
    }

    /// Counts one more failure and returns the delay before the next attempt, using `random` in [0, 1].
    public mutating func next(random: Double = Double.random(in: 0...1)) -> Double {
        attempt += 1
        let b = bound(attempt: attempt)
        return b / 2 + b / 2 * min(1, max(0, random))
    }

    /// Forgets the failures (after a success).
    public mutating func reset() {
        attempt = 0
    }
}

extension Double {
    fileprivate static func pow2(_ n: Double) -> Double {
        var result = 1.0
        var i = 0.0
        while i < n {
            result *= 2
            i += 1
        }
        return result
    }
}
