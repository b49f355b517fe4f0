import Foundation
@testable import StoreHistory
import StoreBase
import StoreSQLite
import TestSupport
import XCTest

/// A value is its SQLite type and its bytes: the integer 1, the real 1.0 and the text '1' are three values, and so
/// are 0.1 and 0.10000000000000002, or the blob x'01' and the text '\x01'. In a column without a declared type, a
/// change of type alone travels to every store, `verify` and `doctor` show it, on the container file and on
/// PostgreSQL, through the built binary.
final class ValueTypeTests: XCTestCase {
    static let schema = "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, v);\n"

    /// A value of the model, as SQL writes it and as `FleetRows` reads it back.
    enum Cell: Equatable {
        case null
        case integer(Int64)
        case real(Double)
        case text([UInt8])
        case blob([UInt8])

        static func utf8(_ s: String) -> Cell { .text(Array(s.utf8)) }

        /// The SQL literal of the value, with every digit of a real (`%.17g`; an integral real keeps a `.0`).
        var sql: String {
            switch self {
            case .null: return "NULL"
            case .integer(let i): return String(i)
            case .real(let d):
                var s = String(format: "%.17g", d)
                if !s.contains(".") && !s.contains("e") && !s.contains("n") && !s.contains("i") { s += ".0" }
                return s
            case .text(let b): return "CAST(X'\(Hex.string(b, uppercase: true))' AS TEXT)"
            case .blob(let b): return "X'\(Hex.string(b, uppercase: true))'"
            }
        }

        var typeName: String {
            switch self {
            case .null: return "null"
            case .integer: return "integer"
            case .real: return "real"
            case .text: return "text"
            case .blob: return "blob"
            }
        }

        /// The value as a row line of `FleetRows` shows it (`i:1`, `r:1.0`, `t:'1'`, `b:x'01'`).
        var line: String {
            switch self {
            case .null: return "null"
            case .integer(let i): return "i:\(i)"
            case .real(let d): return "r:\(d)"
            case .text(let b):
                if let s = String(validating: b, as: UTF8.self),
                   !s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }), !s.contains("|")
                {
                    return "t:'\(s)'"
                }
                return "t:x'\(Hex.string(b, uppercase: true))'"
            case .blob(let b): return "b:x'\(Hex.string(b, uppercase: true))'"
            }
        }
    }

    /// The expected rows of table `t` for a model.
    func expected(_ model: [String: Cell]) -> [String] {
        model.map { k, v in "t|k=t:'\(k)'|v=\(v.line)" }.sorted()
    }

    /// Each row's key, `typeof(v)` and `quote(v)` (every digit of a real, every byte of text and blob).
    func typed(_ f: Fleet, _ store: String) throws -> [String] {
        try f.sql(store, "SELECT k || '|' || typeof(v) || '|' || quote(v) || '|' || hex(v) FROM t ORDER BY k")
            .split(separator: "\n").map(String.init)
    }

    func backends() -> [FleetBackend] {
        var list: [FleetBackend] = [.file]
        if let pg = FleetBackend.postgres() { list.append(pg) }
        return list
    }

    /// Writes `model` into `store` with one UPDATE a key (the rows exist).
    func write(_ f: Fleet, _ store: String, _ changes: [String: Cell]) throws {
        let sql = changes.keys.sorted().map { "UPDATE t SET v = \(changes[$0]?.sql ?? "NULL") WHERE k = '\($0)';" }
        try f.sql(store, sql.joined(separator: "\n"))
    }

    static let before: [String: Cell] = [
        "int-to-real": .integer(1), "real-to-int": .real(2.0), "int-to-text": .integer(1),
        "last-digit": .real(0.1), "blob-to-text": .blob([1]), "text-to-blob": .text([1]),
        "text-to-int": .utf8("7"), "big-real": .real(1e20),
    ]
    static let after: [String: Cell] = [
        "int-to-real": .real(1.0), "real-to-int": .integer(2), "int-to-text": .utf8("1"),
        "last-digit": .real(0.10000000000000002), "blob-to-text": .text([1]), "text-to-blob": .blob([1]),
        "text-to-int": .integer(7), "big-real": .real(100000000000000000000.0 + 16384),
    ]

    /// Two stores synced with `before`: every row has the same type and bytes on both.
    func synced(_ backend: FleetBackend) throws -> Fleet {
        let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-value-types")
        try f.initialise("a")
        try f.sql("a", Self.before.keys.sorted().map {
            "INSERT INTO t(k, v) VALUES ('\($0)', \(Self.before[$0]?.sql ?? "NULL"));"
        }.joined(separator: "\n"))
        try f.cloudMode("a")
        try f.cloudMode("b")
        XCTAssertEqual(try typed(f, "b"), try typed(f, "a"), "[\(backend)] the first sync")
        return f
    }

    /// Each change of type alone (1 -> 1.0, 2.0 -> 2, 1 -> '1', '7' -> 7, blob <-> text with the same bytes) and of a
    /// last digit (0.1 -> 0.10000000000000002) is exported, arrives with its type, and `verify` then agrees; the
    /// same changes back again, from the other store.
    func testEveryChangeOfTypeAloneReachesTheOtherStore() throws {
        for backend in backends() {
            let f = try synced(backend)
            try write(f, "a", Self.after)
            let saved = try f.json("a", ["sync"]).doc
            XCTAssertEqual(JSONDoc.int(saved, "exported", "saved"),
                           Self.after.count, "[\(backend)] every change of type is exported\n\(saved ?? "")")
            try f.run("b", ["sync"])
            XCTAssertEqual(try typed(f, "b"), try typed(f, "a"), "[\(backend)] types after the sync")
            try f.assertRows(expected(Self.after), "[\(backend)] after the changes of type")
            for s in ["a", "b"] {
                try f.run(s, ["verify"])
                try f.assertHealthy(s, "after the changes of type")
            }
            // And back, written on b.
            try write(f, "b", Self.before)
            try f.syncRounds(1, ["b", "a"])
            XCTAssertEqual(try typed(f, "a"), try typed(f, "b"), "[\(backend)] types after the changes back")
            try f.assertRows(expected(Self.before), "[\(backend)] after the changes back")
            for s in ["a", "b"] { try f.run(s, ["verify"]) }
        }
    }

    /// A store that differs from the cloud only in types (written so that no export sends it) is not in sync for
    /// `verify` (exit 1) nor healthy for `doctor`, and both show values that read differently: a type beside
    /// each value whose type differs, a real with every digit. Doing what `doctor` says then fixes it.
    func testAStoreThatDiffersOnlyInTypeIsReportedWithTextThatShowsTheDifference() throws {
        for backend in backends() {
            let f = try synced(backend)
            // Written as if imported: the export skips it, as it skipped what older triggers did not record.
            try f.sql("b", """
                BEGIN;
                INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, 'cloud-import', 0);
                UPDATE t SET v = 1.0 WHERE k = 'int-to-real';
                UPDATE t SET v = 0.10000000000000002 WHERE k = 'last-digit';
                UPDATE t SET v = CAST(X'01' AS TEXT) WHERE k = 'blob-to-text';
                DELETE FROM _storectl_context;
                COMMIT;
                """)
            let verify = try f.run("b", ["verify"], expect: 1)
            let lines = verify.stdout.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            for expectedLine in ["v: 1.0 (real) here, 1 (integer) in the cloud",
                                 "v: 0.10000000000000002 here, 0.1 in the cloud",
                                 #"v: "\u0001" (text) here, {"$blob": "01"} (blob) in the cloud"#]
            {
                XCTAssertTrue(lines.contains(expectedLine), "[\(backend)] verify does not show '\(expectedLine)'\n"
                              + verify.stdout)
            }
            for line in lines where line.hasPrefix("v: ") {
                let parts = line.dropFirst(3).components(separatedBy: " here, ")
                XCTAssertEqual(parts.count, 2, line)
                XCTAssertNotEqual(parts.first, parts.last.map { String($0.dropLast(" in the cloud".count)) },
                                  "[\(backend)] two values that differ read the same: \(line)")
            }
            // --json: the values, and each side's type.
            let doc = try f.json("b", ["verify"], expect: 1).doc
            let differences = (JSONDoc.get(doc, "differences") as? [[String: Any]]) ?? []
            var seen: [String: [String: Any]] = [:]
            for d in differences {
                let key = (d["record_name"] as? String) ?? ""
                if let column = (d["columns"] as? [[String: Any]])?.first { seen[key] = column }
            }
            XCTAssertEqual(seen.count, 3, "[\(backend)] verify --json lists three rows\n\(doc ?? "")")
            let columns = Array(seen.values)
            let types = Set(columns.map { "\($0["local_type"] ?? "?")>\($0["cloud_type"] ?? "?")" })
            XCTAssertEqual(types, ["real>integer", "real>real", "text>blob"], "[\(backend)] verify --json types")
            // Numbers read with JSONDecoder (JSONSerialization may round the last digit).
            let decoded = try JSONDecoder().decode(VerifyDoc.self, from: Data(try f.run("b", ["--json", "verify"],
                                                                                        expect: 1).stdout.utf8))
            let reals = decoded.differences.flatMap(\.columns).filter { $0.local_type == "real" && $0.cloud_type == "real" }
            XCTAssertEqual(reals.map(\.local), [0.10000000000000002], "[\(backend)] verify --json keeps every digit")
            XCTAssertEqual(reals.map(\.cloud), [0.1])
            // doctor: not healthy, and its text shows the difference too.
            let doctor = try f.run("b", ["doctor"], expect: nil)
            XCTAssertNotEqual(doctor.status, 0, "[\(backend)] doctor calls a store that differs in type healthy")
            XCTAssertTrue(doctor.stdout.contains("1.0 (real) here, 1 (integer) in the cloud")
                          || doctor.stdout.contains("0.10000000000000002 here, 0.1 in the cloud")
                          || doctor.stdout.contains("(text) here"), "[\(backend)] doctor\n\(doctor)")
            // doctor's fix: change the row here to the value it should hold, then sync.
            try write(f, "b", ["int-to-real": .integer(1), "last-digit": .real(0.1), "blob-to-text": .blob([1])])
            try f.run("b", ["sync"])
            try f.run("b", ["verify"])
            try f.run("a", ["sync"])
            XCTAssertEqual(try typed(f, "a"), try typed(f, "b"), "[\(backend)] after doctor's fix")
            try f.assertHealthy("b", "after doctor's fix")
        }
    }

    /// Merges see a change of type alone and a change of a last digit as the changes they are: a property merge
    /// keeps both stores' changes to different columns, and the store that syncs last wins the column both changed.
    func testMergesKeepChangesOfTypeAndOfALastDigit() throws {
        for backend in backends() {
            let f = try Fleet(backend: backend, schema: "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, "
                                + "k TEXT NOT NULL UNIQUE, v, w, x);\n", label: "storectl-value-types-merge")
            try f.initialise("a")
            try f.sql("a", "INSERT INTO t(k, v, w, x) VALUES ('r', 1, 0.1, 2.0)")
            try f.cloudMode("a")
            try f.cloudMode("b")
            // Offline on both: a changes v's type only, b w's last digit only; both change x's type, differently.
            try f.sql("a", "UPDATE t SET v = 1.0, x = 2")
            try f.sql("b", "UPDATE t SET w = 0.10000000000000002, x = '2'")
            try f.syncRounds(2, ["a", "b"])
            let row = "SELECT typeof(v) || ':' || quote(v) || '|' || typeof(w) || ':' || printf('%!.17g', w) || '|' "
                + "|| typeof(x) || ':' || quote(x) FROM t"
            let expected = "real:1.0|real:0.10000000000000002|text:'2'\n"
            XCTAssertEqual(try f.sql("a", row), expected, "[\(backend)] a after the merge")
            XCTAssertEqual(try f.sql("b", row), expected, "[\(backend)] b after the merge")
            for s in ["a", "b"] { try f.run(s, ["verify"]) }
        }
    }

    /// What the test reads of `verify --json`: each column's values when they are numbers, and their types.
    struct VerifyDoc: Decodable {
        struct Column: Decodable {
            var local: Double?
            var cloud: Double?
            var local_type: String?
            var cloud_type: String?

            enum CodingKeys: String, CodingKey { case local, cloud, local_type, cloud_type }

            init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                local = try? c.decode(Double.self, forKey: .local)
                cloud = try? c.decode(Double.self, forKey: .cloud)
                local_type = try c.decodeIfPresent(String.self, forKey: .local_type)
                cloud_type = try c.decodeIfPresent(String.self, forKey: .cloud_type)
            }
        }
        struct Difference: Decodable { var columns: [Column] }
        var differences: [Difference]
    }

    /// A store whose triggers are still those of format 2 (which missed a change of type alone) is upgraded by
    /// its next sync, and the change its triggers missed is found by comparing each row with its last synced
    /// record, and exported.
    func testAFormat2StoreExportsTheTypeChangesItsTriggersMissed() throws {
        let f = try synced(.file)
        try f.putBackStoreFormat("a", 2)
        let seq = try f.sql("a", "SELECT max(seq) FROM _storectl_history")
        try write(f, "a", ["int-to-real": .real(1.0), "real-to-int": .integer(2)])
        XCTAssertEqual(try f.sql("a", "SELECT max(seq) FROM _storectl_history"), seq,
                       "format 2's triggers record no change of type alone (the case this upgrade repairs)")
        let sync = try f.run("a", ["sync"])
        XCTAssertTrue((sync.stdout + sync.stderr).contains("from store format 2 to 6"), "\(sync)")
        try f.run("b", ["sync"])
        XCTAssertEqual(try typed(f, "b"), try typed(f, "a"))
        var model = Self.before
        model["int-to-real"] = .real(1.0)
        model["real-to-int"] = .integer(2)
        try f.assertRows(expected(model), "a store upgraded from format 2")
        // Once upgraded, a change of type alone is recorded.
        try write(f, "a", ["int-to-real": .integer(1)])
        XCTAssertNotEqual(try f.sql("a", "SELECT max(seq) FROM _storectl_history"), seq)
    }

    /// Seeded random values of every type in a column without a declared type, random changes (many of type
    /// alone) on random stores, syncs in random orders: every store ends with the model's type and bytes.
    func testRandomChangesOfTypeConverge() throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["STORECTL_TEST_SEED"] ?? "")
            ?? UInt64.random(in: 0...UInt64.max)
        var rng = SplitMix64(seed: seed)
        // Values that compare equal across types, and close reals.
        func value(near base: Cell?) -> Cell {
            if let base, rng.chance(70) {
                switch base {
                case .integer(let i): return [.real(Double(i)), .utf8(String(i)), .blob(Array(String(i).utf8))][rng.below(3)]
                case .real(let d):
                    if d.rounded() == d && abs(d) < 1e15 { return [.integer(Int64(d)), .real(d.nextUp)][rng.below(2)] }
                    return [.real(d.nextUp), .real(d.nextDown), .utf8(String(d))][rng.below(3)]
                case .text(let b): return .blob(b)
                case .blob(let b): return .text(b)
                case .null: break
                }
            }
            switch rng.below(6) {
            case 0: return .integer(Int64(rng.below(5)) - 2)
            case 1: return .real(Double(rng.below(5)) - 2)
            case 2: return .real([0.1, 0.30000000000000004, 1e20, -2.5, 1.0 / 3][rng.below(5)])
            case 3: return .utf8(["1", "1.0", "0.1", "", "x"][rng.below(5)])
            case 4: return .blob(Array(["1", "", "\u{1}"][rng.below(3)].utf8))
            default: return .null
            }
        }
        for backend in backends() {
            let f = try Fleet(backend: backend, schema: Self.schema, label: "storectl-value-types-random")
            try f.initialise("a")
            var model: [String: Cell] = [:]
            for i in 0..<8 { model["k\(i)"] = value(near: nil) }
            try f.sql("a", model.keys.sorted().map { "INSERT INTO t(k, v) VALUES ('\($0)', \(model[$0]?.sql ?? "NULL"));" }
                .joined(separator: "\n"))
            try f.cloudMode("a")
            try f.cloudMode("b")
            for round in 0..<4 {
                // One store writes per round (two stores editing one row offline would be a conflict to merge).
                let writer = rng.chance(50) ? "a" : "b"
                var changes: [String: Cell] = [:]
                for k in model.keys.sorted() where rng.chance(50) { changes[k] = value(near: model[k]) }
                try write(f, writer, changes)
                model.merge(changes) { $1 }
                try f.syncRounds(1, writer == "a" ? ["a", "b"] : ["b", "a"])
                XCTAssertEqual(try typed(f, "a"), try typed(f, "b"), "[\(backend)] seed \(seed), round \(round)")
            }
            try f.assertRows(expected(model), "[\(backend)] seed \(seed)")
            for s in ["a", "b"] { try f.run(s, ["verify"]) }
        }
    }
}
