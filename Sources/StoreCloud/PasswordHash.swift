import Synchronization
import StoreBase
import StoreCrypto
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The stored form of an account secret: PBKDF2-HMAC-SHA256 (RFC 8018, computed by libcrypto) with a random salt.
///
/// The container keeps `pbkdf2-sha256$<iterations>$<salt-hex>$<hash-hex>`, never the secret itself. The iteration
/// count travels with each hash, so a container can raise its count: a hash made with fewer iterations than the
/// container's count is replaced on its next successful check (`needsUpgrade`).
public enum PasswordHash {
    /// The iterations for new secrets: OWASP's current guidance for PBKDF2-HMAC-SHA256 (600,000). One check takes
    /// about a quarter of a second; the `VerifiedSecretCache` spares short commands from paying it every time.
    public static let defaultIterations = 600_000
    /// The most iterations a stored hash may ask for (a container written by someone else must not hang a check).
    public static let maximumIterations = 10_000_000

    /// PBKDF2-HMAC-SHA256 of `password` with `salt`, giving `length` bytes.
    /// - Throws: `LibCryptoUnavailableError` when libcrypto cannot be loaded.
    public static func pbkdf2(password: [UInt8], salt: [UInt8], iterations: Int, length: Int = 32) throws -> [UInt8] {
        try Crypto.pbkdf2SHA256(password: password, salt: salt, iterations: iterations, length: length)
    }

    /// Hashes `secret` with a fresh random salt, in the stored form.
    /// - Throws: `LibCryptoUnavailableError` when libcrypto cannot be loaded.
    public static func make(secret: String, iterations: Int = defaultIterations) throws -> String {
        let salt = try Crypto.randomBytes(16)
        let hash = try pbkdf2(password: Array(secret.utf8), salt: salt, iterations: iterations)
        return "pbkdf2-sha256$\(iterations)$\(Hex.string(salt))$\(Hex.string(hash))"
    }

    /// The iteration count recorded in a stored form, or nil when it cannot be read.
    public static func iterations(of stored: String) -> Int? {
        let parts = stored.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", let n = Int(parts[1]), n > 0 else { return nil }
        return n
    }

    /// Whether `stored` was made with fewer iterations than `target`, and should be made again the next time its
    /// secret is known to be right.
    public static func needsUpgrade(_ stored: String, target: Int) -> Bool {
        iterations(of: stored).map { $0 < target } ?? false
    }

    /// Whether `secret` matches the stored form `stored`. The comparison takes the same time wherever the bytes
    /// differ. A stored form that cannot be read never matches.
    ///
    /// A match is remembered: in this process's memory, and in the user's `VerifiedSecretCache`, so that the next
    /// process that checks the same secret against the same stored form skips PBKDF2. A mismatch is never
    /// remembered: every wrong guess pays the full PBKDF2 cost.
    /// - Throws: `LibCryptoUnavailableError` when libcrypto cannot be loaded.
    public static func verify(secret: String, stored: String) throws -> Bool {
        // One check per secret and stored hash per process: a command that opens the container more than once
        // pays for PBKDF2 once.
        let key = stored + "\u{0}" + secret
        if let known = verified.withLock({ $0[key] }) { return known }
        let cache = VerifiedSecretCache.forCurrentUser()
        if let cache, cache.contains(secret: secret, stored: stored) {
            verified.withLock { $0[key] = true }
            return true
        }
        let result = try computeVerify(secret: secret, stored: stored)
        verified.withLock { $0[key] = result }
        if result { cache?.insert(secret: secret, stored: stored) }
        return result
    }

    /// Remembers that `secret` matches `stored`, a hash just made from it (an upgraded hash), so that the next
    /// check does not pay PBKDF2 again.
    public static func remember(secret: String, stored: String) {
        verified.withLock { $0[stored + "\u{0}" + secret] = true }
        VerifiedSecretCache.forCurrentUser()?.insert(secret: secret, stored: stored)
    }

    private static let verified = Mutex<[String: Bool]>([:])

    private static func computeVerify(secret: String, stored: String) throws -> Bool {
        let parts = stored.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", let iterations = Int(parts[1]), iterations > 0,
              iterations <= maximumIterations, let salt = Hex.bytes(parts[2]), let expected = Hex.bytes(parts[3]),
              !expected.isEmpty, expected.count <= 1024
        else { return false }
        let actual = try pbkdf2(password: Array(secret.utf8), salt: salt, iterations: iterations,
                                length: expected.count)
        return try Crypto.constantTimeEqual(actual, expected)
    }
}

/// The secrets PBKDF2 verified recently for this user, as keyed hashes, so that each short command (`status`,
/// `mode`, `sync`, called by scripts in loops) does not pay for PBKDF2 again: 600,000 iterations are about 0.25 s,
/// far more than the rest of a `storectl mode local` process.
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
        guard let (key, entries) = load(), let entry = Self.entry(key: key, secret: secret, stored: stored) else {
            return false
        }
        var found = false
        // Every entry is compared in full, so the time does not tell which one matched.
        for candidate in entries where (try? Crypto.constantTimeEqual(candidate, entry)) == true { found = true }
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
            guard let fresh = try? Crypto.randomBytes(32) else { return }
            key = fresh
            entries = []
        }
        guard let entry = Self.entry(key: key, secret: secret, stored: stored) else { return }
        entries.removeAll { $0 == entry }
        entries.append(entry)
        if entries.count > Self.capacity { entries.removeFirst(entries.count - Self.capacity) }
        let text = ([Self.header, Hex.string(key)] + entries.map { Hex.string($0) }).joined(separator: "\n") + "\n"
        store(text)
    }

    private static func entry(key: [UInt8], secret: String, stored: String) -> [UInt8]? {
        try? Crypto.hmacSHA256(key: key, Array((stored + "\u{0}" + secret).utf8))
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
