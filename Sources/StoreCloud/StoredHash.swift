import StoreBase

/// The stored form of an account secret, as a container keeps it: `pbkdf2-sha256$<iterations>$<salt-hex>$<hash-hex>`.
///
/// The iteration count travels with each hash, so a container can raise its count: a hash made with fewer
/// iterations than the container's count is replaced on its next successful check (`PasswordHash.needsUpgrade`).
public struct StoredHash: Sendable, Equatable {
    /// The scheme's name, the first field.
    public static let scheme = "pbkdf2-sha256"

    public var iterations: Int
    public var salt: [UInt8]
    public var hash: [UInt8]

    public init(iterations: Int, salt: [UInt8], hash: [UInt8]) {
        self.iterations = iterations
        self.salt = salt
        self.hash = hash
    }

    /// Reads a stored form; nil when it is not one (another scheme, a field that is not a number or hex, no hash).
    public init?(parsing text: String) {
        let parts = text.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == Self.scheme, let n = Int(parts[1]), n > 0,
              let salt = Hex.bytes(parts[2]), let hash = Hex.bytes(parts[3])
        else { return nil }
        self.init(iterations: n, salt: salt, hash: hash)
    }

    /// The iteration count of a stored form, read without decoding its hex; nil when it cannot be read.
    public static func iterations(of text: String) -> Int? {
        let parts = text.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == Self.scheme, let n = Int(parts[1]), n > 0 else { return nil }
        return n
    }

    /// The text a container keeps.
    public var text: String { "\(Self.scheme)$\(iterations)$\(Hex.string(salt))$\(Hex.string(hash))" }
}
