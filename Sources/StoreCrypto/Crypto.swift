import StoreBase

/// The hashes storectl uses, all computed by OpenSSL's libcrypto.
///
///     try Crypto.sha256(Array("abc".utf8))   // ba7816bf...f20015ad
///     try Crypto.hmacSHA256(key: key, message)
///     try Crypto.pbkdf2SHA256(password: pw, salt: salt, iterations: 600_000)
///     try Crypto.scrypt(password: pw, salt: salt, n: 1 << 15, r: 8, p: 1)
///
/// Authenticated encryption is `AESGCM`.
///
/// Every function throws `LibCryptoUnavailableError` (exit 69) when libcrypto cannot be loaded.
public enum Crypto {
    /// SHA-1 (FIPS 180-4). For name-based UUIDs only, never where collision resistance matters.
    public static func sha1(_ message: [UInt8]) throws -> [UInt8] {
        let c = try LibCrypto.shared()
        return try digest(message, c.sha1, size: 20, c)
    }

    /// SHA-256 (FIPS 180-4).
    public static func sha256(_ message: [UInt8]) throws -> [UInt8] {
        let c = try LibCrypto.shared()
        return try digest(message, c.sha256, size: 32, c)
    }

    private static func digest(_ message: [UInt8], _ md: OpaquePointer, size: Int, _ c: LibCrypto) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 64)
        var length: UInt32 = 0
        let ok = message.withUnsafeBytes { input in
            out.withUnsafeMutableBufferPointer { c.EVP_Digest(input.baseAddress, input.count, $0.baseAddress, &length, md,
                                                              nil) }
        }
        guard ok == 1, Int(length) == size else { throw failure("EVP_Digest") }
        return Array(out.prefix(size))
    }

    /// HMAC-SHA256 (RFC 2104) of `message` under `key`.
    public static func hmacSHA256(key: [UInt8], _ message: [UInt8]) throws -> [UInt8] {
        let c = try LibCrypto.shared()
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        // HMAC takes a non-NULL key pointer even for an empty key.
        let keyBytes = key.isEmpty ? [0] : key
        let result = keyBytes.withUnsafeBytes { k in
            message.withUnsafeBufferPointer { m in
                out.withUnsafeMutableBufferPointer { o in
                    c.HMAC(c.sha256, k.baseAddress, Int32(key.count), m.baseAddress, m.count, o.baseAddress, &length)
                }
            }
        }
        guard result != nil, length == 32 else { throw failure("HMAC") }
        return out
    }

    /// PBKDF2 with HMAC-SHA256 (RFC 8018), giving `length` bytes.
    /// - Precondition: `iterations` is at least 1 and fits in an `Int32`.
    public static func pbkdf2SHA256(password: [UInt8], salt: [UInt8], iterations: Int, length: Int = 32) throws
        -> [UInt8]
    {
        guard iterations >= 1, iterations <= Int(Int32.max), length >= 1, length <= 1024 else {
            throw StoreError(.software, "PBKDF2 parameters out of range (\(iterations) iterations, \(length) bytes)")
        }
        let c = try LibCrypto.shared()
        var out = [UInt8](repeating: 0, count: length)
        let passwordBytes = password.map { CChar(bitPattern: $0) } + [0]
        let saltBytes = salt.isEmpty ? [0] : salt
        let ok = passwordBytes.withUnsafeBufferPointer { p in
            saltBytes.withUnsafeBufferPointer { s in
                out.withUnsafeMutableBufferPointer { o in
                    c.PKCS5_PBKDF2_HMAC(p.baseAddress, Int32(password.count), s.baseAddress, Int32(salt.count),
                                        Int32(iterations), c.sha256, Int32(length), o.baseAddress)
                }
            }
        }
        guard ok == 1 else { throw failure("PKCS5_PBKDF2_HMAC") }
        return out
    }

    /// scrypt (RFC 7914), giving `length` bytes: memory-hard, each evaluation fills 128·r·N bytes.
    ///
    /// OpenSSL refuses to use more memory than its `maxmem` argument, 32 MiB when it is 0, which N = 2^15 with r = 8
    /// already passes; storectl gives it what these parameters need (see `scryptMemory`) plus 1 MiB.
    /// - Throws: `StoreError` (exit 70) naming the parameters when they are out of range (see `scryptMemory`).
    public static func scrypt(password: [UInt8], salt: [UInt8], n: UInt64, r: UInt64, p: UInt64, length: Int = 32)
        throws -> [UInt8]
    {
        let memory = try scryptMemory(n: n, r: r, p: p, length: length)
        let c = try LibCrypto.shared()
        var out = [UInt8](repeating: 0, count: length)
        let passwordBytes = password.map { CChar(bitPattern: $0) } + [0]
        let saltBytes = salt.isEmpty ? [0] : salt
        let ok = passwordBytes.withUnsafeBufferPointer { pw in
            saltBytes.withUnsafeBufferPointer { s in
                out.withUnsafeMutableBufferPointer { o in
                    c.EVP_PBE_scrypt(pw.baseAddress, password.count, s.baseAddress, salt.count, n, r, p,
                                     memory + (1 << 20), o.baseAddress, length)
                }
            }
        }
        guard ok == 1 else { throw failure("EVP_PBE_scrypt") }
        return out
    }

    /// The bytes scrypt allocates for these parameters, as OpenSSL counts them: 128·r·(N + 2) for its V array and
    /// 128·r·p for B.
    /// - Throws: `StoreError` (exit 70) naming the parameters unless N is a power of two from 2 to 2^22 (and below
    ///   2^(16·r), RFC 7914 section 2), r and p are at least 1, the memory is at most 1 GiB, and `length` is 1 to
    ///   1024 bytes.
    static func scryptMemory(n: UInt64, r: UInt64, p: UInt64, length: Int) throws -> UInt64 {
        func refused(_ reason: String) -> StoreError {
            StoreError(.software, "scrypt parameters out of range (N=\(n), r=\(r), p=\(p), \(length) bytes): \(reason)")
        }
        guard n > 1, n & (n - 1) == 0, n <= 1 << 22 else { throw refused("N must be a power of two from 2 to 2^22") }
        guard r >= 1, p >= 1 else { throw refused("r and p must be at least 1") }
        // RFC 7914: "N ... less than 2^(128 * r / 8)"; from r = 2 on, that is above the 2^22 cap.
        guard r > 1 || n < 1 << 16 else { throw refused("N must be less than 2^16 when r is 1") }
        guard length >= 1, length <= 1024 else { throw refused("the length must be 1 to 1024 bytes") }
        let (block, o1) = r.multipliedReportingOverflow(by: 128)
        let (v, o2) = block.multipliedReportingOverflow(by: n + 2)
        let (b, o3) = block.multipliedReportingOverflow(by: p)
        let (memory, o4) = v.addingReportingOverflow(b)
        guard !(o1 || o2 || o3 || o4), memory <= 1 << 30 else { throw refused("they need more than 1 GiB of memory") }
        return memory
    }

    /// `count` bytes from OpenSSL's CSPRNG.
    public static func randomBytes(_ count: Int) throws -> [UInt8] {
        let c = try LibCrypto.shared()
        var out = [UInt8](repeating: 0, count: max(count, 1))
        let ok = out.withUnsafeMutableBufferPointer { c.RAND_bytes($0.baseAddress, Int32(count)) }
        guard ok == 1 else { throw failure("RAND_bytes") }
        return Array(out.prefix(count))
    }

    /// Whether `a` and `b` are equal, in time that depends only on their lengths (`CRYPTO_memcmp`).
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) throws -> Bool {
        guard a.count == b.count else { return false }
        guard !a.isEmpty else { return true }
        let c = try LibCrypto.shared()
        return a.withUnsafeBytes { x in b.withUnsafeBytes { y in c.CRYPTO_memcmp(x.baseAddress, y.baseAddress, a.count) } }
            == 0
    }

    /// A libcrypto function that should not fail did.
    static func failure(_ function: String) -> StoreError {
        StoreError(.software, "libcrypto's \(function) failed", hint: "this is a bug or a broken OpenSSL; please report it")
    }
}

/// Name-based UUIDs (RFC 4122 version 5): the same namespace and name give the same UUID on every device.
///
///     try UUIDv5.make(namespace: UUIDv5.dns, name: "www.example.com") // "2ed6657d-e927-568b-95e1-2665a8aea6a2"
public enum UUIDv5 {
    /// The RFC 4122 DNS namespace.
    public static let dns: [UInt8] = [0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f,
                                      0xd4, 0x30, 0xc8]
    /// storectl's namespace for seed record names.
    public static let storectl: [UInt8] = [0x5f, 0x0e, 0x7a, 0x2c, 0x41, 0x3b, 0x4d, 0x8e, 0x9a, 0x51, 0x6c, 0x2d, 0x7e,
                                           0x10, 0xb3, 0x94]

    /// The version-5 UUID of `name` in `namespace`, lowercase with dashes.
    /// - Throws: `LibCryptoUnavailableError` when libcrypto cannot be loaded.
    public static func make(namespace: [UInt8], name: String) throws -> String {
        var hash = try Crypto.sha1(namespace + Array(name.utf8))
        hash[6] = (hash[6] & 0x0f) | 0x50
        hash[8] = (hash[8] & 0x3f) | 0x80
        let hex = Hex.string(hash.prefix(16))
        let parts = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { range in
            String(hex.dropFirst(range.lowerBound).prefix(range.count))
        }
        return parts.joined(separator: "-")
    }
}

/// Short SHA-256 fingerprints of many small values, with one digest context reused (for per-field hashes on hot
/// paths). Not `Sendable`: one owner at a time.
///
///     let digest = try Digest64()
///     let h = try digest.sha256Prefix(tag: 1, name, value)   // first 8 bytes of SHA-256(1 || name || 0 || value)
public final class Digest64 {
    private let c: LibCrypto
    private let ctx: OpaquePointer

    /// - Throws: `LibCryptoUnavailableError` when libcrypto cannot be loaded.
    public init() throws {
        c = try LibCrypto.shared()
        guard let ctx = c.EVP_MD_CTX_new() else {
            throw StoreError(.software, "libcrypto's EVP_MD_CTX_new failed", hint: "this is a bug or a broken OpenSSL; please report it")
        }
        self.ctx = ctx
    }

    deinit { c.EVP_MD_CTX_free(ctx) }

    /// The first 8 bytes, big-endian, of SHA-256(`tag` || `first`), or with `second` of
    /// SHA-256(`tag` || `first` || 0x00 || `second`).
    public func sha256Prefix(tag: UInt8, _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer? = nil) throws
        -> UInt64
    {
        var byte = tag
        var ok = c.EVP_DigestInit_ex(ctx, c.sha256Fetched, nil) == 1
        ok = ok && c.EVP_DigestUpdate(ctx, &byte, 1) == 1
        ok = ok && (first.isEmpty || c.EVP_DigestUpdate(ctx, first.baseAddress, first.count) == 1)
        if let second {
            byte = 0
            ok = ok && c.EVP_DigestUpdate(ctx, &byte, 1) == 1
            ok = ok && (second.isEmpty || c.EVP_DigestUpdate(ctx, second.baseAddress, second.count) == 1)
        }
        var out = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        var length: UInt32 = 0
        ok = ok && withUnsafeMutableBytes(of: &out) {
            c.EVP_DigestFinal_ex(ctx, $0.baseAddress?.assumingMemoryBound(to: UInt8.self), &length) == 1
        }
        guard ok, length == 32 else {
            throw StoreError(.software, "libcrypto's SHA-256 failed", hint: "this is a bug or a broken OpenSSL; please report it")
        }
        return UInt64(bigEndian: out.0)
    }
}
