import Foundation
import StoreCloud
import StoreCloudPostgres
import TestSupport
import XCTest

/// `storectl migrate --cloud`: moving a store's sync target, through the real binary.
final class MigrateCloudTests: XCTestCase {
    /// Two stores in cloud mode on one container file, with rows, and a change on a not exported yet.
    func synced(label: String = "storectl-cloud-move") throws -> Fleet {
        let s = try Fleet.notesInTheCloud(label: label)
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n3', 'pending on a')")
        return s
    }

    func notes(_ s: Fleet, _ store: String) throws -> String {
        try s.sql(store, "SELECT uuid || '|' || title FROM notes ORDER BY uuid")
    }

    func testAFileStoreMovesToPostgreSQLAndASecondStoreSyncsFromIt() throws {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" { XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set") }
            return
        }
        let container = "test.migrate.\(UInt32.random(in: 0...UInt32.max))"
        defer { try? PostgresCloudDatabase(url: url, container: container).deleteContainer() }
        let s = try synced(label: "storectl-cloud-move-pg")
        let user = env["PGUSER"] ?? "postgres"
        let move = ["migrate", "--cloud", url, "--container", container, "--account", user]
        let r = try s.run("a", ["--json"] + move)
        let doc = try XCTUnwrap(JSONDoc.parse(r.stdout))
        XCTAssertEqual(JSONDoc.get(doc, "version") as? Int, 1)
        XCTAssertEqual(JSONDoc.get(doc, "to", "container") as? String, container)
        XCTAssertEqual(JSONDoc.get(doc, "verified", "unexplained_count") as? Int, 0, r.stdout)
        XCTAssertNotNil(JSONDoc.get(doc, "final_sync"), r.stdout)
        // config.yaml names the new target, comments and the other store untouched.
        let config = s.config
        XCTAssertTrue(config.contains("      url: '\(url)'") || config.contains("      url: \(url)"), config)
        XCTAssertTrue(config.contains("      container: \(container)"), config)
        XCTAssertTrue(config.contains("path: data/b.sqlite   # the store file"), config)
        XCTAssertEqual(config.components(separatedBy: "url: file:cloud/shared.container").count - 1, 1, config)
        try s.run("a", ["verify"])

        // b still syncs with the file until it follows; a's pending change reached both targets.
        try s.run("b", ["sync"])
        XCTAssertEqual(try notes(s, "b"), "n1|one\nn2|two\nn3|pending on a\n")
        try s.sql("b", "UPDATE notes SET title = 'edited on b before it moved' WHERE uuid = 'n2'")
        try s.sql("a", "UPDATE notes SET title = 'edited on a after it moved' WHERE uuid = 'n1'")
        try s.run("a", ["sync"])
        try s.run("b", move)
        // b took in a's edit made in PostgreSQL, and brought its own edit made on the file.
        try s.run("a", ["sync"])
        let expected = "n1|edited on a after it moved\nn2|edited on b before it moved\nn3|pending on a\n"
        XCTAssertEqual(try notes(s, "a"), expected)
        XCTAssertEqual(try notes(s, "b"), expected)
        // The second store syncs from PostgreSQL: a change made there arrives.
        try s.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n4', 'from b via PostgreSQL')")
        try s.run("b", ["sync"])
        try s.run("a", ["sync"])
        XCTAssertEqual(try s.sql("a", "SELECT title FROM notes WHERE uuid = 'n4'"), "from b via PostgreSQL\n")
        try s.run("a", ["verify"])
        try s.run("b", ["verify"])
        XCTAssertEqual(try s.noteRows("a"), try s.noteRows("b"))

        // And back to the container file, which holds an older copy: nothing newer is lost.
        let back = ["migrate", "--cloud", "file:cloud/shared.container", "--container", "iCloud.com.example.notes",
                    "--account", "demo"]
        try s.run("a", back)
        try s.run("b", back)
        try s.run("a", ["sync"])
        XCTAssertEqual(try notes(s, "a"), expected + "n4|from b via PostgreSQL\n")
        XCTAssertEqual(try s.noteRows("a"), try s.noteRows("b"))
        XCTAssertEqual(try s.cloudNoteRows(), try s.noteRows("a").filter { !$0.hasPrefix("dangling") })
        try s.run("a", ["verify"])
    }

    /// The new URL's password, in every form a PostgreSQL URL holds one (user info, `?password=`, libpq
    /// `password=`), appears in no step line, JSON document, error or hint of `migrate --cloud`, whether the move
    /// succeeds or fails; the redacted URL is what the user sees.
    func testMigrateCloudNeverPrintsTheNewURLsPassword() throws {
        let secret = "hunter2-Mv7q"
        let env = ProcessInfo.processInfo.environment
        let s = try synced(label: "storectl-cloud-move-secret")
        // Failures first (nothing listens on 127.0.0.1:1): the errors quote the URL.
        for url in ["postgres://alice:\(secret)@127.0.0.1:1/notes?connect_timeout=2",
                    "postgres://alice@127.0.0.1:1/notes?password=\(secret)&connect_timeout=2",
                    "host=127.0.0.1 port=1 dbname=notes user=alice password='\(secret)' connect_timeout=2"]
        {
            for json in [false, true] {
                let r = try s.run("a", (json ? ["--json"] : []) + ["migrate", "--cloud", url, "--account", "alice"],
                                  expect: nil)
                XCTAssertNotEqual(r.status, 0, "\(url)\n\(r)")
                XCTAssertNotEqual(r.status, 70, "\(url)\n\(r)")
                XCTAssertFalse(r.stdout.contains("hunter2") || r.stderr.contains("hunter2"), "\(url)\n\(r)")
            }
        }
        guard let socket = env["STORECTL_TEST_PG_SOCKET_DIR"], !socket.isEmpty,
              let admin = env["STORECTL_TEST_PG_URL"], !admin.isEmpty
        else {
            if env["STORECTL_REQUIRE_PG"] == "1" { XCTFail("STORECTL_REQUIRE_PG=1 but no PostgreSQL (see .ci/run)") }
            return
        }
        let user = env["PGUSER"] ?? "postgres"
        let port = env["PGPORT"] ?? "5432"
        let forms = [
            "postgresql://\(user):\(secret)@/postgres?host=\(socket)&port=\(port)",
            "postgresql://\(user)@/postgres?host=\(socket)&port=\(port)&password=\(secret)",
            "host=\(socket) port=\(port) dbname=postgres user=\(user) password=\(secret)",
        ]
        let base = "test.migrate.secret.\(UInt32.random(in: 0...UInt32.max))"
        var containers: [String] = []
        defer { for c in containers { try? PostgresCloudDatabase(url: admin, container: c).deleteContainer() } }
        for (i, url) in forms.enumerated() {
            for json in [false, true] {
                let container = "\(base).\(i).\(json ? "json" : "text")"
                containers.append(container)
                let r = try s.run("a", (json ? ["--json"] : [])
                                  + ["migrate", "--cloud", url, "--container", container, "--account", user])
                XCTAssertFalse(r.stdout.contains(secret) || r.stderr.contains(secret), "\(url)\n\(r)")
                XCTAssertFalse(r.stdout.contains("hunter2") || r.stderr.contains("hunter2"), "\(url)\n\(r)")
                if json {
                    let shown = JSONDoc.get(JSONDoc.parse(r.stdout), "config", "stores.a.cloud.url") as? String
                    XCTAssertEqual(shown?.contains("<redacted>"), true, r.stdout)
                    XCTAssertEqual(shown?.contains(socket), true, "the server is still named\n\(r.stdout)")
                } else {
                    let line = r.stderr.split(separator: "\n").first { $0.contains("config: stores.a.cloud.url: ") }
                    XCTAssertEqual(line?.contains("<redacted>"), true, r.stderr)
                }
                try s.run("a", ["sync"])
            }
        }
        try s.run("a", ["verify"])
    }

    /// A url, container or zone edited by hand is a new target, never "purged"; the message names migrate --cloud;
    /// putting the old value back just works.
    func testATargetChangedByHandIsANewTargetThatNamesMigrateCloud() throws {
        let s = try synced()
        try s.run("a", ["sync"])
        let original = s.config
        let edits = [
            ("url", original.replacingOccurrences(of: "url: file:cloud/shared.container",
                                                  with: "url: file:cloud/other.container")),
            ("container", original.replacingOccurrences(of: "container: iCloud.com.example.notes",
                                                        with: "container: iCloud.com.example.renamed")),
            ("zone", original.replacingOccurrences(of: "      secret: demo-secret\n",
                                                   with: "      secret: demo-secret\n      zone: elsewhere\n")),
        ]
        for (what, text) in edits {
            try s.dir.write("config.yaml", text)
            chmod(s.dir.file("config.yaml"), 0o600)
            let refused = try s.run("a", ["sync"], expect: 78)
            XCTAssertTrue(refused.stderr.contains("new sync target"), "\(what): \(refused.stderr)")
            XCTAssertTrue(refused.stderr.contains("storectl --store a migrate --cloud"), "\(what): \(refused.stderr)")
            XCTAssertFalse(refused.stderr.contains("purged"), "\(what): \(refused.stderr)")
            let doctor = try s.run("a", ["doctor"], expect: 69)
            XCTAssertTrue(doctor.stdout.contains("migrate --cloud"), "\(what): \(doctor.stdout)")
            XCTAssertFalse(doctor.stdout.contains("cloud init") || doctor.stdout.contains("purged"),
                           "\(what): \(doctor.stdout)")
            // sync refuses, so status does not exit 0 either: 78, the code sync meets it with.
            let status = try s.run("a", ["status"], expect: 78)
            XCTAssertTrue(status.stdout.contains("new sync target"), "\(what): \(status.stdout)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: s.dir.file("cloud/other.container")), what)
            // Back to the first target: it syncs as before.
            try s.dir.write("config.yaml", original)
            chmod(s.dir.file("config.yaml"), 0o600)
            try s.run("a", ["sync"])
        }
        // --rebind is the explicit choice of a new baseline in the new target.
        try s.dir.write("config.yaml", edits[2].1)
        try s.run("a", ["sync", "--rebind"])
        try s.run("a", ["verify"])
    }

    func testAMoveToAnotherZoneOfTheSameContainer() throws {
        let s = try synced()
        try s.run("a", ["migrate", "--cloud", "file:cloud/shared.container", "--zone", "v2"])
        XCTAssertTrue(s.config.contains("      zone: v2\n"), s.config)
        try s.run("a", ["verify"])
        try s.run("b", ["migrate", "--cloud", "file:cloud/shared.container", "--zone", "v2"])
        try s.sql("b", "INSERT INTO settings VALUES ('lang', 'fr')")
        try s.run("b", ["sync"])
        try s.run("a", ["sync"])
        XCTAssertEqual(try s.sql("a", "SELECT value FROM settings WHERE key = 'lang'"), "fr\n")
        let zones = try s.sqlFile(s.dir.file("cloud/shared.container"),
                                  "SELECT zone, count(*) FROM records WHERE deleted = 0 GROUP BY zone ORDER BY zone")
        // The old zone keeps what it had (3 notes, 1 tag, 1 link, 1 setting); nothing was deleted there.
        XCTAssertEqual(zones, "default|6\nv2|7\n")
        // The same command again: nothing to do.
        let again = try s.run("a", ["migrate", "--cloud", "file:cloud/shared.container", "--zone", "v2"])
        XCTAssertTrue(again.stdout.contains("nothing to do"), again.stdout)
    }

    func testAnUnavailableTargetAccountChangesNothing() throws {
        let s = try synced()
        let config = s.config
        _ = try FileCloudDatabaseHelper.make(s.dir.file("cloud/new.container"), account: "carol", secret: "right")
        let wrong = try s.run("a", ["migrate", "--cloud", "file:cloud/new.container", "--account", "carol",
                                    "--secret-env", "NEW_SECRET"], env: ["NEW_SECRET": "wrong"], expect: 69)
        XCTAssertTrue(wrong.stderr.contains("restricted") || wrong.stderr.contains("carol"), wrong.stderr)
        XCTAssertFalse(wrong.stderr.contains("wrong"), "the secret was printed: \(wrong.stderr)")
        let unset = try s.run("a", ["migrate", "--cloud", "file:cloud/new.container", "--secret-env", "NOT_SET"],
                              expect: 78)
        XCTAssertTrue(unset.stderr.contains("NOT_SET"), unset.stderr)
        try s.run("a", ["migrate", "--cloud", "file:cloud/new.container", "--to", "x.sqlite"], expect: 64)
        try s.run("a", ["migrate", "--zone", "z"], expect: 64)
        XCTAssertEqual(s.config, config)
        try s.run("a", ["sync"])
        try s.run("b", ["sync"])
        XCTAssertEqual(try notes(s, "b"), "n1|one\nn2|two\nn3|pending on a\n")

        // With the right secret, the move goes through and config.yaml names the variable, not the secret.
        try s.run("a", ["migrate", "--cloud", "file:cloud/new.container", "--account", "carol",
                        "--secret-env", "NEW_SECRET"], env: ["NEW_SECRET": "right"])
        XCTAssertTrue(s.config.contains("secret: ${NEW_SECRET}") || s.config.contains("secret: '${NEW_SECRET}'"),
                      s.config)
        XCTAssertFalse(s.config.contains("right"), s.config)
        try s.run("a", ["verify"], env: ["NEW_SECRET": "right"])
    }

    /// Killed at every step, the old setup (before the config edit) or the new one (after it) works, and the same
    /// command run again finishes; then the other store follows and both hold every row.
    func testAKillAtEveryStepLeavesAWorkingSetup() throws {
        let steps = ["cloud-move.after-final-sync", "cloud-move.after-account", "cloud-move.after-export",
                     "cloud-move.after-verify", "cloud-move.after-stage", "cloud-move.after-config",
                     "cloud-move.before-activate-commit"]
        let move = ["migrate", "--cloud", "file:cloud/new.container"]
        for failpoint in steps {
            let s = try synced(label: "storectl-cloud-move-kill")
            let oldConfig = s.config
            let newConfig = oldConfig.replacingOccurrences(
                of: "  a:\n    path: data/a.sqlite   # the store file\n    schema: schema.sql\n    mode: cloud\n"
                    + "    history:\n      author: app-a\n    cloud:\n      container: iCloud.com.example.notes\n"
                    + "      url: file:cloud/shared.container",
                with: "  a:\n    path: data/a.sqlite   # the store file\n    schema: schema.sql\n    mode: cloud\n"
                    + "    history:\n      author: app-a\n    cloud:\n      container: iCloud.com.example.notes\n"
                    + "      url: file:cloud/new.container")
            XCTAssertNotEqual(oldConfig, newConfig)
            let killed = try s.run("a", move, env: ["STORECTL_FAILPOINT": failpoint], expect: 137)
            XCTAssertEqual(killed.status, 137, failpoint)
            let switched = s.config == newConfig
            XCTAssertTrue(switched || s.config == oldConfig, "\(failpoint): config.yaml is half-edited\n\(s.config)")
            XCTAssertEqual(switched, ["cloud-move.after-config", "cloud-move.before-activate-commit"]
                .contains(failpoint), failpoint)
            XCTAssertEqual(try s.integrity().values.filter { $0 != "ok" }, [], failpoint)

            // The setup config.yaml names works: the app writes, the store syncs, b (still on the file) sees it
            // when a is still there too.
            try s.sql("a", "INSERT INTO settings VALUES ('after the kill', 'no')")
            try s.sql("a", "UPDATE settings SET value = 'yes' WHERE key = 'after the kill'")
            try s.sql("a", "INSERT INTO settings VALUES ('gone after the kill', 'x')")
            try s.sql("a", "DELETE FROM settings WHERE key = 'gone after the kill'")
            // b, still on the old target, keeps writing there before a's rerun.
            try s.sql("b", "INSERT INTO settings VALUES ('b after the kill', 'yes')")
            try s.run("b", ["sync"])
            try s.run("a", ["sync"])
            try s.run("a", ["verify"])
            if !switched {
                try s.run("b", ["sync"])
                XCTAssertEqual(try s.sql("b", "SELECT value FROM settings WHERE key = 'after the kill'"), "yes\n",
                               failpoint)
            }

            // The same command again finishes (or has nothing left to do), then b follows.
            try s.run("a", move)
            XCTAssertEqual(s.config, newConfig, failpoint)
            try s.run("b", move)
            for store in ["a", "b", "a"] { try s.run(store, ["sync"]) }
            try s.run("a", ["verify"])
            try s.run("b", ["verify"])
            XCTAssertEqual(try s.noteRows("a"), try s.noteRows("b"), failpoint)
            XCTAssertEqual(try notes(s, "b"), "n1|one\nn2|two\nn3|pending on a\n", failpoint)
            XCTAssertEqual(try s.sql("b", "SELECT value FROM settings WHERE key = 'after the kill'"), "yes\n",
                           failpoint)
            for store in ["a", "b"] {
                XCTAssertEqual(try s.sql(store, "SELECT value FROM settings WHERE key = 'b after the kill'"), "yes\n",
                               "\(failpoint): b's write on the old target reaches \(store)")
                XCTAssertEqual(try s.sql(store, "SELECT count(*) FROM settings WHERE key = 'gone after the kill'"),
                               "0\n", "\(failpoint): a row deleted after the kill stays deleted on \(store)")
            }
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: s.dir.file("data"))
                .filter { $0.contains("storectl-cloud-move") }
            XCTAssertEqual(leftovers, [], failpoint)
        }
    }
}

/// A container file with one account, made the way `storectl account add` would, with one PBKDF2 round.
enum FileCloudDatabaseHelper {
    static func make(_ path: String, account: String, secret: String) throws -> Bool {
        _ = try FileCloudDatabase.create(path: path, container: "iCloud.com.example.notes", account: account,
                                         secret: secret, iterations: 1)
        return true
    }
}
