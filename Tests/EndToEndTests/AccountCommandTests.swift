import Foundation
import TestSupport
import XCTest

/// `storectl account ...` and `storectl cloud init|purge`, run as the real binary on real container files.
final class AccountCommandTests: XCTestCase {
    let aliceSecret = "alice-S3cret-7a1f"
    let bobSecret = "bob-S3cret-90d2"
    /// Everything the binary printed in a test, to prove that no secret ever appears in it.
    private var printed = ""

    override func setUp() {
        super.setUp()
        printed = ""
    }

    /// A config with one store `notes` whose cloud is the container file `cloud/notes.container`.
    @discardableResult
    private func writeConfig(_ p: E2EProject, account: String? = "alice", secretVariable: String? = "ALICE_SECRET",
                             url: String = "file:cloud/notes.container", createIfMissing: Bool = false) throws
        -> String
    {
        let cloud = E2EProject.Cloud(container: "iCloud.com.example.notes", url: url, account: account,
                                     secret: secretVariable.map { "${\($0)}" }, createIfMissing: createIfMissing)
        return try p.writeConfig([E2EProject.Store("notes", path: "data/notes.sqlite", schema: nil, cloud: cloud)])
    }

    /// Runs the binary with both accounts' secrets in its environment, and keeps what it printed.
    private func run(_ args: [String], in p: E2EProject, secret: String? = nil, stdin: String? = nil,
                     environment: [String: String] = [:]) throws -> ProcessResult
    {
        var env = environment
        env["ALICE_SECRET"] = secret ?? aliceSecret
        env["BOB_SECRET"] = env["BOB_SECRET"] ?? bobSecret
        let result = try p.run(args, expect: nil, env: env, stdin: stdin)
        printed += result.stdout + result.stderr
        return result
    }

    private func initContainer(_ p: E2EProject) throws {
        let result = try run(["cloud", "init"], in: p)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(result.stdout, "created container 'iCloud.com.example.notes' at file:\(containerPath(p)); "
                           + "account 'alice' is its owner\n")
        XCTAssertEqual(result.stderr, "")
    }

    private func containerPath(_ p: E2EProject) -> String {
        // The temporary folder may sit behind a symlink; the config loader resolves against the config's path.
        p.dir.file("cloud/notes.container")
    }

    private func status(_ p: E2EProject, secret: String? = nil) throws -> (ProcessResult, [String: Any]) {
        let result = try run(["account", "status", "--json"], in: p, secret: secret)
        let json = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any] ?? [:]
        return (result, json)
    }

    /// No secret in anything the binary printed, nor in any file of the container's folder.
    private func assertNoSecretLeaked(_ p: E2EProject, file: StaticString = #filePath, line: UInt = #line) throws {
        for secret in [aliceSecret, bobSecret, "wrong-secret-5b"] {
            XCTAssertFalse(printed.contains(secret), "the output holds a secret", file: file, line: line)
        }
        let folder = p.dir.file("cloud")
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + name))
            for secret in [aliceSecret, bobSecret] {
                XCTAssertNil(bytes.range(of: Data(secret.utf8)), "\(name) holds a secret", file: file, line: line)
            }
        }
    }

    // MARK: The five statuses, and available

    func testAMissingContainerCouldNotBeDetermined() throws {
        let p = try E2EProject()
        try writeConfig(p)
        let result = try run(["account", "status"], in: p)
        XCTAssertEqual(result.status, 69, "\(result)")
        XCTAssertEqual(result.stdout, """
            status: couldNotDetermine
            account: alice
            container: iCloud.com.example.notes (file:\(containerPath(p)))
            reason: container 'iCloud.com.example.notes' does not exist at \(containerPath(p)); run 'storectl cloud \
            init' to create it, or set cloud.create_if_missing: true

            """)
        XCTAssertEqual(result.stderr, "")
        XCTAssertFalse(FileManager.default.fileExists(atPath: containerPath(p)), "checking never creates it")
        try assertNoSecretLeaked(p)
    }

    func testCloudInitMakesTheAccountAvailable() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        let (result, json) = try status(p)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(json["status"] as? String, "available")
        XCTAssertEqual(json["account"] as? String, "alice")
        XCTAssertEqual(json["store"] as? String, "notes")
        XCTAssertEqual(json["container"] as? String, "iCloud.com.example.notes")
        XCTAssertEqual(json["url"] as? String, "file:" + containerPath(p))
        XCTAssertEqual(json["reason"] as? String, "account 'alice' (owner) can read and write container "
                           + "'iCloud.com.example.notes' at \(containerPath(p))")
        XCTAssertEqual(result.stderr, "")

        let again = try run(["cloud", "init"], in: p)
        XCTAssertEqual(again.status, 0)
        XCTAssertEqual(again.stdout, "container 'iCloud.com.example.notes' already exists at "
                           + "file:\(containerPath(p)); nothing changed\n")
        try assertNoSecretLeaked(p)
    }

    func testAReadOnlyContainerIsRestricted() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        // CI runs as root, which writes through permission bits: storectl treats a file without them as read-only.
        XCTAssertEqual(chmod(containerPath(p), 0o444), 0)
        defer { chmod(containerPath(p), 0o644) }
        let (result, json) = try status(p)
        XCTAssertEqual(result.status, 69, "\(result)")
        XCTAssertEqual(json["status"] as? String, "restricted")
        XCTAssertEqual(json["reason"] as? String, "the container file \(containerPath(p)) has no write permission; "
                           + "check the permissions of the container file and its folder")
        try assertNoSecretLeaked(p)
    }

    func testALockedContainerIsTemporarilyUnavailable() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        // Another process holds the write lock for longer than storectl waits.
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        holder.arguments = ["python3", "-c", """
            import sqlite3, sys, time
            db = sqlite3.connect(sys.argv[1], isolation_level=None)
            db.execute('BEGIN IMMEDIATE')
            print('locked', flush=True)
            time.sleep(60)
            """, containerPath(p)]
        let out = Pipe()
        holder.standardOutput = out
        try holder.run()
        defer {
            holder.terminate()
            holder.waitUntilExit()
        }
        var line = ""
        while !line.hasSuffix("\n") {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += String(decoding: chunk, as: UTF8.self)
        }
        XCTAssertEqual(line, "locked\n")

        let (result, json) = try status(p)
        XCTAssertEqual(result.status, 75, "\(result)")
        XCTAssertEqual(json["status"] as? String, "temporarilyUnavailable")
        XCTAssertEqual(json["reason"] as? String, "the container \(containerPath(p)) is locked by another process "
                           + "beyond the busy timeout (5000 ms); retry later")
        try assertNoSecretLeaked(p)
    }

    func testAWrongSecretIsRestricted() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        let result = try run(["account", "status"], in: p, secret: "wrong-secret-5b")
        XCTAssertEqual(result.status, 69, "\(result)")
        XCTAssertEqual(result.stdout, """
            status: restricted
            account: alice
            container: iCloud.com.example.notes (file:\(containerPath(p)))
            reason: the secret configured for account 'alice' does not match the one registered in container \
            'iCloud.com.example.notes'; check cloud.secret and the environment variable it names

            """)
        try assertNoSecretLeaked(p)
    }

    func testADisabledAccountIsRestricted() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        let add = try run(["account", "add", "bob", "--secret-env", "BOB_SECRET"], in: p)
        XCTAssertEqual(add.status, 0, "\(add)")
        XCTAssertEqual(add.stdout, "added account 'bob' (member) to container 'iCloud.com.example.notes'\n")

        try writeConfig(p, account: "bob", secretVariable: "BOB_SECRET")
        let (before, beforeJSON) = try status(p)
        XCTAssertEqual(before.status, 0, "\(before)")
        XCTAssertEqual(beforeJSON["status"] as? String, "available")

        try writeConfig(p)
        let disable = try run(["account", "disable", "bob"], in: p)
        XCTAssertEqual(disable.status, 0, "\(disable)")
        XCTAssertEqual(disable.stdout, "disabled account 'bob' of container 'iCloud.com.example.notes'\n")

        try writeConfig(p, account: "bob", secretVariable: "BOB_SECRET")
        let (after, json) = try status(p)
        XCTAssertEqual(after.status, 69, "\(after)")
        XCTAssertEqual(json["status"] as? String, "restricted")
        XCTAssertEqual(json["reason"] as? String, "account 'bob' is disabled in container 'iCloud.com.example.notes'; "
                           + "ask an owner of the container to enable a new account for you")
        try assertNoSecretLeaked(p)
    }

    func testNoAccountWhenNothingIsConfiguredOrTheAccountIsUnknown() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)

        try writeConfig(p, account: nil, secretVariable: nil)
        let (none, noneJSON) = try status(p)
        XCTAssertEqual(none.status, 69, "\(none)")
        XCTAssertEqual(noneJSON["status"] as? String, "noAccount")
        XCTAssertEqual(noneJSON["reason"] as? String, "no account is configured; set cloud.account and cloud.secret")

        try writeConfig(p, account: "alice", secretVariable: nil)
        let (noSecret, noSecretJSON) = try status(p)
        XCTAssertEqual(noSecret.status, 69)
        XCTAssertEqual(noSecretJSON["status"] as? String, "noAccount")

        try writeConfig(p, account: "carol", secretVariable: "ALICE_SECRET")
        let (unknown, unknownJSON) = try status(p)
        XCTAssertEqual(unknown.status, 69)
        XCTAssertEqual(unknownJSON["status"] as? String, "noAccount")
        XCTAssertEqual(unknownJSON["reason"] as? String, "account 'carol' is not registered in container "
                           + "'iCloud.com.example.notes' at \(containerPath(p)); an owner can register it with "
                           + "'storectl account add carol'")
        try assertNoSecretLeaked(p)
    }

    func testCreateIfMissingCountsAsAvailableWithoutCreatingAnything() throws {
        let p = try E2EProject()
        try writeConfig(p, createIfMissing: true)
        let (result, json) = try status(p)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(json["status"] as? String, "available")
        XCTAssertFalse(FileManager.default.fileExists(atPath: containerPath(p)))
    }

    // MARK: Account administration

    func testAccountAddReadsTheSecretFromStdinAndListShowsAccounts() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        let add = try run(["account", "add", "carol", "--role", "owner"], in: p, stdin: bobSecret + "\n")
        XCTAssertEqual(add.status, 0, "\(add)")
        let empty = try run(["account", "add", "dave"], in: p, stdin: "")
        XCTAssertEqual(empty.status, 64, "\(empty)")
        XCTAssertTrue(empty.stderr.hasPrefix("error: no secret for account 'dave'\nhint: pass it on stdin or name an "
                                                 + "environment variable with --secret-env <var>\n"), empty.stderr)
        let unset = try run(["account", "add", "dave", "--secret-env", "NOPE"], in: p)
        XCTAssertEqual(unset.status, 64, "\(unset)")
        XCTAssertTrue(unset.stderr.hasPrefix("error: the environment variable NOPE named by --secret-env is not set "
                                                 + "or empty\n"), unset.stderr)
        let duplicate = try run(["account", "add", "carol", "--secret-env", "BOB_SECRET"], in: p)
        XCTAssertEqual(duplicate.status, 65, "\(duplicate)")
        XCTAssertEqual(duplicate.stderr, "error: account 'carol' already exists in container "
                           + "'iCloud.com.example.notes'\nhint: choose another id, or see 'storectl account list'\n")

        let list = try run(["account", "list", "--json"], in: p)
        XCTAssertEqual(list.status, 0, "\(list)")
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [String: Any])
        let accounts = try XCTUnwrap(json["accounts"] as? [[String: Any]])
        XCTAssertEqual(accounts.map { $0["id"] as? String }, ["alice", "carol"])
        XCTAssertEqual(accounts.map { $0["role"] as? String }, ["owner", "owner"])
        XCTAssertEqual(accounts.map { $0["disabled"] as? Bool }, [false, false])

        let text = try run(["account", "list"], in: p)
        XCTAssertTrue(text.stdout.hasPrefix("ID     ROLE    STATE     CREATED\nalice  owner   enabled   "), text.stdout)

        // The new owner's secret works.
        try writeConfig(p, account: "carol", secretVariable: "BOB_SECRET")
        XCTAssertEqual(try status(p).0.status, 0)
        try assertNoSecretLeaked(p)
    }

    func testAMemberCannotManageAccounts() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        XCTAssertEqual(try run(["account", "add", "bob", "--secret-env", "BOB_SECRET"], in: p).status, 0)
        try writeConfig(p, account: "bob", secretVariable: "BOB_SECRET")
        let result = try run(["account", "disable", "alice"], in: p)
        XCTAssertEqual(result.status, 77, "\(result)")
        XCTAssertEqual(result.stderr, "error: account 'bob' is not an owner of container 'iCloud.com.example.notes'\n"
                           + "hint: only an owner can manage accounts\n")
    }

    // MARK: Errors

    func testAStoreWithoutCloudSettingsIsAConfigError() throws {
        let p = try E2EProject()
        try p.writeConfig([E2EProject.Store("notes", path: "data/notes.sqlite", schema: nil)])
        let result = try run(["account", "status"], in: p)
        XCTAssertEqual(result.status, 78, "\(result)")
        XCTAssertEqual(result.stderr, "error: store 'notes' has no cloud settings (stores.notes.cloud is missing in "
                           + "config.yaml)\nhint: add a cloud: section with container, url, account and secret to "
                           + "stores.notes\n")
        XCTAssertEqual(result.stdout, "")
    }

    func testAnUnreachablePostgresServer() throws {
        let p = try E2EProject()
        try writeConfig(p, url: "postgres://alice:pw-in-url@localhost/notes")
        let (result, json) = try status(p)
        XCTAssertEqual(result.status, 69, "\(result)")
        XCTAssertEqual(json["status"] as? String, "couldNotDetermine")
        XCTAssertEqual(json["url"] as? String, "postgres://alice:<redacted>@localhost/notes")
        XCTAssertFalse(result.stdout.contains("pw-in-url"))
        let initResult = try run(["cloud", "init"], in: p)
        // Nothing listens on localhost:5432 here (the test server has a unix socket only): a temporary failure.
        XCTAssertEqual(initResult.status, 75, "\(initResult)")
        XCTAssertTrue(initResult.stderr.hasPrefix("error: cannot connect to postgres://alice:<redacted>@localhost/notes: "),
                      initResult.stderr)
        XCTAssertTrue(initResult.stderr.hasSuffix("\nhint: check that the server is running and reachable, then "
                          + "retry\n"), initResult.stderr)
        XCTAssertFalse(initResult.stderr.contains("pw-in-url"))
    }

    func testNotAContainer() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try p.dir.write("cloud/notes.container", "these are notes, not a database; storectl must leave them alone.....")
        let (result, json) = try status(p)
        XCTAssertEqual(result.status, 69, "\(result)")
        XCTAssertEqual(json["status"] as? String, "couldNotDetermine")
        let initResult = try run(["cloud", "init"], in: p)
        XCTAssertEqual(initResult.status, 65, "\(initResult)")
        XCTAssertEqual(try p.dir.read("cloud/notes.container"),
                       "these are notes, not a database; storectl must leave them alone.....")
    }

    // MARK: cloud purge and --print-grants

    func testPurgeAsksForConfirmation() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        // Put a zone with two records in the container, as a sync would.
        let sql = """
            INSERT INTO zones(name, epoch, last_seq, created_at) VALUES ('default', 'e1', 2, 0);
            INSERT INTO records VALUES ('default', 'a', 'notes', '{}', 't1', 1, 0, 'd', 0),
                                       ('default', 'b', 'notes', '{}', 't2', 2, 0, 'd', 0);
            """
        let insert = try Binary.run("/usr/bin/env", ["sqlite3", containerPath(p), sql], in: p.dir.path)
        XCTAssertEqual(insert.status, 0, "\(insert)")

        let refused = try run(["cloud", "purge"], in: p)
        XCTAssertEqual(refused.status, 64, "\(refused)")
        XCTAssertTrue(refused.stderr.hasPrefix("error: refusing to purge zone 'default' of container "
                                                   + "'iCloud.com.example.notes' without confirmation\nhint: stdin is "
                                                   + "not a terminal; add --yes to confirm\n"), refused.stderr)
        let count = try Binary.run("/usr/bin/env", ["sqlite3", containerPath(p), "SELECT count(*) FROM records"],
                                   in: p.dir.path)
        XCTAssertEqual(count.stdout, "2\n", "nothing was deleted")

        let purged = try run(["cloud", "purge", "--yes"], in: p)
        XCTAssertEqual(purged.status, 0, "\(purged)")
        XCTAssertEqual(purged.stdout, "purged zone 'default' of container 'iCloud.com.example.notes': 2 records "
                           + "deleted; stores syncing with it start over on their next sync\n")
        let after = try Binary.run("/usr/bin/env", ["sqlite3", containerPath(p),
                                                    "SELECT count(*), (SELECT epoch FROM zones) FROM records"],
                                   in: p.dir.path)
        XCTAssertEqual(after.stdout.prefix(2), "0|")
        XCTAssertNotEqual(after.stdout, "0|e1\n", "the zone has a new epoch")
    }

    func testPrintGrantsIsForPostgres() throws {
        let p = try E2EProject()
        try writeConfig(p)
        let result = try run(["cloud", "init", "--print-grants"], in: p)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(result.stdout, "--print-grants applies to PostgreSQL containers; a container file needs no "
                           + "grants (its file permissions decide who can use it)\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: containerPath(p)), "it changes nothing")
    }
}

extension AccountCommandTests {
    /// disable, enable and remove: an owner changes another account; the last enabled owner stays.
    func testAccountEnableAndRemove() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try initContainer(p)
        XCTAssertEqual(try run(["account", "add", "bob", "--secret-env", "BOB_SECRET"], in: p).status, 0)
        XCTAssertEqual(try run(["account", "disable", "bob"], in: p).status, 0)
        let enable = try run(["--json", "account", "enable", "bob"], in: p)
        XCTAssertEqual(enable.status, 0, "\(enable)")
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(enable.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["action"] as? String, "enabled")
        XCTAssertEqual(doc["enabled"] as? Bool, true)
        XCTAssertEqual(doc["account"] as? String, "bob")
        let listed = try run(["--json", "account", "list"], in: p)
        let accounts = (try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any])?["accounts"]
            as? [[String: Any]] ?? []
        XCTAssertEqual(accounts.first { $0["id"] as? String == "bob" }?["disabled"] as? Bool, false)
        let remove = try run(["account", "remove", "bob"], in: p)
        XCTAssertEqual(remove.status, 0, "\(remove)")
        XCTAssertEqual(remove.stdout, "removed account 'bob' of container 'iCloud.com.example.notes'\n")
        let after = try run(["--json", "account", "list"], in: p)
        XCTAssertFalse(after.stdout.contains("\"bob\""), after.stdout)
        // The last enabled owner is never removed, and an unknown id is named.
        let last = try run(["account", "remove", "alice"], in: p)
        XCTAssertEqual(last.status, 65, "\(last)")
        XCTAssertTrue(last.stderr.contains("last enabled owner"), last.stderr)
        XCTAssertTrue(last.stderr.contains("'storectl account add alice --role owner'"), last.stderr)
        let unknown = try run(["account", "enable", "carol"], in: p)
        XCTAssertNotEqual(unknown.status, 0)
        XCTAssertTrue(unknown.stderr.contains("no account 'carol'"), unknown.stderr)
    }
}
