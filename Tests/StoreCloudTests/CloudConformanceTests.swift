import Foundation
import StoreCloud
import XCTest

/// A container made for one test, by one backend. It is `Sendable` so that threads can each open their own
/// connection to it; a connection itself never crosses threads.
protocol CloudTestContainer: Sendable {
    /// The account `connect()` uses: registered, with the matching secret, and available.
    var account: String { get }
    /// A new, independent connection to the container, as `account`.
    func connect() throws -> any CloudDatabase
    /// A new connection as another account (nil: none configured) with `secret` (nil: none configured).
    func connect(account: String?, secret: String?) throws -> any CloudDatabase
    /// Registers a member account with `secret`.
    func addAccount(id: String, secret: String) throws
    /// Disables an account.
    func disableAccount(id: String) throws
}

extension CloudTestContainer {
    func addAccount(id: String, secret: String) throws {
        let admin = try XCTUnwrap(try connect() as? any CloudAccountAdministration,
                                  "a backend without CloudAccountAdministration must implement addAccount")
        try admin.addAccount(id: id, secret: secret, role: .member)
    }

    func disableAccount(id: String) throws {
        let admin = try XCTUnwrap(try connect() as? any CloudAccountAdministration,
                                  "a backend without CloudAccountAdministration must implement disableAccount")
        try admin.disableAccount(id: id)
    }
}

/// A container file in a temporary folder, removed when the last reference goes.
final class FileTestContainer: CloudTestContainer, @unchecked Sendable {
    let directory: String
    let path: String
    let container = "iCloud.com.example.conformance"
    let account = "owner"
    let secret = "owner-secret-4f9d"

    init() throws {
        let base = ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"
        var template = Array("\(base)/storectl-cloud-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buf -> Bool in
            guard let p = buf.baseAddress else { return false }
            return mkdtemp(p) != nil
        }
        guard made else { throw CocoaError(.fileWriteUnknown) }
        directory = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        path = directory + "/cloud/notes.container"
        // Few iterations: the tests open many connections, and each checks the secret once.
        _ = try FileCloudDatabase.create(path: path, container: container, account: account, secret: secret,
                                         iterations: 500)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    func connect() throws -> any CloudDatabase { try connect(account: account, secret: secret) }

    func connect(account: String?, secret: String?) throws -> any CloudDatabase {
        let db = try FileCloudDatabase.open(path: path, container: container, account: account, secret: secret)
        db.hashIterations = 500
        return db
    }
}

/// A thread-safe bag for what threads report.
final class Collector<T>: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [T] = []
    func append(_ item: T) { lock.withLock { items.append(item) } }
    var all: [T] { lock.withLock { items } }
}

/// The conformance suite of `CloudDatabase`: every guarantee of the protocol, proven against a real backend.
///
/// This class runs it against the file backend (the embedded default). Another backend runs the very same tests
/// by subclassing and overriding `makeContainer()`:
///
///     final class PostgresCloudConformanceTests: CloudConformanceTests {
///         override func makeContainer() throws -> any CloudTestContainer { try PostgresTestContainer() }
///     }
///
/// (XCTest on Linux runs inherited test methods in each subclass, and in the base class too: hence the base class
/// runs a real backend rather than being abstract.) Nothing here may assume a particular backend.
class CloudConformanceTests: XCTestCase {
    /// A fresh, empty container with an available account.
    func makeContainer() throws -> any CloudTestContainer { try FileTestContainer() }

    let zone = "default"

    private func save(_ name: String, _ fields: String = #"{"n":1}"#, type: String = "notes", deleted: Bool = false,
                      expecting tag: String?) -> RecordSave
    {
        RecordSave(recordName: name, recordType: type, fields: fields, deleted: deleted, expectedTag: tag)
    }

    private func savedTag(_ outcome: SaveOutcome?, file: StaticString = #filePath, line: UInt = #line) -> String? {
        guard case .saved(let tag, _) = outcome else {
            XCTFail("expected .saved, got \(String(describing: outcome))", file: file, line: line)
            return nil
        }
        return tag
    }

    private func conflictRecord(_ outcome: SaveOutcome?, file: StaticString = #filePath, line: UInt = #line)
        -> CloudRecord??
    {
        guard case .conflict(let server) = outcome else {
            XCTFail("expected .conflict, got \(String(describing: outcome))", file: file, line: line)
            return nil
        }
        return .some(server)
    }

    private func assertCloudError(_ kind: CloudError.Kind, file: StaticString = #filePath, line: UInt = #line,
                                  _ body: () throws -> Void)
    {
        do {
            try body()
            XCTFail("expected CloudError .\(kind), but it succeeded", file: file, line: line)
        } catch let error as CloudError {
            XCTAssertEqual(error.kind, kind, "\(error)", file: file, line: line)
        } catch {
            XCTFail("expected CloudError .\(kind), got \(error)", file: file, line: line)
        }
    }

    /// Every change after `token`, page by page, checking that seqs only go up.
    private func drain(_ db: any CloudDatabase, since token: ServerChangeToken?, pageSize: Int,
                       file: StaticString = #filePath, line: UInt = #line) throws
        -> (records: [CloudRecord], token: ServerChangeToken?)
    {
        var token = token
        var records: [CloudRecord] = []
        var lastSeq = token?.seq ?? 0
        while true {
            let batch = try db.fetchChanges(zone: zone, since: token, limit: pageSize)
            XCTAssertLessThanOrEqual(batch.records.count, pageSize, file: file, line: line)
            for record in batch.records {
                XCTAssertGreaterThan(record.seq, lastSeq, "seqs go up across pages", file: file, line: line)
                lastSeq = record.seq
            }
            XCTAssertGreaterThanOrEqual(batch.token.seq, lastSeq, file: file, line: line)
            records += batch.records
            token = batch.token
            if !batch.moreComing { return (records, token) }
        }
    }

    // MARK: Zones

    func testZonesAreCreatedOnceAndReportTheirState() throws {
        let container = try makeContainer()
        let db = try container.connect()
        XCTAssertNil(try db.zoneInfo(zone))
        let first = try db.ensureZone(zone)
        XCTAssertEqual(first.name, zone)
        XCTAssertEqual(first.lastSeq, 0)
        XCTAssertEqual(first.liveRecords, 0)
        XCTAssertFalse(first.epoch.isEmpty)
        let again = try container.connect().ensureZone(zone)
        XCTAssertEqual(again.epoch, first.epoch, "ensureZone on an existing zone changes nothing")
        _ = try db.save(zone: zone, [save("a", expecting: nil), save("b", expecting: nil)], device: "d1")
        let info = try XCTUnwrap(try db.zoneInfo(zone))
        XCTAssertEqual(info.lastSeq, 2)
        XCTAssertEqual(info.liveRecords, 2)
        XCTAssertEqual(db.container, "iCloud.com.example.conformance")
        XCTAssertFalse(db.displayURL.isEmpty)
    }

    func testAMissingZoneIsReported() throws {
        let db = try makeContainer().connect()
        assertCloudError(.zoneNotFound) { _ = try db.fetchChanges(zone: "nowhere", since: nil, limit: 10) }
        assertCloudError(.zoneNotFound) { _ = try db.save(zone: "nowhere", [save("a", expecting: nil)], device: "d") }
        assertCloudError(.zoneNotFound) { _ = try db.createMarker(zone: "nowhere", name: "m", device: "d", payload: "") }
        assertCloudError(.zoneNotFound) { try db.purgeZone("nowhere") }
        XCTAssertNil(try db.fetchRecord(zone: "nowhere", recordName: "a"))
    }

    func testZonesAreSeparate() throws {
        let db = try makeContainer().connect()
        try db.ensureZone("one")
        try db.ensureZone("two")
        _ = try db.save(zone: "one", [save("a", #"{"zone":1}"#, expecting: nil)], device: "d")
        _ = try db.save(zone: "two", [save("a", #"{"zone":2}"#, expecting: nil)], device: "d")
        XCTAssertEqual(try db.fetchRecord(zone: "one", recordName: "a")?.fields, #"{"zone":1}"#)
        XCTAssertEqual(try db.fetchRecord(zone: "two", recordName: "a")?.fields, #"{"zone":2}"#)
        XCTAssertEqual(try db.fetchChanges(zone: "two", since: nil, limit: 10).records.map(\.zone), ["two"])
        try db.purgeZone("one")
        XCTAssertNotNil(try db.fetchRecord(zone: "two", recordName: "a"), "a purge touches only its zone")
    }

    // MARK: Saving and fetching

    func testSaveAndFetchRoundTrip() throws {
        let container = try makeContainer()
        let db = try container.connect()
        try db.ensureZone(zone)
        let fields = #"{"body":"héllo \"quoted\"","n":42,"note_id":{"$ref":"notes/1"}}"#
        let outcomes = try db.save(zone: zone, [save("notes/1", fields, expecting: nil),
                                                save("notes/2", expecting: nil),
                                                save("tags/1", type: "tags", expecting: nil)], device: "device-A")
        XCTAssertEqual(outcomes.count, 3)
        var tags: [String] = []
        var seqs: [Int64] = []
        for outcome in outcomes {
            guard case .saved(let tag, let seq) = outcome else { return XCTFail("\(outcome)") }
            tags.append(tag)
            seqs.append(seq)
        }
        XCTAssertEqual(Set(tags).count, 3, "every save gets its own tag")
        XCTAssertEqual(seqs, seqs.sorted())
        XCTAssertEqual(Set(seqs).count, 3)

        let record = try XCTUnwrap(try db.fetchRecord(zone: zone, recordName: "notes/1"))
        XCTAssertEqual(record.zone, zone)
        XCTAssertEqual(record.recordType, "notes")
        XCTAssertEqual(record.fields, fields, "fields come back byte for byte")
        XCTAssertEqual(record.changeTag, tags[0])
        XCTAssertEqual(record.seq, seqs[0])
        XCTAssertFalse(record.deleted)
        XCTAssertEqual(record.modifiedBy, "device-A")
        XCTAssertEqual(record.modifiedAt, Date().timeIntervalSince1970, accuracy: 60)
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "notes/404"))

        let all = try db.fetchChanges(zone: zone, since: nil, limit: 100)
        XCTAssertEqual(all.records.map(\.recordName), ["notes/1", "notes/2", "tags/1"])
        XCTAssertEqual(all.records.first, record)
        XCTAssertFalse(all.moreComing)
        XCTAssertEqual(all.token.seq, seqs[2])
        let nothing = try db.fetchChanges(zone: zone, since: all.token, limit: 100)
        XCTAssertEqual(nothing.records, [])
        XCTAssertFalse(nothing.moreComing)
        XCTAssertEqual(nothing.token, all.token)

        // A change is seen by another connection, once, at its latest state.
        let other = try container.connect()
        _ = try other.save(zone: zone, [save("notes/2", #"{"n":2}"#, expecting: tags[1])], device: "device-B")
        let later = try db.fetchChanges(zone: zone, since: all.token, limit: 100)
        XCTAssertEqual(later.records.map(\.recordName), ["notes/2"])
        XCTAssertEqual(later.records.first?.fields, #"{"n":2}"#)
        XCTAssertEqual(later.records.first?.modifiedBy, "device-B")
        XCTAssertEqual(ServerChangeToken(rawValue: later.token.rawValue), later.token, "tokens survive their text")
    }

    func testSavesAreConditionalOnTheExpectedTag() throws {
        let container = try makeContainer()
        let db = try container.connect()
        try db.ensureZone(zone)
        let tag1 = try XCTUnwrap(savedTag(try db.save(zone: zone, [save("r", expecting: nil)], device: "d").first))

        // nil means "must not exist": the record exists, so this is a conflict that returns it.
        let created = try db.save(zone: zone, [save("r", #"{"n":9}"#, expecting: nil)], device: "d")
        let server = try XCTUnwrap(conflictRecord(created.first))
        XCTAssertEqual(server?.changeTag, tag1)
        XCTAssertEqual(server?.fields, #"{"n":1}"#)

        // The right tag saves, and gives a new tag.
        let tag2 = try XCTUnwrap(savedTag(try db.save(zone: zone, [save("r", #"{"n":2}"#, expecting: tag1)],
                                                      device: "d").first))
        XCTAssertNotEqual(tag2, tag1)
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "r")?.fields, #"{"n":2}"#)

        // Expecting a tag for a record that does not exist: a conflict with no server record.
        let missing = try db.save(zone: zone, [save("ghost", expecting: "made-up-tag")], device: "d")
        let none = try XCTUnwrap(conflictRecord(missing.first))
        XCTAssertNil(none)
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "ghost"))

        // A conflict saves nothing: the seq does not move.
        XCTAssertEqual(try db.zoneInfo(zone)?.lastSeq, 2)
    }

    func testAStaleTagIsAConflictAndTheRestOfTheBatchIsSaved() throws {
        let container = try makeContainer()
        let alice = try container.connect()
        let bob = try container.connect()
        try alice.ensureZone(zone)
        let tag1 = try XCTUnwrap(savedTag(try alice.save(zone: zone, [save("shared", #"{"v":"a1"}"#, expecting: nil)],
                                                         device: "alice").first))
        // Bob read the record at tag1; Alice changes it again.
        XCTAssertEqual(try bob.fetchRecord(zone: zone, recordName: "shared")?.changeTag, tag1)
        let tag2 = try XCTUnwrap(savedTag(try alice.save(zone: zone, [save("shared", #"{"v":"a2"}"#, expecting: tag1)],
                                                         device: "alice").first))

        let outcomes = try bob.save(zone: zone, [save("bob-1", expecting: nil),
                                                 save("shared", #"{"v":"b"}"#, expecting: tag1),
                                                 save("bob-2", expecting: nil)], device: "bob")
        XCTAssertEqual(outcomes.count, 3)
        XCTAssertNotNil(savedTag(outcomes[0]))
        let server = try XCTUnwrap(conflictRecord(outcomes[1]))
        XCTAssertEqual(server?.changeTag, tag2)
        XCTAssertEqual(server?.fields, #"{"v":"a2"}"#)
        XCTAssertEqual(server?.modifiedBy, "alice")
        XCTAssertNotNil(savedTag(outcomes[2]))

        XCTAssertEqual(try alice.fetchRecord(zone: zone, recordName: "shared")?.fields, #"{"v":"a2"}"#)
        XCTAssertNotNil(try alice.fetchRecord(zone: zone, recordName: "bob-1"))
        XCTAssertNotNil(try alice.fetchRecord(zone: zone, recordName: "bob-2"))

        // Resolving: save again over the server's tag.
        XCTAssertNotNil(savedTag(try bob.save(zone: zone, [save("shared", #"{"v":"merged"}"#, expecting: tag2)],
                                              device: "bob").first))
        XCTAssertEqual(try alice.fetchRecord(zone: zone, recordName: "shared")?.fields, #"{"v":"merged"}"#)
    }

    func testTombstonesAreReturned() throws {
        let db = try makeContainer().connect()
        try db.ensureZone(zone)
        let tag = try XCTUnwrap(savedTag(try db.save(zone: zone, [save("gone", #"{"x":1}"#, expecting: nil),
                                                                  save("kept", expecting: nil)], device: "d").first))
        let start = try db.fetchChanges(zone: zone, since: nil, limit: 10).token
        let deleted = try db.save(zone: zone, [save("gone", #"{"ignored":true}"#, deleted: true, expecting: tag)],
                                  device: "d2")
        let tombstoneTag = try XCTUnwrap(savedTag(deleted.first))

        let changes = try db.fetchChanges(zone: zone, since: start, limit: 10)
        XCTAssertEqual(changes.records.count, 1)
        let tombstone = try XCTUnwrap(changes.records.first)
        XCTAssertEqual(tombstone.recordName, "gone")
        XCTAssertTrue(tombstone.deleted)
        XCTAssertEqual(tombstone.fields, "{}", "a tombstone carries no fields")
        XCTAssertEqual(tombstone.changeTag, tombstoneTag)
        XCTAssertEqual(tombstone.modifiedBy, "d2")
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "gone")?.deleted, true)
        XCTAssertEqual(try db.zoneInfo(zone)?.liveRecords, 1)
        // A tombstone that names where a merged duplicate went keeps that alias, and only that.
        let kept = try XCTUnwrap(try db.fetchRecord(zone: zone, recordName: "kept"))
        _ = try db.save(zone: zone, [save("kept", #"{"$alias":"gone"}"#, deleted: true, expecting: kept.changeTag)],
                        device: "d3")
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "kept")?.fields, #"{"$alias":"gone"}"#)
        _ = try db.save(zone: zone, [save("bad-alias", #"{"$alias":"x","more":1}"#, deleted: true, expecting: nil)],
                        device: "d3")
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "bad-alias")?.fields, "{}")
        // So is the mark of a row the orphan rule deleted, exactly as written.
        _ = try db.save(zone: zone, [save("orphan", RecordSave.orphanTombstone, deleted: true, expecting: nil),
                                     save("bad-orphan", #"{"$orphan":true,"x":1}"#, deleted: true, expecting: nil)],
                        device: "d3")
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "orphan")?.fields, RecordSave.orphanTombstone)
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "bad-orphan")?.fields, "{}")
        _ = try db.save(zone: zone, [save("kept", #"{"x":2}"#, expecting: try db.fetchRecord(zone: zone,
                                                                                          recordName: "kept")?.changeTag)],
                        device: "d3")
        // From the beginning, the tombstone is there too (a reader that never saw the record learns of it).
        XCTAssertEqual(try db.fetchChanges(zone: zone, since: nil, limit: 10).records.filter(\.deleted).map(\.recordName),
                       ["gone", "bad-alias", "orphan", "bad-orphan"])

        // A tombstone counts as existing: "must not exist" conflicts with it and returns it.
        let recreate = try db.save(zone: zone, [save("gone", #"{"x":2}"#, expecting: nil)], device: "d")
        let server = try XCTUnwrap(conflictRecord(recreate.first))
        XCTAssertEqual(server?.deleted, true)
        XCTAssertEqual(server?.changeTag, tombstoneTag)
        // Saving over the tombstone's tag brings the record back.
        XCTAssertNotNil(savedTag(try db.save(zone: zone, [save("gone", #"{"x":3}"#, expecting: tombstoneTag)],
                                             device: "d").first))
        let back = try XCTUnwrap(try db.fetchRecord(zone: zone, recordName: "gone"))
        XCTAssertFalse(back.deleted)
        XCTAssertEqual(back.fields, #"{"x":3}"#)
    }

    func testInvalidFieldsRejectTheWholeBatch() throws {
        let db = try makeContainer().connect()
        try db.ensureZone(zone)
        assertCloudError(.invalid) {
            _ = try db.save(zone: zone, [save("ok", expecting: nil), save("bad", "not json", expecting: nil)],
                            device: "d")
        }
        assertCloudError(.invalid) { _ = try db.save(zone: zone, [save("array", "[1,2]", expecting: nil)], device: "d") }
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "ok"), "nothing of a refused batch is saved")
        XCTAssertEqual(try db.zoneInfo(zone)?.lastSeq, 0)
        assertCloudError(.invalid) { _ = try db.fetchChanges(zone: zone, since: nil, limit: 0) }
        XCTAssertEqual(try db.save(zone: zone, [], device: "d"), [])
    }

    func testPagingReturnsEachChangeExactlyOnce() throws {
        let db = try makeContainer().connect()
        try db.ensureZone(zone)
        var tags: [String: String] = [:]
        for batch in 0..<10 {
            let names = (0..<100).map { "r\(batch * 100 + $0)" }
            let outcomes = try db.save(zone: zone, names.map { save($0, #"{"i":\#(batch)}"#, expecting: nil) },
                                       device: "d")
            for (name, outcome) in zip(names, outcomes) { tags[name] = savedTag(outcome) }
        }
        let (records, token) = try drain(db, since: nil, pageSize: 7)
        XCTAssertEqual(records.count, 1000)
        XCTAssertEqual(Set(records.map(\.recordName)).count, 1000, "no record twice")
        XCTAssertEqual(Set(records.map(\.recordName)), Set(tags.keys))
        XCTAssertEqual(try db.fetchChanges(zone: zone, since: token, limit: 7).records, [])

        // Records changed again appear once more, at their latest state, and only after the token.
        _ = try db.save(zone: zone, ["r5", "r500", "r999"].map { save($0, #"{"i":"again"}"#, expecting: tags[$0]) },
                        device: "d")
        let (again, _) = try drain(db, since: token, pageSize: 2)
        XCTAssertEqual(again.map(\.recordName), ["r5", "r500", "r999"])
        XCTAssertEqual(Set(again.map(\.fields)), [#"{"i":"again"}"#])

        // A page exactly as large as what is left says nothing more is coming.
        let exact = try db.fetchChanges(zone: zone, since: token, limit: 3)
        XCTAssertEqual(exact.records.count, 3)
        XCTAssertFalse(exact.moreComing)
    }

    func testConcurrentWritersNeverMakeAReaderMissAChange() throws {
        let container = try makeContainer()
        try container.connect().ensureZone(zone)
        let writers = 2, batches = 60, perBatch = 4
        let errors = Collector<String>()
        let seen = Collector<String>()
        let writersDone = Collector<Int>()
        let group = DispatchGroup()
        let zone = self.zone
        for w in 0..<writers {
            group.enter()
            Thread.detachNewThread {
                defer { writersDone.append(w); group.leave() }
                do {
                    let db = try container.connect()
                    for b in 0..<batches {
                        let saves = (0..<perBatch).map {
                            RecordSave(recordName: "w\(w)-b\(b)-r\($0)", recordType: "t", fields: #"{"w":\#(w)}"#,
                                       expectedTag: nil)
                        }
                        let outcomes = try db.save(zone: zone, saves, device: "writer-\(w)")
                        if outcomes.contains(where: { if case .saved = $0 { return false } else { return true } }) {
                            errors.append("writer \(w) batch \(b): \(outcomes)")
                        }
                    }
                } catch {
                    errors.append("writer \(w): \(error)")
                }
            }
        }
        group.enter()
        Thread.detachNewThread {
            defer { group.leave() }
            do {
                let db = try container.connect()
                var token: ServerChangeToken?
                var lastSeq: Int64 = 0
                var finalPass = false
                while true {
                    // Decide before fetching: a pass that starts after every writer finished must see everything.
                    let done = writersDone.all.count == writers
                    let batch = try db.fetchChanges(zone: zone, since: token, limit: 5)
                    for record in batch.records {
                        if record.seq <= lastSeq { errors.append("seq went back: \(record.seq) after \(lastSeq)") }
                        lastSeq = record.seq
                        seen.append(record.recordName)
                    }
                    token = batch.token
                    if !batch.moreComing {
                        if finalPass { break }
                        if done { finalPass = true }
                    }
                }
            } catch {
                errors.append("reader: \(error)")
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 300), .success, "the threads finished")
        XCTAssertEqual(errors.all, [])
        let expected = Set((0..<writers).flatMap { w in
            (0..<batches).flatMap { b in (0..<perBatch).map { "w\(w)-b\(b)-r\($0)" } }
        })
        XCTAssertEqual(seen.all.count, expected.count, "each change seen exactly once")
        XCTAssertEqual(Set(seen.all), expected, "the reader following the feed saw every change")
        XCTAssertEqual(try container.connect().zoneInfo(zone)?.lastSeq, Int64(writers * batches * perBatch))
    }

    func testConcurrentWritersOfOneRecordConflictInsteadOfLosingUpdates() throws {
        let container = try makeContainer()
        let setup = try container.connect()
        try setup.ensureZone(zone)
        _ = try setup.save(zone: zone, [save("counter", #"{"n":0}"#, expecting: nil)], device: "setup")
        let errors = Collector<String>()
        let applied = Collector<Int>()
        let group = DispatchGroup()
        let zone = self.zone
        for w in 0..<3 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do {
                    let db = try container.connect()
                    var done = 0
                    while done < 10 {
                        guard let current = try db.fetchRecord(zone: zone, recordName: "counter") else {
                            return errors.append("counter vanished")
                        }
                        let n = Int(current.fields.filter(\.isNumber)) ?? -1
                        let outcome = try db.save(zone: zone, [RecordSave(recordName: "counter", recordType: "t",
                                                                          fields: #"{"n":\#(n + 1)}"#,
                                                                          expectedTag: current.changeTag)],
                                                  device: "w\(w)")
                        if case .saved = outcome.first {
                            done += 1
                            applied.append(w)
                        }
                    }
                } catch {
                    errors.append("writer \(w): \(error)")
                }
            }
        }
        XCTAssertEqual(group.wait(timeout: .now() + 300), .success)
        XCTAssertEqual(errors.all, [])
        XCTAssertEqual(applied.all.count, 30)
        XCTAssertEqual(try setup.fetchRecord(zone: zone, recordName: "counter")?.fields, #"{"n":30}"#,
                       "every successful conditional save built on the one before it")
    }

    // MARK: Markers

    func testMarkersAreCreatedOnce() throws {
        let db = try makeContainer().connect()
        try db.ensureZone(zone)
        XCTAssertNil(try db.marker(zone: zone, name: "seed:v1"))
        let first = try db.createMarker(zone: zone, name: "seed:v1", device: "d1", payload: #"{"rows":3}"#)
        XCTAssertTrue(first.created)
        XCTAssertEqual(first.marker.name, "seed:v1")
        XCTAssertEqual(first.marker.zone, zone)
        XCTAssertEqual(first.marker.createdBy, "d1")
        XCTAssertEqual(first.marker.payload, #"{"rows":3}"#)
        let second = try db.createMarker(zone: zone, name: "seed:v1", device: "d2", payload: "other")
        XCTAssertFalse(second.created)
        XCTAssertEqual(second.marker, first.marker, "the stored marker is returned unchanged")
        XCTAssertEqual(try db.marker(zone: zone, name: "seed:v1"), first.marker)
    }

    func testASchemaVersionIsRaisedOnceAndOnlyByADeviceThatSawEveryRecord() throws {
        let container = try makeContainer()
        let a = try container.connect(), b = try container.connect()
        try a.ensureZone(zone)
        XCTAssertNil(try a.schemaVersion(zone: zone), "a new zone is at version 0")
        let first = try a.save(zone: zone, [save("r1", expecting: nil)], device: "da")
        guard case .saved(_, let seq1)? = first.first else { return XCTFail("not saved: \(first)") }
        let v2 = ZoneSchemaVersion(version: 2, sha256: "ab12", file: "migrations/0002-price.sql")
        // Another device saved after what b has seen: b's migration never transformed that record.
        XCTAssertEqual(try b.raiseSchemaVersion(zone: zone, to: v2, device: "db", seenUpTo: 0), .unseenChanges(1))
        XCTAssertNil(try a.schemaVersion(zone: zone))
        // Its own saves do not count.
        XCTAssertEqual(try a.raiseSchemaVersion(zone: zone, to: v2, device: "da", seenUpTo: 0).isRaised, true)
        let stored = try XCTUnwrap(try b.schemaVersion(zone: zone))
        XCTAssertEqual(stored.version, 2)
        XCTAssertEqual(stored.file, "migrations/0002-price.sql")
        XCTAssertEqual(stored.sha256, "ab12")
        XCTAssertEqual(stored.device, "da")
        // Raised once: the second device finds it there, at the same or a lower version asked for.
        guard case .alreadyAt(let there) = try b.raiseSchemaVersion(zone: zone, to: v2, device: "db", seenUpTo: seq1)
        else { return XCTFail("a second raise must find the zone at its version") }
        XCTAssertEqual(there, stored)
        let v1 = ZoneSchemaVersion(version: 1, sha256: "", file: "")
        XCTAssertEqual(try b.raiseSchemaVersion(zone: zone, to: v1, device: "db", seenUpTo: seq1), .alreadyAt(stored))
        assertCloudError(.invalid) { _ = try b.raiseSchemaVersion(zone: self.zone, to: ZoneSchemaVersion(
            version: 0, sha256: "", file: ""), device: "db", seenUpTo: seq1) }
        assertCloudError(.zoneNotFound) { _ = try b.schemaVersion(zone: "nowhere") }
    }

    /// Whether the backend reads the zone's schema version along with the zone and each page of its feed (so a
    /// round asks it nothing more): PostgreSQL does.
    var readsSchemaVersionAlong: Bool { false }

    /// The schema version a zone or a page of its feed carries is the one `schemaVersion(zone:)` reads, before and
    /// after a raise.
    func testAZoneAndAPageOfItsFeedCarryItsSchemaVersion() throws {
        let container = try makeContainer()
        let a = try container.connect()
        try a.ensureZone(zone)
        func check(_ expected: ZoneSchemaVersion?, _ what: String) throws {
            let zoneRead = try XCTUnwrap(try a.zoneInfo(zone, countLive: false)).schemaVersion
            let pageRead = try a.fetchChanges(zone: zone, since: nil, limit: 10, excludingDevice: nil).schemaVersion
            for (read, source) in [(zoneRead, "zoneInfo"), (pageRead, "fetchChanges")] {
                switch read {
                case .read(let version): XCTAssertEqual(version, expected, "\(what): \(source)")
                case .notRead: XCTAssertFalse(readsSchemaVersionAlong, "\(what): \(source) did not read it")
                }
            }
        }
        try check(nil, "a new zone")
        // The round's read of the zone carries the device's export mark, as `exportState` reads it.
        for device in ["da", "db"] {
            if case .read(let state) = try XCTUnwrap(try a.roundZoneInfo(zone, device: device)).exportState {
                XCTAssertEqual(state, try a.exportState(zone: zone, device: device), device)
            } else {
                XCTAssertFalse(readsSchemaVersionAlong, "roundZoneInfo did not read \(device)'s export state")
            }
        }
        _ = try a.save(zone: zone, [save("r1", expecting: nil)], device: "da",
                       mark: ExportMark(serial: 4, historySeq: 17, time: 1), schemaVersion: nil)
        for device in ["da", "db"] {
            if case .read(let state) = try XCTUnwrap(try a.roundZoneInfo(zone, device: device)).exportState {
                XCTAssertEqual(state, try a.exportState(zone: zone, device: device), device)
                XCTAssertEqual(state?.mark.serial, device == "da" ? 4 : nil, device)
            } else {
                XCTAssertFalse(readsSchemaVersionAlong, "roundZoneInfo did not read \(device)'s export state")
            }
        }
        _ = try a.raiseSchemaVersion(zone: zone, to: ZoneSchemaVersion(version: 3, sha256: "cd34", file: "m/3.sql"),
                                     device: "da", seenUpTo: 1)
        let stored = try XCTUnwrap(try a.schemaVersion(zone: zone))
        XCTAssertEqual(stored.version, 3)
        try check(stored, "after a raise")
    }

    func testASaveAtAnOlderSchemaVersionIsRefusedWhole() throws {
        let container = try makeContainer()
        let a = try container.connect(), b = try container.connect()
        try a.ensureZone(zone)
        let old = try b.save(zone: zone, [save("r1", expecting: nil)], device: "db", mark: nil, schemaVersion: 0)
        let tag = try XCTUnwrap(savedTag(old.first))
        _ = try a.raiseSchemaVersion(zone: zone, to: ZoneSchemaVersion(version: 2, sha256: "", file: ""),
                                     device: "da", seenUpTo: 1)
        let before = try a.zoneInfo(zone)
        for version in [0, 1] {
            assertCloudError(.schemaAhead) {
                _ = try b.save(zone: self.zone, [self.save("r1", #"{"n":2}"#, expecting: tag),
                                                 self.save("r2", expecting: nil)],
                               device: "db", mark: ExportMark(serial: 1, historySeq: 1, time: 1), schemaVersion: version)
            }
        }
        XCTAssertEqual(try a.zoneInfo(zone), before, "nothing of a refused batch is saved")
        XCTAssertEqual(try a.fetchRecord(zone: zone, recordName: "r1")?.fields, #"{"n":1}"#)
        XCTAssertNil(try b.exportState(zone: zone, device: "db")?.mark.serial == 1 ? "marked" : nil)
        // At the zone's version, or without a version (not an export), the save goes through.
        XCTAssertNotNil(savedTag(try b.save(zone: zone, [save("r1", #"{"n":3}"#, expecting: tag)], device: "db",
                                            mark: nil, schemaVersion: 2).first))
        XCTAssertNotNil(savedTag(try b.save(zone: zone, [save("r3", expecting: nil)], device: "db").first))
        XCTAssertNotNil(savedTag(try b.save(zone: zone, [save("r4", expecting: nil)], device: "db", mark: nil,
                                            schemaVersion: 3).first))
    }

    func testMarkersStayAtomicUnderConcurrentCreation() throws {
        let container = try makeContainer()
        try container.connect().ensureZone(zone)
        let threads = 6
        let zone = self.zone
        for round in 0..<4 {
            let results = Collector<(created: Bool, marker: Marker, thread: Int)>()
            let errors = Collector<String>()
            let ready = DispatchGroup()
            let finished = DispatchGroup()
            let gate = DispatchSemaphore(value: 0)
            for t in 0..<threads {
                ready.enter()
                finished.enter()
                Thread.detachNewThread {
                    defer { finished.leave() }
                    do {
                        let db = try container.connect()
                        _ = try db.zoneInfo(zone)  // checks the account before the race starts
                        ready.leave()
                        gate.wait()
                        let (created, marker) = try db.createMarker(zone: zone, name: "seed-\(round)",
                                                                    device: "thread-\(t)", payload: "from \(t)")
                        results.append((created, marker, t))
                    } catch {
                        errors.append("thread \(t): \(error)")
                        ready.leave()
                    }
                }
            }
            XCTAssertEqual(ready.wait(timeout: .now() + 120), .success)
            for _ in 0..<threads { gate.signal() }
            XCTAssertEqual(finished.wait(timeout: .now() + 120), .success)
            XCTAssertEqual(errors.all, [])
            let all = results.all
            XCTAssertEqual(all.count, threads)
            let winners = all.filter(\.created)
            XCTAssertEqual(winners.count, 1, "exactly one creator wins round \(round)")
            guard let winner = winners.first else { continue }
            XCTAssertEqual(winner.marker.createdBy, "thread-\(winner.thread)")
            XCTAssertEqual(winner.marker.payload, "from \(winner.thread)")
            for result in all { XCTAssertEqual(result.marker, winner.marker, "everyone sees the winner's marker") }
        }
    }

    // MARK: The contract both backends share (CloudContract): every edge where two backends once answered apart

    func testARecordNamedTwiceInOneBatchRefusesTheWholeBatch() throws {
        let db = try makeContainer().connect()
        try db.ensureZone(zone)
        let tag = savedTag(try db.save(zone: zone, [save("kept", expecting: nil)], device: "d").first)
        for batch in [
            [save("twice", expecting: nil), save("other", expecting: nil), save("twice", #"{"n":2}"#, expecting: nil)],
            [save("kept", #"{"n":2}"#, expecting: tag), save("kept", #"{"n":3}"#, expecting: tag)],
            [save("twice", expecting: nil), save("twice", deleted: true, expecting: nil)],
        ] {
            do {
                _ = try db.save(zone: zone, batch, device: "d")
                XCTFail("a batch that names a record twice must be refused, not half saved or a conflict")
            } catch let error as CloudError {
                XCTAssertEqual(error.kind, .invalid, "\(error)")
                XCTAssertTrue(error.summary.contains("appears twice"), error.summary)
            }
        }
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "twice"), "nothing of a refused batch is saved")
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "other"))
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "kept")?.changeTag, tag)
        XCTAssertEqual(try db.zoneInfo(zone)?.lastSeq, 1, "a refused batch takes no seq")
    }

    /// Two names that differ in their bytes only by Unicode form (NFC `caf\u{E9}`, NFD `cafe\u{301}`; Swift's `String`
    /// takes them for equal) are two records: one batch saves both, and each is fetched by its own bytes.
    func testNamesInTwoUnicodeFormsAreTwoRecords() throws {
        let db = try makeContainer().connect()
        try db.ensureZone(zone)
        let (nfc, nfd) = ("caf\u{E9}", "cafe\u{301}")
        XCTAssertNotEqual(Array(nfc.utf8), Array(nfd.utf8))
        _ = try db.save(zone: zone, [save(nfc, #"{"n":1}"#, expecting: nil), save(nfd, #"{"n":2}"#, expecting: nil)],
                        device: "d")
        let fetched = [try db.fetchRecord(zone: zone, recordName: nfc), try db.fetchRecord(zone: zone, recordName: nfd)]
        XCTAssertEqual(fetched.map { $0.map { Array($0.recordName.utf8) } }, [Array(nfc.utf8), Array(nfd.utf8)])
        XCTAssertEqual(fetched.map { $0?.fields }, [#"{"n":1}"#, #"{"n":2}"#])
        XCTAssertEqual(try db.zoneInfo(zone)?.lastSeq, 2)
    }

    func testEmptyNamesTypesZonesAndDevicesAreRefused() throws {
        let db = try makeContainer().connect()
        assertCloudError(.invalid) { _ = try db.ensureZone("") }
        XCTAssertNil(try db.zoneInfo(""), "no zone without a name is created")
        try db.ensureZone(zone)
        assertCloudError(.invalid) { _ = try db.save(zone: zone, [save("", expecting: nil)], device: "d") }
        assertCloudError(.invalid) { _ = try db.save(zone: zone, [save("n", type: "", expecting: nil)], device: "d") }
        assertCloudError(.invalid) { _ = try db.save(zone: zone, [save("n", expecting: nil)], device: "") }
        assertCloudError(.invalid) { try db.registerDevice(storeID: "", name: "laptop") }
        assertCloudError(.invalid) { _ = try db.createMarker(zone: zone, name: "seed", device: "", payload: "") }
        XCTAssertEqual(try db.devices(), [])
        XCTAssertNil(try db.marker(zone: zone, name: "seed"))
        XCTAssertEqual(try db.zoneInfo(zone)?.lastSeq, 0)
        assertCloudError(.invalid) { _ = try db.fetchChanges(zone: zone, since: nil, limit: 0) }
        assertCloudError(.invalid) { _ = try db.fetchDeviceRecords(zone: zone, device: "d", after: 0, limit: 0) }
        // An empty batch is no request at all: it saves nothing and asks nothing.
        XCTAssertEqual(try db.save(zone: zone, [], device: ""), [])
    }

    func testChangeTagsHaveOneFormat() throws {
        let db = try makeContainer().connect()
        let info = try db.ensureZone(zone)
        // 40 records: seqs past 9 and past 15 tell base 10, 16 and 36 apart.
        let first = try db.save(zone: zone, (0..<40).map { save("t\($0)", expecting: nil) }, device: "d")
        var tags: [String: String] = [:]
        for (index, outcome) in first.enumerated() {
            guard case .saved(let tag, let seq) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertEqual(tag, CloudContract.changeTag(seq: seq, epoch: info.epoch))
            tags["t\(index)"] = tag
        }
        XCTAssertEqual(tags["t30"], "1f-" + info.epoch.prefix(8), "lowercase hex seq, then the epoch's first 8")
        // The conditional path (records that exist) hands out tags of the same format.
        let again = try db.save(zone: zone, [save("t3", #"{"n":2}"#, expecting: tags["t3"]), save("new", expecting: nil)],
                                device: "d")
        for outcome in again {
            guard case .saved(let tag, let seq) = outcome else { return XCTFail("\(outcome)") }
            XCTAssertEqual(tag, CloudContract.changeTag(seq: seq, epoch: info.epoch))
        }
        for record in try db.fetchChanges(zone: zone, since: nil, limit: 100).records {
            XCTAssertEqual(record.changeTag, CloudContract.changeTag(seq: record.seq, epoch: info.epoch),
                           "a fetched record carries the tag its save returned")
        }
    }

    func testTheTokenOfAPageFollowsOneRule() throws {
        let db = try makeContainer().connect()
        let info = try db.ensureZone(zone)
        _ = try db.save(zone: zone, (0..<5).map { save("p\($0)", expecting: nil) }, device: "a")
        _ = try db.save(zone: zone, (0..<3).map { save("q\($0)", expecting: nil) }, device: "b")
        // A partial page stops at its last record.
        let partial = try db.fetchChanges(zone: zone, since: nil, limit: 2)
        XCTAssertTrue(partial.moreComing)
        XCTAssertEqual(partial.token, ServerChangeToken(epoch: info.epoch, seq: 2))
        // A complete page jumps to the zone's last seq, even when the records left out are another device's.
        let rest = try db.fetchChanges(zone: zone, since: partial.token, limit: 100, excludingDevice: "b")
        XCTAssertFalse(rest.moreComing)
        XCTAssertEqual(rest.records.map(\.recordName), ["p2", "p3", "p4"])
        XCTAssertEqual(rest.token, ServerChangeToken(epoch: info.epoch, seq: 8))
        // Nothing new: the token stays where it is, never below it.
        let empty = try db.fetchChanges(zone: zone, since: rest.token, limit: 10)
        XCTAssertEqual(empty.records, [])
        XCTAssertEqual(empty.token, rest.token)
        // A token of another epoch is refused.
        assertCloudError(.zoneReset) {
            _ = try db.fetchChanges(zone: zone, since: ServerChangeToken(epoch: "other", seq: 1), limit: 10)
        }
    }

    // MARK: Purge

    func testPurgeGivesZoneResetForOldTokens() throws {
        let container = try makeContainer()
        let db = try container.connect()
        let before = try db.ensureZone(zone)
        _ = try db.save(zone: zone, [save("a", expecting: nil), save("b", expecting: nil)], device: "d")
        _ = try db.createMarker(zone: zone, name: "seed", device: "d", payload: "")
        let oldToken = try db.fetchChanges(zone: zone, since: nil, limit: 10).token

        try container.connect().purgeZone(zone)

        assertCloudError(.zoneReset) { _ = try db.fetchChanges(zone: zone, since: oldToken, limit: 10) }
        let after = try XCTUnwrap(try db.zoneInfo(zone))
        XCTAssertNotEqual(after.epoch, before.epoch, "a purge gives the zone a new epoch")
        XCTAssertEqual(after.liveRecords, 0)
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "a"))
        XCTAssertNil(try db.marker(zone: zone, name: "seed"), "markers go with the purge")
        let fresh = try db.fetchChanges(zone: zone, since: nil, limit: 10)
        XCTAssertEqual(fresh.records, [])
        XCTAssertEqual(fresh.token.epoch, after.epoch)

        // The zone is usable again: names are free, and new tokens work.
        XCTAssertNotNil(savedTag(try db.save(zone: zone, [save("a", #"{"new":true}"#, expecting: nil)],
                                             device: "d").first))
        let next = try db.fetchChanges(zone: zone, since: fresh.token, limit: 10)
        XCTAssertEqual(next.records.map(\.recordName), ["a"])
        XCTAssertTrue(try db.createMarker(zone: zone, name: "seed", device: "d", payload: "").created)
    }

    // MARK: Export marks

    /// An atomic batch that meets a conflict writes nothing: no record, no seq, no mark; its other records come back
    /// `.notSaved`. The same batch, not atomic, saves what it can. Both paths: a batch of new records only, and
    /// a batch with updates (COPY-sized batches take the same statements).
    func testAnAtomicBatchWithAConflictWritesNothing() throws {
        let container = try makeContainer()
        let db = try container.connect()
        try db.ensureZone(zone)
        let first = try db.save(zone: zone, [save("a", expecting: nil), save("b", expecting: nil)], device: "d1",
                                mark: ExportMark(serial: 1, historySeq: 3, time: 1))
        guard let tagA = savedTag(first.first), let tagB = savedTag(first.last) else { return }
        let before = try XCTUnwrap(db.zoneInfo(zone)).lastSeq
        let mark = ExportMark(serial: 1, historySeq: 5, time: 1)
        // An update that conflicts, an update that would not, and a new record.
        var outcomes = try db.save(zone: zone, [save("a", #"{"n":2}"#, expecting: "stale"),
                                                save("b", #"{"n":2}"#, expecting: tagB), save("c", expecting: nil)],
                                   device: "d2", mark: mark, schemaVersion: nil, atomic: true)
        XCTAssertEqual(conflictRecord(outcomes[0])??.changeTag, tagA)
        XCTAssertEqual(Array(outcomes.dropFirst()), [.notSaved, .notSaved])
        XCTAssertEqual(try db.zoneInfo(zone)?.lastSeq, before, "no seq was taken")
        XCTAssertEqual(try db.fetchRecord(zone: zone, recordName: "b")?.changeTag, tagB)
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "c"))
        XCTAssertNil(try db.exportState(zone: zone, device: "d2"), "no mark was recorded")
        XCTAssertFalse(try db.fetchDeviceRecords(zone: zone, device: "d1", after: 0, limit: 10).records
            .contains { $0.superseded }, "nothing of d1's was superseded by a batch that was not written")
        // New records only, one of which exists.
        outcomes = try db.save(zone: zone, [save("d", expecting: nil), save("a", expecting: nil)], device: "d2",
                               mark: mark, schemaVersion: nil, atomic: true)
        XCTAssertEqual(outcomes.first, .notSaved)
        XCTAssertEqual(conflictRecord(outcomes.last)??.changeTag, tagA)
        XCTAssertNil(try db.fetchRecord(zone: zone, recordName: "d"))
        XCTAssertEqual(try db.zoneInfo(zone)?.lastSeq, before)
        // Without a conflict, an atomic batch saves like any other.
        outcomes = try db.save(zone: zone, [save("b", #"{"n":3}"#, expecting: tagB), save("c", expecting: nil)],
                               device: "d2", mark: mark, schemaVersion: nil, atomic: true)
        XCTAssertNotNil(savedTag(outcomes.first))
        XCTAssertNotNil(savedTag(outcomes.last))
        XCTAssertEqual(try db.exportState(zone: zone, device: "d2")?.mark, mark)
        // Not atomic, the conflict is the only record left out.
        outcomes = try db.save(zone: zone, [save("a", #"{"n":4}"#, expecting: "stale"), save("d", expecting: nil)],
                               device: "d2", mark: mark, schemaVersion: nil, atomic: false)
        XCTAssertEqual(conflictRecord(outcomes.first)??.changeTag, tagA)
        XCTAssertNotNil(savedTag(outcomes.last))
    }

    func testExportMarksRecordWhereEachDeviceStands() throws {
        let container = try makeContainer()
        let db = try container.connect()
        try db.ensureZone(zone)
        XCTAssertNil(try db.exportState(zone: zone, device: "d1"))
        let m1 = ExportMark(serial: 1, historySeq: 10, time: 1_000)
        _ = try db.save(zone: zone, [save("a", expecting: nil), save("b", expecting: nil)], device: "d1", mark: m1)
        _ = try db.save(zone: zone, [save("x", expecting: nil)], device: "d2")  // no mark
        XCTAssertEqual(try db.exportState(zone: zone, device: "d1"), DeviceExportState(mark: m1, lastSeq: 2))
        XCTAssertNil(try db.exportState(zone: zone, device: "d2"), "a save without a mark records none")

        // A second batch of the same export: the latest mark is the state; a batch that saves nothing leaves it.
        let m2 = ExportMark(serial: 1, historySeq: 12, time: 1_500)
        let tagA = try XCTUnwrap(savedTag(try db.fetchRecord(zone: zone, recordName: "a").map {
            SaveOutcome.saved(changeTag: $0.changeTag, seq: $0.seq) }))
        _ = try db.save(zone: zone, [save("a", #"{"v":2}"#, expecting: tagA), save("c", expecting: nil)],
                        device: "d1", mark: m2)
        XCTAssertEqual(try db.exportState(zone: zone, device: "d1"), DeviceExportState(mark: m2, lastSeq: 5))
        let conflictOnly = try db.save(zone: zone, [save("a", expecting: "stale-tag")], device: "d1",
                                       mark: ExportMark(serial: 1, historySeq: 99, time: 9_999))
        guard case .conflict = conflictOnly.first else { return XCTFail("expected a conflict") }
        XCTAssertEqual(try db.exportState(zone: zone, device: "d1"), DeviceExportState(mark: m2, lastSeq: 5))

        // Each of the device's records comes with the history seq of the batch that saved it; a record saved
        // later by another device is not the device's any more, but the version it saved is kept, marked
        // superseded, while the marks of its serial are.
        var (own, more) = try db.fetchDeviceRecords(zone: zone, device: "d1", after: 0, limit: 10)
        XCTAssertFalse(more)
        XCTAssertEqual(own.map(\.record.recordName), ["b", "a", "c"])
        XCTAssertEqual(own.map(\.historySeq), [10, 12, 12])
        XCTAssertEqual(own.map(\.superseded), [false, false, false])
        let savedB = try XCTUnwrap(own.first?.record)
        _ = try db.save(zone: zone, [save("b", #"{"by":"d2"}"#, expecting: savedB.changeTag)], device: "d2")
        (own, more) = try db.fetchDeviceRecords(zone: zone, device: "d1", after: 0, limit: 1)
        XCTAssertTrue(more)
        XCTAssertEqual(own.map(\.record.recordName), ["b"])
        XCTAssertEqual(own.first?.superseded, true)
        XCTAssertEqual(own.first?.historySeq, 10)
        XCTAssertEqual(own.first?.record.changeTag, savedB.changeTag, "the version d1 saved, not d2's")
        XCTAssertEqual(own.first?.record.seq, savedB.seq)
        XCTAssertEqual(own.first?.record.modifiedBy, "d1")
        XCTAssertEqual(own.first?.record.fields, savedB.fields)
        (own, _) = try db.fetchDeviceRecords(zone: zone, device: "d1", after: own[0].record.seq, limit: 10)
        XCTAssertEqual(own.map(\.record.recordName), ["a", "c"])
        XCTAssertEqual(own.map(\.superseded), [false, false])
        // d2's own records never include d1's superseded version.
        (own, _) = try db.fetchDeviceRecords(zone: zone, device: "d2", after: 0, limit: 10)
        XCTAssertTrue(own.contains { $0.record.recordName == "b" && !$0.superseded })
        XCTAssertFalse(own.contains { $0.superseded })
        // A save of d1 over its own record keeps nothing (only another device's save supersedes).
        let tagC = try XCTUnwrap(try db.fetchDeviceRecords(zone: zone, device: "d1", after: 0, limit: 10).records
            .last?.record.changeTag)
        _ = try db.save(zone: zone, [save("c", #"{"again":true}"#, expecting: tagC)], device: "d1",
                        mark: ExportMark(serial: 1, historySeq: 13, time: 1_300))
        (own, _) = try db.fetchDeviceRecords(zone: zone, device: "d1", after: 0, limit: 10)
        XCTAssertEqual(own.map(\.record.recordName), ["b", "a", "c"])
        XCTAssertEqual(own.map(\.superseded), [true, false, false])

        // A new export (a higher serial) forgets the marks of the older ones.
        let m3 = ExportMark(serial: 2, historySeq: 20, time: 2_000)
        _ = try db.save(zone: zone, [save("d", expecting: nil)], device: "d1", mark: m3)
        XCTAssertEqual(try db.exportState(zone: zone, device: "d1")?.mark, m3)
        (own, _) = try db.fetchDeviceRecords(zone: zone, device: "d1", after: 0, limit: 10)
        XCTAssertEqual(own.map(\.record.recordName), ["a", "c", "d"])
        XCTAssertEqual(own.map(\.historySeq), [nil, nil, 20], "marks of older serials are gone")

        // A purge forgets them all.
        try db.purgeZone(zone)
        XCTAssertNil(try db.exportState(zone: zone, device: "d1"))
        assertCloudError(.zoneNotFound) { _ = try db.fetchDeviceRecords(zone: "nowhere", device: "d1", after: 0, limit: 1) }
    }

    // MARK: Devices

    func testDevicesRegistryRemembersWhenEachWasLastSeen() throws {
        let container = try makeContainer()
        let db = try container.connect()
        XCTAssertEqual(try db.devices(), [])
        try db.registerDevice(storeID: "store-1", name: "laptop")
        try container.connect().registerDevice(storeID: "store-2", name: "server")
        let first = try db.devices()
        XCTAssertEqual(first.map(\.storeID), ["store-1", "store-2"])
        XCTAssertEqual(first.map(\.name), ["laptop", "server"])
        XCTAssertEqual(first.map(\.account), [container.account, container.account])
        let laptop = try XCTUnwrap(first.first)
        XCTAssertEqual(laptop.firstSeen, laptop.lastSeen)
        XCTAssertEqual(laptop.lastSeen, Date().timeIntervalSince1970, accuracy: 60)

        Thread.sleep(forTimeInterval: 0.05)
        try db.registerDevice(storeID: "store-1", name: "laptop (renamed)")
        let again = try XCTUnwrap(try db.devices().first)
        XCTAssertEqual(again.storeID, "store-1")
        XCTAssertEqual(again.name, "laptop (renamed)")
        XCTAssertEqual(again.firstSeen, laptop.firstSeen, "first seen stays")
        XCTAssertGreaterThan(again.lastSeen, laptop.lastSeen, "last seen moves")
        XCTAssertEqual(try db.devices().count, 2)
    }

    // MARK: Accounts

    func testAccountStatuses() throws {
        let container = try makeContainer()
        let owner = try container.connect()
        let available = owner.accountStatus()
        XCTAssertEqual(available.status, .available, available.reason)
        XCTAssertEqual(available.account, container.account)

        try container.addAccount(id: "member-1", secret: "member-secret-77")
        XCTAssertEqual(try container.connect(account: "member-1", secret: "member-secret-77").accountStatus().status,
                       .available)

        let cases: [(String?, String?, AccountStatus, String)] = [
            (nil, nil, .noAccount, "no account configured"),
            ("member-1", nil, .noAccount, "no secret configured"),
            ("nobody", "whatever", .noAccount, "account not registered"),
            ("member-1", "wrong-secret", .restricted, "wrong secret"),
        ]
        for (account, secret, expected, label) in cases {
            let db = try container.connect(account: account, secret: secret)
            let report = db.accountStatus()
            XCTAssertEqual(report.status, expected, "\(label): \(report.reason)")
            XCTAssertFalse(report.reason.isEmpty, label)
            XCTAssertEqual(report.account, account, label)
            if let secret { XCTAssertFalse(report.reason.contains(secret), "\(label): the reason never holds a secret") }
            // An account that is not available cannot read or write.
            assertCloudError(.account) { _ = try db.ensureZone(self.zone) }
            assertCloudError(.account) { _ = try db.fetchChanges(zone: self.zone, since: nil, limit: 1) }
        }

        try container.disableAccount(id: "member-1")
        let disabled = try container.connect(account: "member-1", secret: "member-secret-77")
        let report = disabled.accountStatus()
        XCTAssertEqual(report.status, .restricted, report.reason)
        XCTAssertTrue(report.reason.contains("disabled"), report.reason)
        assertCloudError(.account) { _ = try disabled.devices() }
        XCTAssertEqual(owner.accountStatus().status, .available, "other accounts are untouched")
    }
}

extension SchemaRaise {
    var isRaised: Bool {
        if case .raised = self { return true }
        return false
    }
}
