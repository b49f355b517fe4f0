import Foundation
import StoreCloud
import TestSupport
import XCTest

/// The per-user cache of verified secrets that lets a process skip PBKDF2.
final class VerifiedSecretCacheTests: XCTestCase {
    private let stored = (try? PasswordHash.make(secret: "correct horse", iterations: 1000)) ?? ""

    func testOnlyTheVerifiedSecretAndStoredFormMatch() throws {
        let dir = try TempDirectory()
        let cache = VerifiedSecretCache(path: dir.file("cache/storectl/verified-secrets"))
        XCTAssertFalse(cache.contains(secret: "correct horse", stored: stored))
        cache.insert(secret: "correct horse", stored: stored)
        XCTAssertTrue(cache.contains(secret: "correct horse", stored: stored))
        XCTAssertFalse(cache.contains(secret: "correct horse ", stored: stored))
        XCTAssertFalse(cache.contains(secret: "", stored: stored))
        // The same secret registered again (a new salt) is another stored form: it misses.
        let rotated = try PasswordHash.make(secret: "correct horse", iterations: 1000)
        XCTAssertFalse(cache.contains(secret: "correct horse", stored: rotated))
    }

    func testTheFileIsPrivateAndHoldsNoSecret() throws {
        let dir = try TempDirectory()
        let cache = VerifiedSecretCache(path: dir.file("cache/storectl/verified-secrets"))
        cache.insert(secret: "correct horse", stored: stored)
        let text = try String(contentsOfFile: cache.path, encoding: .utf8)
        XCTAssertFalse(text.contains("correct horse"))
        XCTAssertFalse(text.contains(stored))
        XCTAssertEqual(text.split(separator: "\n").count, 3, text)
        let file = try FileManager.default.attributesOfItem(atPath: cache.path)
        XCTAssertEqual((file[.posixPermissions] as? NSNumber)?.intValue, 0o600)
        let folder = try FileManager.default.attributesOfItem(atPath: dir.file("cache/storectl"))
        XCTAssertEqual((folder[.posixPermissions] as? NSNumber)?.intValue, 0o700)
    }

    func testAFileOthersCanReadIsIgnored() throws {
        let dir = try TempDirectory()
        let cache = VerifiedSecretCache(path: dir.file("cache/storectl/verified-secrets"))
        cache.insert(secret: "correct horse", stored: stored)
        XCTAssertTrue(cache.contains(secret: "correct horse", stored: stored))
        XCTAssertEqual(chmod(cache.path, 0o644), 0)
        XCTAssertFalse(cache.contains(secret: "correct horse", stored: stored))
    }

    func testAMalformedFileIsReplaced() throws {
        let dir = try TempDirectory()
        let path = try dir.write("verified-secrets", "not a cache\n")
        XCTAssertEqual(chmod(path, 0o600), 0)
        let cache = VerifiedSecretCache(path: path)
        XCTAssertFalse(cache.contains(secret: "correct horse", stored: stored))
        cache.insert(secret: "correct horse", stored: stored)
        XCTAssertTrue(cache.contains(secret: "correct horse", stored: stored))
    }

    func testTheNewestEntriesAreKept() throws {
        let dir = try TempDirectory()
        let cache = VerifiedSecretCache(path: dir.file("verified-secrets"))
        for i in 0..<70 { cache.insert(secret: "secret \(i)", stored: stored) }
        XCTAssertFalse(cache.contains(secret: "secret 0", stored: stored))
        XCTAssertFalse(cache.contains(secret: "secret 5", stored: stored))
        XCTAssertTrue(cache.contains(secret: "secret 6", stored: stored))
        XCTAssertTrue(cache.contains(secret: "secret 69", stored: stored))
    }

    func testTheCacheFollowsTheEnvironment() {
        // The environment is the caller's (the CLI passes the one it was started with), never read here.
        var environment = ["XDG_CACHE_HOME": "/tmp/xdg-cache-test", "HOME": "/home/someone"]
        XCTAssertEqual(VerifiedSecretCache.forUser(environment: environment)?.path,
                       "/tmp/xdg-cache-test/storectl/verified-secrets")
        environment["STORECTL_CREDENTIAL_CACHE"] = "off"
        XCTAssertNil(VerifiedSecretCache.forUser(environment: environment))
        XCTAssertEqual(VerifiedSecretCache.forUser(environment: ["HOME": "/home/someone"])?.path,
                       "/home/someone/.cache/storectl/verified-secrets")
        XCTAssertNil(VerifiedSecretCache.forUser(environment: [:]), "no home folder, no cache")
    }
}
