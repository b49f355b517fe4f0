import Foundation
import TestSupport
import XCTest

/// The metrics for monitoring, through the real binary: `watch --metrics-file` after a successful round, a failed
/// round and the recovery, with the file replaced atomically; and `status --metrics` for every store or one. Every
/// text is checked by Prometheus' own linter, `promtool check metrics`. The stores share a container file (and, in
/// the subclass, a PostgreSQL container).
class MetricsTests: WatchTestCase {
    /// The schema of store a; b's notes refuse the title 'bad', so a record from a with it is set aside on b.
    static let schemaA = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT);\n"
    static let schemaB = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, "
        + "title TEXT CHECK (title <> 'bad'));\n"

    /// The families both `watch` and `status` write, and those only a watcher has.
    static let gaugeFamilies = ["storectl_store_up", "storectl_cloud_mode", "storectl_last_success_timestamp_seconds",
                                "storectl_pending_export_rows", "storectl_set_aside_records",
                                "storectl_waiting_for_parent_records", "storectl_sync_failing"]
    static let watchFamilies = ["storectl_rounds_total", "storectl_round_duration_seconds"]

    // MARK: - promtool and the text format

    /// promtool's path. Missing: the test is skipped, or fails under `STORECTL_REQUIRE_PG=1` (CI, where
    /// scripts/install-deps.sh installs it).
    private func promtool() throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for dir in path.split(separator: ":") + ["/usr/bin", "/usr/local/bin"] {
            let candidate = "\(dir)/promtool"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        if ProcessInfo.processInfo.environment["STORECTL_REQUIRE_PG"] == "1" {
            XCTFail("STORECTL_REQUIRE_PG=1 but promtool is not installed: run scripts/install-deps.sh "
                    + "(Debian package prometheus)")
            throw CocoaError(.fileNoSuchFile)
        }
        throw XCTSkip("promtool is not installed (Debian package prometheus; scripts/install-deps.sh)")
    }

    /// `promtool check metrics` on `text` (read on stdin): exit 0 and nothing to say.
    private func assertPromtoolAccepts(_ text: String, _ what: String, file: StaticString = #filePath,
                                       line: UInt = #line) throws
    {
        let r = try Binary.run(try promtool(), ["check", "metrics"], in: NSTemporaryDirectory(), stdin: text)
        XCTAssertEqual(r.status, 0, "promtool check metrics on \(what):\n\(r)\n--- text\n\(text)", file: file, line: line)
    }

    /// One sample: the metric name (with `_bucket`, `_sum`, `_count`), its labels and its value.
    struct Sample {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    /// Parses the text format as storectl writes it; nil (with a failure) when a line is not a sample, a HELP or a
    /// TYPE line, or the text does not end with a line feed.
    private func parse(_ text: String, file: StaticString = #filePath, line: UInt = #line) -> [Sample]? {
        guard text.hasSuffix("\n") else {
            XCTFail("the text does not end with a whole line:\n\(text)", file: file, line: line)
            return nil
        }
        var samples: [Sample] = []
        for raw in text.split(separator: "\n") {
            let l = String(raw)
            if l.hasPrefix("# HELP ") || l.hasPrefix("# TYPE ") { continue }
            guard let open = l.firstIndex(of: "{"), let close = l.lastIndex(of: "}"),
                  let value = Double(l[l.index(after: close)...].trimmingCharacters(in: .whitespaces)
                    .replacingOccurrences(of: "+Inf", with: "inf"))
            else {
                XCTFail("not a sample line: \(l)", file: file, line: line)
                return nil
            }
            var labels: [String: String] = [:]
            for pair in l[l.index(after: open)..<close].split(separator: ",") {
                let kv = pair.split(separator: "=", maxSplits: 1)
                guard kv.count == 2 else { continue }
                labels[String(kv[0])] = String(kv[1]).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            }
            samples.append(Sample(name: String(l[..<open]), labels: labels, value: value))
        }
        return samples
    }

    /// The value of `name` for `labels`, or nil.
    private func value(_ samples: [Sample], _ name: String, _ labels: [String: String]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    /// The families named by `# TYPE` lines, in order.
    private func families(_ text: String) -> [String] {
        text.split(separator: "\n").filter { $0.hasPrefix("# TYPE ") }.map { String($0.split(separator: " ")[2]) }
    }

    // MARK: - watch --metrics-file

    /// Reads the metrics file while a watcher replaces it: every read is a whole file (every family, the last line
    /// whole) that promtool accepts.
    private final class MetricsFile {
        let path: String
        var lastText = ""
        var reads = 0
        init(path: String) { self.path = path }
    }

    private func read(_ file: MetricsFile, store: String, line: UInt = #line) throws -> [Sample]? {
        guard let data = FileManager.default.contents(atPath: file.path) else { return nil }
        let text = String(decoding: data, as: UTF8.self)
        file.reads += 1
        XCTAssertEqual(families(text), Self.gaugeFamilies + Self.watchFamilies, "every family, in order:\n\(text)",
                       line: line)
        // The histogram's count line of the store is the file's last line: a half-written file lacks it.
        XCTAssertTrue(text.hasSuffix("\nstorectl_round_duration_seconds_count{store=\"\(store)\"} "
                                     + "\(text.split(separator: " ").last ?? "")"), "a whole file:\n\(text)",
                      line: line)
        if text != file.lastText {
            try assertPromtoolAccepts(text, "the watcher's metrics file", line: line)
            file.lastText = text
        }
        return parse(text, line: line)
    }

    /// The histogram of `store` agrees with itself and with the round counter.
    private func assertHistogramConsistent(_ s: [Sample], store: String, line: UInt = #line) {
        let buckets = s.filter { $0.name == "storectl_round_duration_seconds_bucket" && $0.labels["store"] == store }
        XCTAssertGreaterThan(buckets.count, 5, line: line)
        let counts = buckets.map(\.value)
        XCTAssertEqual(counts, counts.sorted(), "cumulative buckets never decrease", line: line)
        let total = value(s, "storectl_round_duration_seconds_count", ["store": store])
        XCTAssertEqual(buckets.last?.labels["le"], "+Inf", line: line)
        XCTAssertEqual(buckets.last?.value, total, "the +Inf bucket is the count", line: line)
        let rounds = s.filter { $0.name == "storectl_rounds_total" && $0.labels["store"] == store }.map(\.value)
        XCTAssertEqual(rounds.reduce(0, +), total, "every round is counted once by result and once by duration",
                       line: line)
        XCTAssertGreaterThanOrEqual(value(s, "storectl_round_duration_seconds_sum", ["store": store]) ?? -1, 0,
                                    line: line)
    }

    /// The backend of the test, chosen once (a PostgreSQL container's name is random).
    private var chosenBackend: Backend?

    /// A config of two stores on one container. `broken`: store b's rounds fail, with a wrong secret (a container
    /// file) or a container moved away (PostgreSQL, whose test server may trust any password).
    private func writeConfig(_ p: E2EProject, broken: Bool = false) throws {
        let b = try chosenBackend ?? backend()
        chosenBackend = b
        try p.writeSchema(Self.schemaA, to: "a.sql")
        try p.writeSchema(Self.schemaB, to: "b.sql")
        let cloud = E2EProject.Cloud(container: b.container, url: b.url, account: b.account,
                                     createIfMissing: !b.isPostgres)
        var cloudB = cloud
        if broken, b.isPostgres { cloudB.container += "moved" } else if broken { cloudB.secret = "wrong-secret" }
        try p.writeConfig([
            E2EProject.Store("a", path: "data/a.sqlite", schema: "a.sql", before: ["mode: local"], cloud: cloud),
            E2EProject.Store("b", path: "data/b.sqlite", schema: "b.sql", before: ["mode: local"], cloud: cloudB),
        ])
        if b.isPostgres, !FileManager.default.fileExists(atPath: p.dir.file("data")) {
            try p.run(["--store", "a", "cloud", "init"])
        }
    }

    func testTheWatcherWritesMetricsAfterSuccessFailureAndRecovery() throws {
        _ = try promtool()
        let p = try E2EProject()
        try writeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "mode", "cloud"])
        try FileManager.default.createDirectory(atPath: p.dir.file("textfile"), withIntermediateDirectories: true)
        let file = MetricsFile(path: p.dir.file("textfile/storectl.prom"))
        let started = Date().timeIntervalSince1970
        let w = try watch(p, ["--store", "b", "--json", "--metrics-file", "textfile/storectl.prom"])

        // A successful round.
        var s: [Sample] = []
        XCTAssertTrue(try eventually {
            s = try read(file, store: "b") ?? []
            return (value(s, "storectl_rounds_total", ["store": "b", "result": "ok"]) ?? 0) >= 1
        }, w.transcript)
        let firstSuccess = try XCTUnwrap(value(s, "storectl_last_success_timestamp_seconds", ["store": "b"]))
        XCTAssertGreaterThanOrEqual(firstSuccess, started - 1)
        XCTAssertLessThanOrEqual(firstSuccess, Date().timeIntervalSince1970 + 1)
        XCTAssertEqual(value(s, "storectl_store_up", ["store": "b"]), 1)
        XCTAssertEqual(value(s, "storectl_cloud_mode", ["store": "b"]), 1)
        XCTAssertEqual(value(s, "storectl_pending_export_rows", ["store": "b"]), 0)
        XCTAssertEqual(value(s, "storectl_set_aside_records", ["store": "b"]), 0)
        XCTAssertEqual(value(s, "storectl_sync_failing", ["store": "b"]), 0)
        XCTAssertNil(s.first { $0.labels["store"] == "a" }, "only the watched store")
        assertHistogramConsistent(s, store: "b")

        // A record b cannot apply is set aside, and the gauge says so; b's own writes are exported.
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'bad'), ('n2', 'fine')")
        try p.run(["--store", "a", "sync"])
        XCTAssertTrue(try eventually {
            s = try read(file, store: "b") ?? []
            return value(s, "storectl_set_aside_records", ["store": "b"]) == 1
        }, w.transcript)
        XCTAssertEqual(try p.sql("b", "SELECT uuid FROM notes ORDER BY uuid"), "n2\n")

        // A failed round: after a reload of the config, b's secret is wrong or its container moved away.
        try writeConfig(p, broken: true)
        w.send(SIGHUP)
        let error = try XCTUnwrap(w.waitForEvent(upTo: 30) { $0["type"] as? String == "error" }, w.transcript)
        let kind = try XCTUnwrap((error["error"] as? [String: Any])?["kind"] as? String)
        XCTAssertNotEqual(kind, "ok")
        let okBeforeFailure = value(s, "storectl_rounds_total", ["store": "b", "result": "ok"]) ?? 0
        XCTAssertTrue(try eventually {
            s = try read(file, store: "b") ?? []
            return (value(s, "storectl_rounds_total", ["store": "b", "result": kind]) ?? 0) >= 1
                && value(s, "storectl_sync_failing", ["store": "b"]) == 1
        }, w.transcript)
        let lastSuccessWhileFailing = try XCTUnwrap(value(s, "storectl_last_success_timestamp_seconds", ["store": "b"]))
        XCTAssertGreaterThanOrEqual(
            value(s, "storectl_rounds_total", ["store": "b", "result": "ok"]) ?? -1, okBeforeFailure,
            "a reload keeps the counters")
        assertHistogramConsistent(s, store: "b")
        // A second failed round: the failure counter grows, the last success stays.
        let failuresSoFar = value(s, "storectl_rounds_total", ["store": "b", "result": kind]) ?? 0
        XCTAssertTrue(try eventually(30) {
            s = try read(file, store: "b") ?? []
            return (value(s, "storectl_rounds_total", ["store": "b", "result": kind]) ?? 0) > failuresSoFar
        }, w.transcript)
        XCTAssertEqual(value(s, "storectl_last_success_timestamp_seconds", ["store": "b"]), lastSuccessWhileFailing)
        XCTAssertEqual(value(s, "storectl_sync_failing", ["store": "b"]), 1)

        // Recovery: the config as it was; a local write on b is exported.
        try writeConfig(p)
        w.send(SIGHUP)
        let okWhileFailing = value(s, "storectl_rounds_total", ["store": "b", "result": "ok"]) ?? 0
        XCTAssertTrue(try eventually(30) {
            s = try read(file, store: "b") ?? []
            return (value(s, "storectl_rounds_total", ["store": "b", "result": "ok"]) ?? 0) > okWhileFailing
                && value(s, "storectl_sync_failing", ["store": "b"]) == 0
        }, w.transcript)
        XCTAssertGreaterThan(try XCTUnwrap(value(s, "storectl_last_success_timestamp_seconds", ["store": "b"])),
                             lastSuccessWhileFailing)
        XCTAssertGreaterThanOrEqual(value(s, "storectl_rounds_total", ["store": "b", "result": kind]) ?? 0,
                                    failuresSoFar + 1, "a counter never goes down")
        _ = try p.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n3', 'from b')")
        XCTAssertTrue(try eventually {
            _ = try read(file, store: "b")
            try p.run(["--store", "a", "sync"])
            return try p.sql("a", "SELECT count(*) FROM notes WHERE uuid = 'n3'") == "1\n"
        }, w.transcript)
        XCTAssertTrue(try eventually {
            s = try read(file, store: "b") ?? []
            return value(s, "storectl_pending_export_rows", ["store": "b"]) == 0
        }, w.transcript)
        assertHistogramConsistent(s, store: "b")

        w.send(SIGTERM)
        XCTAssertEqual(w.waitForExit(upTo: 20), 0, w.transcript)
        XCTAssertGreaterThan(file.reads, 10, "the file was read during the rounds")
        // No temporary file is left beside it; node_exporter reads only *.prom, and finds one.
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: p.dir.file("textfile")), ["storectl.prom"])
        let mode = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int
        XCTAssertEqual(mode.map { $0 & 0o044 }, 0o044, "node_exporter's user can read it")
    }

    func testTheFileIsReplacedWholeAtEveryRound() throws {
        _ = try promtool()
        let p = try E2EProject()
        try writeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        let file = MetricsFile(path: p.dir.file("storectl.prom"))
        let w = try watch(p, ["--store", "a", "--metrics-file", "storectl.prom", "--interval", "0.05"])
        // Rounds every 50 ms and writes on a meanwhile: each read sees one whole file, never a mix or a half.
        var distinct = Set<String>()
        var s: [Sample] = []
        let deadline = Date().addingTimeInterval(6)
        var n = 0
        while Date() < deadline {
            if n % 20 == 0 { _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('w\(n)', 'x')") }
            n += 1
            if let read = try read(file, store: "a") {
                s = read
                distinct.insert(file.lastText)
                assertHistogramConsistent(s, store: "a")
            }
            Thread.sleep(forTimeInterval: 0.005)
        }
        XCTAssertGreaterThan(distinct.count, 5, "the file was replaced many times while it was read")
        XCTAssertGreaterThan(value(s, "storectl_rounds_total", ["store": "a", "result": "ok"]) ?? 0, 10)
        w.send(SIGTERM)
        XCTAssertEqual(w.waitForExit(upTo: 20), 0, w.transcript)
        let left = try FileManager.default.contentsOfDirectory(atPath: p.dir.path).filter { $0.contains("prom") }
        XCTAssertEqual(left, ["storectl.prom"], "no temporary file is left")
    }

    func testAMetricsFileThatCannotBeWrittenStopsTheWatcherAtStart() throws {
        let p = try E2EProject()
        try writeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        let r = try p.run(["--store", "a", "watch", "--once", "--metrics-file", "missing/storectl.prom"], expect: 73)
        XCTAssertTrue(r.stderr.contains("cannot create a temporary file in missing"), r.description)
        try p.run(["--store", "a", "watch", "--once", "--metrics-file", ""], expect: 64)
    }

    // MARK: - status --metrics

    func testStatusMetricsForEveryStoreAndForOne() throws {
        _ = try promtool()
        let p = try E2EProject()
        try writeConfig(p)
        try p.run(["--store", "a", "mode", "cloud"])
        try p.run(["--store", "b", "init"])
        _ = try p.sql("b", "INSERT INTO notes(uuid, title) VALUES ('x', '1'), ('y', '2'); "
                    + "UPDATE notes SET title = '3' WHERE uuid = 'x'")
        let status = try p.run(["--store", "a", "status", "--json"])
        let lastSync = try XCTUnwrap((try JSONSerialization.jsonObject(with: Data(status.stdout.utf8))
                                      as? [String: Any])?["last_sync"] as? String)

        let all = try p.run(["status", "--metrics"])
        try assertPromtoolAccepts(all.stdout, "status --metrics")
        XCTAssertEqual(families(all.stdout), Self.gaugeFamilies, "no round counters: status runs no rounds")
        let s = try XCTUnwrap(parse(all.stdout))
        XCTAssertEqual(value(s, "storectl_store_up", ["store": "a"]), 1)
        XCTAssertEqual(value(s, "storectl_cloud_mode", ["store": "a"]), 1)
        XCTAssertEqual(value(s, "storectl_cloud_mode", ["store": "b"]), 0)
        XCTAssertEqual(value(s, "storectl_pending_export_rows", ["store": "b"]), 2, "two rows changed, three times")
        XCTAssertEqual(value(s, "storectl_pending_export_rows", ["store": "a"]), 0)
        XCTAssertEqual(value(s, "storectl_last_success_timestamp_seconds", ["store": "b"]), 0, "never synced")
        let success = try XCTUnwrap(value(s, "storectl_last_success_timestamp_seconds", ["store": "a"]))
        let formatter = ISO8601DateFormatter()
        let recorded = try XCTUnwrap(formatter.date(from: lastSync)).timeIntervalSince1970
        XCTAssertEqual(success, recorded, accuracy: 1, "the time status --json reports as last_sync")

        let one = try p.run(["--store", "b", "status", "--metrics"])
        try assertPromtoolAccepts(one.stdout, "status --metrics for one store")
        let only = try XCTUnwrap(parse(one.stdout))
        XCTAssertEqual(Set(only.compactMap { $0.labels["store"] }), ["b"])
        XCTAssertEqual(value(only, "storectl_pending_export_rows", ["store": "b"]), 2)

        // b exports its rows, then sets aside a record from a that it cannot hold.
        try p.run(["--store", "b", "mode", "cloud"])
        _ = try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'bad')")
        try p.run(["--store", "a", "sync"])
        try p.run(["--store", "b", "sync"])
        let after = try XCTUnwrap(parse(try p.run(["--store", "b", "status", "--metrics"]).stdout))
        XCTAssertEqual(value(after, "storectl_set_aside_records", ["store": "b"]), 1)
        XCTAssertEqual(value(after, "storectl_pending_export_rows", ["store": "b"]), 0)
        XCTAssertGreaterThan(value(after, "storectl_last_success_timestamp_seconds", ["store": "b"]) ?? 0, 0)

        // A missing store: its metrics say so, the others are still printed, and the exit code is status's.
        try FileManager.default.removeItem(atPath: p.storePath("a"))
        let missing = try p.run(["status", "--metrics"], expect: 66)
        try assertPromtoolAccepts(missing.stdout, "status --metrics with a missing store")
        let m = try XCTUnwrap(parse(missing.stdout))
        XCTAssertEqual(value(m, "storectl_store_up", ["store": "a"]), 0)
        XCTAssertEqual(value(m, "storectl_last_success_timestamp_seconds", ["store": "a"]), 0)
        XCTAssertEqual(value(m, "storectl_store_up", ["store": "b"]), 1)
        XCTAssertTrue(missing.stderr.contains("does not exist"), missing.description)

        // --json stays as it is, and is not mixed with --metrics. (b holds a record set aside: status exits 65.)
        let json = try p.run(["--store", "b", "status", "--json"], expect: 65)
        XCTAssertFalse(json.stdout.contains("storectl_"), json.stdout)
        let both = try p.run(["--store", "b", "status", "--metrics", "--json"], expect: 64)
        let doc = try JSONSerialization.jsonObject(with: Data(both.stdout.utf8)) as? [String: Any]
        XCTAssertEqual((doc?["error"] as? [String: Any])?["kind"] as? String, "usage")
    }

    // MARK: - The documented alert

    /// The rule file docs/watch.md prints: promtool accepts it as printed, and its first alert fires for a store
    /// whose last success is more than 15 minutes old, not for one that syncs every minute.
    func testTheDocumentedAlertFiresForAStoreThatHasNotSyncedIn15Minutes() throws {
        let promtool = try promtool()
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let doc = try String(contentsOf: root.appendingPathComponent("docs/watch.md"), encoding: .utf8)
        let section = try XCTUnwrap(doc.range(of: "### An alert for a store that has not synced in 15 minutes"))
        let afterFence = try XCTUnwrap(doc.range(of: "```yaml\n", range: section.upperBound..<doc.endIndex))
        let end = try XCTUnwrap(doc.range(of: "```", range: afterFence.upperBound..<doc.endIndex))
        let rules = String(doc[afterFence.upperBound..<end.lowerBound])
        XCTAssertTrue(rules.contains("time() - storectl_last_success_timestamp_seconds > 900"), rules)
        let dir = try TempDirectory("storectl-rules")
        try dir.write("rules.yml", rules)
        let check = try Binary.run(promtool, ["check", "rules", "rules.yml"], in: dir.path)
        XCTAssertEqual(check.status, 0, check.description)

        // promtool's unit test compares annotations too: the copy it runs leaves them out.
        var bare: [String] = []
        var annotationsIndent: Int?
        for line in rules.components(separatedBy: "\n") {
            let indent = line.prefix { $0 == " " }.count
            if let at = annotationsIndent, !line.trimmingCharacters(in: .whitespaces).isEmpty, indent > at { continue }
            annotationsIndent = nil
            if line.trimmingCharacters(in: .whitespaces) == "annotations:" {
                annotationsIndent = indent
                continue
            }
            bare.append(line)
        }
        try dir.write("bare.yml", bare.joined(separator: "\n"))
        try dir.write("test.yml", """
            rule_files: [bare.yml]
            evaluation_interval: 1m
            tests:
              - interval: 1m
                input_series:
                  - series: 'storectl_last_success_timestamp_seconds{store="stale",instance="h"}'
                    values: '0x30'
                  - series: 'storectl_last_success_timestamp_seconds{store="fine",instance="h"}'
                    values: '0+60x30'
                alert_rule_test:
                  - eval_time: 14m
                    alertname: StorectlStoreNotSynced
                    exp_alerts: []
                  - eval_time: 16m
                    alertname: StorectlStoreNotSynced
                    exp_alerts:
                      - exp_labels: {severity: warning, store: stale, instance: h}
            """)
        let test = try Binary.run(promtool, ["test", "rules", "test.yml"], in: dir.path)
        XCTAssertEqual(test.status, 0, test.description)
    }

    func testTheOptionsHaveHelp() throws {
        let p = try E2EProject()
        let watch = try p.run(["watch", "--help"])
        XCTAssertTrue(watch.stdout.contains("--metrics-file <path>"), watch.stdout)
        let status = try p.run(["status", "--help"])
        XCTAssertTrue(status.stdout.contains("--metrics"), status.stdout)
        let man = try p.run(["man"])
        XCTAssertTrue(man.stdout.contains("metrics\\-file") || man.stdout.contains("metrics-file"))
        for shell in ["bash", "zsh", "fish"] {
            let completions = try p.run(["completions", shell])
            XCTAssertTrue(completions.stdout.contains("metrics-file"), shell)
        }
    }
}

/// The same with the stores sharing a PostgreSQL container.
final class PostgresMetricsTests: MetricsTests {
    override func backend() throws -> Backend {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (see .ci/run)")
            }
            throw XCTSkip("no PostgreSQL server (set STORECTL_TEST_PG_URL)")
        }
        let container = "iCloud.com.example.metrics" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        return Backend(url: url + (url.contains("?") ? "&" : "?") + "application_name=\(container)",
                       account: env["PGUSER"] ?? "postgres", container: container, isPostgres: true)
    }

    // Tests are found by the methods a class declares (on Linux), so the ones that use the backend are named again.
    override func testTheWatcherWritesMetricsAfterSuccessFailureAndRecovery() throws {
        try super.testTheWatcherWritesMetricsAfterSuccessFailureAndRecovery()
    }
    override func testTheFileIsReplacedWholeAtEveryRound() throws {
        try super.testTheFileIsReplacedWholeAtEveryRound()
    }
    override func testStatusMetricsForEveryStoreAndForOne() throws {
        try super.testStatusMetricsForEveryStoreAndForOne()
    }
}
