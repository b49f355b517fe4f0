import Foundation
import StoreConfig
import StoreHistory
import StoreMirror
import StoreControl
import TestSupport
import XCTest

/// The README's library example, run as written: open a store from a config, write with an author, read history
/// after a token, switch the mode, sync.
final class LibraryAPITests: XCTestCase {
    func testTheReadmeExampleWorks() throws {
        let dir = try TempDirectory()
        try dir.write("schema.sql", "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT, title TEXT);")
        try dir.write("config.yaml", """
            version: 1
            stores:
              notes:
                path: notes.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.lib
                  url: file:lib.container
                  create_if_missing: true
                  account: demo
                  secret: demo-secret
            """)
        let config = try ConfigLoader.load(path: dir.file("config.yaml"), environment: [:])
        let store = try StoreHandle(config: config, storeName: "notes", environment: [:])
        try store.ensureInitialized()

        let tracker = try store.historyTracker()
        let tx = try tracker.write(author: "importer") {
            try store.database().run("INSERT INTO notes(uuid, title) VALUES (?, ?)", ["n-1", "Hello"])
        }
        let transactions = try tracker.transactions(after: 0)
        XCTAssertEqual(transactions.map(\.author), ["importer"])
        XCTAssertEqual(transactions.first?.tx, tx)
        XCTAssertEqual(transactions.first?.changes.map(\.entity), ["notes"])

        let mode = try store.enableCloud(SyncOptions())
        XCTAssertEqual(mode.to, "cloud")
        XCTAssertEqual(mode.sync?.exported.saved, 1)
        XCTAssertEqual(try store.storeMode(), .cloud)
        XCTAssertTrue(try dir.read("config.yaml").contains("mode: cloud"))
        let report = try store.sync(SyncOptions())
        XCTAssertEqual(report.exported.saved, 0)
        XCTAssertEqual(report.imported.applied, 0)
    }
}
