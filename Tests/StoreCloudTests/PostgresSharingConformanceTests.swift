import Foundation
import StoreCloud
@testable import StoreCloudPostgres
import XCTest

/// A container on the PostgreSQL test server (`STORECTL_TEST_PG_URL`, trust on its unix socket) made by the
/// superuser, whose accounts are roles of the test's own granted the container: none of them owns the schema, so
/// the server's row-level security applies to each. `drop()` removes the container and the roles.
final class PostgresSharingContainer: SharingTestContainer {
    let url: String
    let container = PostgresTestServer.uniqueContainer("share")
    let admin: PostgresCloudDatabase
    private let suffix = String(UInt32.random(in: 0...UInt32.max), radix: 16)
    private(set) var roles: [String] = []

    init(url: String) throws {
        self.url = url
        admin = try PostgresCloudDatabase(url: url, container: container)
        try admin.initializeContainer()
        try addAccount("alice")
    }

    func id(_ label: String) -> String { "st_\(label)_\(suffix)" }

    func addAccount(_ label: String) throws {
        let role = id(label)
        _ = try PostgresTestServer.superuser(url, "CREATE ROLE \(role) LOGIN")
        roles.append(role)
        for line in PostgresCloudDatabase.grantSQL(container: container, role: role).split(separator: "\n")
        where !line.hasPrefix("--") {
            _ = try PostgresTestServer.superuser(url, String(line))
        }
    }

    func connect(_ label: String) throws -> any CloudSharing { try postgres(label) }

    /// A connection as `label`'s role, with the backend's own type.
    func postgres(_ label: String) throws -> PostgresCloudDatabase {
        try PostgresCloudDatabase(url: url, container: container, account: id(label))
    }

    func drop() {
        try? admin.deleteContainer()
        admin.close()
        for role in roles {
            _ = try? PostgresTestServer.superuser(url, "DROP OWNED BY \(role)")
            _ = try? PostgresTestServer.superuser(url, "DROP ROLE IF EXISTS \(role)")
        }
        roles = []
    }

    /// The PostgreSQL server of the tests, or nil when there is none and none is required; with
    /// `STORECTL_REQUIRE_PG=1` a missing server fails the test (`PostgresTestServer.url`) and throws.
    static func serverURL(file: StaticString = #filePath, line: UInt = #line) throws -> String {
        if let url = PostgresTestServer.url(file: file, line: line) { return url }
        if PostgresTestServer.required { throw StoreTestError("STORECTL_REQUIRE_PG=1 and no PostgreSQL server") }
        throw XCTSkip("no PostgreSQL (set STORECTL_TEST_PG_URL or STORECTL_REQUIRE_PG=1)")
    }
}

/// The sharing suite (`SharingConformanceTests`) on PostgreSQL.
final class PostgresSharingConformanceTests: SharingConformanceTests {
    private var made: [PostgresSharingContainer] = []

    override func makeContainer() throws -> any SharingTestContainer {
        let c = try PostgresSharingContainer(url: try PostgresSharingContainer.serverURL())
        made.append(c)
        return c
    }

    override func tearDown() {
        for c in made { c.drop() }
        made = []
        super.tearDown()
    }

    // XCTest on Linux discovers only the test methods a class declares itself, so each inherited test is
    // declared again here; `testEverySharingTestRunsHere` fails when the suite gains one that is not.
    override func testTheCreatorOwnsTheZone() throws { try super.testTheCreatorOwnsTheZone() }
    override func testAReadOnlyParticipantReadsAndSavesNothing() throws {
        try super.testAReadOnlyParticipantReadsAndSavesNothing()
    }
    override func testAReadWriteParticipantSavesButNeverPurges() throws {
        try super.testAReadWriteParticipantSavesButNeverPurges()
    }
    override func testAnAccountWithoutAShareNeitherReadsNorTakesTheZoneName() throws {
        try super.testAnAccountWithoutAShareNeitherReadsNorTakesTheZoneName()
    }
    override func testOnlyTheOwnerManagesTheShares() throws { try super.testOnlyTheOwnerManagesTheShares() }
    override func testARemovedShareIsMetAtTheNextRead() throws { try super.testARemovedShareIsMetAtTheNextRead() }
    override func testAParticipantLeaves() throws { try super.testAParticipantLeaves() }
    override func testTheQuietStateFollowsTheShare() throws { try super.testTheQuietStateFollowsTheShare() }

    static let runHere = [
        "testTheCreatorOwnsTheZone", "testAReadOnlyParticipantReadsAndSavesNothing",
        "testAReadWriteParticipantSavesButNeverPurges", "testAnAccountWithoutAShareNeitherReadsNorTakesTheZoneName",
        "testOnlyTheOwnerManagesTheShares", "testARemovedShareIsMetAtTheNextRead", "testAParticipantLeaves",
        "testTheQuietStateFollowsTheShare",
    ]

    func testEverySharingTestRunsHere() throws {
        let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let source = try String(contentsOf: here.appendingPathComponent("SharingConformanceTests.swift"),
                                encoding: .utf8)
        let declared = source.split(separator: "\n").compactMap { line -> String? in
            let t = line.trimmingCharacters(in: .whitespaces)
            guard t.hasPrefix("func test"), let paren = t.firstIndex(of: "(") else { return nil }
            return String(t[t.index(t.startIndex, offsetBy: 5)..<paren])
        }
        XCTAssertEqual(declared, Self.runHere, "declare the new sharing tests in PostgresSharingConformanceTests")
    }

    /// A poll of a watcher's standing session (one statement) sees a share removed: no quiet state, and the full
    /// round's first read is refused.
    func testAStandingSessionsPollSeesARemovedShare() throws {
        let c = try PostgresSharingContainer(url: try PostgresSharingContainer.serverURL())
        made.append(c)
        let alice = try c.postgres("alice")
        try alice.ensureZone(zone)
        try c.addAccount("bob")
        try alice.addShare(zone: zone, account: c.id("bob"), permission: .readOnly)
        let bob = try c.postgres("bob")
        XCTAssertEqual(bob.accountStatus().status, .available)
        let info = try XCTUnwrap(try bob.zoneInfo(zone, countLive: false))
        XCTAssertNotNil(bob.standingSession)
        let token = ServerChangeToken(epoch: info.epoch, seq: info.lastSeq)
        let imported = try XCTUnwrap(bob.quietState(zone: zone, importedUpTo: token))
        XCTAssertEqual(try bob.quietState(zone: zone, known: imported), imported)
        try alice.addShare(zone: zone, account: c.id("bob"), permission: .readWrite)
        XCTAssertNotEqual(try bob.quietState(zone: zone, known: imported), imported)
        try alice.removeShare(zone: zone, account: c.id("bob"))
        XCTAssertNil(try bob.quietState(zone: zone, known: imported))
        XCTAssertThrowsError(try bob.fetchChanges(zone: zone, since: token, limit: 10)) { error in
            XCTAssertEqual((error as? CloudError)?.kind, .permission, "\(error)")
        }
    }
}
