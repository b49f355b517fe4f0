import Foundation
import TestSupport
import XCTest

/// `storectl status` for a store in local mode: it never contacts the cloud unless asked.
final class StatusTests: XCTestCase {
    func testALocalStoreDoesNotContactTheCloudUnlessAsked() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", """
            version: 1
            stores:
              s:
                path: s.sqlite
                cloud:
                  container: iCloud.com.example.status
                  url: file:missing/c.container
                  create_if_missing: true
                  account: demo
                  secret: ${S:-demo-secret}
            """)
        XCTAssertEqual(try Binary.storectl(["init"], in: dir.path).status, 0)
        let r = try Binary.storectl(["--json", "status"], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
        // Without --store, status is {"version": 1, "stores": [...]}, even for one store.
        let all = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(all["version"] as? Int, 1)
        let doc = try XCTUnwrap((all["stores"] as? [[String: Any]])?.first)
        XCTAssertEqual(doc["mode"] as? String, "local")
        XCTAssertEqual((doc["account"] as? [String: Any])?["status"] as? String, "notChecked")
        XCTAssertNil((doc["cloud"] as? [String: Any])?["reachable"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("missing")))

        let checked = try Binary.storectl(["--json", "--store", "s", "status", "--check-cloud"], in: dir.path)
        XCTAssertEqual(checked.status, 0, "\(checked)")
        let doc2 = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(checked.stdout.utf8)) as? [String: Any])
        XCTAssertNotEqual((doc2["account"] as? [String: Any])?["status"] as? String, "notChecked")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("missing/c.container")))
    }
}
