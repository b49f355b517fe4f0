import Foundation
import StoreBase
import StoreCrypto
import XCTest

/// libcrypto, as storectl calls it, against the standards' test vectors: SHA-1 and SHA-256 (NIST FIPS 180-4
/// examples), HMAC-SHA256 (RFC 4231), PBKDF2-HMAC-SHA256 (RFC 7914 section 11 and the widely used "password" /
/// "salt" vectors) and UUIDv5 (RFC 4122 appendix B as corrected, and Python's uuid5).
final class CryptoTests: XCTestCase {
    private func hex(_ bytes: [UInt8]) -> String { Hex.string(bytes) }

    func testSHA1KnownAnswers() throws {
        XCTAssertEqual(hex(try Crypto.sha1([])), "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        XCTAssertEqual(hex(try Crypto.sha1(Array("abc".utf8))), "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(hex(try Crypto.sha1(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))),
                       "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        XCTAssertEqual(hex(try Crypto.sha1([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))),
                       "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    func testSHA256KnownAnswers() throws {
        XCTAssertEqual(hex(try Crypto.sha256([])), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(hex(try Crypto.sha256(Array("abc".utf8))),
                       "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex(try Crypto.sha256(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(hex(try Crypto.sha256([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))),
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    func testHMACSHA256RFC4231() throws {
        XCTAssertEqual(hex(try Crypto.hmacSHA256(key: [UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8))),
                       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        XCTAssertEqual(hex(try Crypto.hmacSHA256(key: Array("Jefe".utf8), Array("what do ya want for nothing?".utf8))),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        XCTAssertEqual(hex(try Crypto.hmacSHA256(key: [UInt8](repeating: 0xaa, count: 131),
                                                 Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8))),
                       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54")
        // An empty key and an empty message are valid HMAC inputs.
        XCTAssertEqual(hex(try Crypto.hmacSHA256(key: [], [])),
                       "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
    }

    func testPBKDF2KnownAnswers() throws {
        let password = Array("password".utf8), salt = Array("salt".utf8)
        XCTAssertEqual(hex(try Crypto.pbkdf2SHA256(password: password, salt: salt, iterations: 1)),
                       "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b")
        XCTAssertEqual(hex(try Crypto.pbkdf2SHA256(password: password, salt: salt, iterations: 2)),
                       "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43")
        XCTAssertEqual(hex(try Crypto.pbkdf2SHA256(password: password, salt: salt, iterations: 4096)),
                       "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a")
        // RFC 7914 section 11: 64 bytes, so two PBKDF2 blocks.
        XCTAssertEqual(hex(try Crypto.pbkdf2SHA256(password: Array("passwd".utf8), salt: salt, iterations: 1,
                                                   length: 64)),
                       "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
                           + "49ca9cccf179b645991664b39d77ef317c71b845b1e30bd509112041d3a19783")
        XCTAssertEqual(hex(try Crypto.pbkdf2SHA256(password: Array("Password".utf8), salt: Array("NaCl".utf8),
                                                   iterations: 80000, length: 64)),
                       "4ddcd8f60b98be21830cee5ef22701f9641a4418d04c0414aeff08876b34ab56"
                           + "a1d425a1225833549adb841b51c9b3176a272bdebba1d078478f62b397f33c8d")
        XCTAssertThrowsError(try Crypto.pbkdf2SHA256(password: password, salt: salt, iterations: 0))
    }

    func testUUIDv5KnownAnswers() throws {
        XCTAssertEqual(try UUIDv5.make(namespace: UUIDv5.dns, name: "www.example.com"),
                       "2ed6657d-e927-568b-95e1-2665a8aea6a2")
        XCTAssertEqual(try UUIDv5.make(namespace: UUIDv5.dns, name: "python.org"),
                       "886313e1-3b8a-5372-9b90-0c9aee199e5d")
    }

    func testRandomBytesAndConstantTimeEqual() throws {
        let a = try Crypto.randomBytes(32)
        let b = try Crypto.randomBytes(32)
        XCTAssertEqual(a.count, 32)
        XCTAssertNotEqual(a, b)
        XCTAssertTrue(try Crypto.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        XCTAssertFalse(try Crypto.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        XCTAssertFalse(try Crypto.constantTimeEqual([1, 2, 3], [1, 2]))
        XCTAssertTrue(try Crypto.constantTimeEqual([], []))
    }
}
