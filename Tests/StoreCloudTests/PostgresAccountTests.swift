import Foundation
import StoreBase
import StoreCloud
@testable import StoreCloudPostgres
import XCTest

/// Account statuses mapped onto PostgreSQL roles and privileges.
final class PostgresAccountTests: PostgresTestCase {
    func testTheSuperuserIsAvailable() throws {
        guard let db = try makeContainer("acct") else { return }
        let report = db.accountStatus()
        XCTAssertEqual(report.status, .available, report.reason)
        XCTAssertEqual(report.account, "postgres")
        XCTAssertEqual(report.reason, "role postgres can log in at \(db.displayURL) and use container \(db.container) "
                           + "(its owner)")
        XCTAssertEqual(report.owner, "postgres")
    }

    func testAMissingRoleIsNoAccount() throws {
        guard let db = try makeContainer("acct"), let url = PostgresTestServer.url() else { return }
        let role = PostgresTestServer.uniqueRole()
        let as_ = try PostgresCloudDatabase(url: url, container: db.container, account: role)
        let report = as_.accountStatus()
        XCTAssertEqual(report, AccountStatusReport(status: .noAccount,
                                                   reason: "role \(role) does not exist at \(db.displayURL)",
                                                   account: role))
        XCTAssertThrowsError(try as_.ensureZone("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .account)
            XCTAssertEqual((error as? CloudError)?.exitCode, .unavailable)
            XCTAssertTrue("\(error)".contains("PostgreSQL error 28000: "), "\(error)")
            XCTAssertEqual((error as? CloudError)?.hint, "create the role, or set cloud.account to a role that exists")
        }
    }

    func testNoConfiguredRoleIsNoAccount() throws {
        guard let url = PostgresTestServer.url() else { return }
        let host = try XCTUnwrap(PGConnInfo.parse(url)["host"])
        let db = try PostgresCloudDatabase(url: "postgresql:///postgres?host=\(host)", container: "c")
        if ProcessInfo.processInfo.environment["PGUSER"] == nil {
            XCTAssertNil(db.role)
            XCTAssertEqual(db.accountStatus().status, .noAccount)
            XCTAssertEqual(db.accountStatus().account, nil)
        } else {
            XCTAssertNotNil(db.role)
        }
    }

    /// A version-3 container (no superseded saves) is migrated by its owner's first use; a member role granted
    /// before the migration may then write the new table, and its saves over another device's keep that save.
    func testAVersion3ContainerGrantsItsMembersTheSupersededSaves() throws {
        guard let owner = try makeContainer("mig4"), let url = PostgresTestServer.url() else { return }
        let role = try makeRole(url: url)
        for line in PostgresCloudDatabase.grantSQL(container: owner.container, role: role).split(separator: "\n")
        where !line.hasPrefix("--") {
            _ = try PostgresTestServer.superuser(url, String(line))
        }
        let s = "\"\(owner.schemaName)\""
        _ = try PostgresTestServer.superuser(url, "DROP TABLE \(s).superseded_saves")
        _ = try PostgresTestServer.superuser(url, "UPDATE \(s).meta SET value = '3' WHERE key = 'schema_version'")
        // The owner's first use migrates it.
        let again = try PostgresCloudDatabase(url: url, container: owner.container)
        try again.ensureZone("z")
        try again.addShare(zone: "z", account: role, permission: .readWrite)
        let version = try PostgresTestServer.superuser(url, "SELECT value FROM \(s).meta WHERE key = 'schema_version'")
        XCTAssertEqual(version.string(0, 0), String(PostgresCloudDatabase.schemaVersion))
        let granted = try PostgresTestServer.superuser(url, """
            SELECT has_table_privilege($1, $2, 'SELECT') AND has_table_privilege($1, $2, 'INSERT')
               AND has_table_privilege($1, $2, 'DELETE')
            """, [role, "\(s).superseded_saves"])
        XCTAssertEqual(granted.bool(0, 0), true, "the member role may write the superseded saves")
        let member = try PostgresCloudDatabase(url: url, container: owner.container, account: role)
        XCTAssertEqual(member.accountStatus().status, .available, member.accountStatus().reason)
        // The owner's device saves with a mark; the member's save over it keeps the owner's version.
        let first = try again.save(zone: "z", [RecordSave(recordName: "a", recordType: "t", fields: #"{"n":1}"#,
                                                          expectedTag: nil)],
                                   device: "d1", mark: ExportMark(serial: 1, historySeq: 5, time: 1))
        guard case .saved(let tag, _) = first.first else { return XCTFail("not saved: \(first)") }
        let second = try member.save(zone: "z", [RecordSave(recordName: "a", recordType: "t", fields: #"{"n":2}"#,
                                                            expectedTag: tag)], device: "d2")
        guard case .saved = second.first else { return XCTFail("not saved: \(second)") }
        let own = try again.fetchDeviceRecords(zone: "z", device: "d1", after: 0, limit: 10).records
        XCTAssertEqual(own.map(\.superseded), [true])
        XCTAssertEqual(own.first?.record.fields, #"{"n":1}"#)
        XCTAssertEqual(own.first?.historySeq, 5)
    }

    func testPrivilegesDecideBetweenRestrictedAndAvailable() throws {
        guard let owner = try makeContainer("acct"), let url = PostgresTestServer.url() else { return }
        let role = try makeRole(url: url)
        let db = try PostgresCloudDatabase(url: url, container: owner.container, account: role)
        let s = owner.schemaName

        var report = db.accountStatus()
        XCTAssertEqual(report.status, .restricted)
        XCTAssertEqual(report.reason, "role \(role) lacks USAGE on schema \(s) at \(db.displayURL): a database owner "
            + "can grant it with the SQL from 'storectl cloud init --print-grants'")
        XCTAssertThrowsError(try db.ensureZone("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .permission)
            XCTAssertEqual((error as? CloudError)?.exitCode, .noPermission)
        }

        _ = try PostgresTestServer.superuser(url, "GRANT USAGE ON SCHEMA \"\(s)\" TO \(role)")
        _ = try PostgresTestServer.superuser(url, "GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA \"\(s)\" TO \(role)")
        report = db.accountStatus()
        XCTAssertEqual(report.status, .restricted)
        XCTAssertEqual(report.reason, "role \(role) lacks privileges in schema \(s) at \(db.displayURL): "
            + "UPDATE on zones, DELETE on zones, UPDATE on records, DELETE on records, UPDATE on markers, "
            + "DELETE on markers, UPDATE on devices, DELETE on devices, UPDATE on export_marks, DELETE on export_marks, "
            + "DELETE on superseded_saves, UPDATE on shares, DELETE on shares; "
            + "a database owner can grant them with the SQL "
            + "from 'storectl cloud init --print-grants'")

        // The printed grants are exactly what is needed.
        _ = try PostgresTestServer.superuser(url, "REVOKE ALL ON ALL TABLES IN SCHEMA \"\(s)\" FROM \(role)")
        _ = try PostgresTestServer.superuser(url, "REVOKE ALL ON SCHEMA \"\(s)\" FROM \(role)")
        let grants = PostgresCloudDatabase.grantSQL(container: owner.container, role: role)
        for line in grants.split(separator: "\n") where !line.hasPrefix("--") {
            _ = try PostgresTestServer.superuser(url, String(line))
        }
        report = db.accountStatus()
        XCTAssertEqual(report, AccountStatusReport(status: .available, reason: "role \(role) can log in at "
            + "\(db.displayURL) and use container \(owner.container), which role postgres owns", account: role,
            owner: "postgres"))
        try owner.ensureZone("z")
        try owner.addShare(zone: "z", account: role, permission: .readWrite)
        let saved = try db.save(zone: "z", [RecordSave(recordName: "a", recordType: "T", fields: "{}",
                                                       expectedTag: nil)], device: "d")
        guard case .saved = saved[0] else { return XCTFail("\(saved)") }
        // Granted the container's privileges and a share, but not an owner: no purge.
        XCTAssertThrowsError(try db.purgeZone("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .permission, "\(error)")
        }
        try db.registerDevice(storeID: "s", name: "n")
        XCTAssertEqual(try db.devices().first?.account, role)
        // But not to change the schema.
        XCTAssertThrowsError(try db.initializeContainer())
    }

    /// A purge is the owner's: the role that created the container, or a role granted it. A role granted only the
    /// container's privileges (a member), a disabled role and a role that does not exist are refused, and the zone
    /// keeps its records.
    func testOnlyTheOwnerRoleCanPurge() throws {
        guard let url = PostgresTestServer.url() else { return }
        let owner = try makeRole(url: url)
        _ = try PostgresTestServer.superuser(url, "GRANT CREATE ON DATABASE \"\(try databaseName(url))\" TO \(owner)")
        let container = PostgresTestServer.uniqueContainer("purge")
        let asOwner = try PostgresCloudDatabase(url: url, container: container, account: owner)
        try asOwner.initializeContainer()
        dropAfterTest(try PostgresCloudDatabase(url: url, container: container))
        let member = try makeRole(url: url)
        for line in PostgresCloudDatabase.grantSQL(container: container, role: member).split(separator: "\n")
            where !line.hasPrefix("--")
        {
            _ = try PostgresTestServer.superuser(url, String(line))
        }
        let disabled = try makeRole(url: url, options: "NOLOGIN")
        try asOwner.ensureZone("z")
        func live() throws -> Int64 { try asOwner.zoneInfo("z")?.liveRecords ?? -1 }
        _ = try asOwner.save(zone: "z", [RecordSave(recordName: "a", recordType: "T", fields: "{}", expectedTag: nil)],
                             device: "d")
        for (role, kind) in [(member, CloudError.Kind.permission), (disabled, .account),
                             (PostgresTestServer.uniqueRole(), .account)]
        {
            let db = try PostgresCloudDatabase(url: url, container: container, account: role)
            XCTAssertThrowsError(try db.purgeZone("z"), role) { error in
                XCTAssertEqual((error as? CloudError)?.kind, kind, "\(role): \(error)")
            }
            XCTAssertEqual(try live(), 1, "\(role) purged the zone")
        }
        // A member of the owner role acts as the owner.
        _ = try PostgresTestServer.superuser(url, "GRANT \(owner) TO \(member)")
        try PostgresCloudDatabase(url: url, container: container, account: member).purgeZone("z")
        XCTAssertEqual(try live(), 0)
        try asOwner.purgeZone("z")
    }

    private func databaseName(_ url: String) throws -> String {
        try XCTUnwrap(PostgresTestServer.superuser(url, "SELECT current_database()").string(0, 0))
    }

    func testALoginRefusedIsRestricted() throws {
        guard let db = try makeContainer("acct"), let url = PostgresTestServer.url() else { return }
        let role = try makeRole(url: url, options: "NOLOGIN")
        let report = try PostgresCloudDatabase(url: url, container: db.container, account: role).accountStatus()
        XCTAssertEqual(report.status, .restricted)
        XCTAssertTrue(report.reason.hasPrefix("role \(role) is disabled or refused at \(db.displayURL): "), report.reason)
        XCTAssertTrue(report.reason.contains("is not permitted to log in"), report.reason)
    }

    func testReadOnlyAndTooManyConnectionsAreTemporarilyUnavailable() throws {
        guard let owner = try makeContainer("acct"), let url = PostgresTestServer.url() else { return }
        let reader = try makeRole(url: url)
        for line in PostgresCloudDatabase.grantSQL(container: owner.container, role: reader).split(separator: "\n")
        where !line.hasPrefix("--") {
            _ = try PostgresTestServer.superuser(url, String(line))
        }
        try owner.ensureZone("z")
        try owner.addShare(zone: "z", account: reader, permission: .readWrite)
        _ = try PostgresTestServer.superuser(url, "ALTER ROLE \(reader) SET default_transaction_read_only = on")
        let db = try PostgresCloudDatabase(url: url, container: owner.container, account: reader)
        let report = db.accountStatus()
        XCTAssertEqual(report.status, .temporarilyUnavailable)
        XCTAssertEqual(report.reason, "the server at \(db.displayURL) is read-only (default_transaction_read_only is on)")
        XCTAssertThrowsError(try db.save(zone: "z", [RecordSave(recordName: "a", recordType: "T", fields: "{}",
                                                                expectedTag: nil)], device: "d")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .temporary)
            XCTAssertEqual((error as? CloudError)?.exitCode, .tempFail)
            XCTAssertTrue("\(error)".contains("PostgreSQL error 25006"), "\(error)")
        }

        let limited = try makeRole(url: url, options: "LOGIN CONNECTION LIMIT 0")
        let full = try PostgresCloudDatabase(url: url, container: owner.container, account: limited)
        let fullReport = full.accountStatus()
        XCTAssertEqual(fullReport.status, .temporarilyUnavailable)
        XCTAssertTrue(fullReport.reason.contains("too many connections"), fullReport.reason)
        XCTAssertThrowsError(try full.ensureZone("z")) { XCTAssertEqual(($0 as? CloudError)?.kind, .temporary) }
    }

    func testAnUnreachableServerCannotBeDetermined() throws {
        let db = try PostgresCloudDatabase(url: "postgresql://postgres@/postgres?host=/nonexistent-storectl-dir",
                                           container: "c")
        let report = db.accountStatus()
        XCTAssertEqual(report.status, .couldNotDetermine)
        XCTAssertTrue(report.reason.hasPrefix("cannot reach the server at \(db.displayURL): "), report.reason)
        XCTAssertThrowsError(try db.ensureZone("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .temporary)
            XCTAssertEqual((error as? CloudError)?.hint, "check that the server is running and reachable, then retry")
        }
    }

    func testAMissingContainerIsAvailableOnlyToARoleThatCanCreateIt() throws {
        guard let url = PostgresTestServer.url() else { return }
        let container = PostgresTestServer.uniqueContainer("acct")
        let owner = try PostgresCloudDatabase(url: url, container: container)
        XCTAssertEqual(owner.accountStatus().status, .available)
        XCTAssertTrue(owner.accountStatus().reason.contains("'storectl cloud init' creates it"))
        let role = try makeRole(url: url)
        let report = try PostgresCloudDatabase(url: url, container: container, account: role).accountStatus()
        XCTAssertEqual(report.status, .restricted)
        XCTAssertEqual(report.reason, "container \(container) does not exist at \(owner.displayURL) (no schema "
            + "\(owner.schemaName)), and role \(role) may not create it: a database owner runs 'storectl cloud init'")
    }

    /// Password authentication needs a server that asks for passwords: a scratch cluster with scram-sha-256.
    func testPasswordsComeFromTheSecretPGPASSWORDOrPgpass() throws {
        guard let cluster = try ScratchCluster.start(auth: "scram-sha-256") else { return }
        let savedPassword = getenv("PGPASSWORD").map { String(cString: $0) }
        let savedPassFile = getenv("PGPASSFILE").map { String(cString: $0) }
        defer {
            if let savedPassword { setenv("PGPASSWORD", savedPassword, 1) } else { unsetenv("PGPASSWORD") }
            if let savedPassFile { setenv("PGPASSFILE", savedPassFile, 1) } else { unsetenv("PGPASSFILE") }
        }
        unsetenv("PGPASSWORD")
        setenv("PGPASSFILE", cluster.directory + "/no-such-pgpass", 1)

        let container = "iCloud.test.passwords"
        let admin = try PostgresCloudDatabase(url: cluster.url, container: container,
                                              password: cluster.superuserPassword)
        try admin.initializeContainer()
        try cluster.superuser("CREATE ROLE alice LOGIN PASSWORD 'right horse'")
        for line in PostgresCloudDatabase.grantSQL(container: container, role: "alice").split(separator: "\n")
        where !line.hasPrefix("--") {
            try cluster.superuser(String(line))
        }
        let url = cluster.url

        let wrong = try PostgresCloudDatabase(url: url, container: container, account: "alice", password: "wrong")
        let wrongReport = wrong.accountStatus()
        XCTAssertEqual(wrongReport, AccountStatusReport(status: .restricted, reason: "the password of role alice was "
            + "refused at \(wrong.displayURL)", account: "alice"))
        XCTAssertThrowsError(try wrong.ensureZone("z")) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .account)
            XCTAssertTrue("\(error)".contains("PostgreSQL error 28P01"), "\(error)")
            XCTAssertFalse("\(error)".contains("wrong"), "\(error)")
        }

        let none = try PostgresCloudDatabase(url: url, container: container, account: "alice")
        let noneReport = none.accountStatus()
        XCTAssertEqual(noneReport.status, .noAccount)
        XCTAssertEqual(noneReport.reason, "no password for role alice at \(none.displayURL): set cloud.secret, "
            + "PGPASSWORD or ~/.pgpass")

        let secret = try PostgresCloudDatabase(url: url, container: container, account: "alice",
                                               password: "right horse")
        XCTAssertEqual(secret.accountStatus().status, .available, secret.accountStatus().reason)
        try secret.ensureZone("z")

        // The password in the URL is used too, and never shown.
        let inURL = try PostgresCloudDatabase(url: "postgresql://alice:right%20horse@/postgres?host="
            + cluster.directory, container: container)
        XCTAssertEqual(inURL.accountStatus().status, .available)
        XCTAssertFalse(inURL.displayURL.contains("horse"))

        setenv("PGPASSWORD", "right horse", 1)
        XCTAssertEqual(none.accountStatus().status, .available, "PGPASSWORD")
        unsetenv("PGPASSWORD")

        let pgpass = cluster.directory + "/pgpass"
        try "*:*:*:alice:right horse\n".write(toFile: pgpass, atomically: false, encoding: .utf8)
        chmod(pgpass, 0o600)
        setenv("PGPASSFILE", pgpass, 1)
        XCTAssertEqual(none.accountStatus().status, .available, ".pgpass")
        XCTAssertEqual(try none.zoneInfo("z")?.name, "z")
    }
}
