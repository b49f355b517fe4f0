import StoreBase
import StoreCrypto
import XCTest

/// AES-256-GCM through libcrypto, against the test cases of the GCM specification: D. McGrew and J. Viega, "The
/// Galois/Counter Mode of Operation (GCM)", the revised version submitted to NIST (gcm-revised-spec.pdf), appendix B,
/// test cases 13 to 16 (the 256-bit key ones with a 96-bit IV); and tampering of every part of a sealed message.
final class AESGCMTests: XCTestCase {
    private func bytes(_ hex: String) -> [UInt8] { Hex.bytes(hex)! }

    private struct Vector {
        var key: String, iv: String, plaintext: String, aad: String, ciphertext: String, tag: String
    }

    // Test case 13: K = 0^256, P and A empty, IV = 0^96.
    private let case13 = Vector(
        key: "0000000000000000000000000000000000000000000000000000000000000000",
        iv: "000000000000000000000000",
        plaintext: "", aad: "", ciphertext: "",
        tag: "530f8afbc74536b9a963b4f1c4cb738b")

    // Test case 14: K = 0^256, P = 0^128, A empty, IV = 0^96.
    private let case14 = Vector(
        key: "0000000000000000000000000000000000000000000000000000000000000000",
        iv: "000000000000000000000000",
        plaintext: "00000000000000000000000000000000", aad: "",
        ciphertext: "cea7403d4d606b6e074ec5d3baf39d18",
        tag: "d0d1c8a799996bf0265b98b5d48ab919")

    // Test case 15: 64 bytes of plaintext, A empty.
    private let case15 = Vector(
        key: "feffe9928665731c6d6a8f9467308308" + "feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        plaintext: "d9313225f88406e5a55909c5aff5269a" + "86a7a9531534f7da2e4c303d8a318a72"
            + "1c3c0c95956809532fcf0e2449a6b525" + "b16aedf5aa0de657ba637b391aafd255",
        aad: "",
        ciphertext: "522dc1f099567d07f47f37a32a84427d" + "643a8cdcbfe5c0c97598a2bd2555d1aa"
            + "8cb08e48590dbb3da7b08b1056828838" + "c5f61e6393ba7a0abcc9f662898015ad",
        tag: "b094dac5d93471bdec1a502270e3cc6c")

    // Test case 16: 60 bytes of plaintext (a partial last block) and 20 bytes of associated data.
    private let case16 = Vector(
        key: "feffe9928665731c6d6a8f9467308308" + "feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        plaintext: "d9313225f88406e5a55909c5aff5269a" + "86a7a9531534f7da2e4c303d8a318a72"
            + "1c3c0c95956809532fcf0e2449a6b525" + "b16aedf5aa0de657ba637b39",
        aad: "feedfacedeadbeeffeedfacedeadbeef" + "abaddad2",
        ciphertext: "522dc1f099567d07f47f37a32a84427d" + "643a8cdcbfe5c0c97598a2bd2555d1aa"
            + "8cb08e48590dbb3da7b08b1056828838" + "c5f61e6393ba7a0abcc9f662",
        tag: "76fc6ece0f4e1768cddf8853bb2d551b")

    /// Seals the vector's plaintext under its key and IV, then opens its ciphertext and tag, in both forms.
    private func check(_ v: Vector, file: StaticString = #filePath, line: UInt = #line) throws {
        let key = bytes(v.key), nonce = bytes(v.iv), aad = bytes(v.aad), plaintext = bytes(v.plaintext)
        let sealed = try AESGCM.seal(key: key, nonce: nonce, plaintext: plaintext, aad: aad)
        XCTAssertEqual(Hex.string(sealed.ciphertext), v.ciphertext, "ciphertext", file: file, line: line)
        XCTAssertEqual(Hex.string(sealed.tag), v.tag, "tag", file: file, line: line)
        XCTAssertEqual(try AESGCM.open(key: key, nonce: nonce, ciphertext: bytes(v.ciphertext), tag: bytes(v.tag),
                                       aad: aad),
                       plaintext, "open", file: file, line: line)
        XCTAssertEqual(try AESGCM.open(key: key, sealed: nonce + bytes(v.ciphertext) + bytes(v.tag), aad: aad),
                       plaintext, "open sealed", file: file, line: line)
    }

    private func assertAuthenticationFails(_ body: @autoclosure () throws -> [UInt8], _ message: String,
                                           file: StaticString = #filePath, line: UInt = #line)
    {
        XCTAssertThrowsError(try body(), message, file: file, line: line) { error in
            XCTAssertEqual(error as? AESGCM.AuthenticationError, AESGCM.AuthenticationError(), "\(message): \(error)",
                           file: file, line: line)
        }
    }

    func testGCMSpecTestCase13EmptyPlaintext() throws { try check(case13) }
    func testGCMSpecTestCase14OneBlock() throws { try check(case14) }
    func testGCMSpecTestCase15FourBlocks() throws { try check(case15) }
    func testGCMSpecTestCase16PartialBlockWithAAD() throws { try check(case16) }

    func testOpenRefusesEveryFlippedBit() throws {
        let key = bytes(case16.key), nonce = bytes(case16.iv), aad = bytes(case16.aad)
        let ciphertext = bytes(case16.ciphertext), tag = bytes(case16.tag)
        let sealed = nonce + ciphertext + tag
        XCTAssertEqual(try AESGCM.open(key: key, sealed: sealed, aad: aad), bytes(case16.plaintext))
        // Every bit of the sealed message: nonce, ciphertext, tag.
        for bit in 0..<(sealed.count * 8) {
            var tampered = sealed
            tampered[bit / 8] ^= 1 << (bit % 8)
            assertAuthenticationFails(try AESGCM.open(key: key, sealed: tampered, aad: aad), "bit \(bit) flipped")
        }
        for bit in 0..<(aad.count * 8) {
            var other = aad
            other[bit / 8] ^= 1 << (bit % 8)
            assertAuthenticationFails(try AESGCM.open(key: key, sealed: sealed, aad: other), "AAD bit \(bit) flipped")
        }
        // The known-nonce form, one bit in each part.
        var flipped = ciphertext
        flipped[59] ^= 0x80
        assertAuthenticationFails(try AESGCM.open(key: key, nonce: nonce, ciphertext: flipped, tag: tag, aad: aad),
                                  "ciphertext")
        flipped = tag
        flipped[0] ^= 0x01
        assertAuthenticationFails(try AESGCM.open(key: key, nonce: nonce, ciphertext: ciphertext, tag: flipped,
                                                  aad: aad),
                                  "tag")
        flipped = nonce
        flipped[11] ^= 0x01
        assertAuthenticationFails(try AESGCM.open(key: key, nonce: flipped, ciphertext: ciphertext, tag: tag, aad: aad),
                                  "nonce")
        flipped = aad
        flipped[19] ^= 0x01
        assertAuthenticationFails(try AESGCM.open(key: key, nonce: nonce, ciphertext: ciphertext, tag: tag,
                                                  aad: flipped),
                                  "AAD")
        // Associated data left out, or added where there was none.
        assertAuthenticationFails(try AESGCM.open(key: key, sealed: sealed, aad: []), "no AAD")
        let case15Sealed = bytes(case15.iv) + bytes(case15.ciphertext) + bytes(case15.tag)
        XCTAssertEqual(try AESGCM.open(key: key, sealed: case15Sealed, aad: []), bytes(case15.plaintext))
        assertAuthenticationFails(try AESGCM.open(key: key, sealed: case15Sealed, aad: [0]), "AAD added")
    }

    func testOpenRefusesAnotherKey() throws {
        let key = try Crypto.randomBytes(AESGCM.keySize)
        let sealed = try AESGCM.seal(key: key, plaintext: Array("the secret".utf8), aad: Array("header".utf8))
        XCTAssertEqual(try AESGCM.open(key: key, sealed: sealed, aad: Array("header".utf8)), Array("the secret".utf8))
        var other = key
        other[31] ^= 0x01
        assertAuthenticationFails(try AESGCM.open(key: other, sealed: sealed, aad: Array("header".utf8)), "key bit")
        assertAuthenticationFails(try AESGCM.open(key: try Crypto.randomBytes(32), sealed: sealed,
                                                  aad: Array("header".utf8)),
                                  "random key")
        // The vectors under the all-zero key of test cases 13 and 14.
        assertAuthenticationFails(try AESGCM.open(key: bytes(case13.key), sealed: bytes(case16.iv)
                                                      + bytes(case16.ciphertext) + bytes(case16.tag),
                                                  aad: bytes(case16.aad)),
                                  "zero key")
    }

    func testOpenRefusesShortInputAndTruncatedTags() throws {
        let key = [UInt8](repeating: 7, count: 32)
        for count in [0, 1, 12, 27] {
            assertAuthenticationFails(try AESGCM.open(key: key, sealed: [UInt8](repeating: 0, count: count), aad: []),
                                      "\(count) bytes")
        }
        // 28 bytes is an empty message: this one does not verify.
        assertAuthenticationFails(try AESGCM.open(key: key, sealed: [UInt8](repeating: 0, count: 28), aad: []),
                                  "28 zero bytes")
        // OpenSSL checks as many tag bytes as it is given: a tag cut short must not pass.
        let v = case16
        for count in [0, 4, 12, 15, 17] {
            let tag = Array((bytes(v.tag) + [0]).prefix(count))
            assertAuthenticationFails(try AESGCM.open(key: bytes(v.key), nonce: bytes(v.iv),
                                                      ciphertext: bytes(v.ciphertext), tag: tag, aad: bytes(v.aad)),
                                      "\(count)-byte tag")
        }
    }

    func testSealDrawsAFreshNonceEachTime() throws {
        let key = try Crypto.randomBytes(32)
        let plaintext = Array("same message".utf8), aad = Array("same header".utf8)
        let first = try AESGCM.seal(key: key, plaintext: plaintext, aad: aad)
        let second = try AESGCM.seal(key: key, plaintext: plaintext, aad: aad)
        XCTAssertEqual(first.count, AESGCM.nonceSize + plaintext.count + AESGCM.tagSize)
        XCTAssertNotEqual(Array(first.prefix(12)), Array(second.prefix(12)))
        XCTAssertNotEqual(first, second)
        XCTAssertEqual(try AESGCM.open(key: key, sealed: first, aad: aad), plaintext)
        XCTAssertEqual(try AESGCM.open(key: key, sealed: second, aad: aad), plaintext)
        // The sealed form is nonce || the known-nonce form's ciphertext || its tag.
        let known = try AESGCM.seal(key: key, nonce: Array(first.prefix(12)), plaintext: plaintext, aad: aad)
        XCTAssertEqual(first, Array(first.prefix(12)) + known.ciphertext + known.tag)
    }

    func testRoundTrips() throws {
        let key = try Crypto.randomBytes(32)
        let header = Array("header".utf8)
        for (plaintext, aad) in [([UInt8](), [UInt8]()), ([], header), (Array("x".utf8), []),
                                 (Array("seventeen bytes!!".utf8), header)]
        {
            let sealed = try AESGCM.seal(key: key, plaintext: plaintext, aad: aad)
            XCTAssertEqual(sealed.count, 28 + plaintext.count)
            XCTAssertEqual(try AESGCM.open(key: key, sealed: sealed, aad: aad), plaintext)
            let nonce = [UInt8](repeating: 1, count: 12)
            let known = try AESGCM.seal(key: key, nonce: nonce, plaintext: plaintext, aad: aad)
            XCTAssertEqual(try AESGCM.open(key: key, nonce: nonce,
                                           ciphertext: known.ciphertext, tag: known.tag, aad: aad),
                           plaintext)
        }
        // 1 MB, not a whole number of blocks.
        var large = try Crypto.randomBytes(1_000_003)
        large[0] = 1
        let sealed = try AESGCM.seal(key: key, plaintext: large, aad: header)
        XCTAssertEqual(sealed.count, large.count + 28)
        XCTAssertNotEqual(Array(sealed[12..<1012]), Array(large.prefix(1000)))
        XCTAssertEqual(try AESGCM.open(key: key, sealed: sealed, aad: header), large)
        var tampered = sealed
        tampered[500_000] ^= 0x10
        assertAuthenticationFails(try AESGCM.open(key: key, sealed: tampered, aad: header), "1 MB, one bit flipped")
    }

    func testKeyAndNonceSizesAreChecked() throws {
        for count in [0, 16, 24, 31, 33] {
            XCTAssertThrowsError(try AESGCM.seal(key: [UInt8](repeating: 0, count: count), plaintext: [1], aad: [])) {
                XCTAssertEqual(($0 as? StoreError)?.exitCode, .software, "\(count)-byte key: \($0)")
            }
            XCTAssertThrowsError(try AESGCM.open(key: [UInt8](repeating: 0, count: count),
                                                 sealed: [UInt8](repeating: 0, count: 40), aad: [])) {
                XCTAssertEqual(($0 as? StoreError)?.exitCode, .software, "\(count)-byte key: \($0)")
            }
        }
        for count in [0, 8, 11, 13, 16] {
            let nonce = [UInt8](repeating: 0, count: count)
            XCTAssertThrowsError(try AESGCM.seal(key: bytes(case13.key), nonce: nonce, plaintext: [], aad: [])) {
                XCTAssertEqual(($0 as? StoreError)?.exitCode, .software, "\(count)-byte nonce: \($0)")
            }
            XCTAssertThrowsError(try AESGCM.open(key: bytes(case13.key), nonce: nonce, ciphertext: [],
                                                 tag: bytes(case13.tag), aad: [])) {
                XCTAssertEqual(($0 as? StoreError)?.exitCode, .software, "\(count)-byte nonce: \($0)")
            }
        }
    }
}
