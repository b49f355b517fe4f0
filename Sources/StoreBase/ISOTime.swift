#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Times as ISO 8601 text in UTC, formatted with the C library's `gmtime_r` (no calendar or time-zone database
/// to load, which matters in commands that scripts call in loops).
public enum ISOTime {
    /// `2024-05-01T10:00:00Z` for whole seconds, `2024-05-01T10:00:00.123Z` with `milliseconds`.
    ///
    ///     ISOTime.string(unixMilliseconds: 1714557600123, fractional: true) // "2024-05-01T10:00:00.123Z"
    public static func string(unixMilliseconds ms: Int64, fractional: Bool) -> String {
        // Floor division, so that times before 1970 keep a positive millisecond part.
        var seconds = time_t(ms / 1000)
        var millis = Int(ms % 1000)
        if millis < 0 {
            millis += 1000
            seconds -= 1
        }
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return String(ms) }
        func pad(_ n: Int32, _ width: Int) -> String {
            let text = String(n)
            return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
        }
        var out = pad(parts.tm_year + 1900, 4) + "-" + pad(parts.tm_mon + 1, 2) + "-" + pad(parts.tm_mday, 2)
        out += "T" + pad(parts.tm_hour, 2) + ":" + pad(parts.tm_min, 2) + ":" + pad(parts.tm_sec, 2)
        if fractional { out += "." + pad(Int32(millis), 3) }
        return out + "Z"
    }
}
