internal import CCrypto
import StoreBase
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// OpenSSL's libcrypto, loaded with `dlopen` the first time a command hashes something, as a table of the functions
/// storectl calls.
///
/// Linked, libcrypto made the dynamic loader map and relocate 4.5 MB at the start of every process, 0.6 ms that
/// the short commands scripts call in loops (`status`, `mode`, `--version`) would pay without hashing anything.
/// Loaded here, it costs nothing to a command that does not check a secret or seed. The CCrypto target provides
/// the headers; its module map links nothing, so every function storectl uses is a field of this table.
///
/// `STORECTL_LIBCRYPTO` names another file to open (a path, or a name the loader searches for).
final class LibCrypto: @unchecked Sendable {
    // @unchecked Sendable: immutable after init; every field is a pointer to a C function or to a static,
    // read-only EVP_MD or EVP_CIPHER that OpenSSL documents as safe to share between threads.

    /// The file that was opened.
    let library: String

    // "EVP_sha256() ... return EVP_MD structures ... These are static constant objects" (EVP_sha256(3)).
    let sha1: OpaquePointer
    let sha256: OpaquePointer

    /// `int EVP_Digest(const void *data, size_t count, unsigned char *md, unsigned int *size, const EVP_MD *type,
    /// ENGINE *impl)`.
    let EVP_Digest: @convention(c) (UnsafeRawPointer?, Int, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt32>?,
                                    OpaquePointer?, OpaquePointer?) -> Int32
    /// `unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len, const unsigned char *data,
    /// size_t data_len, unsigned char *md, unsigned int *md_len)`.
    let HMAC: @convention(c) (OpaquePointer?, UnsafeRawPointer?, Int32, UnsafePointer<UInt8>?, Int,
                              UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt32>?) -> UnsafeMutablePointer<UInt8>?
    /// `int PKCS5_PBKDF2_HMAC(const char *pass, int passlen, const unsigned char *salt, int saltlen, int iter,
    /// const EVP_MD *digest, int keylen, unsigned char *out)`.
    let PKCS5_PBKDF2_HMAC: @convention(c) (UnsafePointer<CChar>?, Int32, UnsafePointer<UInt8>?, Int32, Int32,
                                           OpaquePointer?, Int32, UnsafeMutablePointer<UInt8>?) -> Int32
    /// `int RAND_bytes(unsigned char *buf, int num)`.
    let RAND_bytes: @convention(c) (UnsafeMutablePointer<UInt8>?, Int32) -> Int32
    /// `int CRYPTO_memcmp(const void *a, const void *b, size_t len)`: "the time ... is independent of the
    /// contents of the memory regions" (CRYPTO_memcmp(3)).
    let CRYPTO_memcmp: @convention(c) (UnsafeRawPointer?, UnsafeRawPointer?, Int) -> Int32
    /// SHA-256 fetched once from the default provider (OpenSSL 3: `EVP_MD_fetch(NULL, "SHA256", NULL)`), else
    /// `sha256`. "Implicit fetching" (a static EVP_MD given to EVP_DigestInit_ex) looks the algorithm up on every
    /// init (crypto(7), "Performance"): a few times the cost of hashing a short value.
    let sha256Fetched: OpaquePointer
    /// `EVP_MD_CTX *EVP_MD_CTX_new(void)`, `void EVP_MD_CTX_free(EVP_MD_CTX *ctx)`.
    let EVP_MD_CTX_new: @convention(c) () -> OpaquePointer?
    let EVP_MD_CTX_free: @convention(c) (OpaquePointer?) -> Void
    /// `int EVP_DigestInit_ex(EVP_MD_CTX *ctx, const EVP_MD *type, ENGINE *impl)`.
    let EVP_DigestInit_ex: @convention(c) (OpaquePointer?, OpaquePointer?, OpaquePointer?) -> Int32
    /// `int EVP_DigestUpdate(EVP_MD_CTX *ctx, const void *d, size_t cnt)`.
    let EVP_DigestUpdate: @convention(c) (OpaquePointer?, UnsafeRawPointer?, Int) -> Int32
    /// `int EVP_DigestFinal_ex(EVP_MD_CTX *ctx, unsigned char *md, unsigned int *s)`.
    let EVP_DigestFinal_ex: @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<UInt32>?)
        -> Int32

    /// `const EVP_CIPHER *EVP_aes_256_gcm(void)`, called once: like the digests, a static constant object (EVP_aes(3)).
    let aes256GCM: OpaquePointer
    /// `EVP_CIPHER_CTX *EVP_CIPHER_CTX_new(void)`, `void EVP_CIPHER_CTX_free(EVP_CIPHER_CTX *ctx)`.
    let EVP_CIPHER_CTX_new: @convention(c) () -> OpaquePointer?
    let EVP_CIPHER_CTX_free: @convention(c) (OpaquePointer?) -> Void
    /// `int EVP_CIPHER_CTX_ctrl(EVP_CIPHER_CTX *ctx, int type, int arg, void *ptr)`.
    let EVP_CIPHER_CTX_ctrl: @convention(c) (OpaquePointer?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32
    /// `int EVP_EncryptInit_ex(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *type, ENGINE *impl, const unsigned char *key,
    /// const unsigned char *iv)`, and `EVP_DecryptInit_ex` with the same parameters.
    let EVP_EncryptInit_ex: CipherInit
    let EVP_DecryptInit_ex: CipherInit
    /// `int EVP_EncryptUpdate(EVP_CIPHER_CTX *ctx, unsigned char *out, int *outl, const unsigned char *in, int inl)`,
    /// and `EVP_DecryptUpdate` with the same parameters. With `out` NULL, `in` is additional authenticated data.
    let EVP_EncryptUpdate: CipherUpdate
    let EVP_DecryptUpdate: CipherUpdate
    /// `int EVP_EncryptFinal_ex(EVP_CIPHER_CTX *ctx, unsigned char *out, int *outl)`, and `EVP_DecryptFinal_ex`
    /// with the same parameters. "EVP_DecryptFinal_ex() returns 0 if the decrypt failed or 1 for success": for GCM,
    /// whether the tag verified.
    let EVP_EncryptFinal_ex: CipherFinal
    let EVP_DecryptFinal_ex: CipherFinal
    /// `int EVP_PBE_scrypt(const char *pass, size_t passlen, const unsigned char *salt, size_t saltlen, uint64_t N,
    /// uint64_t r, uint64_t p, uint64_t maxmem, unsigned char *key, size_t keylen)`.
    let EVP_PBE_scrypt: @convention(c) (UnsafePointer<CChar>?, Int, UnsafePointer<UInt8>?, Int, UInt64, UInt64, UInt64,
                                        UInt64, UnsafeMutablePointer<UInt8>?, Int) -> Int32

    typealias CipherInit = @convention(c) (OpaquePointer?, OpaquePointer?, OpaquePointer?, UnsafePointer<UInt8>?,
                                           UnsafePointer<UInt8>?) -> Int32
    typealias CipherUpdate = @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int32>?,
                                             UnsafePointer<UInt8>?, Int32) -> Int32
    typealias CipherFinal = @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafeMutablePointer<Int32>?)
        -> Int32

    #if canImport(Darwin)
    static let defaultLibrary = "libcrypto.3.dylib"
    #else
    static let defaultLibrary = "libcrypto.so.3"
    #endif

    /// The process's libcrypto, loaded on the first call.
    /// - Throws: `LibCryptoUnavailableError` (exit 69) when it cannot be loaded; every later call throws it again.
    static func shared() throws(LibCryptoUnavailableError) -> LibCrypto {
        try loaded.get()
    }

    private static let loaded = Result { () throws(LibCryptoUnavailableError) -> LibCrypto in
        let configured = getenv("STORECTL_LIBCRYPTO").map { String(cString: $0) } ?? ""
        return try LibCrypto(library: configured.isEmpty ? defaultLibrary : configured)
    }

    /// Opens `library` and resolves every function storectl uses.
    /// - Throws: `LibCryptoUnavailableError` when the file cannot be loaded or lacks a function.
    init(library: String) throws(LibCryptoUnavailableError) {
        let lib: DynamicLibrary
        do {
            lib = try DynamicLibrary.open(library)
        } catch {
            throw LibCryptoUnavailableError(library: library, reason: error.reason)
        }
        func symbol<F>(_ name: String) throws(LibCryptoUnavailableError) -> F {
            do {
                return try lib.function(name)
            } catch {
                throw LibCryptoUnavailableError(library: library,
                                                reason: error.reason + " (OpenSSL 1.1 or later is needed)")
            }
        }
        self.library = library
        let evpSHA1: @convention(c) () -> OpaquePointer? = try symbol("EVP_sha1")
        let evpSHA256: @convention(c) () -> OpaquePointer? = try symbol("EVP_sha256")
        guard let sha1 = evpSHA1(), let sha256 = evpSHA256() else {
            throw LibCryptoUnavailableError(library: library, reason: "it offers no SHA-1 or SHA-256")
        }
        self.sha1 = sha1
        self.sha256 = sha256
        EVP_Digest = try symbol("EVP_Digest")
        HMAC = try symbol("HMAC")
        PKCS5_PBKDF2_HMAC = try symbol("PKCS5_PBKDF2_HMAC")
        RAND_bytes = try symbol("RAND_bytes")
        CRYPTO_memcmp = try symbol("CRYPTO_memcmp")
        EVP_MD_CTX_new = try symbol("EVP_MD_CTX_new")
        EVP_MD_CTX_free = try symbol("EVP_MD_CTX_free")
        EVP_DigestInit_ex = try symbol("EVP_DigestInit_ex")
        EVP_DigestUpdate = try symbol("EVP_DigestUpdate")
        EVP_DigestFinal_ex = try symbol("EVP_DigestFinal_ex")
        let evpAES256GCM: @convention(c) () -> OpaquePointer? = try symbol("EVP_aes_256_gcm")
        guard let aes256GCM = evpAES256GCM() else {
            throw LibCryptoUnavailableError(library: library, reason: "it offers no AES-256-GCM")
        }
        self.aes256GCM = aes256GCM
        EVP_CIPHER_CTX_new = try symbol("EVP_CIPHER_CTX_new")
        EVP_CIPHER_CTX_free = try symbol("EVP_CIPHER_CTX_free")
        EVP_CIPHER_CTX_ctrl = try symbol("EVP_CIPHER_CTX_ctrl")
        EVP_EncryptInit_ex = try symbol("EVP_EncryptInit_ex")
        EVP_DecryptInit_ex = try symbol("EVP_DecryptInit_ex")
        EVP_EncryptUpdate = try symbol("EVP_EncryptUpdate")
        EVP_DecryptUpdate = try symbol("EVP_DecryptUpdate")
        EVP_EncryptFinal_ex = try symbol("EVP_EncryptFinal_ex")
        EVP_DecryptFinal_ex = try symbol("EVP_DecryptFinal_ex")
        EVP_PBE_scrypt = try symbol("EVP_PBE_scrypt")
        // `EVP_MD *EVP_MD_fetch(OSSL_LIB_CTX *ctx, const char *algorithm, const char *properties)`, OpenSSL 3.
        // The fetched method is kept for the life of the process (never freed, like the static ones).
        let fetch: (@convention(c) (OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> OpaquePointer?)? =
            try? lib.function("EVP_MD_fetch")
        sha256Fetched = fetch.flatMap { $0(nil, "SHA256", nil) } ?? sha256
    }
}

/// libcrypto could not be loaded, so secrets cannot be checked nor seeds named (exit 69).
public struct LibCryptoUnavailableError: DiagnosedError, Equatable {
    /// The file storectl tried to open (`libcrypto.so.3`, or `STORECTL_LIBCRYPTO`).
    public var library: String
    /// Why: the loader's message, or the missing function.
    public var reason: String

    public var exitCode: ExitCode { .unavailable }
    public var summary: String { "cannot load the OpenSSL crypto library \(library): \(reason)" }
    public var hint: String? {
        "install OpenSSL 3 (Debian/Ubuntu: apt-get install libssl3, or libssl-dev; macOS: brew install openssl@3), "
            + "or set STORECTL_LIBCRYPTO to the library's path"
    }
}
