import Foundation
import StoreBase
import StoreCloud
import XCTest

/// The stored form of a secret: its format, its check, its iteration count and its upgrade. The hashes themselves
/// are libcrypto's, checked against the standards' vectors in CryptoTests.
final class PasswordHashTests: XCTestCase {
    private func hex(_ bytes: [UInt8]) -> String { Hex.string(bytes) }

    func testStoredFormVerifiesOnlyTheRightSecret() throws {
        let stored = try PasswordHash.make(secret: "correct horse", iterations: 1000)
        let parts = stored.split(separator: "$").map(String.init)
        XCTAssertEqual(parts.count, 4, stored)
        XCTAssertEqual(parts[0], "pbkdf2-sha256")
        XCTAssertEqual(parts[1], "1000")
        XCTAssertEqual(parts[2].count, 32, "16 bytes of salt")
        XCTAssertEqual(parts[3].count, 64, "32 bytes of hash")
        XCTAssertFalse(stored.contains("correct horse"))
        XCTAssertTrue(try PasswordHash.verify(secret: "correct horse", stored: stored))
        XCTAssertFalse(try PasswordHash.verify(secret: "correct horse ", stored: stored))
        XCTAssertFalse(try PasswordHash.verify(secret: "", stored: stored))
        // A fresh salt each time: the same secret never hashes to the same text.
        XCTAssertNotEqual(try PasswordHash.make(secret: "correct horse", iterations: 1000), stored)
        // Damaged stored forms never match.
        for bad in ["", "pbkdf2-sha256$1000$zz$00", "md5$1$00$00", "pbkdf2-sha256$0$00$00",
                    parts.dropLast().joined(separator: "$")]
        {
            XCTAssertFalse(try PasswordHash.verify(secret: "correct horse", stored: bad), bad)
        }
        XCTAssertEqual(PasswordHash.defaultIterations, 600_000)
        XCTAssertEqual(PasswordHash.iterations(of: stored), 1000)
        XCTAssertTrue(PasswordHash.needsUpgrade(stored, target: 600_000))
        XCTAssertFalse(PasswordHash.needsUpgrade(stored, target: 1000))
        XCTAssertFalse(PasswordHash.needsUpgrade("garbage", target: 600_000))
        // A stored form that asks for more iterations than storectl ever runs never matches (and never hangs).
        let huge = "pbkdf2-sha256$2000000000$" + parts[2] + "$" + parts[3]
        XCTAssertFalse(try PasswordHash.verify(secret: "correct horse", stored: huge))
    }

    func testDefaultIterationsStayUsable() throws {
        let start = Date()
        let stored = try PasswordHash.make(secret: "s3cret")
        XCTAssertTrue(stored.hasPrefix("pbkdf2-sha256$600000$"), stored)
        XCTAssertTrue(try PasswordHash.verify(secret: "s3cret", stored: stored))
        let seconds = Date().timeIntervalSince(start)
        print("PBKDF2-HMAC-SHA256, 600,000 iterations, hashed then checked: \(Int(seconds * 1000)) ms")
        XCTAssertLessThan(seconds, 5.0, "hashing twice with the default iterations")
    }
}
