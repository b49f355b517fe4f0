import Foundation
import TestSupport
import XCTest

/// What storectl does with config input that is not a config: files that are too big or not files at all,
/// and random mutations of real configs, given to the real binary.
final class ConfigInputTests: XCTestCase {
    /// Runs `storectl args` with a time limit, so that a hang is a failure rather than a stuck test run.
    func storectl(_ args: [String], in dir: TempDirectory, seconds: Int = 20) throws -> ProcessResult {
        try Binary.run("/usr/bin/timeout", ["-s", "KILL", String(seconds), Binary.storectl] + args, in: dir.path)
    }

    func testSpecialAndHugeConfigFilesAreRefusedAtOnceWith78() throws {
        let dir = try TempDirectory("storectl-input")
        // A FIFO nobody writes to: opening it must not wait for a writer.
        XCTAssertEqual(mkfifo(dir.file("fifo.yaml"), 0o600), 0)
        // A file far larger than any config.
        let big = dir.file("big.yaml")
        FileManager.default.createFile(atPath: big, contents: Data("version: 1\n".utf8))
        XCTAssertEqual(truncate(big, 3 << 30), 0, "a 3 GiB sparse file")
        let cases: [(String, String)] = [
            ("fifo.yaml", "fifo.yaml is a pipe, not a config file"),
            ("/dev/zero", "/dev/zero is a character device, not a config file"),
            ("/dev/null", "/dev/null is a character device, not a config file"),
            ("big.yaml", "big.yaml is larger than 1024 KiB, the most a config file may hold"),
        ]
        for (path, message) in cases {
            for args in [["config", "validate"], ["mode", "cloud"], ["--json", "status"]] {
                let start = Date()
                let r = try storectl(["--config", path] + args, in: dir)
                XCTAssertEqual(r.status, 78, "\(path) \(args)\n\(r)")
                XCTAssertLessThan(Date().timeIntervalSince(start), 5, "\(path) \(args)")
                XCTAssertTrue((r.stderr + r.stdout).contains(message), "\(path) \(args)\n\(r)")
            }
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted(),
                       ["big.yaml", "fifo.yaml"], "nothing was created")
        // Just under the limit is read (and refused for what it says, not for its size).
        try Data(("version: 1\n" + String(repeating: "# padding\n", count: 100_000)).utf8)
            .write(to: URL(fileURLWithPath: dir.file("padded.yaml")))
        let padded = try storectl(["--config", "padded.yaml", "config", "validate"], in: dir)
        XCTAssertEqual(padded.status, 78, "\(padded)")
        XCTAssertTrue(padded.stderr.contains("stores: required key is missing"), padded.stderr)
    }

    /// A bounded, seeded run of mutated configs through the binary: every one ends in exit 0 or 78, never a crash
    /// (a signal), a hang (the time limit), or another code. `STORECTL_FUZZ_RUNS` sets how many (default 150).
    func testMutatedConfigsThroughTheBinaryEndIn0Or78() throws {
        let env = ProcessInfo.processInfo.environment
        let runs = env["STORECTL_FUZZ_RUNS"].flatMap(Int.init) ?? 150
        let seed = env["STORECTL_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 0...UInt64.max)
        print("binary config fuzz: seed \(seed), \(runs) runs")
        var rng = SplitMix64(seed: seed)
        let dir = try TempDirectory("storectl-fuzz")
        let seeds = Self.seeds
        var codes: [Int32: Int] = [:]
        for run in 0..<runs {
            var bytes = Array((seeds.randomElement(using: &rng) ?? "").utf8)
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let at = bytes.isEmpty ? 0 : Int.random(in: 0...bytes.count, using: &rng)
                let token = Array((Self.tokens.randomElement(using: &rng) ?? "").utf8)
                if Bool.random(using: &rng) || bytes.isEmpty {
                    bytes.insert(contentsOf: token, at: at)
                } else {
                    bytes.removeSubrange(min(at, bytes.count - 1)..<min(bytes.count, at + 8))
                }
            }
            try Data(bytes).write(to: URL(fileURLWithPath: dir.file("config.yaml")))
            let args = [["config", "validate"], ["config", "show"], ["--json", "config", "show", "--resolved"]]
                .randomElement(using: &rng) ?? []
            let r = try storectl(args, in: dir)
            codes[r.status, default: 0] += 1
            XCTAssertTrue([0, 78].contains(r.status), "seed \(seed), run \(run), storectl \(args)\n"
                          + String(decoding: bytes, as: UTF8.self) + "\n\(r)")
            XCTAssertFalse(r.stderr.contains("internal"), "\(r)")
        }
        print("binary config fuzz: exit codes \(codes.sorted { $0.key < $1.key })")
        let created = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        XCTAssertEqual(created, ["config.yaml"], "validating created files")
    }

    static let seeds = [
        """
        version: 1
        stores:
          notes:
            path: data/notes.sqlite
            history: {retention: 30d}
            cloud:
              container: iCloud.com.example.notes
              url: file:cloud/notes.container
              account: demo
              secret: hunter2
            entities:
              notes: {unique: [uuid], keep: newest(updated_at)}

        """,
        """
        version: 1
        stores:
          a: {path: a.sqlite, cloud: {container: iCloud.com.x.y, url: "host=db password='p q'", account: bob}}
          b:
            path: ~/b.sqlite
            cloud: {container: iCloud.com.x.y, url: postgres://u:pw@db:5432/x?sslmode=require}

        """,
    ]

    static let tokens = [
        ":", "{", "}", "[", "]", ",", "- ", "&a ", "*a", "!!int ", "\t", "\n", "\"", "'", "#", "---\n", "${X}", "${",
        "\\0", "\u{0}", "\u{1B}", "~", "1e400", "200000000000d", "postgres://u:p@h:0/d", "host=h password='x",
        "file:", "~bob/", "%zz", String(repeating: "[", count: 80), String(repeating: "x", count: 5000),
    ]
}

