import Foundation
import StoreBase
import StoreCloud
import XCTest

/// SHA-256 (NIST FIPS 180-4 examples), HMAC-SHA256 (RFC 4231) and PBKDF2-HMAC-SHA256 (RFC 7914 section 11 and the
/// widely used "password"/"salt" vectors), and the stored form of a secret.
final class PasswordHashTests: XCTestCase {
    private func hex(_ bytes: [UInt8]) -> String { Hex.string(bytes) }

    func testSHA256KnownAnswers() {
        XCTAssertEqual(hex(SHA256.hash([])), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(hex(SHA256.hash(Array("abc".utf8))),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex(SHA256.hash(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(hex(SHA256.hash([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))),
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    func testSHA256IncrementalUpdatesMatchOneShot() {
        let message = (0..<300).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        for split in [0, 1, 55, 56, 63, 64, 65, 128, 299, 300] {
            var h = SHA256()
            h.update(Array(message[..<split]))
            h.update(Array(message[split...]))
            XCTAssertEqual(h.finalize(), SHA256.hash(message), "split at \(split)")
        }
    }

    func testHMACSHA256RFC4231() {
        XCTAssertEqual(hex(HMACSHA256.mac(key: [UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8))),
                       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        XCTAssertEqual(hex(HMACSHA256.mac(key: Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        XCTAssertEqual(hex(HMACSHA256.mac(key: [UInt8](repeating: 0xaa, count: 131),
                                          Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8))),
                       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
    }

    func testPBKDF2KnownAnswers() {
        let password = Array("password".utf8), salt = Array("salt".utf8)
        XCTAssertEqual(hex(PasswordHash.pbkdf2(password: password, salt: salt, iterations: 1)),
                       "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b")
        XCTAssertEqual(hex(PasswordHash.pbkdf2(password: password, salt: salt, iterations: 2)),
                       "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43")
        XCTAssertEqual(hex(PasswordHash.pbkdf2(password: password, salt: salt, iterations: 4096)),
                       "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a")
        // RFC 7914 section 11: 64 bytes, so two PBKDF2 blocks.
        XCTAssertEqual(hex(PasswordHash.pbkdf2(password: Array("passwd".utf8), salt: salt, iterations: 1, length: 64)),
                       "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
                           + "49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783")
        XCTAssertEqual(hex(PasswordHash.pbkdf2(password: Array("Password".utf8), salt: Array("NaCl".utf8),
                                               iterations: 80000, length: 64)),
                       "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56"
                           + "a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d")
    }

    func testStoredFormVerifiesOnlyTheRightSecret() throws {
        let stored = PasswordHash.make(secret: "correct horse", iterations: 1000)
        let parts = stored.split(separator: "$").map(String.init)
        XCTAssertEqual(parts.count, 4, stored)
        XCTAssertEqual(parts[0], "pbkdf2-sha256")
        XCTAssertEqual(parts[1], "1000")
        XCTAssertEqual(parts[2].count, 32, "16 bytes of salt")
        XCTAssertEqual(parts[3].count, 64, "32 bytes of hash")
        XCTAssertFalse(stored.contains("correct horse"))
        XCTAssertTrue(PasswordHash.verify(secret: "correct horse", stored: stored))
        XCTAssertFalse(PasswordHash.verify(secret: "correct horse ", stored: stored))
        XCTAssertFalse(PasswordHash.verify(secret: "", stored: stored))
        // A fresh salt each time: the same secret never hashes to the same text.
        XCTAssertNotEqual(PasswordHash.make(secret: "correct horse", iterations: 1000), stored)
        // Damaged stored forms never match.
        for bad in ["", "pbkdf2-sha256$1000$zz$00", "md5$1$00$00", "pbkdf2-sha256$0$00$00",
                    parts.dropLast().joined(separator: "$")]
        {
            XCTAssertFalse(PasswordHash.verify(secret: "correct horse", stored: bad), bad)
        }
        XCTAssertEqual(PasswordHash.defaultIterations, 20_000)
    }

    func testConstantTimeEqual() {
        XCTAssertTrue(PasswordHash.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        XCTAssertFalse(PasswordHash.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        XCTAssertFalse(PasswordHash.constantTimeEqual([1, 2, 3], [1, 2]))
        XCTAssertTrue(PasswordHash.constantTimeEqual([], []))
    }

    func testDefaultIterationsStayQuick() {
        let start = Date()
        let stored = PasswordHash.make(secret: "s3cret")
        XCTAssertTrue(PasswordHash.verify(secret: "s3cret", stored: stored))
        XCTAssertLessThan(Date().timeIntervalSince(start), 2.0, "hashing twice with the default iterations")
    }
}
