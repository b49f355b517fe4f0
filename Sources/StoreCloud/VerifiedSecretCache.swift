import StoreBase
import StoreCrypto
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

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

    /// The cache of the user whose environment this is (`XDG_CACHE_HOME`, `HOME`, `STORECTL_CREDENTIAL_CACHE`),
    /// or nil when it is turned off or there is no home folder. The CLI passes the environment it was started with.
    public static func forUser(environment: [String: String]) -> VerifiedSecretCache? {
        func env(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
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
