import Foundation
import StoreBase
import StoreSQLite
import Synchronization
@testable import StoreControl
import TestSupport
import XCTest

/// The pieces of `storectl watch` that need no process: backoff, the failpoint syntax, event JSON, the lock file.
final class WatchUnitTests: XCTestCase {
    func testBackoffGrowsWithJitterUpToTheCap() {
        var backoff = WatchBackoff(initial: 1, cap: 10)
        // The lowest and the highest draw of each attempt: [b/2, b] with b doubling up to the cap.
        var low = backoff
        let lows = (0..<6).map { _ in low.next(random: 0) }
        let highs = (0..<6).map { _ in backoff.next(random: 1) }
        XCTAssertEqual(lows, [0.5, 1, 2, 4, 5, 5])
        XCTAssertEqual(highs, [1, 2, 4, 8, 10, 10])
        XCTAssertEqual(backoff.attempt, 6)
        // Any draw of attempt n+1 is at least any draw of attempt n, until the cap.
        for n in 1..<4 { XCTAssertGreaterThanOrEqual(backoff.bound(attempt: n + 1) / 2, backoff.bound(attempt: n)) }
        var random = WatchBackoff(initial: 1, cap: 300)
        let draws = (0..<40).map { _ in random.next() }
        for (i, d) in draws.enumerated() {
            let b = random.bound(attempt: i + 1)
            XCTAssertTrue(d >= b / 2 && d <= b, "attempt \(i + 1): \(d) outside [\(b / 2), \(b)]")
        }
        XCTAssertEqual(random.bound(attempt: 1000), 300, "no overflow for many attempts")
        backoff.reset()
        XCTAssertEqual(backoff.attempt, 0)
        XCTAssertEqual(backoff.next(random: 1), 1)
    }

    func testFailpointSyntax() {
        XCTAssertEqual(Failpoint.parse("export.after-save").count, 1)
        XCTAssertEqual(Failpoint.parse("export.after-save").action, .kill)
        XCTAssertEqual(Failpoint.parse("export.after-save:3").count, 3)
        let pause = Failpoint.parse("import.before-commit:pause")
        XCTAssertEqual(pause.name, "import.before-commit")
        XCTAssertEqual(pause.action, .pause(seconds: nil))
        let second = Failpoint.parse("export.after-save:2:pause")
        XCTAssertEqual(second.name, "export.after-save")
        XCTAssertEqual(second.count, 2)
        XCTAssertEqual(second.action, .pause(seconds: nil))
        XCTAssertEqual(Failpoint.parse("import.before-commit:pause=2.5").action, .pause(seconds: 2.5))
        XCTAssertEqual(Failpoint.parse("a:pause=x").name, "a:pause=x", "an unknown suffix stays part of the name")
    }

    func testEventsAreVersionedSnakeCaseJSON() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let change = ImportedChange(entity: "notes", key: [.init(.integer(7)), .init(.text("x")), .init(.blob([1, 255])),
                                                           .init(.null), .init(.real(1.5))], op: "insert", seq: 3)
        let event = WatchEvent.imported(ImportEvent(
            store: "a", at: "2024-05-01T10:00:00.000Z", author: "cloud-import", token: 3, transaction: nil,
            serverToken: nil, count: 1, entities: ["notes"], changes: [change], changesTruncated: false, applied: 1,
            deleted: 0))
        let text = String(decoding: try encoder.encode(event), as: UTF8.self)
        XCTAssertEqual(text, """
            {"applied":1,"at":"2024-05-01T10:00:00.000Z","author":"cloud-import","changes":[{"entity":"notes",\
            "key":[7,"x",{"$blob":"01ff"},null,1.5],"op":"insert","seq":3}],"changes_truncated":false,"count":1,\
            "deleted":0,"entities":["notes"],"server_token":null,"store":"a","token":3,"transaction":null,\
            "type":"import","version":1}
            """)
        let retry = WatchEvent.retry(RetryEvent(store: "a", at: "t", attempt: 2, delaySeconds: 1.23456,
                                                nextAttemptAt: "u", reason: "locked", code: 75))
        XCTAssertEqual(String(decoding: try encoder.encode(retry), as: UTF8.self), """
            {"at":"t","attempt":2,"code":75,"delay_seconds":1.235,"next_attempt_at":"u","reason":"locked",\
            "store":"a","type":"retry","version":1}
            """)
        let error = WatchEvent.error(ErrorEvent(store: "a", at: "t", error: WatchErrorBody(
            StoreError(.tempFail, "the container is locked", hint: "retry later"), store: "a")))
        XCTAssertEqual(String(decoding: try encoder.encode(error), as: UTF8.self), """
            {"at":"t","error":{"code":75,"hint":"retry later","kind":"temporary","location":null,\
            "message":"the container is locked","status":null,"store":"a"},"store":"a","type":"error","version":1}
            """)
        let mode = WatchEvent.mode(ModeEvent(store: "a", at: "t", mode: "local", previous: "cloud"))
        XCTAssertEqual(String(decoding: try encoder.encode(mode), as: UTF8.self),
                       #"{"at":"t","mode":"local","previous":"cloud","store":"a","type":"mode","version":1}"#)
        XCTAssertEqual(mode.type, "mode")
    }

    func testTheLockRefusesASecondHolderAndIsGoneWithTheFirst() throws {
        let dir = try TempDirectory()
        let store = dir.file("s.sqlite")
        XCTAssertNil(WatchLock.holder(storePath: store))
        var first: WatchLock? = try WatchLock.acquire(store: "s", storePath: store)
        let holder = try XCTUnwrap(WatchLock.holder(storePath: store))
        XCTAssertEqual(holder.pid, getpid())
        XCTAssertEqual(holder.lockFile, store + ".watch.lock")
        // An open-file-description lock: refused even within the same process.
        XCTAssertThrowsError(try WatchLock.acquire(store: "s", storePath: store)) { error in
            XCTAssertEqual((error as? WatchLockError)?.exitCode, .tempFail)
            XCTAssertEqual((error as? WatchLockError)?.summary.hasPrefix("store 's' is already served by storectl watch "
                                                                    + "(pid \(getpid())"), true, "\(error)")
        }
        let record = SyncErrorRecord(at: 1_714_557_600_123, error: WatchErrorBody(code: 75, kind: "temp_fail",
                                                                                 message: "locked", hint: nil,
                                                                                 store: "s"))
        first?.record(lastError: record)
        XCTAssertEqual(WatchLock.holder(storePath: store)?.lastError, record)
        XCTAssertEqual(WatchLock.holder(storePath: store)?.lastError?.at, "2024-05-01T10:00:00.123Z")
        first = nil
        XCTAssertNil(WatchLock.holder(storePath: store))
        XCTAssertFalse(FileManager.default.fileExists(atPath: store + ".watch.lock"))
        XCTAssertNotNil(try WatchLock.acquire(store: "s", storePath: store))
        // A folder that does not exist: the store is not where the config says (moved, or never made).
        XCTAssertThrowsError(try WatchLock.acquire(store: "t", storePath: dir.file("none/t.sqlite"))) { error in
            XCTAssertEqual((error as? WatchLockError)?.exitCode, .noInput)
            XCTAssertEqual((error as? WatchLockError)?.store, "t")
            XCTAssertEqual((error as? WatchLockError)?.hint, "if the file was moved, point the config at its new "
                           + "place: 'storectl config set stores.t.path NEW_PATH'")
        }
    }

    func testTheHookRunsInItsFolderWithItsEnvironmentAndStopsOnTime() throws {
        let dir = try TempDirectory()
        let odd = dir.file("it's a folder; with $HOME in it")
        try FileManager.default.createDirectory(atPath: odd, withIntermediateDirectories: true)
        var lines: [String] = []
        let done = try HookProcess.run(command: "pwd; echo \"count=$STORECTL_COUNT\"; echo to stderr >&2; exit 4",
                                       directory: odd, environment: ["STORECTL_COUNT": "3", "PATH": "/usr/bin:/bin"],
                                       timeout: 10, stopDeadline: { nil }, maxLines: 10, line: { lines.append($0) })
        XCTAssertEqual(done, .exited(4))
        XCTAssertEqual(lines, [odd, "count=3", "to stderr"])

        // A command still running after its timeout is stopped, with its children.
        let start = Date()
        lines = []
        let slow = try HookProcess.run(command: "sleep 30 & sleep 30", directory: dir.path, environment: [:],
                                       timeout: 0.3, stopDeadline: { nil }, maxLines: 10, line: { lines.append($0) })
        XCTAssertEqual(slow, .timedOut)
        XCTAssertLessThan(Date().timeIntervalSince(start), 5)

        // A background child that keeps the output open does not hold the run.
        let detached = Date()
        let quick = try HookProcess.run(command: "(sleep 30 &); echo started", directory: dir.path, environment: [:],
                                        timeout: 20, stopDeadline: { nil }, maxLines: 10, line: { _ in })
        XCTAssertEqual(quick, .exited(0))
        XCTAssertLessThan(Date().timeIntervalSince(detached), 5)

        // Long output is cut: at most maxLines lines are passed on, then one line says so.
        lines = []
        _ = try HookProcess.run(command: "seq 1 50", directory: dir.path, environment: ["PATH": "/usr/bin:/bin"],
                                timeout: 10, stopDeadline: { nil }, maxLines: 5, line: { lines.append($0) })
        XCTAssertEqual(lines, ["1", "2", "3", "4", "5", "(more output not logged)"])
    }

    func testConfinementIsChecked() throws {
        let confinement = ThreadConfinement()
        XCTAssertTrue(confinement.isOwner)
        let other = Mutex<Bool?>(nil)
        let thread = try DedicatedThread(name: "test") { other.withLock { $0 = confinement.isOwner } }
        thread.join()
        XCTAssertEqual(other.withLock { $0 }, false)
    }
}
