import StoreBase
import StoreCrypto
import XCTest

/// scrypt through libcrypto's EVP_PBE_scrypt, against RFC 7914 section 12 (the PBKDF2-HMAC-SHA256 vectors of
/// section 11 are in CryptoTests), and the parameters storectl refuses.
final class ScryptTests: XCTestCase {
    /// The RFC's hex, without its spaces and line breaks.
    private func hex(_ text: String) -> String { text.filter { !$0.isWhitespace } }

    func testRFC7914Section12Vectors() throws {
        // scrypt (P="", S="", N=16, r=1, p=1, dkLen=64)
        XCTAssertEqual(Hex.string(try Crypto.scrypt(password: [], salt: [], n: 16, r: 1, p: 1, length: 64)), hex("""
            77 d6 57 62 38 65 7b 20 3b 19 ca 42 c1 8a 04 97
            f1 6b 48 44 e3 07 4a e8 df df fa 3f ed e2 14 42
            fc d0 06 9d ed 09 48 f8 32 6a 75 3a 0f c8 1f 17
            e8 d3 e0 fb 2e 0d 36 28 cf 35 e2 0c 38 d1 89 06
            """))
        // scrypt (P="password", S="NaCl", N=1024, r=8, p=16, dkLen=64)
        XCTAssertEqual(Hex.string(try Crypto.scrypt(password: Array("password".utf8), salt: Array("NaCl".utf8), n: 1024,
                                                    r: 8, p: 16, length: 64)), hex("""
            fd ba be 1c 9d 34 72 00 78 56 e7 19 0d 01 e9 fe
            7c 6a d7 cb c8 23 78 30 e7 73 76 63 4b 37 31 62
            2e af 30 d9 2e 22 a3 88 6f f1 09 27 9d 98 30 da
            c7 27 af b9 4a 83 ee 6d 83 60 cb df a2 cc 06 40
            """))
        // scrypt (P="pleaseletmein", S="SodiumChloride", N=16384, r=8, p=1, dkLen=64)
        XCTAssertEqual(Hex.string(try Crypto.scrypt(password: Array("pleaseletmein".utf8),
                                                    salt: Array("SodiumChloride".utf8), n: 16384, r: 8, p: 1,
                                                    length: 64)),
                       hex("""
            70 23 bd cb 3a fd 73 48 46 1c 06 cd 81 fd 38 eb
            fd a8 fb ba 90 4f 8e 3e a9 b5 43 f6 54 5d a1 f2
            d5 43 29 55 61 3f 0f cf 62 d4 97 05 24 2a 9a f9
            e6 1e 85 dc 0d 65 1e 40 df cf 01 7b 45 57 58 87
            """))
    }

    /// N = 2^15 with r = 8 needs 32 MiB and some: more than OpenSSL allows when it is given no limit.
    func testParametersAboveOpenSSLDefaultLimit() throws {
        let password = Array("pleaseletmein".utf8), salt = Array("SodiumChloride".utf8)
        let key = try Crypto.scrypt(password: password, salt: salt, n: 1 << 15, r: 8, p: 1)
        XCTAssertEqual(key.count, 32)
        // Another N gives another key: N = 2^14 gives the first 32 bytes of the RFC's third vector.
        let smaller = try Crypto.scrypt(password: password, salt: salt, n: 1 << 14, r: 8, p: 1)
        XCTAssertEqual(Hex.string(smaller), "7023bdcb3afd7348461c06cd81fd38ebfda8fbba904f8e3ea9b543f6545da1f2")
        XCTAssertNotEqual(key, smaller)
    }

    func testParametersOutOfRangeAreRefused() throws {
        let refused: [(n: UInt64, r: UInt64, p: UInt64, length: Int)] = [
            (0, 8, 1, 32), (1, 8, 1, 32), (3, 8, 1, 32), (1000, 8, 1, 32), ((1 << 14) + 1, 8, 1, 32), // not 2^k > 1
            (1 << 23, 2, 1, 32), (1 << 40, 8, 1, 32), (1 << 63, 8, 1, 32), // N above 2^22
            (1 << 20, 8, 1, 32), (1 << 22, 8, 1, 32), (1 << 14, 1 << 20, 1, 32), // more than 1 GiB
            (1 << 14, 8, 1 << 20, 32), (16, UInt64.max, 1, 32), (16, 1, UInt64.max, 32), // ... or overflowing
            (1 << 16, 1, 1, 32), // N not below 2^(16 r)
            (1 << 14, 0, 1, 32), (1 << 14, 8, 0, 32), // r, p of 0
            (1 << 14, 8, 1, 0), (1 << 14, 8, 1, -1), (1 << 14, 8, 1, 1025), // length
        ]
        for (n, r, p, length) in refused {
            XCTAssertThrowsError(try Crypto.scrypt(password: [1], salt: [2], n: n, r: r, p: p, length: length)) {
                let error = $0 as? StoreError
                XCTAssertEqual(error?.exitCode, .software, "N=\(n) r=\(r) p=\(p) \(length): \($0)")
                let named = "scrypt parameters out of range (N=\(n), r=\(r), p=\(p), \(length) bytes): "
                XCTAssertTrue(error?.summary.hasPrefix(named) == true, "\($0)")
            }
        }
        // Just inside: N = 2^15 with r = 1, the largest N for r = 1, and 1 byte.
        XCTAssertEqual(try Crypto.scrypt(password: [1], salt: [2], n: 1 << 15, r: 1, p: 1, length: 1).count, 1)
        XCTAssertEqual(try Crypto.scrypt(password: [1], salt: [2], n: 2, r: 1, p: 1, length: 1024).count, 1024)
    }
}
