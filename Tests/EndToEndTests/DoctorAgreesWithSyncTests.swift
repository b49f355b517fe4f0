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
}
