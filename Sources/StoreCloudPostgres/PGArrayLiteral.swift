extension PGConnInfo {
    /// The same text-format array literal as `textArray(_:)` (`{"a","b",NULL}`), built faster: the bytes between
    /// two characters that need a backslash (`"` and `\`) are copied as one run instead of one by one. A batch of
    /// records is three such literals of a few hundred kilobytes each, built while the zone waits for it.
    static func textArrayLiteral(_ values: [String?]) -> String {
        let quote = UInt8(ascii: "\""), backslash = UInt8(ascii: "\\")
        var out: [UInt8] = []
        // The escapes come on top; for JSON texts about one byte in ten is a quote.
        out.reserveCapacity(values.reduce(2) { $0 + ($1?.utf8.count ?? 4) * 9 / 8 + 3 })
        out.append(UInt8(ascii: "{"))
        for index in values.indices {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            guard var value = values[index] else {
                out.append(contentsOf: "NULL".utf8)
                continue
            }
            out.append(quote)
            // `withUTF8` gives the string's own contiguous bytes (after making them native, if they were not).
            value.withUTF8 { bytes in
                var start = 0
                for position in 0..<bytes.count where bytes[position] == quote || bytes[position] == backslash {
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<position]))
                    out.append(backslash)
                    start = position
                }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
            }
            out.append(quote)
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}
