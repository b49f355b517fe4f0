import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// The meta keys are part of the store format: other programs and older storectl versions read them by name.
final class MetaKeyTests: XCTestCase {
    func testEveryKeyKeepsItsStoredName() {
        let names = MetaKey.all.map(\.rawValue)
        XCTAssertEqual(Set(names).count, names.count, "two keys share a name")
        XCTAssertEqual(names, [
            "format_version", "format_upgraded_from", "store_id", "mode", "schema_hash", "tracked", "next_tx",
            "history_gap", "history_gap_reason", "created_at", "schema", "store_path", "bound_account",
            "bound_container", "bound_zone", "bound_url", "baseline_container", "last_sync_at", "last_export_at",
            "last_import_at", "last_sync_error", "export_serial", "restored_at", "restore_detected_at",
            "own_records_unchecked", "accepted_owner", "zone_access", "reencrypt_pending", "zone_encrypted_fields", "record_map_base", "sync_tables", "moved_from", "moved_to", "move_snapshot",
            "schema_version", "schema_version_sha256", "schema_version_at", "data_migration", "schema_version_unsynced",
            "schema_wait", "schema_adopted_through", "switch_target", "switch_export_token", "switch_server_token", "switch_snapshot",
        ])
        XCTAssertEqual(MetaKey.columns("notes").rawValue, "columns:notes")
        XCTAssertEqual(MetaKey.columnsCompared("notes").rawValue, "columns_compared:notes")
        XCTAssertEqual(MetaKey.seedDone("tags").rawValue, "seed_done:tags")
        XCTAssertEqual(MetaKey.seedMarkerPending("tags").rawValue, "seed_marker_pending:tags")
        XCTAssertEqual(MetaKey.unknownType("folders").rawValue, "unknown_type:folders")
        XCTAssertEqual(MetaKey.ownSeq(container: "iCloud.x", zone: "default").rawValue, "own_seq:iCloud.x/default")
    }

    func testFamiliesMatchOnlyTheirOwnKeysInSQL() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT);")
        let db = f.db
        try StoreMeta.set(db, .seedDone("a_b"), "1")
        try StoreMeta.set(db, .seedDone("c"), "2")
        try StoreMeta.set(db, .seedMarkerPending("x"), "1")
        // An underscore in LIKE matches any character: `seedXdone:` must not count as a `seed_done:` key.
        try db.run("INSERT INTO _storectl_meta(key, value) VALUES ('seedXdone:z', '3')")
        XCTAssertEqual(try StoreMeta.entries(db, .seedDone).map(\.name), ["a_b", "c"])
        XCTAssertEqual(try StoreMeta.entries(db, .seedDone).map(\.value), ["1", "2"])
        try StoreMeta.add(db, .unknownType("t"), 2)
        try StoreMeta.add(db, .unknownType("t"), 3)
        XCTAssertEqual(try StoreMeta.value(db, .unknownType("t")), "5")
        try StoreMeta.removeAll(db, .seedDone)
        XCTAssertEqual(try StoreMeta.entries(db, .seedDone).count, 0)
        XCTAssertEqual(try StoreMeta.value(db, .seedMarkerPending("x")), "1")
        XCTAssertEqual(try db.scalar("SELECT value FROM _storectl_meta WHERE key = 'seedXdone:z'")?.string, "3")
        try StoreMeta.set(db, .seedMarkerPending("x"), nil)
        XCTAssertNil(try StoreMeta.value(db, .seedMarkerPending("x")))
    }
}
