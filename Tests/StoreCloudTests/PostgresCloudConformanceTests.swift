import Foundation
import StoreCloud
@testable import StoreCloudPostgres
import XCTest

/// The `CloudDatabase` conformance suite, run on PostgreSQL.
///
/// Accounts are PostgreSQL roles, so the suite needs a server that asks roles for passwords: it runs on one
/// cluster of its own (initdb + pg_ctl from `STORECTL_TEST_PG_BIN`, like `.ci/run`'s), whose `pg_hba.conf` lets the
/// superuser in by trust and asks the accounts the tests create (members of `storectl_accounts`) for their
/// scram-sha-256 password. Each test gets its own container (schema).
final class PostgresCloudConformanceTests: CloudConformanceTests {
    nonisolated(unsafe) private static var cluster: ScratchCluster?

    override func makeContainer() throws -> any CloudTestContainer {
        if Self.cluster == nil {
            // Fail, not skip, when PostgreSQL is required; a plain developer run without it does nothing.
            guard PostgresTestServer.required || PostgresTestServer.environment["STORECTL_TEST_PG_URL"] != nil else {
                throw XCTSkip("no PostgreSQL (set STORECTL_TEST_PG_URL or STORECTL_REQUIRE_PG=1)")
            }
            guard let cluster = try ScratchCluster.start(auth: "scram-sha-256", hba: """
                local all +storectl_accounts scram-sha-256
                local all all trust

                """)
            else { throw StoreTestError("no PostgreSQL cluster could be started for the conformance suite") }
            try cluster.superuser("CREATE ROLE storectl_accounts NOLOGIN")
            Self.cluster = cluster
        }
        guard let cluster = Self.cluster else { throw StoreTestError("no cluster") }
        return try PostgresTestContainer(cluster: cluster)
    }

    // XCTest on Linux discovers only the test methods a class declares itself, so each inherited test is
    // declared again here; `testEveryConformanceTestRunsHere` fails when the suite gains one that is not.
    override func testExportMarksRecordWhereEachDeviceStands() throws {
        try super.testExportMarksRecordWhereEachDeviceStands()
    }
    override var readsSchemaVersionAlong: Bool { true }
    override func testAZoneAndAPageOfItsFeedCarryItsSchemaVersion() throws {
        try super.testAZoneAndAPageOfItsFeedCarryItsSchemaVersion()
    }
    override func testZonesAreCreatedOnceAndReportTheirState() throws {
        try super.testZonesAreCreatedOnceAndReportTheirState()
    }
    override func testAMissingZoneIsReported() throws {
        try super.testAMissingZoneIsReported()
    }
    override func testZonesAreSeparate() throws {
        try super.testZonesAreSeparate()
    }
    override func testSaveAndFetchRoundTrip() throws {
        try super.testSaveAndFetchRoundTrip()
    }
    override func testSavesAreConditionalOnTheExpectedTag() throws {
        try super.testSavesAreConditionalOnTheExpectedTag()
    }
    override func testAStaleTagIsAConflictAndTheRestOfTheBatchIsSaved() throws {
        try super.testAStaleTagIsAConflictAndTheRestOfTheBatchIsSaved()
    }
    override func testTombstonesAreReturned() throws {
        try super.testTombstonesAreReturned()
    }
    override func testInvalidFieldsRejectTheWholeBatch() throws {
        try super.testInvalidFieldsRejectTheWholeBatch()
    }
    override func testPagingReturnsEachChangeExactlyOnce() throws {
        try super.testPagingReturnsEachChangeExactlyOnce()
    }
    override func testConcurrentWritersNeverMakeAReaderMissAChange() throws {
        try super.testConcurrentWritersNeverMakeAReaderMissAChange()
    }
    override func testConcurrentWritersOfOneRecordConflictInsteadOfLosingUpdates() throws {
        try super.testConcurrentWritersOfOneRecordConflictInsteadOfLosingUpdates()
    }
    override func testMarkersAreCreatedOnce() throws {
        try super.testMarkersAreCreatedOnce()
    }
    override func testASchemaVersionIsRaisedOnceAndOnlyByADeviceThatSawEveryRecord() throws {
        try super.testASchemaVersionIsRaisedOnceAndOnlyByADeviceThatSawEveryRecord()
    }
    override func testASaveAtAnOlderSchemaVersionIsRefusedWhole() throws {
        try super.testASaveAtAnOlderSchemaVersionIsRefusedWhole()
    }
    override func testMarkersStayAtomicUnderConcurrentCreation() throws {
        try super.testMarkersStayAtomicUnderConcurrentCreation()
    }
    override func testARecordNamedTwiceInOneBatchRefusesTheWholeBatch() throws {
        try super.testARecordNamedTwiceInOneBatchRefusesTheWholeBatch()
    }
    override func testNamesInTwoUnicodeFormsAreTwoRecords() throws {
        try super.testNamesInTwoUnicodeFormsAreTwoRecords()
    }
    override func testEmptyNamesTypesZonesAndDevicesAreRefused() throws {
        try super.testEmptyNamesTypesZonesAndDevicesAreRefused()
    }
    override func testChangeTagsHaveOneFormat() throws {
        try super.testChangeTagsHaveOneFormat()
    }
    override func testTheTokenOfAPageFollowsOneRule() throws {
        try super.testTheTokenOfAPageFollowsOneRule()
    }
    override func testPurgeGivesZoneResetForOldTokens() throws {
        try super.testPurgeGivesZoneResetForOldTokens()
    }
    override func testAnAtomicBatchWithAConflictWritesNothing() throws {
        try super.testAnAtomicBatchWithAConflictWritesNothing()
    }
    override func testDevicesRegistryRemembersWhenEachWasLastSeen() throws {
        try super.testDevicesRegistryRemembersWhenEachWasLastSeen()
    }
    override func testAccountStatuses() throws {
        try super.testAccountStatuses()
    }

    /// The names of the tests above, checked against the suite's source.
    static let runHere: [String] = [
        "testZonesAreCreatedOnceAndReportTheirState",
        "testAMissingZoneIsReported",
        "testZonesAreSeparate",
        "testSaveAndFetchRoundTrip",
        "testSavesAreConditionalOnTheExpectedTag",
        "testAStaleTagIsAConflictAndTheRestOfTheBatchIsSaved",
        "testTombstonesAreReturned",
        "testInvalidFieldsRejectTheWholeBatch",
        "testPagingReturnsEachChangeExactlyOnce",
        "testConcurrentWritersNeverMakeAReaderMissAChange",
        "testConcurrentWritersOfOneRecordConflictInsteadOfLosingUpdates",
        "testMarkersAreCreatedOnce",
        "testASchemaVersionIsRaisedOnceAndOnlyByADeviceThatSawEveryRecord",
        "testAZoneAndAPageOfItsFeedCarryItsSchemaVersion",
        "testASaveAtAnOlderSchemaVersionIsRefusedWhole",
        "testMarkersStayAtomicUnderConcurrentCreation",
        "testARecordNamedTwiceInOneBatchRefusesTheWholeBatch",
        "testNamesInTwoUnicodeFormsAreTwoRecords",
        "testEmptyNamesTypesZonesAndDevicesAreRefused",
        "testChangeTagsHaveOneFormat",
        "testTheTokenOfAPageFollowsOneRule",
        "testPurgeGivesZoneResetForOldTokens",
        "testAnAtomicBatchWithAConflictWritesNothing",
        "testExportMarksRecordWhereEachDeviceStands",
        "testDevicesRegistryRemembersWhenEachWasLastSeen",
        "testAccountStatuses",
    ]

    func testEveryConformanceTestRunsHere() throws {
        let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        let source = try String(contentsOf: here.appendingPathComponent("CloudConformanceTests.swift"), encoding: .utf8)
        let declared = source.split(separator: "\n").compactMap { line -> String? in
            let t = line.trimmingCharacters(in: .whitespaces)
            guard t.hasPrefix("func test"), let paren = t.firstIndex(of: "(") else { return nil }
            return String(t[t.index(t.startIndex, offsetBy: 5)..<paren])
        }
        XCTAssertEqual(declared, Self.runHere, "declare the new conformance tests in PostgresCloudConformanceTests")
    }

    override class func tearDown() {
        cluster = nil
        super.tearDown()
    }
}

/// A container in a PostgreSQL cluster for one conformance test. Its accounts are roles (members of
/// `storectl_accounts`); they and the schema are dropped when the next test's container is made.
final class PostgresTestContainer: CloudTestContainer, @unchecked Sendable {
    let url: String
    let superuserPassword: String
    let container = "iCloud.com.example.conformance"
    /// The superuser: it owns the container (the conformance container is fresh for each test).
    let account = "postgres"

    init(cluster: ScratchCluster) throws {
        url = cluster.url
        superuserPassword = cluster.superuserPassword
        // The previous test's container and accounts go now, not when that test released its container object:
        // a test may release it while it still uses a connection (`makeContainer().connect()`).
        let members = try superuser("""
            SELECT quote_ident(r.rolname) FROM pg_roles r JOIN pg_auth_members m ON m.member = r.oid
            JOIN pg_roles g ON g.oid = m.roleid WHERE g.rolname = 'storectl_accounts'
            """)
        let owner = try PostgresCloudDatabase(url: url, container: container, account: account,
                                              password: superuserPassword)
        try owner.deleteContainer()
        for row in 0..<members.rowCount {
            guard let role = members.string(row, 0) else { continue }
            try superuser("DROP OWNED BY \(role)")
            try superuser("DROP ROLE \(role)")
        }
        try owner.initializeContainer()
    }

    func connect() throws -> any CloudDatabase {
        try PostgresCloudDatabase(url: url, container: container, account: account, password: superuserPassword)
    }

    func connect(account: String?, secret: String?) throws -> any CloudDatabase {
        // Without an account, the URL names no user either: nothing is configured.
        let noUser = url.replacingOccurrences(of: "postgresql://postgres@/", with: "postgresql:///")
        return try PostgresCloudDatabase(url: account == nil ? noUser : url, container: container, account: account,
                                         password: secret)
    }

    func addAccount(id: String, secret: String) throws {
        let role = PostgresSchema.quoted(id)
        let password = "'" + secret.replacingOccurrences(of: "'", with: "''") + "'"
        try superuser("CREATE ROLE \(role) LOGIN IN ROLE storectl_accounts PASSWORD \(password)")
        for statement in PostgresCloudDatabase.grantSQL(container: container, role: id).split(separator: "\n")
        where !statement.hasPrefix("--") {
            try superuser(String(statement))
        }
    }

    func disableAccount(id: String) throws {
        try superuser("ALTER ROLE \(PostgresSchema.quoted(id)) NOLOGIN")
    }

    @discardableResult
    private func superuser(_ sql: String) throws -> PGResult {
        let c = try PGConnection(parameters: [("dbname", url), ("password", superuserPassword)], timeout: 10)
        return try c.execute(sql)
    }
}
