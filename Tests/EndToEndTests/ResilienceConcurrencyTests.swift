import Foundation
import TestSupport
import XCTest

/// Things happening at the same time: the app writing while storectl exports, two syncs of one store at once, and
/// every store syncing into one container at once. Each row has one writer, so the model knows the end state
/// whatever the interleaving.
final class ResilienceConcurrencyTests: XCTestCase {
    /// A storectl process running in the background; its output goes to files.
    final class Background {
        let process = Process()
        let out: String

        init(_ f: Fleet, _ args: [String], env: [String: String] = [:]) throws {
            out = f.dir.file("bg-\(UInt32.random(in: 0...UInt32.max)).log")
            FileManager.default.createFile(atPath: out, contents: nil)
            process.executableURL = URL(fileURLWithPath: Binary.storectl)
            process.arguments = args
            process.currentDirectoryURL = URL(fileURLWithPath: f.dir.path)
            var e: [String: String] = ["NO_COLOR": "1"]
            for key in ["PATH", "HOME", "TMPDIR", "LANG", "STORECTL_TEST_PG_URL"] {
                if let v = ProcessInfo.processInfo.environment[key] { e[key] = v }
            }
            for (k, v) in env { e[k] = v }
            process.environment = e
            let handle = FileHandle(forWritingAtPath: out)
            process.standardOutput = handle
            process.standardError = handle
            process.standardInput = FileHandle.nullDevice
            try process.run()
        }

        /// Waits for the process; returns its exit status and output.
        func wait() -> (Int32, String) {
            process.waitUntilExit()
            return (process.terminationStatus, (try? String(contentsOfFile: out, encoding: .utf8)) ?? "")
        }
    }

    /// The app keeps writing (updates, deletes, re-inserts, inserts) while the first export of 400 rows runs.
    func writesDuringExport(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: CrashModel.schema, label: "storectl-concurrent")
        var m = CrashModel()
        try f.initialise("a")
        try m.write(f, "a", (1...400).map { CrashModel.Write.insertNote("n\($0)", "t\($0)", id: $0) }
                    + (1...30).map { CrashModel.Write.setSetting("k\($0)", "v\($0)") })
        try f.cloudMode("b")
        let sync = try Background(f, ["--store", "a", "mode", "cloud"], env: ["STORECTL_BATCH_SIZE": "5"])
        var rng = SplitMix64(seed: 7)
        for round in 0..<25 {
            let i = 1 + rng.below(400)
            let writes: [CrashModel.Write]
            switch round % 5 {
            case 0: writes = [.setTitle("n\(i)", "during \(round)")]
            case 1: writes = [.deleteNote("n\(i)")]
            case 2: writes = [.reinsertNote("n\(i)", "reborn \(round)", id: i)]
            case 3: writes = [.insertNote("x\(round)", "new \(round)"), .setSetting("k\(1 + rng.below(30))", "w\(round)")]
            default: writes = [.setBody("n\(i)", "body \(round)"), .deleteSetting("k\(1 + rng.below(30))")]
            }
            try m.write(f, "a", writes)
            usleep(UInt32(2_000 + rng.below(15_000)))
        }
        let (status, output) = sync.wait()
        XCTAssertEqual(status, 0, "[\(backend)] mode cloud while the app wrote\n\(output)")
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(m.rows, "writes during the first export")
        for s in f.stores { try f.assertHealthy(s, "writes during the first export") }
    }

    func testWritesDuringTheFirstExportFile() throws { try writesDuringExport(.file) }

    func testWritesDuringTheFirstExportPostgres() throws {
        if let pg = FleetBackend.postgres() { try writesDuringExport(pg) }
    }

    /// Two `sync` processes on one store at once, several times, with writes between: each exits 0 or 75
    /// (retry), and nothing is lost or doubled.
    func twoSyncsOfOneStore(_ backend: FleetBackend) throws {
        let f = try Fleet(backend: backend, schema: CrashModel.schema, label: "storectl-concurrent")
        var m = CrashModel()
        try f.cloudMode("a")
        try f.cloudMode("b")
        for round in 0..<5 {
            try m.write(f, "a", (0..<40).map { CrashModel.Write.insertNote("r\(round)-\($0)", "t") }
                        + [.setSetting("round", "\(round)")])
            if round > 0 { try m.write(f, "a", [.deleteNote("r\(round - 1)-3"), .setTitle("r\(round - 1)-4", "edited")]) }
            let one = try Background(f, ["--store", "a", "sync"], env: ["STORECTL_BATCH_SIZE": "3"])
            let two = try Background(f, ["--store", "a", "sync"], env: ["STORECTL_BATCH_SIZE": "3"])
            for (status, output) in [one.wait(), two.wait()] {
                XCTAssertTrue(status == 0 || status == 75, "[\(backend)] two syncs of one store at once\n\(output)")
            }
        }
        try f.syncRounds(2, ["a", "b"])
        try f.assertRows(m.rows, "two syncs of one store at once")
        for s in f.stores { try f.assertHealthy(s, "two syncs of one store at once") }
    }

    func testTwoSyncsOfOneStoreAtOnceFile() throws { try twoSyncsOfOneStore(.file) }

    func testTwoSyncsOfOneStoreAtOncePostgres() throws {
        if let pg = FleetBackend.postgres() { try twoSyncsOfOneStore(pg) }
    }

    /// Three stores write rows of their own and all sync at the same moment, round after round.
    func everyStoreAtOnce(_ backend: FleetBackend) throws {
        let f = try Fleet(stores: ["a", "b", "c"], backend: backend, schema: CrashModel.schema,
                          label: "storectl-concurrent")
        var m = CrashModel()
        for s in f.stores { try f.cloudMode(s) }
        for round in 0..<6 {
            for s in f.stores {
                var writes = (0..<15).map { CrashModel.Write.insertNote("\(s)\(round)-\($0)", "t") }
                writes.append(.setPair(s, round, "v"))
                if round > 0 {
                    writes += [.deleteNote("\(s)\(round - 1)-0"), .setTitle("\(s)\(round - 1)-1", "edited"),
                               .reinsertNote("\(s)\(round - 1)-2", "reborn", id: 0)]
                }
                try m.write(f, s, writes)
            }
            let runs = try f.stores.map { try Background(f, ["--store", $0, "sync"], env: ["STORECTL_BATCH_SIZE": "4"]) }
            for (status, output) in runs.map({ $0.wait() }) {
                XCTAssertTrue(status == 0 || status == 75, "[\(backend)] every store syncing at once\n\(output)")
            }
        }
        try f.syncRounds(2)
        try f.assertRows(m.rows, "every store syncing at once")
        for s in f.stores { try f.assertHealthy(s, "every store syncing at once") }
    }

    func testEveryStoreSyncingAtOnceFile() throws { try everyStoreAtOnce(.file) }

    func testEveryStoreSyncingAtOncePostgres() throws {
        if let pg = FleetBackend.postgres() { try everyStoreAtOnce(pg) }
    }
}
