import Foundation
import StoreCloud
import StoreSQLite
import TestSupport
import XCTest

/// What only the file backend does: the container file itself, its permissions, locks, and account admin.
final class FileCloudDatabaseTests: XCTestCase {
    let container = "iCloud.com.example.notes"
    let secret = "pa55-Secret-9e1c"

    private func assertCloudError(_ kind: CloudError.Kind, _ summary: String? = nil, hint: String? = nil,
                                  file: StaticString = #filePath, line: UInt = #line, _ body: () throws -> Void)
    {
        do {
            try body()
            XCTFail("expected CloudError .\(kind), but it succeeded", file: file, line: line)
        } catch let error as CloudError {
            XCTAssertEqual(error.kind, kind, "\(error)", file: file, line: line)
            if let summary { XCTAssertEqual(error.summary, summary, file: file, line: line) }
            if let hint { XCTAssertEqual(error.hint, hint, file: file, line: line) }
        } catch {
            XCTFail("expected CloudError .\(kind), got \(error)", file: file, line: line)
        }
    }

    private func make(_ dir: TempDirectory, iterations: Int = 500) throws -> FileCloudDatabase {
        let (db, created) = try FileCloudDatabase.create(path: dir.file("c/notes.container"), container: container,
                                                         account: "alice", secret: secret, iterations: iterations)
        XCTAssertTrue(created)
        db.hashIterations = 500
        return db
    }

    func testAMissingContainerSaysToRunCloudInit() throws {
        let dir = try TempDirectory()
        let path = dir.file("missing.container")
        assertCloudError(.containerMissing, "container '\(container)' does not exist at \(path)",
                         hint: "run 'storectl cloud init' to create it, or set cloud.create_if_missing: true") {
            _ = try FileCloudDatabase.open(path: path, container: container, account: "alice", secret: secret)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path), "opening never creates it")
        XCTAssertEqual(CloudError(.containerMissing, "x").exitCode.rawValue, 69)
        let report = FileCloudDatabase.accountStatus(path: path, container: container, account: "alice",
                                                     secret: secret)
        XCTAssertEqual(report.status, .couldNotDetermine)
        XCTAssertTrue(report.reason.contains("storectl cloud init"), report.reason)
    }

    func testCreateIfMissingCreatesTheContainerWithTheOwner() throws {
        let dir = try TempDirectory()
        let path = dir.file("deep/folder/notes.container")
        let db = try FileCloudDatabase.open(path: path, container: container, account: "alice", secret: secret,
                                            createIfMissing: true)
        XCTAssertEqual(db.accountStatus().status, .available)
        XCTAssertEqual(try db.listAccounts().map(\.id), ["alice"])
        XCTAssertEqual(try db.listAccounts().first?.role, "owner")
        XCTAssertEqual(db.displayURL, "file:" + path)
        // Created once: a second create finds it and changes nothing.
        let (again, created) = try FileCloudDatabase.create(path: path, container: container, account: "bob",
                                                            secret: "other")
        XCTAssertFalse(created)
        XCTAssertEqual(try db.listAccounts().map(\.id), ["alice"])
        XCTAssertEqual(again.accountStatus().status, .noAccount)

        let raw = try Connection(path: path, mode: .readOnly)
        XCTAssertEqual(try raw.scalar("PRAGMA journal_mode")?.string, "wal")
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'format'")?.string,
                       "storectl-cloud-container")
        XCTAssertEqual(try raw.scalar("SELECT value FROM container_meta WHERE key = 'container'")?.string, container)
    }

    /// A hash made with fewer iterations than the container's count is made again on the next successful check,
    /// with the count recorded in it; a wrong secret never changes it.
    func testAWeakHashIsUpgradedOnItsNextSuccessfulCheck() throws {
        let dir = try TempDirectory()
        let path = dir.file("c/notes.container")
        _ = try FileCloudDatabase.create(path: path, container: container, account: "alice", secret: secret,
                                         iterations: 1000)
        func storedHash() throws -> String {
            let raw = try Connection(path: path, mode: .readOnly)
            return try XCTUnwrap(try raw.scalar("SELECT secret_hash FROM accounts WHERE id = 'alice'")?.string)
        }
        func check(_ secret: String) throws -> AccountStatus {
            try FileCloudDatabase.open(path: path, container: container, account: "alice", secret: secret)
                .accountStatus().status
        }
        XCTAssertEqual(PasswordHash.iterations(of: try storedHash()), 1000)
        // The container's own count: nothing to upgrade.
        XCTAssertEqual(try check(secret), .available)
        XCTAssertEqual(PasswordHash.iterations(of: try storedHash()), 1000)
        // The count raised (as for a container made before counts were recorded, or by an owner).
        let raw = try Connection(path: path)
        try raw.run("UPDATE container_meta SET value = '5000' WHERE key = 'hash_iterations'")
        let before = try storedHash()
        XCTAssertNotEqual(try check("wrong secret"), .available)
        XCTAssertEqual(try storedHash(), before, "a wrong secret changes nothing")
        XCTAssertEqual(try check(secret), .available)
        let upgraded = try storedHash()
        XCTAssertEqual(PasswordHash.iterations(of: upgraded), 5000)
        XCTAssertNotEqual(upgraded, before)
        XCTAssertTrue(try PasswordHash.verify(secret: secret, stored: upgraded))
        XCTAssertEqual(try check(secret), .available)
        // A container without a recorded count is raised to the default, 600,000.
        try raw.run("DELETE FROM container_meta WHERE key = 'hash_iterations'")
        XCTAssertEqual(try check(secret), .available)
        XCTAssertEqual(PasswordHash.iterations(of: try storedHash()), PasswordHash.defaultIterations)
        XCTAssertEqual(try check(secret), .available)
    }

    func testTheSecretIsStoredOnlyAsASaltedHash() throws {
        let dir = try TempDirectory()
        let db = try make(dir, iterations: PasswordHash.defaultIterations)
        try db.addAccount(id: "bob", secret: "bobs-own-secret-31", role: .member)
        try db.ensureZone("default")
        _ = try db.save(zone: "default", [RecordSave(recordName: "r", recordType: "t", fields: "{}", expectedTag: nil)],
                        device: "d")
        let raw = try Connection(path: db.path, mode: .readOnly)
        let stored = try XCTUnwrap(try raw.scalar("SELECT secret_hash FROM accounts WHERE id = 'alice'")?.string)
        XCTAssertTrue(stored.hasPrefix("pbkdf2-sha256$600000$"), stored)
        XCTAssertTrue(try PasswordHash.verify(secret: secret, stored: stored))
        // Neither secret is anywhere in the container's files (the database, its WAL and shared memory).
        for name in try FileManager.default.contentsOfDirectory(atPath: dir.file("c")) {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: dir.file("c/" + name)))
            XCTAssertNil(bytes.range(of: Data(secret.utf8)), "\(name) holds the secret")
            XCTAssertNil(bytes.range(of: Data("bobs-own-secret-31".utf8)), "\(name) holds bob's secret")
        }
    }

    func testAForeignFileIsNotAContainer() throws {
        let dir = try TempDirectory()
        let sqlite = dir.file("app.sqlite")
        let other = try Connection(path: sqlite)
        try other.execute("CREATE TABLE accounts(id TEXT)")
        let hint = "check cloud.url; storectl never writes into a file that is not its container"
        assertCloudError(.notAContainer, "\(sqlite) is a SQLite database but not a storectl container", hint: hint) {
            _ = try FileCloudDatabase.open(path: sqlite, container: container, account: "alice", secret: secret)
        }
        assertCloudError(.notAContainer) {
            _ = try FileCloudDatabase.create(path: sqlite, container: container, account: "alice", secret: secret)
        }
        XCTAssertEqual(try other.scalar("SELECT count(*) FROM sqlite_master")?.int64, 1, "the file was not changed")

        let text = try dir.write("notes.txt", "just some text, long enough to be read as a header by SQLite.....")
        assertCloudError(.notAContainer) {
            _ = try FileCloudDatabase.open(path: text, container: container, account: "alice", secret: secret)
        }
        XCTAssertEqual(try dir.read("notes.txt"), "just some text, long enough to be read as a header by SQLite.....")
        let report = FileCloudDatabase.accountStatus(path: text, container: container, account: "alice", secret: secret)
        XCTAssertEqual(report.status, .couldNotDetermine, report.reason)
    }

    func testAnotherContainersFileIsRefused() throws {
        let dir = try TempDirectory()
        let db = try make(dir)
        assertCloudError(.notAContainer, "\(db.path) holds container '\(container)', not 'iCloud.other'",
                         hint: "check cloud.container and cloud.url in the config") {
            _ = try FileCloudDatabase.open(path: db.path, container: "iCloud.other", account: "alice", secret: secret)
        }
    }

    func testAReadOnlyContainerIsRestrictedEvenForRoot() throws {
        let dir = try TempDirectory()
        let path = try make(dir).path
        XCTAssertEqual(chmod(path, 0o444), 0)
        defer { chmod(path, 0o644) }
        let db = try FileCloudDatabase.open(path: path, container: container, account: "alice", secret: secret)
        let report = db.accountStatus()
        XCTAssertEqual(report.status, .restricted, report.reason)
        XCTAssertTrue(report.reason.contains("has no write permission"), report.reason)
        // Reading works; writing is refused up front (root could otherwise write through the permission bits).
        XCTAssertNil(try db.zoneInfo("default"))
        assertCloudError(.permission) { _ = try db.ensureZone("default") }

        XCTAssertEqual(chmod(path, 0o644), 0)
        XCTAssertEqual(chmod(dir.file("c"), 0o555), 0)
        defer { chmod(dir.file("c"), 0o755) }
        let inReadOnlyFolder = FileCloudDatabase.accountStatus(path: path, container: container, account: "alice",
                                                               secret: secret)
        XCTAssertEqual(inReadOnlyFolder.status, .restricted, inReadOnlyFolder.reason)
        XCTAssertTrue(inReadOnlyFolder.reason.contains("folder"), inReadOnlyFolder.reason)
    }

    func testALockedContainerIsTemporarilyUnavailable() throws {
        let dir = try TempDirectory()
        let path = try make(dir).path
        let holder = try Connection(path: path)
        try holder.execute("BEGIN IMMEDIATE")
        let start = Date()
        let db = try FileCloudDatabase.open(path: path, container: container, account: "alice", secret: secret,
                                            busyTimeout: 200)
        let report = db.accountStatus()
        XCTAssertEqual(report.status, .temporarilyUnavailable, report.reason)
        XCTAssertTrue(report.reason.contains("locked by another process"), report.reason)
        assertCloudError(.temporary) { _ = try db.ensureZone("default") }
        XCTAssertLessThan(Date().timeIntervalSince(start), 5, "waits only for the busy timeout")
        try holder.execute("ROLLBACK")
        XCTAssertEqual(db.accountStatus().status, .available)
        XCTAssertEqual(CloudError(.temporary, "x").exitCode.rawValue, 75)
    }

    func testAccountAdministration() throws {
        let dir = try TempDirectory()
        let owner = try make(dir)
        try owner.addAccount(id: "bob", secret: "bob-secret", role: .member)
        try owner.addAccount(id: "carol", secret: "carol-secret", role: .owner)
        assertCloudError(.invalid, "account 'bob' already exists in container '\(container)'") {
            try owner.addAccount(id: "bob", secret: "again", role: .member)
        }
        assertCloudError(.invalid) { try owner.addAccount(id: "has space", secret: "x", role: .member) }
        assertCloudError(.invalid) { try owner.addAccount(id: "dave", secret: "", role: .member) }
        let list = try owner.listAccounts()
        XCTAssertEqual(list.map(\.id), ["alice", "bob", "carol"])
        XCTAssertEqual(list.map(\.role), ["owner", "member", "owner"])
        XCTAssertEqual(list.map(\.disabled), [false, false, false])

        // A member may not manage accounts.
        let bob = try FileCloudDatabase.open(path: owner.path, container: container, account: "bob",
                                             secret: "bob-secret")
        assertCloudError(.permission, "account 'bob' is not an owner of container '\(container)'") {
            try bob.addAccount(id: "eve", secret: "x", role: .owner)
        }
        assertCloudError(.permission) { try bob.disableAccount(id: "alice") }
        try owner.ensureZone("default")
        assertCloudError(.permission) { try bob.purgeZone("default") }

        try owner.disableAccount(id: "bob")
        XCTAssertEqual(try owner.listAccounts().map(\.disabled), [false, true, false])
        XCTAssertEqual(try FileCloudDatabase.open(path: owner.path, container: container, account: "bob",
                                                  secret: "bob-secret").accountStatus().status, .restricted)
        assertCloudError(.invalid, "no account 'nobody' in container '\(container)'") {
            try owner.disableAccount(id: "nobody")
        }
        // The last enabled owner stays.
        try owner.disableAccount(id: "carol")
        assertCloudError(.invalid) { try owner.disableAccount(id: "alice") }
        XCTAssertEqual(owner.accountStatus().status, .available)
    }

    func testAContainerWithoutAccountsTakesItsFirstAccountFromAnyone() throws {
        let dir = try TempDirectory()
        let (db, _) = try FileCloudDatabase.create(path: dir.file("c.container"), container: container, account: nil,
                                                   secret: nil)
        XCTAssertEqual(db.accountStatus().status, .noAccount)
        db.hashIterations = 500
        try db.addAccount(id: "first", secret: "first-secret", role: .owner)
        let first = try FileCloudDatabase.open(path: db.path, container: container, account: "first",
                                               secret: "first-secret")
        XCTAssertEqual(first.accountStatus().status, .available)
        assertCloudError(.account) { try db.addAccount(id: "second", secret: "s", role: .owner) }
    }

    func testLargeBatchesAreOneQuickTransaction() throws {
        let dir = try TempDirectory()
        let db = try make(dir)
        try db.ensureZone("default")
        let saves = (0..<5000).map {
            RecordSave(recordName: "notes/\($0)", recordType: "notes", fields: #"{"title":"note \#($0)","n":\#($0)}"#,
                       expectedTag: nil)
        }
        let start = Date()
        let outcomes = try db.save(zone: "default", saves, device: "d")
        let elapsed = Date().timeIntervalSince(start)
        XCTAssertEqual(outcomes.count, 5000)
        XCTAssertEqual(try db.zoneInfo("default")?.lastSeq, 5000)
        XCTAssertLessThan(elapsed, 10, "5000 records in one batch took \(elapsed) s")
        let updates = zip(saves, outcomes).map { save, outcome -> RecordSave in
            var update = save
            if case .saved(let tag, _) = outcome { update.expectedTag = tag }
            update.deleted = true
            return update
        }
        let deleted = try db.save(zone: "default", updates, device: "d")
        XCTAssertEqual(deleted.filter { if case .saved = $0 { return true } else { return false } }.count, 5000)
        XCTAssertEqual(try db.zoneInfo("default")?.liveRecords, 0)
    }

    func testStatusWithoutConfiguredAccountNeedsNoContainer() {
        let report = FileCloudDatabase.accountStatus(path: "/nonexistent/c.container", container: container,
                                                     account: nil, secret: nil)
        XCTAssertEqual(report.status, .noAccount)
        XCTAssertEqual(report.reason, "no account is configured; set cloud.account and cloud.secret")
        let noSecret = FileCloudDatabase.accountStatus(path: "/nonexistent/c.container", container: container,
                                                       account: "alice", secret: "")
        XCTAssertEqual(noSecret.status, .noAccount)
        XCTAssertEqual(noSecret.account, "alice")
    }
}
