import Synchronization
import StoreBase
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// SHA-256 (FIPS 180-4), written out because no crypto library is linked.
///
///     SHA256.hash(Array("abc".utf8)) // ba7816bf...f20015ad
public struct SHA256: Sendable {
    /// The digest size in bytes.
    public static let digestSize = 32
    /// The block size in bytes.
    public static let blockSize = 64

    private static let k: [UInt32] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ]

    private var state: [UInt32] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ]
    private var buffer: [UInt8] = []
    private var length: UInt64 = 0

    public init() {}

    /// The digest of `bytes`.
    public static func hash(_ bytes: [UInt8]) -> [UInt8] {
        var h = SHA256()
        h.update(bytes)
        return h.finalize()
    }

    /// Feeds more bytes.
    public mutating func update(_ bytes: [UInt8]) {
        length &+= UInt64(bytes.count)
        var input = bytes[...]
        if !buffer.isEmpty {
            let take = min(Self.blockSize - buffer.count, input.count)
            buffer += input.prefix(take)
            input = input.dropFirst(take)
            if buffer.count == Self.blockSize {
                Self.compress(&state, buffer[...])
                buffer.removeAll(keepingCapacity: true)
            }
        }
        while input.count >= Self.blockSize {
            Self.compress(&state, input.prefix(Self.blockSize))
            input = input.dropFirst(Self.blockSize)
        }
        buffer += input
    }

    /// Pads, finishes and returns the 32-byte digest.
    public mutating func finalize() -> [UInt8] {
        let bitLength = length &* 8
        var tail = buffer
        tail.append(0x80)
        while tail.count % Self.blockSize != 56 { tail.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) {
            tail.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift)))
        }
        var offset = 0
        while offset < tail.count {
            Self.compress(&state, tail[offset..<offset + Self.blockSize])
            offset += Self.blockSize
        }
        buffer.removeAll()
        return Self.bytes(of: state)
    }

    /// The state words as big-endian bytes.
    static func bytes(of words: [UInt32]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(words.count * 4)
        for w in words {
            out += [UInt8(truncatingIfNeeded: w >> 24), UInt8(truncatingIfNeeded: w >> 16),
                    UInt8(truncatingIfNeeded: w >> 8), UInt8(truncatingIfNeeded: w)]
        }
        return out
    }

    /// The initial state after absorbing one full block (used to precompute HMAC's padded keys).
    static func state(afterBlock block: [UInt8]) -> [UInt32] {
        var h = SHA256()
        compress(&h.state, block[...])
        return h.state
    }

    /// One application of the compression function to a block given as 16 big-endian words, with no allocation:
    /// `w` is scratch space for 64 words. PBKDF2's inner loop runs through here.
    @_optimize(speed)
    static func compressWords(_ state: UnsafeMutablePointer<UInt32>, _ block: UnsafePointer<UInt32>,
                              _ w: UnsafeMutablePointer<UInt32>, _ k: UnsafeBufferPointer<UInt32>)
    {
        for i in 0..<16 { w[i] = block[i] }
        for i in 16..<64 {
            let x = w[i - 15], y = w[i - 2]
            let s0 = (x >> 7 | x << 25) ^ (x >> 18 | x << 14) ^ (x >> 3)
            let s1 = (y >> 17 | y << 15) ^ (y >> 19 | y << 13) ^ (y >> 10)
            w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
        }
        var a = state[0], b = state[1], c = state[2], d = state[3]
        var e = state[4], f = state[5], g = state[6], h = state[7]
        for i in 0..<64 {
            let s1 = (e >> 6 | e << 26) ^ (e >> 11 | e << 21) ^ (e >> 25 | e << 7)
            let ch = (e & f) ^ (~e & g)
            let t1 = h &+ s1 &+ ch &+ k[i] &+ w[i]
            let s0 = (a >> 2 | a << 30) ^ (a >> 13 | a << 19) ^ (a >> 22 | a << 10)
            let maj = (a & b) ^ (a & c) ^ (b & c)
            let t2 = s0 &+ maj
            h = g; g = f; f = e; e = d &+ t1
            d = c; c = b; b = a; a = t1 &+ t2
        }
        state[0] &+= a; state[1] &+= b; state[2] &+= c; state[3] &+= d
        state[4] &+= e; state[5] &+= f; state[6] &+= g; state[7] &+= h
    }

    /// Runs `body` with the round constants as a pointer.
    static func withRoundConstants<T>(_ body: (UnsafeBufferPointer<UInt32>) -> T) -> T {
        k.withUnsafeBufferPointer(body)
    }

    /// One application of the compression function to a 64-byte block.
    static func compress(_ state: inout [UInt32], _ block: ArraySlice<UInt8>) {
        var words = [UInt32](repeating: 0, count: 16)
        let base = block.startIndex
        for i in 0..<16 {
            let j = base + i * 4
            words[i] = UInt32(block[j]) << 24 | UInt32(block[j + 1]) << 16 | UInt32(block[j + 2]) << 8
                | UInt32(block[j + 3])
        }
        var w = [UInt32](repeating: 0, count: 64)
        state.withUnsafeMutableBufferPointer { st in
            words.withUnsafeBufferPointer { blk in
                w.withUnsafeMutableBufferPointer { scratch in
                    withRoundConstants { k in
                        guard let s = st.baseAddress, let b = blk.baseAddress, let wp = scratch.baseAddress else { return }
                        compressWords(s, b, wp, k)
                    }
                }
            }
        }
    }
}

/// HMAC-SHA256 (RFC 2104).
public struct HMACSHA256: Sendable {
    let innerState: [UInt32]
    let outerState: [UInt32]
    private let innerPad: [UInt8]
    private let outerPad: [UInt8]

    /// Prepares an HMAC with `key` (hashed first when longer than a block).
    public init(key: [UInt8]) {
        var k = key.count > SHA256.blockSize ? SHA256.hash(key) : key
        k += [UInt8](repeating: 0, count: SHA256.blockSize - k.count)
        innerPad = k.map { $0 ^ 0x36 }
        outerPad = k.map { $0 ^ 0x5c }
        innerState = SHA256.state(afterBlock: innerPad)
        outerState = SHA256.state(afterBlock: outerPad)
    }

    /// The MAC of `message`.
    public func mac(_ message: [UInt8]) -> [UInt8] {
        var inner = SHA256()
        inner.update(innerPad)
        inner.update(message)
        var outer = SHA256()
        outer.update(outerPad)
        outer.update(inner.finalize())
        return outer.finalize()
    }

    /// The MAC of `message` under `key`.
    public static func mac(key: [UInt8], _ message: [UInt8]) -> [UInt8] {
        HMACSHA256(key: key).mac(message)
    }
}

/// PBKDF2 with HMAC-SHA256 (RFC 8018), and the stored form of an account secret.
///
/// The container keeps `pbkdf2-sha256$<iterations>$<salt-hex>$<hash-hex>`, never the secret itself.
public enum PasswordHash {
    /// The iterations used for new secrets: modest, so that a command stays quick even in a debug build.
    public static let defaultIterations = 20_000

    /// PBKDF2-HMAC-SHA256 of `password` with `salt`, giving `length` bytes.
    public static func pbkdf2(password: [UInt8], salt: [UInt8], iterations: Int, length: Int = 32) -> [UInt8] {
        let prf = HMACSHA256(key: password)
        var derived: [UInt8] = []
        var blockIndex: UInt32 = 1
        while derived.count < length {
            let counter = [UInt8(truncatingIfNeeded: blockIndex >> 24), UInt8(truncatingIfNeeded: blockIndex >> 16),
                           UInt8(truncatingIfNeeded: blockIndex >> 8), UInt8(truncatingIfNeeded: blockIndex)]
            let first = prf.mac(salt + counter)
            derived += iterations > 1 ? iterate(prf, first: first, iterations: iterations) : first
            blockIndex += 1
        }
        return Array(derived.prefix(length))
    }

    /// U_2 ... U_c of one PBKDF2 block, XORed onto U_1, on words and without allocation in the loop.
    private static func iterate(_ prf: HMACSHA256, first: [UInt8], iterations: Int) -> [UInt8] {
        var t = [UInt32](repeating: 0, count: 8)
        var u = [UInt32](repeating: 0, count: 16)
        for i in 0..<8 {
            t[i] = UInt32(first[4 * i]) << 24 | UInt32(first[4 * i + 1]) << 16 | UInt32(first[4 * i + 2]) << 8
                | UInt32(first[4 * i + 3])
            u[i] = t[i]
        }
        // The padding of a 32-byte message after one 64-byte block: 0x80, zeros, then the length in bits (768).
        u[8] = 0x8000_0000
        u[15] = 768
        var inner = [UInt32](repeating: 0, count: 16)
        inner[8] = 0x8000_0000
        inner[15] = 768
        var state = [UInt32](repeating: 0, count: 8)
        var w = [UInt32](repeating: 0, count: 64)
        SHA256.withRoundConstants { k in
            state.withUnsafeMutableBufferPointer { sp in
            w.withUnsafeMutableBufferPointer { wp in
            u.withUnsafeMutableBufferPointer { up in
            inner.withUnsafeMutableBufferPointer { ip in
            t.withUnsafeMutableBufferPointer { tp in
                guard let s = sp.baseAddress, let wb = wp.baseAddress, let ub = up.baseAddress,
                      let ib = ip.baseAddress, let tb = tp.baseAddress
                else { return }
                for _ in 1..<iterations {
                    for i in 0..<8 { s[i] = prf.innerState[i] }
                    SHA256.compressWords(s, ub, wb, k)
                    for i in 0..<8 { ib[i] = s[i] }
                    for i in 0..<8 { s[i] = prf.outerState[i] }
                    SHA256.compressWords(s, ib, wb, k)
                    for i in 0..<8 {
                        ub[i] = s[i]
                        tb[i] ^= s[i]
                    }
                }
            }
            }
            }
            }
            }
        }
        return SHA256.bytes(of: t)
    }

    /// Hashes `secret` with a fresh random salt, in the stored form.
    public static func make(secret: String, iterations: Int = defaultIterations) -> String {
        var rng = SystemRandomNumberGenerator()
        let salt = (0..<16).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let hash = pbkdf2(password: Array(secret.utf8), salt: salt, iterations: iterations)
        return "pbkdf2-sha256$\(iterations)$\(Hex.string(salt))$\(Hex.string(hash))"
    }

    /// Whether `secret` matches the stored form `stored`. The comparison takes the same time wherever the bytes
    /// differ. A stored form that cannot be read never matches.
    ///
    /// A match is remembered: in this process's memory, and in the user's `VerifiedSecretCache`, so that the next
    /// process that checks the same secret against the same stored form skips PBKDF2. A mismatch is never
    /// remembered: every wrong guess pays the full PBKDF2 cost.
    public static func verify(secret: String, stored: String) -> Bool {
        // One check per secret and stored hash per process: a command that opens the container more than once
        // pays for PBKDF2 once.
        let key = stored + "\u{0}" + secret
        if let known = verified.withLock({ $0[key] }) { return known }
        let cache = VerifiedSecretCache.forCurrentUser()
        if let cache, cache.contains(secret: secret, stored: stored) {
            verified.withLock { $0[key] = true }
            return true
        }
        let result = computeVerify(secret: secret, stored: stored)
        verified.withLock { $0[key] = result }
        if result { cache?.insert(secret: secret, stored: stored) }
        return result
    }

    private static let verified = Mutex<[String: Bool]>([:])

    private static func computeVerify(secret: String, stored: String) -> Bool {
        let parts = stored.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", let iterations = Int(parts[1]), iterations > 0,
              iterations <= 10_000_000, let salt = Hex.bytes(parts[2]), let expected = Hex.bytes(parts[3]),
              !expected.isEmpty
        else { return false }
        let actual = pbkdf2(password: Array(secret.utf8), salt: salt, iterations: iterations, length: expected.count)
        return constantTimeEqual(actual, expected)
    }

    /// Compares two byte strings in time that depends only on their lengths.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in 0..<a.count { difference |= a[i] ^ b[i] }
        return difference == 0
    }
}

/// The secrets PBKDF2 verified recently for this user, as keyed hashes, so that each short command (`status`,
/// `mode`, `sync`, called by scripts in loops) does not pay for PBKDF2 again: 20,000 iterations are about 13 ms,
/// a quarter of a `storectl mode local` process.
///
/// The file (`$XDG_CACHE_HOME/storectl/verified-secrets`, else `~/.cache/storectl/verified-secrets`, mode 0600 in
/// a 0700 folder) holds a random 32-byte key and, per verified pair, `HMAC-SHA256(key, stored form + NUL +
/// secret)`; never a secret. An entry matches only the exact secret and the exact stored form (salt included), so
/// a changed secret, a rotated or re-registered account misses and pays PBKDF2 again; whether the account is
/// disabled is still read from the container every time. Only matches are written, never mismatches. The file is
/// ignored when it is not a regular file owned by the user with no group or other permissions.
///
/// Someone who can read the file could test guesses at HMAC speed rather than PBKDF2 speed; such a person can
/// read the user's other files too (config.yaml, the scripts that set the secret's variable), the same trust
/// as `~/.pgpass`. `STORECTL_CREDENTIAL_CACHE=off` turns the cache off (every process runs PBKDF2).
public struct VerifiedSecretCache: Sendable {
    /// The file.
    public let path: String
    /// Entries kept: the newest ones.
    static let capacity = 64
    private static let header = "storectl-verified-secrets 1"

    public init(path: String) { self.path = path }

    /// The current user's cache, or nil when it is turned off or there is no home folder.
    public static func forCurrentUser() -> VerifiedSecretCache? {
        func env(_ name: String) -> String? {
            getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
        }
        if let setting = env("STORECTL_CREDENTIAL_CACHE")?.lowercased(), ["off", "0", "no", "false"].contains(setting) {
            return nil
        }
        let base: String
        if let xdg = env("XDG_CACHE_HOME"), xdg.hasPrefix("/") {
            base = xdg
        } else if let home = env("HOME"), home.hasPrefix("/") {
            base = home + "/.cache"
        } else {
            return nil
        }
        return VerifiedSecretCache(path: base + "/storectl/verified-secrets")
    }

    /// Whether `secret` was verified against `stored` before.
    public func contains(secret: String, stored: String) -> Bool {
        guard let (key, entries) = load() else { return false }
        let entry = Self.entry(key: key, secret: secret, stored: stored)
        var found = false
        // Every entry is compared in full, so the time does not tell which one matched.
        for candidate in entries where PasswordHash.constantTimeEqual(candidate, entry) { found = true }
        return found
    }

    /// Remembers that `secret` matches `stored`. Failures are ignored: the cache only saves time.
    public func insert(secret: String, stored: String) {
        let key: [UInt8]
        var entries: [[UInt8]]
        if let (k, e) = load() {
            key = k
            entries = e
        } else {
            var rng = SystemRandomNumberGenerator()
            key = (0..<32).map { _ in UInt8.random(in: 0...255, using: &rng) }
            entries = []
        }
        let entry = Self.entry(key: key, secret: secret, stored: stored)
        entries.removeAll { $0 == entry }
        entries.append(entry)
        if entries.count > Self.capacity { entries.removeFirst(entries.count - Self.capacity) }
        let text = ([Self.header, Hex.string(key)] + entries.map { Hex.string($0) }).joined(separator: "\n") + "\n"
        store(text)
    }

    private static func entry(key: [UInt8], secret: String, stored: String) -> [UInt8] {
        HMACSHA256(key: key).mac(Array((stored + "\u{0}" + secret).utf8))
    }

    /// The key and entries, or nil when the file is missing, unreadable, malformed or not private to the user.
    private func load() -> (key: [UInt8], entries: [[UInt8]])? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_uid == geteuid(),
              info.st_mode & 0o077 == 0, info.st_size > 0, info.st_size < 64 * 1024
        else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        let count = bytes.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress, $0.count) }
        guard count == bytes.count else { return nil }
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
        guard lines.count >= 2, lines[0] == Self.header, let key = Hex.bytes(lines[1]), key.count == 32
        else { return nil }
        let entries = lines.dropFirst(2).compactMap { Hex.bytes($0) }.filter { $0.count == 32 }
        return (key, entries)
    }

    /// Replaces the file with `text`: a private temp file renamed over it, so readers see the old or the new one.
    private func store(_ text: String) {
        guard let slash = path.lastIndex(of: "/") else { return }
        let folder = String(path[..<slash])
        var prefix = ""
        for part in folder.split(separator: "/") {
            prefix += "/" + part
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST { return }
        }
        let temp = path + ".\(getpid()).tmp"
        let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress, $0.count) }
        close(fd)
        if written != bytes.count || rename(temp, path) != 0 { unlink(temp) }
    }
}

private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { read(fd, buffer, count) }
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, buffer, count) }
