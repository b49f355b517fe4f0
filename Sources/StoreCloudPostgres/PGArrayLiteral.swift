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

extension PGConnInfo {
    /// The record separator (U+001E) that `separatedText(_:)` puts between values. JSON text never holds it: a
    /// control character is not JSON whitespace, and inside a string it must be escaped (`\u001e`).
    static let recordSeparator = UInt8(0x1e)

    /// `values` joined by `recordSeparator`, for `string_to_array($n, chr(30))` on the server: cheaper to build
    /// and to split than an array literal, which escapes every quote of a JSON text and reads it back one
    /// character at a time. Nil when a value is empty or holds the separator itself: the split would then not
    /// give back `values` (`string_to_array('', ...)` is an empty array).
    static func separatedText(_ values: [String]) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(values.reduce(0) { $0 + $1.utf8.count + 1 })
        for index in values.indices {
            if index > 0 { out.append(recordSeparator) }
            var value = values[index]
            let fits = value.withUTF8 { bytes -> Bool in
                guard !bytes.isEmpty, !bytes.contains(recordSeparator) else { return false }
                out.append(contentsOf: bytes)
                return true
            }
            if !fits { return nil }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension PGConnInfo {
    /// Rows in the text format of `COPY ... FROM STDIN`: columns separated by a tab, rows ended by a newline,
    /// and in a value a backslash, tab, newline or carriage return escaped with a backslash ("Backslash
    /// characters (\\) can be used in the COPY data to quote data characters that might otherwise be taken as
    /// row or column delimiters"); a nil value is `\N` (NULL). Nil when a value holds a NUL byte, which no
    /// PostgreSQL text can.
    static func copyText(_ rows: [[String?]]) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(rows.reduce(0) { $0 + $1.reduce(0) { $0 + ($1?.utf8.count ?? 2) + 1 } + 1 })
        let backslash = UInt8(ascii: "\\"), tab = UInt8(ascii: "\t"), newline = UInt8(ascii: "\n"),
            carriageReturn = UInt8(ascii: "\r")
        for row in rows {
            for (index, field) in row.enumerated() {
                if index > 0 { out.append(tab) }
                guard var value = field else {
                    out.append(contentsOf: [backslash, UInt8(ascii: "N")])
                    continue
                }
                let ok = value.withUTF8 { bytes -> Bool in
                    var start = 0
                    for position in 0..<bytes.count {
                        let byte = bytes[position]
                        guard byte == backslash || byte == tab || byte == newline || byte == carriageReturn
                                || byte == 0 else { continue }
                        if byte == 0 { return false }
                        out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<position]))
                        out.append(backslash)
                        out.append(byte == tab ? UInt8(ascii: "t") : byte == newline ? UInt8(ascii: "n")
                                   : byte == carriageReturn ? UInt8(ascii: "r") : backslash)
                        start = position + 1
                    }
                    out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
                    return true
                }
                if !ok { return nil }
            }
            out.append(newline)
        }
        return out
    }
}
