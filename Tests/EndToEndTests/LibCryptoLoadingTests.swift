import Foundation
import TestSupport
import XCTest

/// libcrypto is loaded only when something is hashed (a secret checked, a seed named), and a missing libcrypto is
/// a clear exit 69 that changes nothing.
final class LibCryptoLoadingTests: XCTestCase {
    private let missing = "/nonexistent/storectl-test/libcrypto.so.3"

    func testTheBinaryDoesNotLinkLibcrypto() throws {
        let dir = try TempDirectory()
        let result = try Binary.run("/usr/bin/ldd", [Binary.storectl], in: dir.path)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertTrue(result.stdout.contains("libsqlite3"), result.stdout)
        XCTAssertFalse(result.stdout.contains("libcrypto"), result.stdout)
    }

    func testAMissingLibcryptoStopsOnlyWhatNeedsIt() throws {
        let s = try Fleet.notes(label: "storectl-crypto")
        let env = ["STORECTL_LIBCRYPTO": missing, "STORECTL_CREDENTIAL_CACHE": "off"]
        // Commands that hash nothing work.
        try s.run("a", ["mode", "local"], env: env)
        try s.run("a", ["status"], env: env)
        // Checking the account's secret needs libcrypto.
        let refused = try s.run("a", ["mode", "cloud"], env: env, expect: 69)
        XCTAssertTrue(refused.stderr.contains("cannot load the OpenSSL crypto library \(missing)"), refused.stderr)
        XCTAssertTrue(refused.stderr.contains("apt-get install libssl3"), refused.stderr)
        XCTAssertEqual(try s.run("a", ["mode"]).stdout, "local\n")
        XCTAssertFalse(s.config.contains("mode: cloud"))
        try s.run("a", ["mode", "cloud"])
    }
}
