/// Name-based UUIDs (RFC 4122 version 5): the same namespace and name give the same UUID on every device.
///
/// None of the C libraries storectl links (sqlite3, libyaml, libpq) exposes SHA-1, so it is implemented here,
/// following FIPS 180-4; the tests check it against the standard's vectors.
///
///     UUIDv5.make(namespace: UUIDv5.dns, name: "www.example.com") // "2ed6657d-e927-568b-95e1-2665a8aea6a2"
public enum UUIDv5 {
    /// The RFC 4122 DNS namespace.
    public static let dns: [UInt8] = [0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f,
                                      0xd4, 0x30, 0xc8]
    /// storectl's namespace for seed record names.
    public static let storectl: [UInt8] = [0x5f, 0x0e, 0x7a, 0x2c, 0x41, 0x3b, 0x4d, 0x8e, 0x9a, 0x51, 0x6c, 0x2d, 0x7e,
                                           0x10, 0xb3, 0x94]

    /// The version-5 UUID of `name` in `namespace`, lowercase with dashes.
    public static func make(namespace: [UInt8], name: String) -> String {
        var hash = SHA1.digest(namespace + Array(name.utf8))
        hash[6] = (hash[6] & 0x0f) | 0x50
        hash[8] = (hash[8] & 0x3f) | 0x80
        let hex = hash.prefix(16).map { byte -> String in
            let s = String(byte, radix: 16)
            return s.count == 1 ? "0" + s : s
        }
        return [hex[0..<4], hex[4..<6], hex[6..<8], hex[8..<10], hex[10..<16]].map { $0.joined() }.joined(separator: "-")
    }
}

/// SHA-1 (FIPS 180-4), for name-based UUIDs only: it is not used for anything that needs collision resistance.
public enum SHA1 {
    public static func digest(_ message: [UInt8]) -> [UInt8] {
        var h: [UInt32] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0]
        var data = message
        let bitLength = UInt64(message.count) * 8
        data.append(0x80)
        while data.count % 64 != 56 { data.append(0) }
        for i in (0..<8).reversed() { data.append(UInt8(truncatingIfNeeded: bitLength >> (UInt64(i) * 8))) }
        var w = [UInt32](repeating: 0, count: 80)
        for chunk in stride(from: 0, to: data.count, by: 64) {
            for i in 0..<16 {
                let b = chunk + i * 4
                w[i] = UInt32(data[b]) << 24 | UInt32(data[b + 1]) << 16 | UInt32(data[b + 2]) << 8 | UInt32(data[b + 3])
            }
            for i in 16..<80 {
                let x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
                w[i] = x << 1 | x >> 31
            }
            var a = h[0], b = h[1], c = h[2], d = h[3], e = h[4]
            for i in 0..<80 {
                let f: UInt32
                let k: UInt32
                switch i {
                case 0..<20: f = (b & c) | (~b & d); k = 0x5A827999
                case 20..<40: f = b ^ c ^ d; k = 0x6ED9EBA1
                case 40..<60: f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC
                default: f = b ^ c ^ d; k = 0xCA62C1D6
                }
                let temp = (a << 5 | a >> 27) &+ f &+ e &+ k &+ w[i]
                e = d
                d = c
                c = b << 30 | b >> 2
                b = a
                a = temp
            }
            h[0] = h[0] &+ a
            h[1] = h[1] &+ b
            h[2] = h[2] &+ c
            h[3] = h[3] &+ d
            h[4] = h[4] &+ e
        }
        return h.flatMap { v in (0..<4).map { UInt8(truncatingIfNeeded: v >> (24 - $0 * 8)) } }
    }
}
