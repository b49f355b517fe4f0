import Foundation
import TestSupport
import XCTest

/// One store's config error is that store's alone: a two-store config where store `notes` reads a variable that is
/// unset (`secret: ${NOTES_PG_PASSWORD}`, as `migrate --cloud ... --secret-env NOTES_PG_PASSWORD` writes it) and
/// store `journal` is fine.
final class StoreConfigIsolationTests: WatchTestCase {
    private var watched: [BackgroundProcess] = []

    override func tearDown() {
        for w in watched where w.isRunning { w.send(SIGKILL) }
        watched = []
        super.tearDown()
    }

    /// `journal` on a file container; `notes` with a secret from `NOTES_PG_PASSWORD`, which no run sets unless
    /// `notesSecret` writes it another way. Returns the config text.
    @discardableResult
    private func makeProject(_ p: E2EProject, notesSecret: String = "${NOTES_PG_PASSWORD}",
                             notesExtra: [String] = []) throws -> String
    {
        try p.writeSchema()
        return try p.writeConfig([
            E2EProject.Store("journal", path: "data/journal.sqlite", before: ["mode: local"],
                             cloud: E2EProject.Cloud(container: "iCloud.com.example.journal",
                                                     url: "file:cloud/journal.container")),
            E2EProject.Store("notes", path: "data/notes.sqlite", before: ["mode: local"],
                             cloud: E2EProject.Cloud(container: "iCloud.com.example.notes",
                                                     url: "file:cloud/notes.container", secret: notesSecret,
                                                     extra: notesExtra)),
        ])
    }

    /// `config.yaml:LINE:COL` of the first `needle` in `text` (1-based, as storectl prints it).
    private func location(of needle: String, in text: String) throws -> String {
        let lines = text.components(separatedBy: "\n")
        let index = try XCTUnwrap(lines.firstIndex { $0.contains(needle) }, "\(needle) is not in\n\(text)")
        let column = try XCTUnwrap(lines[index].range(of: needle)).lowerBound.utf16Offset(in: lines[index]) + 1
        return "config.yaml:\(index + 1):\(column)"
    }

    private func json(_ text: String) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any], text)
    }

    func testStatusOfEveryStoreListsTheBrokenStoreWithItsErrorAndExits78() throws {
        let p = try E2EProject()
        let text = try makeProject(p)
        let place = try location(of: "${NOTES_PG_PASSWORD}", in: text)
        try p.run(["--store", "journal", "init"])

        let human = try p.run(["status"], expect: 78)
        XCTAssertTrue(human.stdout.contains("store journal"), human.description)
        XCTAssertTrue(human.stdout.contains("store notes"), human.description)
        XCTAssertTrue(human.stdout.contains("environment variable 'NOTES_PG_PASSWORD' is not set"), human.description)
        XCTAssertTrue(human.stderr.contains("\(place): error: stores.notes.cloud.secret: environment variable "
                                            + "'NOTES_PG_PASSWORD' is not set"), human.description)

        let r = try p.run(["status", "--json"], expect: 78)
        let stores = try XCTUnwrap(try json(r.stdout)["stores"] as? [[String: Any]], r.stdout)
        XCTAssertEqual(stores.map { $0["store"] as? String }, ["journal", "notes"], r.stdout)
        XCTAssertNil(stores[0]["error"], r.stdout)
        XCTAssertEqual(stores[0]["mode"] as? String, "local", r.stdout)
        let error = try XCTUnwrap(stores[1]["error"] as? [String: Any], r.stdout)
        XCTAssertEqual(error["code"] as? Int, 78, r.stdout)
        XCTAssertEqual(error["kind"] as? String, "config", r.stdout)
        XCTAssertEqual(error["location"] as? String, place, r.stdout)
        XCTAssertEqual(error["store"] as? String, "notes", r.stdout)

        // Once the variable is set, every store is fine and status exits 0 for them both.
        try p.run(["--store", "notes", "init"], env: ["NOTES_PG_PASSWORD": "demo-secret"])
        let fixed = try p.run(["status", "--json"], expect: 0, env: ["NOTES_PG_PASSWORD": "demo-secret"])
        let both = try XCTUnwrap(try json(fixed.stdout)["stores"] as? [[String: Any]], fixed.stdout)
        XCTAssertEqual(both.compactMap { $0["error"] }.count, 0, fixed.stdout)
    }

    func testCommandsOnTheOtherStoreWorkAndTheBrokenStoreFailsWithItsPlace() throws {
        let p = try E2EProject()
        let text = try makeProject(p)
        let place = try location(of: "${NOTES_PG_PASSWORD}", in: text)
        try p.run(["--store", "journal", "init"])
        try p.sql("journal", "INSERT INTO notes(uuid, title) VALUES ('j-1', 'one')")
        try p.run(["--store", "journal", "mode", "cloud"])
        try p.run(["--store", "journal", "sync"])
        let status = try p.run(["--store", "journal", "status", "--json"])
        XCTAssertEqual(try json(status.stdout)["mode"] as? String, "cloud", status.stdout)
        // `mode cloud` wrote config.yaml although another store's section is wrong, and left that section alone.
        let written = try String(contentsOfFile: p.dir.file("config.yaml"), encoding: .utf8)
        XCTAssertTrue(written.contains("secret: ${NOTES_PG_PASSWORD}"), written)

        for args in [["--store", "notes", "status"], ["--store", "notes", "sync"], ["--store", "notes", "init"]] {
            let r = try p.run(args, expect: 78)
            XCTAssertTrue(r.stderr.contains("\(place): error: stores.notes.cloud.secret: environment variable "
                                            + "'NOTES_PG_PASSWORD' is not set"), r.description)
        }
    }

    func testOtherStoreSectionErrorsAreIsolatedTooButSharedPartErrorsFailEverything() throws {
        let p = try E2EProject()
        try p.writeSchema()
        // An unknown key inside the store, then a bad URL.
        for (line, message) in [("mdoe: local", "stores.notes.mdoe: unknown key"),
                                ("cloud: {container: iCloud.com.example.notes, url: 'ftp://x/y'}",
                                 "stores.notes.cloud.url: unsupported URL scheme 'ftp'")]
        {
            _ = try p.dir.write("config.yaml", """
                version: 1
                stores:
                  journal:
                    path: data/journal.sqlite
                    schema: schema.sql
                  notes:
                    path: data/notes.sqlite
                    \(line)

                """)
            try p.run(["--store", "journal", "init"])
            try p.run(["--store", "journal", "status"])
            let r = try p.run(["--store", "notes", "status"], expect: 78)
            XCTAssertTrue(r.stderr.contains("config.yaml:8:"), r.description)
            XCTAssertTrue(r.stderr.contains(message), r.description)
            let all = try p.run(["status"], expect: 78)
            XCTAssertTrue(all.stdout.contains("store journal"), all.description)
        }
        // A missing schema file fails only its own store's init.
        try p.writeConfig([E2EProject.Store("journal", path: "data/journal.sqlite"),
                           E2EProject.Store("notes", path: "data/notes.sqlite", schema: "missing.sql")])
        try p.run(["--store", "journal", "status"])
        let initNotes = try p.run(["--store", "notes", "init"], expect: nil)
        XCTAssertNotEqual(initNotes.status, 0, initNotes.description)
        XCTAssertTrue(initNotes.stderr.contains("missing.sql"), initNotes.description)
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("data/notes.sqlite")), initNotes.description)
        try p.run(["--store", "journal", "sync"], expect: nil)
        try p.run(["--store", "journal", "history"])
        // An unknown top-level key, and a YAML syntax error: every command on every store fails.
        for tail in ["colour: blue\n", "stores2: [\n"] {
            _ = try p.dir.write("config.yaml", """
                version: 1
                stores:
                  journal:
                    path: data/journal.sqlite
                \(tail)
                """)
            let r = try p.run(["--store", "journal", "status"], expect: 78)
            XCTAssertTrue(r.stderr.hasPrefix("config.yaml:5:") || r.stderr.hasPrefix("config.yaml:6:"), r.description)
        }
    }

    func testDoctorExaminesTheOtherStoreAndNamesTheBrokenOne() throws {
        let p = try E2EProject()
        let text = try makeProject(p)
        let place = try location(of: "${NOTES_PG_PASSWORD}", in: text)
        try p.run(["--store", "journal", "init"])
        let r = try p.run(["doctor", "--json"], expect: 78)
        let stores = try XCTUnwrap(try json(r.stdout)["stores"] as? [[String: Any]], r.stdout)
        XCTAssertEqual(stores.map { $0["store"] as? String }, ["journal", "notes"], r.stdout)
        XCTAssertTrue((stores[0]["checks"] as? [String] ?? []).contains("history"), r.stdout)
        let finding = try XCTUnwrap((stores[1]["findings"] as? [[String: Any]])?.first, r.stdout)
        XCTAssertEqual(finding["check"] as? String, "config", r.stdout)
        XCTAssertTrue((finding["problem"] as? String ?? "").hasPrefix(place + ": stores.notes.cloud.secret"), r.stdout)
        try p.run(["--store", "journal", "doctor"])
        try p.run(["--store", "notes", "doctor"], expect: 78)
    }

    func testConfigValidateStillReportsTheError() throws {
        let p = try E2EProject()
        let text = try makeProject(p)
        let place = try location(of: "${NOTES_PG_PASSWORD}", in: text)
        let r = try p.run(["config", "validate"], expect: 78)
        XCTAssertTrue(r.stderr.contains("\(place): error: stores.notes.cloud.secret: environment variable "
                                        + "'NOTES_PG_PASSWORD' is not set"), r.description)
        XCTAssertFalse(r.stdout.contains("ok"), r.description)
        let j = try p.run(["config", "validate", "--json"], expect: 78)
        let error = try XCTUnwrap(try json(j.stdout)["error"] as? [String: Any], j.stdout)
        XCTAssertEqual(error["location"] as? String, place, j.stdout)
        try p.run(["config", "validate"], env: ["NOTES_PG_PASSWORD": "s3cret"])
    }

    func testCompletionStillListsEveryStore() throws {
        let p = try E2EProject()
        try makeProject(p)
        let r = try p.run(["completions", "--list-stores"])
        XCTAssertEqual(r.stdout.split(separator: "\n").map(String.init), ["journal", "notes"], r.description)
        XCTAssertEqual(r.stderr, "", r.description)
        let bash = try p.run(["completions", "bash"])
        XCTAssertTrue(bash.stdout.contains("completions --list-stores"), bash.description)
        // The shell runs the listing the way the script does, and gets both names.
        let script = p.dir.file("complete.sh")
        try (bash.stdout + "\nCOMP_WORDS=(storectl --store ''); COMP_CWORD=2; _storectl\n"
            + "printf '%s\\n' \"${COMPREPLY[@]}\"\n").write(toFile: script, atomically: true, encoding: .utf8)
        let path = Binary.productsDirectory + ":/usr/bin:/bin"
        let shell = try Binary.run("/bin/bash", [script], in: p.dir.path, environment: ["PATH": path])
        XCTAssertEqual(shell.stdout.split(separator: "\n").map(String.init).sorted(), ["journal", "notes"],
                       shell.description)
    }

    func testWatchAllOnceSyncsTheGoodStoreReportsTheBrokenOneAndExits78() throws {
        let p = try E2EProject()
        try makeProject(p)
        try p.run(["--store", "journal", "init"])
        try p.run(["--store", "journal", "mode", "cloud"])
        try p.sql("journal", "INSERT INTO notes(uuid, title) VALUES ('j-1', 'one')")
        let r = try p.run(["watch", "--all", "--once", "--json"], expect: 78)
        let events = r.stdout.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let export = events.first { $0["type"] as? String == "export" && $0["store"] as? String == "journal" }
        XCTAssertEqual(export?["saved"] as? Int, 1, r.description)
        let error = events.first { $0["type"] as? String == "error" && $0["store"] as? String == "notes" }
        let body = error?["error"] as? [String: Any]
        XCTAssertEqual(body?["code"] as? Int, 78, r.description)
        XCTAssertTrue((body?["message"] as? String ?? "").contains("'NOTES_PG_PASSWORD' is not set"), r.description)
    }

    func testWatchAllServesTheGoodStoreRetriesTheBrokenOneAndSIGHUPPicksUpTheFix() throws {
        let p = try E2EProject()
        try makeProject(p)
        try p.run(["--store", "journal", "init"])
        try p.run(["--store", "journal", "mode", "cloud"])
        let w = try BackgroundProcess.storectl(["watch", "--all", "--json", "--interval", "1", "--max-backoff", "1"],
                                               in: p.dir.path, environment: p.environment)
        watched.append(w)
        XCTAssertNotNil(w.waitForEvent(upTo: 20) { $0["type"] as? String == "error" && $0["store"] as? String == "notes" },
                        w.transcript)
        // The broken store is tried again, with a delay, more than once.
        XCTAssertTrue(w.wait(upTo: 20) {
            w.jsonLines.filter { $0["type"] as? String == "retry" && $0["store"] as? String == "notes" }.count >= 2
        }, w.transcript)
        let retry = w.jsonLines.first { $0["type"] as? String == "retry" && $0["store"] as? String == "notes" }
        XCTAssertEqual(retry?["code"] as? Int, 78, w.transcript)
        // Meanwhile the good store syncs a write.
        try p.sql("journal", "INSERT INTO notes(uuid, title) VALUES ('j-1', 'one')")
        XCTAssertNotNil(w.waitForEvent(upTo: 20) {
            $0["type"] as? String == "export" && $0["store"] as? String == "journal" && $0["saved"] as? Int == 1
        }, w.transcript)
        XCTAssertTrue(w.isRunning, w.transcript)

        // Fix the config (a default for the variable), then SIGHUP: both stores are served.
        let text = try String(contentsOfFile: p.dir.file("config.yaml"), encoding: .utf8)
        _ = try p.dir.write("config.yaml", text.replacingOccurrences(of: "${NOTES_PG_PASSWORD}",
                                                                 with: "${NOTES_PG_PASSWORD:-demo-secret}"))
        w.send(SIGHUP)
        XCTAssertTrue(w.wait(upTo: 20) { w.stderr.contains("watching 2 store(s): journal, notes") }, w.transcript)
        let before = w.jsonLines.filter { $0["type"] as? String == "retry" && $0["store"] as? String == "notes" }.count
        Thread.sleep(forTimeInterval: 2.5)
        let after = w.jsonLines.filter { $0["type"] as? String == "retry" && $0["store"] as? String == "notes" }.count
        XCTAssertEqual(before, after, "no retry after the fix\n" + w.transcript)
        w.send(SIGTERM)
        XCTAssertEqual(w.waitForExit(upTo: 20), 0, w.transcript)
    }
}
