import Foundation
import TestSupport
import XCTest

/// Whatever makes `sync` refuse, `doctor` reports: it never calls healthy a store that sync will not sync.
final class DoctorAgreesWithSyncTests: XCTestCase {
    func makeStores(_ dir: TempDirectory) throws {
        try dir.write("config.yaml", """
            version: 1
            stores:
              a:
                path: a.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.doctor
                  url: file:cloud/shared.container
                  create_if_missing: true
                  account: demo
                  secret: ${DOCTOR_SECRET:-demo-secret}
              b:
                path: b.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.doctor
                  url: file:cloud/shared.container
                  create_if_missing: true
                  account: demo
                  secret: ${DOCTOR_SECRET:-demo-secret}
            """)
        try dir.write("schema.sql", "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT, title TEXT);\n")
        for store in ["a", "b"] {
            XCTAssertEqual(try Binary.storectl(["--store", store, "mode", "cloud"], in: dir.path).status, 0)
        }
    }

    func sql(_ dir: TempDirectory, _ store: String, _ statement: String) throws {
        let r = try Binary.run("/usr/bin/sqlite3", [dir.file("\(store).sqlite"), statement], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
    }

    func testEverySyncRefusalIsADoctorFinding() throws {
        let cases: [(String, (TempDirectory) throws -> Void, [String: String])] = [
            ("a copied store", { d in
                try FileManager.default.removeItem(atPath: d.file("b.sqlite"))
                try FileManager.default.copyItem(atPath: d.file("a.sqlite"), toPath: d.file("b.sqlite"))
            }, [:]),
            ("schema drift", { d in try self.sql(d, "b", "ALTER TABLE notes ADD COLUMN extra TEXT") }, [:]),
            ("triggers dropped", { d in
                let names = try Binary.run("/usr/bin/sqlite3", [d.file("b.sqlite"),
                                           "SELECT name FROM sqlite_master WHERE type = 'trigger'"], in: d.path)
                for name in names.stdout.split(separator: "\n") { try self.sql(d, "b", "DROP TRIGGER \"\(name)\"") }
            }, [:]),
            ("a wrong secret", { _ in }, ["DOCTOR_SECRET": "wrong"]),
            ("the container gone", { d in try FileManager.default.removeItem(atPath: d.file("cloud")) }, [:]),
            ("the zone purged", { d in
                XCTAssertEqual(try Binary.storectl(["--store", "a", "cloud", "purge", "--yes"], in: d.path).status, 0)
            }, [:]),
            ("another account bound", { d in
                try self.sql(d, "b", "UPDATE _storectl_meta SET value = 'someone-else' WHERE key = 'bound_account'")
            }, [:]),
            ("the store file gone", { d in try FileManager.default.removeItem(atPath: d.file("b.sqlite")) }, [:]),
            ("not a store", { d in
                try FileManager.default.removeItem(atPath: d.file("b.sqlite"))
                try d.write("b.sqlite", "not a database")
            }, [:]),
        ]
        for (name, setUp, env) in cases {
            let dir = try TempDirectory()
            try makeStores(dir)
            try setUp(dir)
            let sync = try Binary.storectl(["--store", "b", "sync"], in: dir.path, environment: env)
            XCTAssertNotEqual(sync.status, 0, "\(name): sync did not refuse\n\(sync)")
            let doctor = try Binary.storectl(["--store", "b", "--json", "doctor"], in: dir.path, environment: env)
            XCTAssertNotEqual(doctor.status, 0, "\(name): sync refuses but doctor exits 0\n\(sync)\n\(doctor)")
            let doc = try? JSONSerialization.jsonObject(with: Data(doctor.stdout.utf8)) as? [String: Any]
            XCTAssertNotEqual(doc?["healthy"] as? Bool, true, "\(name): doctor says healthy\n\(sync)")
        }
    }
}
