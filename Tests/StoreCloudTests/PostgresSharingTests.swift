import Foundation
import StoreCloud
@testable import StoreCloudPostgres
import TestSupport
import XCTest

/// Shares on PostgreSQL are enforced by the server itself (row-level security): a role connecting with plain
/// `psql` reads and writes what its share allows and nothing more. Also the migration of a version-4 container,
/// and records forged by a role that may not write.
final class PostgresSharingTests: XCTestCase {
    private var made: [PostgresSharingContainer] = []
    private let zone = "notes"

    override func tearDown() {
        for c in made { c.drop() }
        made = []
        super.tearDown()
    }

    /// Alice's zone with record `a`; bob has a read-only share, carol a read-write one, dave none.
    private func sharedZone() throws -> (c: PostgresSharingContainer, alice: PostgresCloudDatabase) {
        let c = try PostgresSharingContainer(url: try PostgresSharingContainer.serverURL())
        made.append(c)
        let alice = try c.postgres("alice")
        try alice.ensureZone(zone)
        _ = try alice.save(zone: zone, [RecordSave(recordName: "a", recordType: "notes", fields: #"{"n":1}"#,
                                                   expectedTag: nil)], device: "alice-device")
        for label in ["bob", "carol", "dave"] { try c.addAccount(label) }
        try alice.addShare(zone: zone, account: c.id("bob"), permission: .readOnly)
        try alice.addShare(zone: zone, account: c.id("carol"), permission: .readWrite)
        return (c, alice)
    }

    /// The `psql` program: `$STORECTL_TEST_PG_BIN/psql`, else the one on PATH.
    private var psqlPath: String {
        if let bin = ProcessInfo.processInfo.environment["STORECTL_TEST_PG_BIN"], !bin.isEmpty,
           FileManager.default.isExecutableFile(atPath: bin + "/psql")
        {
            return bin + "/psql"
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin"
        let found = path.split(separator: ":").map { "\($0)/psql" }
            .first { FileManager.default.isExecutableFile(atPath: $0) }
        return found ?? "/usr/bin/psql"
    }

    /// Runs `sql` with `psql` as `label`'s role (the test server trusts its unix socket).
    @discardableResult
    private func psql(_ c: PostgresSharingContainer, as label: String, _ sql: String) throws -> ProcessResult {
        var options = try PGConnInfo.parse(c.url)
        options["user"] = c.id(label)
        options["password"] = nil
        let conninfo = options.map { key, value in
            let quoted = value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "'", with: "\\'")
            return "\(key)='\(quoted)'"
        }.joined(separator: " ")
        return try Binary.run(psqlPath, ["-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql],
                              in: "/")
    }

    private func assertRefused(_ r: ProcessResult, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertNotEqual(r.status, 0, "\(r)", file: file, line: line)
        XCTAssertTrue(r.stderr.contains("row-level security") || r.stderr.contains("permission denied")
                          || r.stderr.contains("only the owner"), r.stderr, file: file, line: line)
    }

    func testPsqlAsAParticipantOrAStrangerGetsWhatTheShareAllows() throws {
        let (c, alice) = try sharedZone()
        let s = "\"\(alice.schemaName)\""
        let before = try XCTUnwrap(try alice.fetchRecord(zone: zone, recordName: "a"))
        let zoneBefore = try XCTUnwrap(try alice.zoneInfo(zone))
        let row = "('\(zone)', 'x', 'notes', '{}', 'tag', 99, false, 'dev', 0)"
        // Read-only: reads, and changes nothing.
        XCTAssertEqual(try psql(c, as: "bob", "SELECT count(*) FROM \(s).records WHERE zone = '\(zone)'").stdout,
                       "1\n")
        assertRefused(try psql(c, as: "bob", "INSERT INTO \(s).records VALUES \(row)"))
        assertRefused(try psql(c, as: "bob", """
            INSERT INTO \(s).records VALUES ('\(zone)', 'a', 'notes', '{"n":9}', 'tag', 99, false, 'dev', 0)
            ON CONFLICT (zone, record_name) DO UPDATE SET fields = excluded.fields
            """))
        XCTAssertEqual(try psql(c, as: "bob", "UPDATE \(s).records SET fields = '{\"n\":9}' RETURNING 1").stdout, "")
        XCTAssertEqual(try psql(c, as: "bob", "DELETE FROM \(s).records RETURNING 1").stdout, "")
        XCTAssertEqual(try psql(c, as: "bob", "UPDATE \(s).zones SET last_seq = last_seq + 5 RETURNING 1").stdout, "")
        assertRefused(try psql(c, as: "bob", """
            INSERT INTO \(s).markers VALUES ('\(zone)', 'm', 'dev', 0, '{}')
            """))
        XCTAssertEqual(try psql(c, as: "bob", """
            UPDATE \(s).shares SET permission = 'read-write' WHERE account = current_user RETURNING 1
            """).stdout, "")
        assertRefused(try psql(c, as: "bob", """
            INSERT INTO \(s).shares VALUES ('\(zone)', '\(c.id("dave"))', 'read-write', 0, current_user)
            """))
        // No share: sees nothing at all.
        for table in ["records", "zones", "shares", "markers", "export_marks"] {
            XCTAssertEqual(try psql(c, as: "dave", "SELECT count(*) FROM \(s).\(table)").stdout, "0\n", table)
        }
        assertRefused(try psql(c, as: "dave", "INSERT INTO \(s).records VALUES \(row)"))
        XCTAssertEqual(try alice.fetchRecord(zone: zone, recordName: "a"), before)
        XCTAssertEqual(try alice.zoneInfo(zone), zoneBefore)
        XCTAssertEqual(try alice.zoneAccess(zone).owner, c.id("alice"))
        XCTAssertEqual(try c.postgres("bob").zoneAccess(zone).level, .readOnly)
        XCTAssertNil(try alice.marker(zone: zone, name: "m"))
        XCTAssertEqual(try alice.shareParticipants(zone: zone).participants.count, 2)
        // Read-write: writes records, but takes no zone over and deletes none.
        XCTAssertEqual(try psql(c, as: "carol", """
            UPDATE \(s).records SET fields = '{"n":5}' WHERE zone = '\(zone)' AND record_name = 'a' RETURNING 1
            """).stdout, "1\n")
        assertRefused(try psql(c, as: "carol", "UPDATE \(s).zones SET owner = current_user"))
        XCTAssertEqual(try psql(c, as: "carol", "DELETE FROM \(s).zones RETURNING 1").stdout, "")
        XCTAssertEqual(try alice.fetchRecord(zone: zone, recordName: "a")?.fields, #"{"n":5}"#)
        XCTAssertEqual(try alice.zoneInfo(zone)?.owner, c.id("alice"))
    }

    /// A participant's change feed under the policies is still a walk of the (zone, seq) index, the policy's
    /// zone list evaluated once (a hashed subplan).
    func testTheChangeFeedOfAParticipantIsAnIndexedRead() throws {
        let (c, alice) = try sharedZone()
        let s = "\"\(alice.schemaName)\""
        let plan = try psql(c, as: "bob", """
            SET enable_bitmapscan = off;
            EXPLAIN SELECT a.epoch, r.* FROM \(s).zone_access('\(zone)', current_user) a
            LEFT JOIN LATERAL (SELECT record_name, seq FROM \(s).records WHERE zone = '\(zone)' AND seq > 0
                               AND modified_by IS DISTINCT FROM 'x' ORDER BY seq LIMIT 101) r ON a.level <> 'none'
            """)
        XCTAssertEqual(plan.status, 0, "\(plan)")
        XCTAssertTrue(plan.stdout.contains("Index Scan using records_zone_seq"), plan.stdout)
        XCTAssertTrue(plan.stdout.contains("hashed SubPlan"), plan.stdout)
        XCTAssertFalse(plan.stdout.contains("Sort"), plan.stdout)
    }

    /// Records written outside storectl in the name of a role that may not write the zone come back rejected, and
    /// so does a record without a saving role (what the server leaves of a superuser's write), named by the role
    /// its device is registered to.
    func testARecordForgedForARoleThatMayNotWriteIsRejected() throws {
        let (c, alice) = try sharedZone()
        try c.postgres("dave").registerDevice(storeID: "dave-device", name: "dave")
        try c.postgres("bob").registerDevice(storeID: "bob-device", name: "bob")
        try c.postgres("carol").registerDevice(storeID: "carol-device", name: "carol")
        let s = "\"\(alice.schemaName)\""
        // Written with the server's own trigger off, as only a superuser or the tables' owner can.
        _ = try PostgresTestServer.superuser(c.url, "ALTER TABLE \(s).records DISABLE TRIGGER records_saver")
        _ = try PostgresTestServer.superuser(c.url, """
            WITH z AS (UPDATE \(s).zones SET last_seq = last_seq + 5 WHERE name = $1 RETURNING last_seq)
            INSERT INTO \(s).records
            SELECT $1, n, 'notes', '{}', 'tag-' || n, z.last_seq - 5 + k, false, d, 0, a
            FROM z, (VALUES ('by-dave', 'dave-device', 1, $2), ('by-bob', 'bob-device', 2, $3),
                            ('by-carol', 'carol-device', 3, $4), ('by-ghost', 'ghost-device', 4, NULL),
                            ('by-nobody', 'dave-device', 5, NULL)) v(n, d, k, a)
            """, [zone, c.id("dave"), c.id("bob"), c.id("carol")])
        _ = try PostgresTestServer.superuser(c.url, "ALTER TABLE \(s).records ENABLE TRIGGER records_saver")
        let records = try c.postgres("carol").fetchChanges(zone: zone, since: nil, limit: 10).records
        XCTAssertEqual(records.map(\.recordName), ["a", "by-dave", "by-bob", "by-carol", "by-ghost", "by-nobody"])
        XCTAssertEqual(records.map(\.rejection), [
            nil,
            "saved by device dave-device of account '\(c.id("dave"))', who may not write zone '\(zone)'",
            "saved by device bob-device of account '\(c.id("bob"))', who may not write zone '\(zone)'",
            nil,
            "saved by device ghost-device (registered to no account) without a saving account on record (written "
                + "outside storectl); not applied to zone '\(zone)'",
            "saved by device dave-device of account '\(c.id("dave"))' without a saving account on record (written "
                + "outside storectl); not applied to zone '\(zone)'",
        ])
        XCTAssertNotNil(try alice.fetchRecord(zone: zone, recordName: "by-dave")?.rejection)
        XCTAssertNil(try alice.fetchRecord(zone: zone, recordName: "by-carol")?.rejection)
        // A superuser's write with the trigger on is left without a saving role, whatever it names.
        _ = try PostgresTestServer.superuser(c.url, """
            UPDATE \(s).records SET account = $2, modified_by = 'dave-device' WHERE zone = $1 AND record_name = 'a'
            """, [zone, c.id("alice")])
        XCTAssertNotNil(try alice.fetchRecord(zone: zone, recordName: "a")?.rejection)
    }

    /// A container at schema version 4 migrates to 5: its zones go to the role that owns its schema, the other
    /// roles with a device in it become read-write participants, and they keep syncing.
    func testAVersion4ContainerIsMigrated() throws {
        let url = try PostgresSharingContainer.serverURL()
        let c = try PostgresSharingContainer(url: url)
        made.append(c)
        for label in ["owner", "bob", "carol", "dave"] { try c.addAccount(label) }
        // Rebuilt at version 4, owned by the role `owner`.
        try c.admin.deleteContainer()
        let schema = c.admin.schemaName, s = "\"\(c.admin.schemaName)\""
        var statements = ["CREATE SCHEMA \(s) AUTHORIZATION \(c.id("owner"))",
                          "CREATE TABLE \(s).meta (key text PRIMARY KEY, value text NOT NULL)",
                          "INSERT INTO \(s).meta VALUES ('container', '\(c.container)'), ('schema_version', '4')"]
        statements += (0..<4).flatMap { PostgresSchema.statements(migration: $0, schema: schema) }
        let roles = ["owner", "bob", "carol", "dave"].map { c.id($0) }.joined(separator: ", ")
        statements += [
            "GRANT USAGE ON SCHEMA \(s) TO \(roles)",
            "GRANT SELECT ON \(s).meta TO \(roles)",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON \(s).zones, \(s).records, \(s).markers, \(s).devices, "
                + "\(s).export_marks, \(s).superseded_saves TO \(roles)",
            "INSERT INTO \(s).zones VALUES ('\(zone)', 'e1', 1, 0), ('todo', 'e2', 0, 0)",
            "INSERT INTO \(s).records VALUES ('\(zone)', 'a', 'notes', '{}', '1-e1', 1, false, 'bob-device', 0)",
            """
            INSERT INTO \(s).devices VALUES ('owner-device', 'o', '\(c.id("owner"))', 0, 0),
                ('bob-device', 'b', '\(c.id("bob"))', 0, 0), ('carol-device', 'c', '\(c.id("carol"))', 0, 0),
                ('ghost-device', 'g', 'a_role_that_is_gone', 0, 0), ('anonymous', 'x', NULL, 0, 0)
            """,
        ]
        for statement in statements { _ = try PostgresTestServer.superuser(url, statement) }
        let setup = try PostgresCloudDatabase(url: url, container: c.container).initializeContainer()
        XCTAssertEqual(setup.previousVersion, 4)
        XCTAssertEqual(setup.version, PostgresCloudDatabase.schemaVersion)
        let owner = try c.postgres("owner")
        for zone in [zone, "todo"] {
            let shares = try owner.shareParticipants(zone: zone)
            XCTAssertEqual(shares.owner, c.id("owner"))
            XCTAssertEqual(shares.participants.map(\.account), [c.id("bob"), c.id("carol")].sorted())
            XCTAssertEqual(Set(shares.participants.map(\.permission)), [.readWrite])
            XCTAssertEqual(Set(shares.participants.map(\.addedBy)), ["upgrade"])
        }
        // The roles that synced keep syncing, under the policies; the others need a share.
        let bob = try c.postgres("bob")
        XCTAssertEqual(bob.accountStatus().status, .available, bob.accountStatus().reason)
        XCTAssertEqual(try bob.fetchChanges(zone: zone, since: nil, limit: 10).records.map(\.recordName), ["a"])
        let saved = try bob.save(zone: zone, [RecordSave(recordName: "b", recordType: "notes", fields: "{}",
                                                         expectedTag: nil)], device: "bob-device")
        guard case .saved = saved.first else { return XCTFail("\(saved)") }
        XCTAssertThrowsError(try c.postgres("dave").zoneInfo(zone)) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .permission, "\(error)")
        }
        XCTAssertEqual(try psql(c, as: "dave", "SELECT count(*) FROM \(s).records").stdout, "0\n")
        XCTAssertEqual(try psql(c, as: "carol", "SELECT count(*) FROM \(s).records").stdout, "2\n")
    }
}
