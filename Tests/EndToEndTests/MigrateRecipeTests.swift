import Foundation
import TestSupport
import XCTest

/// The README's schema-change recipes, run as printed on a copy of the repository's config.yaml and example, with
/// the built storectl first in PATH.
final class MigrateRecipeTests: XCTestCase {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The README's ```sh blocks that contain `marker`.
    static func shellBlocks(containing marker: String) throws -> [String] {
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        var blocks: [String] = []
        var current: [Substring]?
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false) {
            if current == nil, line == "```sh" {
                current = []
            } else if current != nil, line == "```" {
                let block = (current ?? []).joined(separator: "\n") + "\n"
                if block.contains(marker) { blocks.append(block) }
                current = nil
            } else {
                current?.append(line)
            }
        }
        return blocks
    }

    /// A temporary folder holding the repository's config.yaml and examples/notes, and the environment that puts
    /// the built storectl first in PATH for a recipe run with /bin/sh.
    static func exampleCopy(_ label: String) throws -> (TempDirectory, [String: String]) {
        let dir = try TempDirectory(label)
        try dir.write("config.yaml", try String(contentsOf: root.appendingPathComponent("config.yaml"),
                                                encoding: .utf8))
        for f in ["schema.sql", "seed.sql"] {
            try dir.write("examples/notes/\(f)", try String(
                contentsOf: root.appendingPathComponent("examples/notes/\(f)"), encoding: .utf8))
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return (dir, ["PATH": Binary.productsDirectory + ":" + path])
    }

    func testThePriceAndDropColumnRecipesRunAsPrintedOnTheExample() throws {
        let price = try Self.shellBlocks(containing: "migrations/0002-price.sql")
        let drop = try Self.shellBlocks(containing: "DROP COLUMN")
        XCTAssertEqual(price.count, 1, "one price recipe in README.md")
        XCTAssertEqual(drop.count, 1, "one dropped-column recipe in README.md")
        XCTAssertTrue(price.first?.contains("--schema-version 2") == true, price.first ?? "")
        let priceRecipe = try XCTUnwrap(price.first, "the price recipe in README.md")
        let dropRecipe = try XCTUnwrap(drop.first, "the dropped-column recipe in README.md")
        let (dir, env) = try Self.exampleCopy("storectl-recipe")
        @discardableResult
        func storectl(_ args: [String]) throws -> ProcessResult {
            let r = try Binary.storectl(args, in: dir.path)
            XCTAssertEqual(r.status, 0, "storectl \(args.joined(separator: " ")):\n\(r)")
            return r
        }
        @discardableResult
        func sql(_ statement: String) throws -> String {
            let r = try Binary.run("/usr/bin/sqlite3", [dir.file("data/notes.sqlite"), statement], in: dir.path)
            XCTAssertEqual(r.status, 0, "\(statement)\n\(r)")
            return r.stdout
        }
        try storectl(["mode", "cloud"])
        let prices: [(String, Double)] = [("pen", 1.5), ("book", 19.99), ("lamp", 0.1), ("desk", 249.95)]
        try sql(prices.map { "INSERT INTO items(name, price) VALUES ('\($0.0)', \($0.1));" }.joined())
        try storectl(["sync"])

        let first = try Binary.run("/bin/sh", ["-ec", priceRecipe], in: dir.path, environment: env)
        XCTAssertEqual(first.status, 0, "\(priceRecipe)\n\(first)")
        let expected = prices.sorted { $0.0 < $1.0 }.map { "\($0.0)|\(Int(($0.1 * 100).rounded()))|integer\n" }.joined()
        XCTAssertEqual(try sql("SELECT name, price, typeof(price) FROM items ORDER BY name"), expected)
        XCTAssertEqual(try sql("SELECT value FROM _storectl_meta WHERE key = 'schema_version'"), "2\n")
        try storectl(["sync"])
        try storectl(["verify"])

        let second = try Binary.run("/bin/sh", ["-ec", dropRecipe], in: dir.path, environment: env)
        XCTAssertEqual(second.status, 0, "\(dropRecipe)\n\(second)")
        XCTAssertEqual(try sql("SELECT group_concat(name, ',') FROM pragma_table_info('items')"), "id,name,price\n")
        XCTAssertEqual(try sql("SELECT value FROM _storectl_meta WHERE key = 'schema_version'"), "3\n")
        // The triggers were made again: a change after the drop is recorded and syncs.
        try sql("UPDATE items SET price = price + 1 WHERE name = 'pen'")
        let sync = try storectl(["--json", "sync"])
        XCTAssertEqual(JSONDoc.int(JSONDoc.parse(sync.stdout), "exported", "saved"), 1, sync.stdout)
        try storectl(["verify"])
        try storectl(["doctor"])
    }

    /// The README's recipes that move a store file and a store's cloud (the container-file ones: the PostgreSQL one
    /// names a server of the reader's), run as printed on a copy of the repository's config.yaml and example.
    func testTheMoveRecipesRunAsPrintedOnTheExample() throws {
        let move = try XCTUnwrap(try Self.shellBlocks(containing: "migrate --to").first, "the move recipe")
        let cloud = try XCTUnwrap(try Self.shellBlocks(containing: "migrate --cloud file:").first, "the cloud recipe")
        let (dir, env) = try Self.exampleCopy("storectl-recipe-move")
        XCTAssertEqual(try Binary.storectl(["mode", "cloud"], in: dir.path).status, 0)
        let insert = try Binary.run("/usr/bin/sqlite3", [dir.file("data/notes.sqlite"),
                                                         "INSERT INTO items(name, price) VALUES ('pen', 1.5)"],
                                    in: dir.path)
        XCTAssertEqual(insert.status, 0, "\(insert)")
        let moved = try Binary.run("/bin/sh", ["-ec", move], in: dir.path, environment: env)
        XCTAssertEqual(moved.status, 0, "\(move)\n\(moved)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("data/notes.sqlite")))
        XCTAssertTrue(try dir.read("config.yaml").contains("path: archive/notes.sqlite"))
        let copy = try Binary.run("/usr/bin/sqlite3", [dir.file("backup/notes.sqlite"), "SELECT name FROM items"],
                                  in: dir.path)
        XCTAssertEqual(copy.stdout, "pen\n", "\(copy)")
        let switched = try Binary.run("/bin/sh", ["-ec", cloud], in: dir.path, environment: env)
        XCTAssertEqual(switched.status, 0, "\(cloud)\n\(switched)")
        XCTAssertTrue(try dir.read("config.yaml").contains("url: file:cloud/team.container"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir.file("cloud/team.container")))
        let verify = try Binary.storectl(["verify"], in: dir.path)
        XCTAssertEqual(verify.status, 0, "\(verify)")
    }
}
