import Foundation
import TestSupport
import XCTest

/// Whatever makes `sync` refuse, `doctor` reports: it never calls healthy a store that sync will not sync.
final class DoctorAgreesWithSyncTests: XCTestCase {
    func makeStores() throws -> E2EProject {
        let p = try E2EProject()
        let cloud = E2EProject.Cloud.file("iCloud.com.example.doctor", secret: "${DOCTOR_SECRET:-demo-secret}")
        try p.writeConfig(["a", "b"].map { E2EProject.Store($0, cloud: cloud) })
        try p.writeSchema("CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT, title TEXT);\n")
        for store in ["a", "b"] { try p.run(["--store", store, "mode", "cloud"]) }
        return p
    }

    func testEverySyncRefusalIsADoctorFinding() throws {
        let cases: [(String, (E2EProject) throws -> Void, [String: String])] = [
            ("a copied store", { p in
                try FileManager.default.removeItem(atPath: p.storePath("b"))
                try FileManager.default.copyItem(atPath: p.storePath("a"), toPath: p.storePath("b"))
            }, [:]),
            ("schema drift", { p in try p.sql("b", "ALTER TABLE notes ADD COLUMN extra TEXT") }, [:]),
            ("triggers dropped", { p in
                let names = try p.sql("b", "SELECT name FROM sqlite_master WHERE type = 'trigger'")
                for name in names.split(separator: "\n") { try p.sql("b", "DROP TRIGGER \"\(name)\"") }
            }, [:]),
            ("a wrong secret", { _ in }, ["DOCTOR_SECRET": "wrong"]),
            ("the container gone", { p in try FileManager.default.removeItem(atPath: p.dir.file("cloud")) }, [:]),
            ("the zone purged", { p in try p.run(["--store", "a", "cloud", "purge", "--yes"]) }, [:]),
            ("another account bound", { p in
                try p.sql("b", "UPDATE _storectl_meta SET value = 'someone-else' WHERE key = 'bound_account'")
            }, [:]),
            ("the store file gone", { p in try FileManager.default.removeItem(atPath: p.storePath("b")) }, [:]),
            ("not a store", { p in
                try FileManager.default.removeItem(atPath: p.storePath("b"))
                try p.dir.write("b.sqlite", "not a database")
            }, [:]),
        ]
        for (name, setUp, env) in cases {
            let p = try makeStores()
            try setUp(p)
            let sync = try p.run(["--store", "b", "sync"], expect: nil, env: env)
            XCTAssertNotEqual(sync.status, 0, "\(name): sync did not refuse\n\(sync)")
            let doctor = try p.run(["--store", "b", "--json", "doctor"], expect: nil, env: env)
            XCTAssertNotEqual(doctor.status, 0, "\(name): sync refuses but doctor exits 0\n\(sync)\n\(doctor)")
            let doc = try? JSONSerialization.jsonObject(with: Data(doctor.stdout.utf8)) as? [String: Any]
            XCTAssertNotEqual(doc?["healthy"] as? Bool, true, "\(name): doctor says healthy\n\(sync)")
        }
    }

    /// A store whose `sync` fails on every run (here: a conflict under `merge_policy: error`, then the mass-delete
    /// breaker) is reported by `status` (`last_error`) and `doctor` (check `sync`) until a sync succeeds, although
    /// nothing else about it is wrong.
    func testASyncThatKeepsFailingIsReportedUntilOneSucceeds() throws {
        let p = try E2EProject()
        var cloud = E2EProject.Cloud.file("iCloud.com.example.doctor")
        cloud.extra = ["merge_policy: error", "max_delete_count: 2"]
        try p.writeConfig(["a", "b"].map { E2EProject.Store($0, cloud: cloud) })
        try p.writeSchema("CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT, title TEXT);\n")
        try p.run(["--store", "a", "mode", "cloud"])
        try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'), ('n3', 'three'), ('n4', 'four')")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "mode", "cloud"])

        func lastError(_ store: String) throws -> [String: Any]? {
            let status = try p.run(["--store", store, "--json", "status"], expect: nil)
            let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any],
                                    status.stdout)
            let entry = (doc["stores"] as? [[String: Any]])?.first ?? doc
            return entry["last_error"] as? [String: Any]
        }
        func doctorSync(_ store: String) throws -> (Int32, [[String: Any]]) {
            let r = try p.run(["--store", store, "--json", "doctor"], expect: nil)
            let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
                                    r.stdout)
            let entry = (doc["stores"] as? [[String: Any]])?.first ?? [:]
            XCTAssertTrue((entry["checks"] as? [String])?.contains("sync") == true, r.stdout)
            let findings = (entry["findings"] as? [[String: Any]]) ?? []
            return (r.status, findings.filter { $0["check"] as? String == "sync" })
        }
        XCTAssertNil(try lastError("b"))
        XCTAssertEqual(try doctorSync("b").0, 0)

        // The same row edited on both stores: under `error`, b's sync fails, every time.
        try p.sql("a", "UPDATE notes SET title = 'from a' WHERE uuid = 'n1'")
        try p.run(["--store", "a", "sync"])
        try p.sql("b", "UPDATE notes SET title = 'from b' WHERE uuid = 'n1'")
        let first = try p.run(["--store", "b", "sync"], expect: nil)
        XCTAssertNotEqual(first.status, 0, "\(first)")
        let again = try p.run(["--store", "b", "sync"], expect: nil)
        XCTAssertEqual(again.status, first.status, "\(again)")
        let error = try XCTUnwrap(try lastError("b"), "status shows no last_error after a failed sync")
        XCTAssertEqual(error["code"] as? Int, Int(first.status))
        var (status, findings) = try doctorSync("b")
        XCTAssertNotEqual(status, 0)
        XCTAssertEqual(findings.count, 1, "\(findings)")
        XCTAssertTrue((findings.first?["problem"] as? String)?.contains("the last sync failed") == true, "\(findings)")
        XCTAssertNil(try lastError("a"), "a failure of b is reported on a")

        // Resolved by taking a's value (the same change on both sides is no conflict): the next sync succeeds and
        // both reports clear.
        try p.sql("b", "UPDATE notes SET title = 'from a' WHERE uuid = 'n1'")
        try p.run(["--store", "b", "sync"])
        XCTAssertNil(try lastError("b"))
        (status, findings) = try doctorSync("b")
        XCTAssertEqual(status, 0, "\(findings)")

        // The mass-delete breaker: refused (65) on every run, reported until `--allow-mass-delete` goes through.
        try p.run(["--store", "a", "sync"])
        try p.sql("a", "DELETE FROM notes WHERE uuid IN ('n2', 'n3', 'n4')")
        try p.run(["--store", "a", "sync"], expect: 65)
        try p.run(["--store", "a", "sync"], expect: 65)
        XCTAssertEqual(try lastError("a")?["code"] as? Int, 65)
        (status, findings) = try doctorSync("a")
        XCTAssertEqual(status, 65)
        XCTAssertEqual(findings.first?["exit_code"] as? Int, 65, "\(findings)")
        XCTAssertTrue((findings.first?["fix"] as? String)?.contains("--allow-mass-delete") == true, "\(findings)")
        try p.run(["--store", "a", "sync", "--allow-mass-delete"])
        XCTAssertNil(try lastError("a"))
        (status, findings) = try doctorSync("a")
        XCTAssertEqual(status, 0, "\(findings)")
    }
}
