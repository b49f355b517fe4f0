import StoreBase

/// AES-256 in Galois/Counter Mode (NIST SP 800-38D): authenticated encryption, computed by OpenSSL's libcrypto
/// through its EVP cipher API.
///
///     let sealed = try AESGCM.seal(key: key, plaintext: secret, aad: header)   // nonce || ciphertext || tag
///     let secret = try AESGCM.open(key: key, sealed: sealed, aad: header)
///
/// The associated data is authenticated, not encrypted: opening with other associated data fails like a tampered
/// ciphertext. A key must never seal two messages with the same nonce; `seal(key:plaintext:aad:)` draws a fresh
/// random one each time (at most 2^32 messages per key, SP 800-38D section 8.3).
///
/// Every function throws `LibCryptoUnavailableError` (exit 69) when libcrypto cannot be loaded.
public enum AESGCM {
    /// Bytes of a key, of a nonce (96 bits, the size GCM is defined for without hashing the IV) and of a tag.
    public static let keySize = 32, nonceSize = 12, tagSize = 16

    /// The tag did not verify: wrong key, tampered nonce, ciphertext or tag, other associated data, or input too
    /// short to hold a nonce and a tag.
    public struct AuthenticationError: Error, Equatable, Sendable {
        public init() {}
    }

    // `EVP_CTRL_GCM_SET_IVLEN`, `EVP_CTRL_GCM_GET_TAG`, `EVP_CTRL_GCM_SET_TAG` (openssl/evp.h: EVP_CTRL_AEAD_SET_IVLEN
    // 0x9, EVP_CTRL_AEAD_GET_TAG 0x10, EVP_CTRL_AEAD_SET_TAG 0x11).
    private static let setIVLength: Int32 = 0x9
    private static let getTag: Int32 = 0x10
    private static let setTag: Int32 = 0x11

    /// The most bytes given to one `EVP_EncryptUpdate` or `EVP_DecryptUpdate`, whose lengths are `int`s.
    private static let chunk = 1 << 30

    /// Seals with a fresh random 96-bit nonce (RAND_bytes): returns nonce || ciphertext || tag, 28 bytes more than
    /// `plaintext`.
    /// - Throws: `StoreError` (exit 70) when `key` is not 32 bytes.
    public static func seal(key: [UInt8], plaintext: [UInt8], aad: [UInt8]) throws -> [UInt8] {
        try checkKey(key)
        let c = try LibCrypto.shared()
        let nonce = try Crypto.randomBytes(nonceSize)
        var sealed = nonce + [UInt8](repeating: 0, count: plaintext.count + tagSize)
        try sealed.withUnsafeMutableBufferPointer { out in
            try plaintext.withUnsafeBufferPointer { input in
                try nonce.withUnsafeBufferPointer { iv in
                    try encrypt(c, key: key, nonce: iv, plaintext: input, aad: aad,
                                ciphertext: UnsafeMutableBufferPointer(rebasing: out[nonceSize..<out.count - tagSize]),
                                tag: UnsafeMutableBufferPointer(rebasing: out[(out.count - tagSize)...]))
                }
            }
        }
        return sealed
    }

    /// Known-nonce form, for tests and vectors: the ciphertext (as long as `plaintext`) and the 16-byte tag.
    /// - Throws: `StoreError` (exit 70) when `key` is not 32 bytes or `nonce` not 12.
    public static func seal(key: [UInt8], nonce: [UInt8], plaintext: [UInt8], aad: [UInt8]) throws
        -> (ciphertext: [UInt8], tag: [UInt8])
    {
        try checkKey(key)
        try checkNonce(nonce)
        let c = try LibCrypto.shared()
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count)
        var tag = [UInt8](repeating: 0, count: tagSize)
        try ciphertext.withUnsafeMutableBufferPointer { out in
            try tag.withUnsafeMutableBufferPointer { t in
                try plaintext.withUnsafeBufferPointer { input in
                    try nonce.withUnsafeBufferPointer { iv in
                        try encrypt(c, key: key, nonce: iv, plaintext: input, aad: aad, ciphertext: out, tag: t)
                    }
                }
            }
        }
        return (ciphertext, tag)
    }

    /// Opens nonce || ciphertext || tag, as `seal(key:plaintext:aad:)` makes it.
    /// - Throws: `AESGCM.AuthenticationError` when the tag does not verify (wrong key, tampered bytes, other
    ///   associated data) or `sealed` is shorter than a nonce and a tag; `StoreError` (exit 70) when `key` is not
    ///   32 bytes.
    public static func open(key: [UInt8], sealed: [UInt8], aad: [UInt8]) throws -> [UInt8] {
        try checkKey(key)
        guard sealed.count >= nonceSize + tagSize else { throw AuthenticationError() }
        let c = try LibCrypto.shared()
        var plaintext = [UInt8](repeating: 0, count: sealed.count - nonceSize - tagSize)
        try plaintext.withUnsafeMutableBufferPointer { out in
            try sealed.withUnsafeBufferPointer { input in
                try decrypt(c, key: key, nonce: UnsafeBufferPointer(rebasing: input[..<nonceSize]),
                            ciphertext: UnsafeBufferPointer(rebasing: input[nonceSize..<input.count - tagSize]),
                            tag: UnsafeBufferPointer(rebasing: input[(input.count - tagSize)...]), aad: aad,
                            plaintext: out)
            }
        }
        return plaintext
    }

    /// Opens a ciphertext and its tag sealed under `nonce`.
    /// - Throws: `AESGCM.AuthenticationError` when the tag does not verify or is not 16 bytes (OpenSSL would check
    ///   a truncated tag, which is easier to forge); `StoreError` (exit 70) when `key` is not 32 bytes or `nonce`
    ///   not 12.
    public static func open(key: [UInt8], nonce: [UInt8], ciphertext: [UInt8], tag: [UInt8], aad: [UInt8]) throws
        -> [UInt8]
    {
        try checkKey(key)
        try checkNonce(nonce)
        guard tag.count == tagSize else { throw AuthenticationError() }
        let c = try LibCrypto.shared()
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count)
        try plaintext.withUnsafeMutableBufferPointer { out in
            try nonce.withUnsafeBufferPointer { iv in
                try ciphertext.withUnsafeBufferPointer { input in
                    try tag.withUnsafeBufferPointer { t in
                        try decrypt(c, key: key, nonce: iv, ciphertext: input, tag: t, aad: aad, plaintext: out)
                    }
                }
            }
        }
        return plaintext
    }

    private static func checkKey(_ key: [UInt8]) throws {
        guard key.count == keySize else {
            throw StoreError(.software, "an AES-256-GCM key is \(keySize) bytes, not \(key.count)")
        }
    }

    private static func checkNonce(_ nonce: [UInt8]) throws {
        guard nonce.count == nonceSize else {
            throw StoreError(.software, "an AES-256-GCM nonce is \(nonceSize) bytes, not \(nonce.count)")
        }
    }

    /// Encrypts `plaintext` into `ciphertext` (the same length) and writes the tag into `tag` (16 bytes).
    private static func encrypt(_ c: LibCrypto, key: [UInt8], nonce: UnsafeBufferPointer<UInt8>,
                                plaintext: UnsafeBufferPointer<UInt8>, aad: [UInt8],
                                ciphertext: UnsafeMutableBufferPointer<UInt8>,
                                tag: UnsafeMutableBufferPointer<UInt8>) throws
    {
        guard let ctx = c.EVP_CIPHER_CTX_new() else { throw Crypto.failure("EVP_CIPHER_CTX_new") }
        defer { c.EVP_CIPHER_CTX_free(ctx) }
        try start(c, ctx, c.EVP_EncryptInit_ex, "EVP_EncryptInit_ex", key: key, nonce: nonce)
        try aad.withUnsafeBufferPointer { try update(c.EVP_EncryptUpdate, "EVP_EncryptUpdate", ctx, $0, into: nil) }
        try update(c.EVP_EncryptUpdate, "EVP_EncryptUpdate", ctx, plaintext, into: ciphertext)
        // GCM writes nothing at the end; `out` is still a valid place to write to.
        var scratch = [UInt8](repeating: 0, count: 16)
        var length: Int32 = 0
        guard scratch.withUnsafeMutableBufferPointer({ c.EVP_EncryptFinal_ex(ctx, $0.baseAddress, &length) }) == 1,
              length == 0
        else { throw Crypto.failure("EVP_EncryptFinal_ex") }
        guard c.EVP_CIPHER_CTX_ctrl(ctx, getTag, Int32(tagSize), UnsafeMutableRawPointer(tag.baseAddress)) == 1 else {
            throw Crypto.failure("EVP_CIPHER_CTX_ctrl (EVP_CTRL_GCM_GET_TAG)")
        }
    }

    /// Decrypts `ciphertext` into `plaintext` (the same length), which is zeroed unless `tag` verifies.
    private static func decrypt(_ c: LibCrypto, key: [UInt8], nonce: UnsafeBufferPointer<UInt8>,
                                ciphertext: UnsafeBufferPointer<UInt8>, tag: UnsafeBufferPointer<UInt8>, aad: [UInt8],
                                plaintext: UnsafeMutableBufferPointer<UInt8>) throws
    {
        guard let ctx = c.EVP_CIPHER_CTX_new() else { throw Crypto.failure("EVP_CIPHER_CTX_new") }
        defer { c.EVP_CIPHER_CTX_free(ctx) }
        try start(c, ctx, c.EVP_DecryptInit_ex, "EVP_DecryptInit_ex", key: key, nonce: nonce)
        try aad.withUnsafeBufferPointer { try update(c.EVP_DecryptUpdate, "EVP_DecryptUpdate", ctx, $0, into: nil) }
        try update(c.EVP_DecryptUpdate, "EVP_DecryptUpdate", ctx, ciphertext, into: plaintext)
        // EVP_CTRL_GCM_SET_TAG reads the tag through a `void *`; it does not write to it.
        guard c.EVP_CIPHER_CTX_ctrl(ctx, setTag, Int32(tagSize), UnsafeMutableRawPointer(mutating: tag.baseAddress))
            == 1
        else { throw Crypto.failure("EVP_CIPHER_CTX_ctrl (EVP_CTRL_GCM_SET_TAG)") }
        var scratch = [UInt8](repeating: 0, count: 16)
        var length: Int32 = 0
        let verified = scratch.withUnsafeMutableBufferPointer { c.EVP_DecryptFinal_ex(ctx, $0.baseAddress, &length) }
        guard verified == 1, length == 0 else {
            // Nothing unauthenticated leaves: the caller's buffer holds no guess at the plaintext either.
            if let base = plaintext.baseAddress { base.update(repeating: 0, count: plaintext.count) }
            throw AuthenticationError()
        }
    }

    /// Sets up `ctx` for AES-256-GCM with a 12-byte nonce, `key` and `nonce`: the cipher first, then the nonce
    /// length, then key and nonce (EVP_EncryptInit(3), "GCM and OCB Modes").
    private static func start(_ c: LibCrypto, _ ctx: OpaquePointer, _ initialize: LibCrypto.CipherInit, _ name: String,
                              key: [UInt8], nonce: UnsafeBufferPointer<UInt8>) throws
    {
        guard initialize(ctx, c.aes256GCM, nil, nil, nil) == 1 else { throw Crypto.failure(name) }
        guard c.EVP_CIPHER_CTX_ctrl(ctx, setIVLength, Int32(nonce.count), nil) == 1 else {
            throw Crypto.failure("EVP_CIPHER_CTX_ctrl (EVP_CTRL_GCM_SET_IVLEN)")
        }
        guard key.withUnsafeBufferPointer({ initialize(ctx, nil, nil, $0.baseAddress, nonce.baseAddress) }) == 1 else {
            throw Crypto.failure(name)
        }
    }

    /// Feeds `input` to `ctx` a chunk at a time: into `output` (the same length), or, without one, as associated
    /// data. An empty input is not passed at all.
    private static func update(_ function: LibCrypto.CipherUpdate, _ name: String, _ ctx: OpaquePointer,
                               _ input: UnsafeBufferPointer<UInt8>, into output: UnsafeMutableBufferPointer<UInt8>?)
        throws
    {
        guard let inBase = input.baseAddress else { return }
        var offset = 0
        while offset < input.count {
            let count = min(chunk, input.count - offset)
            var written: Int32 = 0
            let ok = function(ctx, output.map { $0.baseAddress! + offset }, &written, inBase + offset, Int32(count))
            guard ok == 1, output == nil || Int(written) == count else { throw Crypto.failure(name) }
            offset += count
        }
    }
}
