import Foundation
import StoreCloud
import XCTest

/// A container for the sharing suite, whose accounts the tests name by label (`alice` owns the zones).
protocol SharingTestContainer: AnyObject {
    /// The account id of `label`: the label itself in a container file, a role of the test's own on PostgreSQL.
    func id(_ label: String) -> String
    /// Registers the account `label` (a PostgreSQL role granted the container).
    func addAccount(_ label: String) throws
    /// A new connection as the account `label`.
    func connect(_ label: String) throws -> any CloudSharing
}

/// A container file in a temporary folder whose owner account is `alice`, removed when the last reference goes.
final class FileSharingContainer: SharingTestContainer {
    let directory: String
    let path: String
    let container = "iCloud.com.example.sharing"

    init() throws {
        let base = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        var template = Array("\(base)/storectl-share-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buf -> Bool in
            guard let p = buf.baseAddress else { return false }
            return mkdtemp(p) != nil
        }
        guard made else { throw CocoaError(.fileWriteUnknown) }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        path = directory + "/shared.container"
        _ = try FileCloudDatabase.create(path: path, container: container, account: "alice",
                                         secret: Self.secret("alice"), iterations: 500)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    static func secret(_ label: String) -> String { label + "-secret-4f9d" }

    func id(_ label: String) -> String { label }

    func addAccount(_ label: String) throws {
        try file("alice").addAccount(id: label, secret: Self.secret(label), role: .member)
    }

    func connect(_ label: String) throws -> any CloudSharing { try file(label) }

    /// A connection as `label`, with the backend's own type.
    func file(_ label: String) throws -> FileCloudDatabase {
        let db = try FileCloudDatabase.open(path: path, container: container, account: label,
                                            secret: Self.secret(label))
        db.hashIterations = 500
        return db
    }
}

/// The sharing rules of `CloudSharing`, proven against a real backend: a zone is its creator's, and other
/// accounts reach it only through a share, read-only or read-write.
///
/// This class runs them on a container file; `PostgresSharingConformanceTests` runs the very same tests on
/// PostgreSQL by overriding `makeContainer()`.
class SharingConformanceTests: XCTestCase {
    /// A fresh container in which `alice` is registered and available.
    func makeContainer() throws -> any SharingTestContainer { try FileSharingContainer() }

    let zone = "notes"

    func assertCloudError(_ kind: CloudError.Kind, _ text: String? = nil, file: StaticString = #filePath,
                          line: UInt = #line, _ body: () throws -> Void)
    {
        do {
            try body()
            XCTFail("expected CloudError .\(kind), but it succeeded", file: file, line: line)
        } catch let error as CloudError {
            XCTAssertEqual(error.kind, kind, "\(error)", file: file, line: line)
            if kind == .permission { XCTAssertEqual(error.exitCode.rawValue, 77, file: file, line: line) }
            if let text { XCTAssertTrue("\(error)".contains(text), "\(error)", file: file, line: line) }
        } catch {
            XCTFail("expected CloudError .\(kind), got \(error)", file: file, line: line)
        }
    }

    func record(_ name: String, _ n: Int, expecting tag: String? = nil) -> RecordSave {
        RecordSave(recordName: name, recordType: "notes", fields: "{\"n\":\(n)}", expectedTag: tag)
    }

    /// Alice's zone with one record `a`, and bob (read-only), carol (read-write) and dave (no share) registered.
    func sharedZone() throws -> (container: any SharingTestContainer, alice: any CloudSharing) {
        let c = try makeContainer()
        let alice = try c.connect("alice")
        try alice.ensureZone(zone)
        _ = try alice.save(zone: zone, [record("a", 1)], device: "alice-device")
        for label in ["bob", "carol", "dave"] { try c.addAccount(label) }
        try alice.addShare(zone: zone, account: c.id("bob"), permission: .readOnly)
        try alice.addShare(zone: zone, account: c.id("carol"), permission: .readWrite)
        return (c, alice)
    }

    func testTheCreatorOwnsTheZone() throws {
        let c = try makeContainer()
        let alice = try c.connect("alice")
        XCTAssertEqual(try alice.zoneAccess(zone), ZoneAccess(zone: zone, owner: nil, account: c.id("alice"),
                                                              level: .owner))
        let info = try alice.ensureZone(zone)
        XCTAssertEqual(info.owner, c.id("alice"))
        XCTAssertEqual(info.access, .owner)
        XCTAssertEqual(try alice.zoneInfo(zone)?.owner, c.id("alice"))
        XCTAssertEqual(try alice.zoneAccess(zone).level, .owner)
        XCTAssertEqual(try alice.shareParticipants(zone: zone).owner, c.id("alice"))
        XCTAssertEqual(try alice.shareParticipants(zone: zone).participants, [])
        assertCloudError(.zoneNotFound) { _ = try alice.shareParticipants(zone: "elsewhere") }
    }

    func testAReadOnlyParticipantReadsAndSavesNothing() throws {
        let (c, alice) = try sharedZone()
        let bob = try c.connect("bob")
        let info = try XCTUnwrap(try bob.zoneInfo(zone))
        XCTAssertEqual(info.owner, c.id("alice"))
        XCTAssertEqual(info.access, .readOnly)
        XCTAssertEqual(info.liveRecords, 1)
        XCTAssertEqual(try bob.fetchChanges(zone: zone, since: nil, limit: 10).records.map(\.recordName), ["a"])
        XCTAssertEqual(try bob.fetchRecord(zone: zone, recordName: "a")?.fields, #"{"n":1}"#)
        XCTAssertNil(try bob.schemaVersion(zone: zone))
        XCTAssertNil(try bob.marker(zone: zone, name: "seed"))
        XCTAssertNil(try bob.exportState(zone: zone, device: "bob-device"))
        XCTAssertEqual(try bob.fetchDeviceRecords(zone: zone, device: "bob-device", after: 0, limit: 10).records, [])
        let tag = try XCTUnwrap(try alice.fetchRecord(zone: zone, recordName: "a")?.changeTag)
        assertCloudError(.permission, "read-only access to zone '\(zone)'") {
            _ = try bob.save(zone: zone, [record("a", 2, expecting: tag)], device: "bob-device")
        }
        assertCloudError(.permission, "read-only") {
            _ = try bob.save(zone: zone, [record("b", 2)], device: "bob-device")
        }
        assertCloudError(.permission) { _ = try bob.createMarker(zone: zone, name: "seed", device: "bob-device",
                                                                 payload: "{}") }
        assertCloudError(.permission) {
            _ = try bob.raiseSchemaVersion(zone: zone, to: ZoneSchemaVersion(version: 2, sha256: "00", file: "m.sql"),
                                           device: "bob-device", seenUpTo: info.lastSeq)
        }
        assertCloudError(.permission) { try bob.ensureZone(zone) }
        assertCloudError(.permission) { try bob.purgeZone(zone) }
        XCTAssertEqual(try alice.fetchChanges(zone: zone, since: nil, limit: 10).records.map(\.fields), [#"{"n":1}"#])
        XCTAssertNil(try alice.marker(zone: zone, name: "seed"))
    }

    func testAReadWriteParticipantSavesButNeverPurges() throws {
        let (c, alice) = try sharedZone()
        let carol = try c.connect("carol")
        XCTAssertEqual(try carol.zoneInfo(zone)?.access, .readWrite)
        XCTAssertEqual(try carol.ensureZone(zone).access, .readWrite)
        let tag = try XCTUnwrap(try carol.fetchRecord(zone: zone, recordName: "a")?.changeTag)
        let outcomes = try carol.save(zone: zone, [record("a", 2, expecting: tag), record("c", 3)],
                                      device: "carol-device", mark: ExportMark(serial: 1, historySeq: 1, time: 1))
        XCTAssertEqual(outcomes.filter { if case .saved = $0 { true } else { false } }.count, 2, "\(outcomes)")
        XCTAssertEqual(try carol.exportState(zone: zone, device: "carol-device")?.mark.serial, 1)
        XCTAssertTrue(try carol.createMarker(zone: zone, name: "seed", device: "carol-device", payload: "{}").created)
        XCTAssertEqual(try alice.fetchChanges(zone: zone, since: nil, limit: 10).records.map(\.recordName), ["a", "c"])
        assertCloudError(.permission) { try carol.purgeZone(zone) }
        XCTAssertEqual(try alice.zoneInfo(zone)?.liveRecords, 2, "a participant purged the zone")
        // The owner may.
        try alice.purgeZone(zone)
        XCTAssertEqual(try alice.zoneInfo(zone)?.liveRecords, 0)
    }

    func testAnAccountWithoutAShareNeitherReadsNorTakesTheZoneName() throws {
        let (c, alice) = try sharedZone()
        let before = try XCTUnwrap(try alice.zoneInfo(zone))
        let dave = try c.connect("dave")
        assertCloudError(.permission, "has no share of zone '\(zone)'") { _ = try dave.zoneInfo(zone) }
        assertCloudError(.permission, "belongs to account '\(c.id("alice"))'") { _ = try dave.zoneInfo(zone) }
        assertCloudError(.permission) { _ = try dave.zoneInfo(zone, countLive: false) }
        assertCloudError(.permission) { _ = try dave.fetchChanges(zone: zone, since: nil, limit: 10) }
        assertCloudError(.permission) { _ = try dave.fetchRecord(zone: zone, recordName: "a") }
        assertCloudError(.permission) { _ = try dave.schemaVersion(zone: zone) }
        assertCloudError(.permission) { _ = try dave.marker(zone: zone, name: "seed") }
        assertCloudError(.permission) { _ = try dave.exportState(zone: zone, device: "d") }
        assertCloudError(.permission) { _ = try dave.fetchDeviceRecords(zone: zone, device: "d", after: 0, limit: 5) }
        assertCloudError(.permission) { _ = try dave.shareParticipants(zone: zone) }
        // No second zone of the name: the one there is alice's, unchanged.
        assertCloudError(.permission) { try dave.ensureZone(zone) }
        assertCloudError(.permission) { _ = try dave.save(zone: zone, [record("d", 4)], device: "dave-device") }
        assertCloudError(.permission) { _ = try dave.createMarker(zone: zone, name: "m", device: "d", payload: "{}") }
        assertCloudError(.permission) { try dave.purgeZone(zone) }
        XCTAssertEqual(try dave.zoneAccess(zone).level, .none)
        XCTAssertEqual(try dave.zoneAccess(zone).owner, c.id("alice"))
        XCTAssertEqual(try alice.zoneInfo(zone), before)
        // A zone of its own is dave's.
        XCTAssertEqual(try dave.ensureZone("dave-notes").owner, c.id("dave"))
        assertCloudError(.permission) { _ = try alice.zoneInfo("dave-notes") }
    }

    func testOnlyTheOwnerManagesTheShares() throws {
        let (c, alice) = try sharedZone()
        let bob = try c.connect("bob")
        let carol = try c.connect("carol")
        let listed = try alice.shareParticipants(zone: zone)
        XCTAssertEqual(listed.owner, c.id("alice"))
        XCTAssertEqual(listed.participants.map(\.account), [c.id("bob"), c.id("carol")].sorted())
        XCTAssertEqual(Set(listed.participants.map(\.addedBy)), [c.id("alice")])
        XCTAssertEqual(try bob.shareParticipants(zone: zone).participants.count, 2, "a participant may read them")
        assertCloudError(.permission) { try carol.addShare(zone: zone, account: c.id("dave"), permission: .readOnly) }
        assertCloudError(.permission) { try carol.removeShare(zone: zone, account: c.id("bob")) }
        assertCloudError(.invalid) { try alice.addShare(zone: zone, account: c.id("alice"), permission: .readOnly) }
        assertCloudError(.zoneNotFound) { try alice.addShare(zone: "nowhere", account: c.id("bob"),
                                                             permission: .readOnly) }
        do {
            try alice.addShare(zone: zone, account: c.id("nobody"), permission: .readOnly)
            XCTFail("an account that does not exist was given a share")
        } catch let error as CloudError {
            XCTAssertEqual(error.kind, .unknownAccount, "\(error)")
            XCTAssertEqual(error.exitCode.rawValue, 67)
            XCTAssertNotNil(error.hint)
        }
        assertCloudError(.invalid) { try alice.removeShare(zone: zone, account: c.id("dave")) }
        // Adding again changes the permission and the time.
        let first = try XCTUnwrap(listed.participants.first { $0.account == c.id("bob") })
        Thread.sleep(forTimeInterval: 0.02)
        let changed = try alice.addShare(zone: zone, account: c.id("bob"), permission: .readWrite)
        XCTAssertEqual(changed.permission, .readWrite)
        XCTAssertGreaterThan(changed.since, first.since)
        XCTAssertEqual(try bob.zoneAccess(zone).level, .readWrite)
        XCTAssertEqual(try alice.shareParticipants(zone: zone).participants.count, 2)
    }

    func testARemovedShareIsMetAtTheNextRead() throws {
        let (c, alice) = try sharedZone()
        let bob = try c.connect("bob")
        let page = try bob.fetchChanges(zone: zone, since: nil, limit: 10)
        XCTAssertNotNil(try bob.zoneInfo(zone))
        try alice.removeShare(zone: zone, account: c.id("bob"))
        // The same connection: never an empty page, never a missing zone.
        assertCloudError(.permission) { _ = try bob.zoneInfo(zone, countLive: false) }
        assertCloudError(.permission) { _ = try bob.fetchChanges(zone: zone, since: page.token, limit: 10) }
        assertCloudError(.permission) { _ = try bob.fetchRecord(zone: zone, recordName: "a") }
        assertCloudError(.invalid) { try alice.removeShare(zone: zone, account: c.id("bob")) }
        // Shared again, read-write this time.
        try alice.addShare(zone: zone, account: c.id("bob"), permission: .readWrite)
        XCTAssertEqual(try bob.zoneInfo(zone)?.access, .readWrite)
        let saved = try bob.save(zone: zone, [record("b", 2)], device: "bob-device")
        guard case .saved = saved.first else { return XCTFail("\(saved)") }
    }

    func testAParticipantLeaves() throws {
        let (c, alice) = try sharedZone()
        let carol = try c.connect("carol")
        let dave = try c.connect("dave")
        try carol.leaveShare(zone: zone)
        assertCloudError(.permission) { _ = try carol.zoneInfo(zone) }
        XCTAssertEqual(try alice.shareParticipants(zone: zone).participants.map(\.account), [c.id("bob")])
        assertCloudError(.invalid) { try carol.leaveShare(zone: zone) }
        assertCloudError(.invalid) { try dave.leaveShare(zone: zone) }
        assertCloudError(.invalid) { try alice.leaveShare(zone: zone) }
        assertCloudError(.zoneNotFound) { try alice.leaveShare(zone: "nowhere") }
    }

    /// The cheap read of `storectl watch` covers the account's access: a share changed makes the next round a full
    /// one, a share removed gives no quiet state at all.
    func testTheQuietStateFollowsTheShare() throws {
        let (c, alice) = try sharedZone()
        let bob = try c.connect("bob")
        XCTAssertEqual(bob.accountStatus().status, .available)
        _ = try bob.zoneInfo(zone)
        let quiet = try XCTUnwrap(try bob.quietState(zone: zone, known: nil), "no quiet state for a participant")
        XCTAssertEqual(try bob.quietState(zone: zone, known: quiet), quiet)
        try alice.addShare(zone: zone, account: c.id("bob"), permission: .readWrite)
        XCTAssertNotEqual(try bob.quietState(zone: zone, known: quiet), quiet, "a changed share looks quiet")
        try alice.removeShare(zone: zone, account: c.id("bob"))
        XCTAssertNil(try bob.quietState(zone: zone, known: quiet), "a removed share looks quiet")
        let dave = try c.connect("dave")
        XCTAssertEqual(dave.accountStatus().status, .available)
        XCTAssertNil(try dave.quietState(zone: zone, known: nil))
    }
}
