import Foundation
import TestSupport
import XCTest

/// `storectl status` for a store in local mode: it never contacts the cloud unless asked.
final class StatusTests: XCTestCase {
    func testALocalStoreDoesNotContactTheCloudUnlessAsked() throws {
        let p = try E2EProject()
        try p.writeConfig([E2EProject.Store("s", schema: nil, cloud: .file("iCloud.com.example.status",
                                                                          url: "file:missing/c.container",
                                                                          secret: "${S:-demo-secret}"))])
        try p.run(["init"])
        let r = try p.run(["--json", "status"])
        // Without --store, status is {"version": 1, "stores": [...]}, even for one store.
        let all = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(all["version"] as? Int, 1)
        let doc = try XCTUnwrap((all["stores"] as? [[String: Any]])?.first)
        XCTAssertEqual(doc["mode"] as? String, "local")
        XCTAssertEqual((doc["account"] as? [String: Any])?["status"] as? String, "notChecked")
        XCTAssertNil((doc["cloud"] as? [String: Any])?["reachable"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("missing")))

        let checked = try p.run(["--json", "--store", "s", "status", "--check-cloud"])
        let doc2 = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(checked.stdout.utf8)) as? [String: Any])
        XCTAssertNotEqual((doc2["account"] as? [String: Any])?["status"] as? String, "notChecked")
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("missing/c.container")))
    }
}
