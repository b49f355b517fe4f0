import Foundation
import TestSupport
import XCTest

/// One key in its NFC and its NFD Unicode forms (`é` as one code point, or `e` and a combining accent): two keys to
/// SQLite, so two rows and two records, whose names differ in their bytes. The cloud compares record names as bytes,
/// as both backends store them; Swift's `String` equality takes the two forms for one, and a batch holding both was
/// refused ("appears twice in one batch"): the export stopped there on every sync, and nothing more was sent.
final class UnicodeKeyFormsTests: XCTestCase {
    func bothForms(_ backend: FleetBackend) throws {
        let f = try Fleet.pair(backend, schema: """
            CREATE TABLE IF NOT EXISTS tags(name TEXT PRIMARY KEY, color TEXT);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, body TEXT);
            """, policy: "property-local-wins", rows: "INSERT INTO notes VALUES (1, 'n1')",
            label: "storectl-unicode-forms")
        let tags = { (store: String) in try f.sql(store, "SELECT hex(name), color FROM tags ORDER BY 1") }
        try f.sql("a", "INSERT INTO tags VALUES (char(233), 'nfc'), ('e' || char(769), 'nfd'); "
                  + "INSERT INTO notes VALUES (2, 'n2')")
        try f.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try tags("b"), "65CC81|nfd\nC3A9|nfc\n", "[\(backend)] both forms arrive")
        XCTAssertEqual(try f.sql("b", "SELECT group_concat(body) FROM notes ORDER BY id"), "n1,n2\n",
                       "[\(backend)] the rest of the export is sent")
        try f.sql("b", "UPDATE tags SET color = 'nfd, again' WHERE name = 'e' || char(769); "
                  + "DELETE FROM tags WHERE name = char(233)")
        try f.syncRounds(2, ["b", "a"])
        XCTAssertEqual(try tags("a"), "65CC81|nfd, again\n", "[\(backend)] one form changed, the other deleted")
        for s in f.stores { try f.assertHealthy(s, "[\(backend)] both forms of one key") }
    }

    func testBothFormsOfAKeyAreTwoRecordsFile() throws { try bothForms(.file) }

    func testBothFormsOfAKeyAreTwoRecordsPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try bothForms(pg)
    }
}
