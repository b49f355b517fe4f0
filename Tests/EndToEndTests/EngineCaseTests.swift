import Foundation
import TestSupport
import XCTest

/// Cases the sync engine once lost or split between stores, each end to end on the real binary.
final class EngineCaseTests: XCTestCase {
    /// A root folder is its own parent through a NOT NULL reference: it arrives on every store, with its children.
    func selfParent(_ backend: FleetBackend, schema: String, insert: String, expected: [String],
                    rename: Bool = true) throws
    {
        let f = try Fleet(backend: backend, schema: schema, label: "storectl-self-parent")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", insert)
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(expected, "a row that is its own parent through a NOT NULL reference")
        for s in f.stores { try f.assertHealthy(s, "a row that is its own parent") }
        // b renames the root, then a deletes it: the tree goes everywhere, by its ON DELETE CASCADE.
        var root = "root"
        if rename {
            try f.sql("b", "UPDATE folders SET name = 'top' WHERE name = 'root'")
            try f.syncRounds(2, ["b", "a"])
            let renamed = try f.rows("a")
            XCTAssertEqual(renamed.filter { $0.contains("'top'") }.count, 2, renamed.joined(separator: "\n"))
            try f.assertSameRows("a self-parent row renamed")
            root = "top"
        }
        try f.sql("a", "DELETE FROM folders WHERE name = '\(root)'")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows([], "a self-parent row deleted with its tree")
        XCTAssertEqual(try f.liveCloudCounts()["folders"] ?? 0, 0)
    }

    func testARowThatIsItsOwnParentArrivesFile() throws {
        try selfParent(.file, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE);
            """, insert: "INSERT INTO folders VALUES (1, 'root', 1), (2, 'child', 1), (3, 'grandchild', 2)",
            expected: ["folders|name=t:'child'|parent=->folders{name=t:'root'}",
                       "folders|name=t:'grandchild'|parent=->folders{name=t:'child'}",
                       "folders|name=t:'root'|parent=->folders{name=t:'root'}"])
    }

    func testARowThatIsItsOwnParentArrivesPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try selfParent(pg, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL,
                parent INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE);
            """, insert: "INSERT INTO folders VALUES (7, 'root', 7), (2, 'child', 7)",
            expected: ["folders|name=t:'child'|parent=->folders{name=t:'root'}",
                       "folders|name=t:'root'|parent=->folders{name=t:'root'}"])
    }

    func testARowThatIsItsOwnParentByANaturalKeyArrivesFile() throws {
        try selfParent(.file, schema: """
            CREATE TABLE IF NOT EXISTS folders(name TEXT PRIMARY KEY,
                parent TEXT NOT NULL REFERENCES folders(name) ON DELETE CASCADE);
            """, insert: "INSERT INTO folders VALUES ('root', 'root'), ('child', 'root')",
            expected: ["folders|name=t:'child'|parent=t:'root'", "folders|name=t:'root'|parent=t:'root'"],
            rename: false)
    }

    /// Two stores insert the same UNIQUE tag, each with a child at the same natural key: the tags merge, and so do
    /// the children; every store ends with the same rows.
    func sameUniqueRowWithTheSameChild(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
            CREATE TABLE IF NOT EXISTS tag_props(tag INTEGER NOT NULL REFERENCES tags(id) ON DELETE CASCADE,
                key TEXT NOT NULL, value TEXT, PRIMARY KEY (tag, key));
            """, label: "storectl-unique-child")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO tags VALUES (1, 'x'); INSERT INTO tag_props VALUES (1, 'color', 'red')")
        try f.sql("b", "INSERT INTO tags VALUES (1, 'x'); INSERT INTO tag_props VALUES (1, 'color', 'blue')")
        try f.syncRounds(3, ["a", "b"])
        try f.assertSameRows("the same UNIQUE row with the same natural-key child on two stores")
        let rows = try f.rows("a")
        XCTAssertEqual(rows.filter { $0.hasPrefix("tag_props") }.count, 1, rows.joined(separator: "\n"))
        for s in f.stores { try f.assertHealthy(s, "merged duplicates with the same child") }
        // One live record for each row in the cloud: the losing tag and its child are deleted there.
        XCTAssertEqual(try f.liveCloudCounts(), ["tags": 1, "tag_props": 1])
        // An edit of the merged child on either store reaches the other.
        try f.sql("b", "UPDATE tag_props SET value = 'green'")
        try f.syncRounds(2, ["b", "a"])
        try f.assertSameRows("the merged child edited")
        XCTAssertTrue(try f.rows("a").contains { $0.contains("'green'") })
    }

    func testTheSameUniqueRowWithTheSameChildOnTwoStoresFile() throws { try sameUniqueRowWithTheSameChild(.file) }

    func testTheSameUniqueRowWithTheSameChildOnTwoStoresPostgres() throws {
        if let pg = FleetBackend.postgres() { try sameUniqueRowWithTheSameChild(pg) }
    }
}

extension EngineCaseTests {
    /// a deletes a folder (its children go by ON DELETE CASCADE) while b edits a child: a delete wins on every store,
    /// under every merge policy.
    static let naturalFolders = """
        CREATE TABLE IF NOT EXISTS folders(id TEXT PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS notes(id TEXT PRIMARY KEY, folder TEXT REFERENCES folders(id) ON DELETE CASCADE,
            title TEXT NOT NULL);
        """
    static let rowidFolders = """
        CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY,
            folder INTEGER NOT NULL REFERENCES folders(id) ON DELETE CASCADE, title TEXT NOT NULL);
        """

    func parentDeletedWhileChildEdited(_ backend: FleetBackend, schema: String, policy: String?, order: [String])
        throws
    {
        let f = try Fleet(backend: backend, schema: schema, cloudExtra: policy.map { "      merge_policy: \($0)" } ?? "", label: "storectl-parent-child")
        try f.cloudMode("a")
        try f.cloudMode("b")
        let keys = schema == Self.naturalFolders ? ("'f1'", "'n1'") : ("1", "1")
        try f.sql("a", "INSERT INTO folders VALUES (\(keys.0), 'inbox'); INSERT INTO notes VALUES (\(keys.1), \(keys.0), 'hello')")
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "DELETE FROM folders WHERE id = \(keys.0)")
        try f.sql("b", "UPDATE notes SET title = 'edited'")
        try f.syncRounds(3, order)
        try f.assertSameRows("a parent deleted while its child was edited (\(policy ?? "default"), \(order))")
        XCTAssertEqual(try f.rows("a"), [], "a delete wins (\(policy ?? "default"), \(order))")
    }

    func testAParentDeletedWhileItsChildIsEditedFile() throws {
        for schema in [Self.naturalFolders, Self.rowidFolders] {
            for policy in [nil, "local-wins", "server-wins", "property-server-wins"] {
                for order in [["a", "b"], ["b", "a"]] {
                    try parentDeletedWhileChildEdited(.file, schema: schema, policy: policy, order: order)
                }
            }
        }
    }

    func testAParentDeletedWhileItsChildIsEditedPostgres() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try parentDeletedWhileChildEdited(pg, schema: Self.naturalFolders, policy: "server-wins", order: ["a", "b"])
    }
}

extension EngineCaseTests {
    /// a, in local mode, deletes a folder while b adds a note to it; a's `mode cloud` goes through, and the note
    /// follows its deleted folder on every store (a delete wins).
    func modeCloudAfterDeletingAParentWithANewChild(_ backend: FleetBackend, schema: String) throws {
        let f = try Fleet(backend: backend, schema: schema, label: "storectl-mode-orphan")
        try f.cloudMode("a")
        try f.cloudMode("b")
        let keys = schema == Self.naturalFolders ? ("'f1'", "'n1'", "'n2'") : ("1", "1", "2")
        try f.sql("a", "INSERT INTO folders VALUES (\(keys.0), 'inbox'); INSERT INTO notes VALUES (\(keys.1), \(keys.0), 'hello')")
        try f.syncRounds(1, ["a", "b"])
        try f.run("a", ["mode", "local"])
        try f.sql("a", "DELETE FROM folders WHERE id = \(keys.0)")
        try f.sql("b", "INSERT INTO notes VALUES (\(keys.2), \(keys.0), 'new in the folder')")
        try f.run("b", ["sync"])
        try f.run("a", ["mode", "cloud"])
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows([], "a parent deleted in local mode while another store added a child")
        for s in f.stores { try f.assertHealthy(s, "a parent deleted in local mode") }
    }

    func testModeCloudAfterDeletingAParentThatGotANewChildFile() throws {
        for schema in [Self.naturalFolders, Self.rowidFolders] {
            try modeCloudAfterDeletingAParentWithANewChild(.file, schema: schema)
        }
    }
}

extension EngineCaseTests {
    /// a deletes a folder whose notes keep living cut loose (`ON DELETE SET NULL`); its export is killed between
    /// two batches; under `merge_policy: error` the resumed sync finishes, with no conflict, and b converges.
    func setNullKilledBetweenBatches(_ backend: FleetBackend, failpoint: String) throws {
        let f = try Fleet(backend: backend, schema: """
            CREATE TABLE IF NOT EXISTS folders(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY,
                folder INTEGER REFERENCES folders(id) ON DELETE SET NULL, title TEXT NOT NULL);
            """, cloudExtra: "      merge_policy: error", label: "storectl-set-null-kill")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", """
            INSERT INTO folders VALUES (1, 'inbox'), (2, 'work');
            INSERT INTO notes VALUES (1, 1, 'n1'), (2, 1, 'n2'), (3, 1, 'n3'), (4, 2, 'n4'), (5, 1, 'n5');
            """)
        try f.syncRounds(1, ["a", "b"])
        try f.sql("a", "DELETE FROM folders WHERE id = 1")
        try f.run("a", ["sync"], env: ["STORECTL_FAILPOINT": failpoint, "STORECTL_BATCH_SIZE": "2"], expect: 137)
        try f.run("a", ["sync"], env: ["STORECTL_BATCH_SIZE": "2"])
        try f.syncRounds(2, ["b", "a"])
        try f.assertRows(["folders|name=t:'work'", "notes|folder=->folders{name=t:'work'}|title=t:'n4'",
                          "notes|folder=null|title=t:'n1'", "notes|folder=null|title=t:'n2'",
                          "notes|folder=null|title=t:'n3'", "notes|folder=null|title=t:'n5'"],
                         "ON DELETE SET NULL killed at \(failpoint)")
        for s in f.stores { try f.assertHealthy(s, "ON DELETE SET NULL killed at \(failpoint)") }
    }

    func testSetNullUnderErrorPolicyKilledBetweenBatchesFile() throws {
        for failpoint in ["export.after-batch-commit", "export.after-save:2", "export.after-batch-commit:2",
                          "export.after-save"]
        {
            try setNullKilledBetweenBatches(.file, failpoint: failpoint)
        }
    }
}

extension EngineCaseTests {
    static let listSchema = """
        CREATE TABLE IF NOT EXISTS lists(id TEXT PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS items(id TEXT PRIMARY KEY, list TEXT NOT NULL REFERENCES lists(id) ON DELETE CASCADE,
            pos INTEGER NOT NULL, label TEXT NOT NULL, UNIQUE(list, pos));
        """

    /// Three stores; two insert an item at the same position of one list (a duplicate by UNIQUE(list, pos)); every
    /// store ends with the same list, whatever the order of syncs.
    func samePositionOnTwoStores(_ backend: FleetBackend, order: [String]) throws {
        let f = try Fleet(stores: ["a", "b", "c"], backend: backend, schema: Self.listSchema, label: "storectl-list-dup")
        for s in ["a", "b", "c"] { try f.cloudMode(s) }
        try f.sql("a", "INSERT INTO lists VALUES ('l1', 'groceries'); INSERT INTO items VALUES ('i0', 'l1', 0, 'milk')")
        try f.syncRounds(1, ["a", "b", "c"])
        try f.sql("a", "INSERT INTO items VALUES ('ia', 'l1', 1, 'eggs')")
        try f.sql("b", "INSERT INTO items VALUES ('ib', 'l1', 1, 'bread')")
        try f.sql("c", "UPDATE items SET pos = 5 WHERE id = 'i0'")
        try f.syncRounds(3, order)
        try f.assertSameRows("two items at one position (\(order))")
        let rows = try f.rows("a")
        XCTAssertEqual(rows.filter { $0.hasPrefix("items") }.count, 2, rows.joined(separator: "\n"))
        for s in f.stores { try f.assertHealthy(s, "two items at one position (\(order))") }
    }

    func testTwoItemsAtOnePositionFile() throws {
        for order in [["a", "b", "c"], ["c", "b", "a"], ["b", "c", "a"]] {
            try samePositionOnTwoStores(.file, order: order)
        }
    }
}
