#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writing to the standard streams without buffering in between (diagnostics must not wait for an exit).
public enum StandardStream {
    /// Writes `text` to standard output.
    public static func out(_ text: String) { write(1, text) }
    /// Writes `text` to standard error.
    public static func err(_ text: String) { write(2, text) }

    /// Writes all of `text` to `fd`, retrying short writes and interrupted calls. A closed pipe ends the output.
    private static func write(_ fd: Int32, _ text: String) {
        var text = text
        text.withUTF8 { buffer in
            var offset = 0
            while offset < buffer.count, let base = buffer.baseAddress {
                let n = Glibc.write(fd, base + offset, buffer.count - offset)
                if n > 0 {
                    offset += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }

    /// Everything on standard input until end of file.
    public static func readAllInput() -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return read(0, base, raw.count)
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            result.append(contentsOf: buffer[0..<n])
        }
        return result
    }
}
