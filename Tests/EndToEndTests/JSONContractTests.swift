import Foundation
import TestSupport
import XCTest

/// The JSON contract, pinned for every command: one object per run, `"version": 1`, snake_case keys, and the same
/// shape whether the config holds one store or two.
final class JSONContractTests: XCTestCase {
    /// A project whose stores (`data/NAME.sqlite`) share one container file, each with a seed of one note.
    static func project(stores: [String]) throws -> E2EProject {
        let p = try E2EProject()
        try p.writeSchema()
        try p.writeConfig(stores.map { name in
            E2EProject.Store(name, path: "data/\(name).sqlite",
                             before: ["entities:", "  notes:", "    unique: [uuid]",
                                      "seed:", "  name: default-\(name)", "  rows:", "    notes:",
                                      "      - {uuid: seeded-\(name), title: hello}"],
                             cloud: .file("iCloud.com.example.contract", secret: "${CONTRACT_SECRET:-demo-secret}"))
        })
        return p
    }

    /// Each command, in the order it runs, with the top-level keys of its document (besides "version").
    static let table: [(args: [String], keys: [String])] = [
        (["--version"], ["storectl_version"]),
        (["init"], ["created_file", "installed", "path", "schema", "schema_applied", "schema_hash", "store",
                    "store_id", "tracked"]),
        (["mode"], ["agrees", "config_mode", "mode", "store", "store_mode"]),
        (["mode", "cloud", "--dry-run"], ["dry_run", "from", "plan", "steps", "store", "to"]),
        (["mode", "cloud"], ["dry_run", "from", "steps", "store", "sync", "to", "verified"]),
        (["status"], ["account", "cloud", "config_mode", "disagreements", "exists", "history",
                      "initial_sync_complete", "last_error", "last_export_at", "last_import_at", "last_sync", "mode",
                      "path", "pending_export", "store", "tokens", "unsettled", "watched", "watcher"]),
        (["sync"], ["exported", "imported"]),
        (["verify"], ["container", "difference_count", "differences", "in_sync", "store", "tables", "truncated",
                      "unexplained_count", "untracked_records", "url", "zone", "zone_exists"]),
        (["migrate", "--to", "copies/a.sqlite", "--copy"], ["action", "config_path", "from", "identity", "integrity",
                                                            "old_file_removed", "pages", "steps", "store",
                                                            "store_id", "to"]),
        (["seed"], []),
        (["history", "--limit", "5"], ["after", "history_gap", "latest_seq", "next_token", "store", "tracking",
                                       "transactions"]),
        (["history", "consumer", "add", "indexer", "--token", "0"], ["consumer", "created"]),
        (["history", "consumer", "advance", "indexer", "latest"], ["advanced", "consumer", "previous_token"]),
        (["history", "consumer", "list"], ["consumers", "latest_seq"]),
        (["history", "consumer", "drop", "indexer"], ["dropped"]),
        (["history", "prune", "--before", "1"], ["first_seq", "held_by", "last_seq", "limit", "remaining",
                                                 "removed"]),
        (["verify"], ["in_sync", "store", "tables"]),
        (["migrate"], ["before", "history_gap", "regenerated", "repaired", "schema_hash", "store", "tables"]),
        (["migrate", "--cloud", "file:cloud/moved.container"], ["config", "exported", "final_sync", "from", "imported",
                                                                "steps", "store", "to", "verified"]),
        (["dedupe", "--dry-run"], []),
        (["config", "validate"], ["ok", "path", "stores", "warnings"]),
        (["config", "get", "stores.a.mode"], ["key", "value"]),
        (["config", "set", "stores.a.history.retention", "30d"], ["changed", "inserted", "key", "line", "new",
                                                                   "old", "path"]),
        (["config", "path"], ["absolute_path", "exists", "path", "searched", "source"]),
        (["account", "status"], ["account", "container", "owner", "reason", "status", "store", "url"]),
        (["account", "list"], ["accounts", "container"]),
        (["account", "disable", "demo"], []),
        (["cloud", "check"], ["entities"]),
        (["cloud", "init"], ["account_status", "container", "created", "owner", "url"]),
        (["cloud", "schema"], ["container", "record_types", "store", "zone"]),
        (["cloud", "schema", "--format", "sql"], ["format", "sql"]),
        (["doctor"], ["healthy", "stores"]),
        (["debug", "failpoints"], ["armed", "failpoints"]),
        (["completions", "bash"], ["script", "shell"]),
        (["completions", "--list-stores"], ["stores"]),
        (["man"], ["format", "page"]),
        (["help", "mode"], ["command", "text"]),
        (["cloud", "purge", "--yes"], ["container", "purged", "records", "zone"]),
    ]

    /// Every key path of a JSON value, array elements as `[]`, object keys sorted.
    static func shape(_ value: Any, _ prefix: String = "") -> Set<String> {
        var out: Set<String> = []
        if let object = value as? [String: Any] {
            for (key, v) in object {
                out.insert(prefix + "." + key)
                out.formUnion(shape(v, prefix + "." + key))
            }
        } else if let array = value as? [Any] {
            for v in array { out.formUnion(shape(v, prefix + "[]")) }
        }
        return out
    }

    static func isSnakeCase(_ key: String) -> Bool {
        !key.isEmpty && key.allSatisfy { ($0.isASCII && $0.isLowercase) || $0.isNumber || $0 == "_" }
    }

    /// Runs the table on a config of `stores`, always acting on store `a`; returns each document's shape.
    func run(stores: [String]) throws -> [String: Set<String>] {
        let p = try Self.project(stores: stores)
        var shapes: [String: Set<String>] = [:]
        for (args, keys) in Self.table {
            let label = args.joined(separator: " ")
            let r = try p.run(["--store", "a", "--json"] + args, expect: nil)
            let object = try XCTUnwrap(try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any],
                                       "\(label) on \(stores): not one JSON object\n\(r)")
            XCTAssertEqual(object["version"] as? Int, 1, "\(label): no version 1\n\(r)")
            let shape = Self.shape(object)
            for path in shape {
                let key = String(path.split(separator: ".").last ?? "").replacingOccurrences(of: "[]", with: "")
                XCTAssertTrue(Self.isSnakeCase(key), "\(label): key '\(path)' is not snake_case")
            }
            if r.status == 0 || object["error"] == nil {
                XCTAssertNil(object["error"], "\(label)\n\(r)")
                // Keys are only ever added: each pinned key is there (null when it has no value).
                let missing = Set(keys).subtracting(object.keys)
                XCTAssertTrue(missing.isEmpty, "\(label): the document lost \(missing.sorted())\n\(r.stdout)")
            } else {
                let error = try XCTUnwrap(object["error"] as? [String: Any], label)
                XCTAssertEqual(error.keys.sorted(), ["code", "hint", "kind", "location", "message", "status", "store"],
                               "\(label)")
                XCTAssertEqual(error["code"] as? Int, Int(r.status), label)
            }
            shapes[label] = shape
        }
        return shapes
    }

    func testEveryCommandKeepsOneShapeWithOneAndWithTwoStores() throws {
        let one = try run(stores: ["a"])
        let two = try run(stores: ["a", "b"])
        // The documents whose content is the config or the help may differ; every other shape is the same.
        for (label, shape) in one where !["config validate", "completions --list-stores"].contains(label) {
            XCTAssertEqual(shape, two[label], "\(label): the shape changed with a second store")
        }
    }

    /// Without --store, commands about every store are `{"version": 1, "stores": [...]}` in every case.
    func testStatusWithoutStoreIsAlwaysAStoresList() throws {
        for stores in [["a"], ["a", "b"]] {
            let p = try Self.project(stores: stores)
            for command in [["status"], ["doctor"]] {
                let r = try p.run(["--json"] + command, expect: nil)
                let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
                XCTAssertEqual(doc["version"] as? Int, 1)
                XCTAssertEqual((doc["stores"] as? [[String: Any]])?.count, stores.count, "\(command) \(r)")
            }
        }
    }

    /// An error document: code, kind, message, hint, store and the account status, every key present.
    func testAnAccountErrorCarriesTheStoreAndTheStatus() throws {
        let p = try Self.project(stores: ["a", "b"])
        // The container is made with the right secret; store b then names a wrong one.
        try p.run(["--store", "a", "cloud", "init"])
        let refused = try p.run(["--store", "b", "--json", "mode", "cloud"], expect: 69,
                                env: ["CONTRACT_SECRET": "wrong"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(refused.stdout.utf8)) as? [String: Any])
        let error = try XCTUnwrap(doc["error"] as? [String: Any])
        XCTAssertEqual(doc["version"] as? Int, 1)
        XCTAssertEqual(error["code"] as? Int, 69)
        XCTAssertEqual(error["kind"] as? String, "unavailable")
        XCTAssertEqual(error["store"] as? String, "b")
        XCTAssertEqual(error["status"] as? String, "restricted")
        XCTAssertFalse(refused.stdout.contains("wrong"), "a secret in the error document")
    }
}
