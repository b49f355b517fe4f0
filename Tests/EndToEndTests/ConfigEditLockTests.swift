import Foundation
import TestSupport
import XCTest

/// Two processes that edit one config file at the same moment both keep their edit: each edit holds a lock from
/// the read to the rename, and the second re-reads what the first wrote.
final class ConfigEditLockTests: XCTestCase {
    /// Runs the two argument lists as two processes at once, and returns both results.
    func together(_ s: Fleet, _ first: [String], _ second: [String]) -> [ProcessResult?] {
        let results = ResultsBox(count: 2)
        let directory = s.dir.path
        DispatchQueue.concurrentPerform(iterations: 2) { i in
            results.set(i, try? Binary.storectl(i == 0 ? first : second, in: directory))
        }
        return results.values
    }

    func testConcurrentConfigSetsNeverLoseAnEdit() throws {
        let s = try Fleet.notes(label: "storectl-lock")
        let rounds = 60
        for round in 1...rounds {
            let results = together(s, ["config", "set", "stores.a.history.author", "a-\(round)"],
                                   ["config", "set", "stores.b.history.author", "b-\(round)"])
            for r in results { XCTAssertEqual(r?.status, 0, "\(String(describing: r))") }
            let text = s.config
            XCTAssertTrue(text.contains("author: a-\(round)\n"), "round \(round) lost a's edit:\n\(text)")
            XCTAssertTrue(text.contains("author: b-\(round)\n"), "round \(round) lost b's edit:\n\(text)")
        }
        // Comments and layout survive every edit.
        XCTAssertTrue(s.config.hasPrefix("# reliability test config\n"))
        XCTAssertTrue(s.config.contains("path: data/a.sqlite   # the store file"))
        // No lock or temporary file is left next to the config.
        let left = try FileManager.default.contentsOfDirectory(atPath: s.dir.path).filter { $0.contains("config") }
        XCTAssertEqual(left, ["config.yaml"])
    }

    func testConcurrentModeSwitchesOnTwoStoresKeepBothModes() throws {
        let s = try Fleet.notes(label: "storectl-lock")
        try s.run("a", ["mode", "local"])
        try s.run("b", ["mode", "local"])
        for round in 1...12 {
            let mode = round % 2 == 1 ? "cloud" : "local"
            let results = together(s, ["--store", "a", "mode", mode], ["--store", "b", "mode", mode])
            for r in results { XCTAssertEqual(r?.status, 0, "\(String(describing: r))") }
            let text = s.config
            let modes = text.split(separator: "\n").filter { $0.contains("mode: ") }
            XCTAssertEqual(modes.map { $0.trimmingCharacters(in: .whitespaces) }, ["mode: \(mode)", "mode: \(mode)"],
                           "round \(round):\n\(text)")
            XCTAssertEqual(try s.run("a", ["mode"]).stdout, mode + "\n")
            XCTAssertEqual(try s.run("b", ["mode"]).stdout, mode + "\n")
        }
    }
}

final class ResultsBox: @unchecked Sendable {
    // @unchecked: every access holds the lock.
    private let lock = NSLock()
    private var storage: [ProcessResult?]

    init(count: Int) { storage = Array(repeating: nil, count: count) }

    func set(_ i: Int, _ value: ProcessResult?) {
        lock.lock()
        storage[i] = value
        lock.unlock()
    }

    var values: [ProcessResult?] {
        lock.lock()
        defer { lock.unlock() }
        return storage
    }
}
