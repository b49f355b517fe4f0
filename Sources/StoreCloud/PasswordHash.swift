import Synchronization
import StoreBase
import StoreCrypto

/// Account secrets hashed and checked: PBKDF2-HMAC-SHA256 (RFC 8018, computed by libcrypto) with a random salt,
/// kept as a `StoredHash`, never the secret itself.
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
        return StoredHash(iterations: iterations, salt: salt, hash: hash).text
    }

    /// The iteration count recorded in a stored form, or nil when it cannot be read.
    public static func iterations(of stored: String) -> Int? { StoredHash.iterations(of: stored) }

    /// Whether `stored` was made with fewer iterations than `target`, and should be made again the next time its
    /// secret is known to be right.
    public static func needsUpgrade(_ stored: String, target: Int) -> Bool {
        iterations(of: stored).map { $0 < target } ?? false
    }

    /// Whether `secret` matches the stored form `stored`. The comparison takes the same time wherever the bytes
    /// differ. A stored form that cannot be read never matches.
    ///
    /// A match is remembered: in this process's memory, and in `cache` (the user's `VerifiedSecretCache`, which
    /// the caller passes in), so that the next process that checks the same secret against the same stored form
    /// skips PBKDF2. A mismatch is never remembered: every wrong guess pays the full PBKDF2 cost.
    /// - Throws: `LibCryptoUnavailableError` when libcrypto cannot be loaded.
    public static func verify(secret: String, stored: String, cache: VerifiedSecretCache? = nil) throws -> Bool {
        // One check per secret and stored hash per process: a command that opens the container more than once
        // pays for PBKDF2 once.
        let key = stored + "\u{0}" + secret
        if let known = verified.withLock({ $0[key] }) { return known }
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
    public static func remember(secret: String, stored: String, cache: VerifiedSecretCache? = nil) {
        verified.withLock { $0[stored + "\u{0}" + secret] = true }
        cache?.insert(secret: secret, stored: stored)
    }

    private static let verified = Mutex<[String: Bool]>([:])

    private static func computeVerify(secret: String, stored: String) throws -> Bool {
        guard let form = StoredHash(parsing: stored), form.iterations <= maximumIterations, !form.hash.isEmpty,
              form.hash.count <= 1024
        else { return false }
        let actual = try pbkdf2(password: Array(secret.utf8), salt: form.salt, iterations: form.iterations,
                                length: form.hash.count)
        return try Crypto.constantTimeEqual(actual, form.hash)
    }
}
