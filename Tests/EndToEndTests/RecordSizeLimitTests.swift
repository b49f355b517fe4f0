import Foundation
import TestSupport
import XCTest

/// `cloud.max_record_size`: a local row larger than the limit is not sent (`sync` exits 65 naming it, after
/// sending everything else), and a record larger than the limit from the cloud is set aside and reported, then
/// applied once the limit allows it. Both are reported by `status` and `doctor` until settled.
final class RecordSizeLimitTests: XCTestCase {
    static let schema = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT);"

    func tooLargeToSend(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      max_record_size: 2KiB",
                          label: "storectl-size")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(id, title, body) VALUES (1, 'small', 'x'), (2, 'large', printf('%.5000c', 'y'))")
        let (sync, doc) = try f.json("a", ["sync"], expect: 65)
        let unsent = JSONDoc.get(doc, "error") == nil ? (JSONDoc.get(doc, "exported", "unsent") as? [Any]) : nil
        let text = sync.stdout + sync.stderr
        XCTAssertTrue(text.contains("notes") && text.contains("[2]"), "[\(backend)] sync does not name the row it "
                      + "could not send\n\(sync)")
        if let unsent { XCTAssertEqual(unsent.count, 1, "[\(backend)] \(sync.stdout)") }
        try f.run("b", ["sync"])
        XCTAssertEqual(try f.rows("b", tables: ["notes"]), ["notes|body=t:'x'|title=t:'small'"],
                       "[\(backend)] the small row must go through, the large one must not")
        try f.assertReported("a", mentions: ["notes"], "a row larger than max_record_size")
        // The row a cannot send does not stop what other devices write from arriving at a.
        try f.sql("b", "INSERT INTO notes(id, title) VALUES (3, 'from b')")
        try f.run("b", ["sync"])
        let blocked = try f.run("a", ["sync"], expect: 65)
        XCTAssertEqual(try f.sql("a", "SELECT title FROM notes WHERE title = 'from b'"), "from b\n",
                       "[\(backend)] a sync that could not send a row must still import\n\(blocked)")
        // Made smaller, the row goes out and everything settles.
        try f.sql("a", "UPDATE notes SET body = 'short now' WHERE id = 2")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(["notes|body=t:'x'|title=t:'small'", "notes|body=t:'short now'|title=t:'large'",
                          "notes|body=null|title=t:'from b'"], tables: ["notes"], "the row made smaller")
        for s in f.stores { try f.assertHealthy(s, "after the large row was made smaller") }
    }

    func testARowTooLargeIsNotSentAndNamedFile() throws { try tooLargeToSend(.file) }
    func testARowTooLargeIsNotSentAndNamedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try tooLargeToSend(pg)
    }

    func tooLargeToApply(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      max_record_size: 2KiB",
                          label: "storectl-size")
        try f.cloudMode("a")
        try f.sql("a", "INSERT INTO notes(id, title) VALUES (1, 'small')")
        try f.run("a", ["sync"])
        // Another machine, with a larger limit, saved a large record.
        var planted = [PlantedRecord(name: "notes/0123456789abcdef000000000007", type: "notes",
                                     fieldsSQL: Fleet.sqlLiteral("{\"title\":\"large\",\"body\":\""
                                                                 + String(repeating: "z", count: 5000) + "\"}"),
                                     bad: true, why: "larger than max_record_size"),
                       PlantedRecord(name: "notes/0123456789abcdef000000000008", type: "notes",
                                     fieldsSQL: Fleet.sqlLiteral("{\"title\":\"beside it\"}"), bad: false, why: "")]
        try f.plant(&planted)
        let sync = try f.run("a", ["sync"], expect: nil)
        XCTAssertTrue([0, 65].contains(sync.status), "[\(backend)] \(sync)")
        XCTAssertTrue((sync.stdout + sync.stderr).contains(planted[0].name), "[\(backend)] sync does not name the "
                      + "record it set aside\n\(sync)")
        XCTAssertEqual(try f.rows("a", tables: ["notes"]).sorted(),
                       ["notes|body=null|title=t:'beside it'", "notes|body=null|title=t:'small'"],
                       "[\(backend)] the record beside the large one must arrive, the large one must not")
        try f.assertReported("a", mentions: [planted[0].name], "a record larger than max_record_size")
        // Once the limit allows it, the record is applied.
        let config = try f.dir.read("config.yaml").replacingOccurrences(of: "max_record_size: 2KiB",
                                                                        with: "max_record_size: 1MiB")
        _ = try f.dir.write("config.yaml", config)
        let again = try f.run("a", ["sync"])
        let large = try f.trySQL("a", "SELECT length(body) FROM notes WHERE title = 'large'").stdout
        XCTAssertEqual(large.trimmingCharacters(in: .whitespacesAndNewlines), "5000",
                       "[\(backend)] the set-aside record was not applied once the limit allowed it\n\(again)")
        try f.assertHealthy("a", "after the limit was raised")
    }

    func testARecordTooLargeIsSetAsideThenAppliedFile() throws { try tooLargeToApply(.file) }
    func testARecordTooLargeIsSetAsideThenAppliedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try tooLargeToApply(pg)
    }
}
