import Foundation
import StoreCloud
import StoreHistory
import StoreMirror
import StoreSQLite
import TestSupport
import XCTest

/// A and B share note u1 (title 't0', body 'b0'). A changes the title to 'ta' and syncs first; B then changes
/// the title to 'tb' and the body to 'bb' and syncs. Each policy has a documented outcome.
final class MergePolicyTests: XCTestCase {
    func scenario(_ policy: MergePolicy) throws -> (a: [String], b: [String], error: Error?) {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        try f.write(a, "INSERT INTO notes(uuid, title, body) VALUES ('u1', 't0', 'b0')")
        try f.sync(a, policy: policy)
        try f.sync(b, policy: policy)
        try f.write(a, "UPDATE notes SET title = 'ta' WHERE uuid = 'u1'")
        try f.sync(a, policy: policy)
        try f.write(b, "UPDATE notes SET title = 'tb', body = 'bb' WHERE uuid = 'u1'")
        var failure: Error?
        do {
            try f.sync(b, policy: policy)
            try f.sync(a, policy: policy)
        } catch {
            failure = error
        }
        let sql = "SELECT uuid, title, body FROM notes"
        return (try f.rows(a, sql), try f.rows(b, sql), failure)
    }

    func testPropertyLocalWinsKeepsEveryLocalChangeAndTheServersOthers() throws {
        let r = try scenario(.propertyLocalWins)
        XCTAssertNil(r.error)
        XCTAssertEqual(r.b, ["u1|tb|bb"])
        XCTAssertEqual(r.a, r.b)
    }

    func testServerWinsDropsTheConflictingLocalChange() throws {
        let r = try scenario(.serverWins)
        XCTAssertNil(r.error)
        XCTAssertEqual(r.b, ["u1|ta|b0"])
        XCTAssertEqual(r.a, r.b)
    }

    func testLocalWinsTakesTheWholeLocalRow() throws {
        let r = try scenario(.localWins)
        XCTAssertNil(r.error)
        XCTAssertEqual(r.b, ["u1|tb|bb"])
        XCTAssertEqual(r.a, r.b)
    }

    func testPropertyServerWinsTakesTheServersChangedColumnsAndKeepsLocalOthers() throws {
        let r = try scenario(.propertyServerWins)
        XCTAssertNil(r.error)
        XCTAssertEqual(r.b, ["u1|ta|bb"])
        XCTAssertEqual(r.a, r.b)
    }

    func testErrorPolicyStopsAndChangesNothingForTheRecord() throws {
        let r = try scenario(.error)
        let conflict = try XCTUnwrap(r.error as? ConflictError, "\(String(describing: r.error))")
        XCTAssertEqual(conflict.conflicts.count, 1)
        XCTAssertEqual(conflict.exitCode.rawValue, 65)
        XCTAssertEqual(r.a, ["u1|ta|b0"])
        XCTAssertEqual(r.b, ["u1|tb|bb"])
    }

    func testDifferentColumnsMergeUnderPropertyPolicies() throws {
        for policy in [MergePolicy.propertyLocalWins, .propertyServerWins] {
            let f = try MirrorFixture()
            let a = try f.store("a")
            let b = try f.store("b")
            try f.write(a, "INSERT INTO notes(uuid, title, body) VALUES ('u1', 't0', 'b0')")
            try f.sync(a, policy: policy)
            try f.sync(b, policy: policy)
            try f.write(a, "UPDATE notes SET title = 'ta' WHERE uuid = 'u1'")
            try f.write(b, "UPDATE notes SET body = 'bb' WHERE uuid = 'u1'")
            try f.sync(a, policy: policy)
            try f.sync(b, policy: policy)
            try f.sync(a, policy: policy)
            let sql = "SELECT uuid, title, body FROM notes"
            XCTAssertEqual(try f.rows(a, sql), ["u1|ta|bb"], "\(policy)")
            XCTAssertEqual(try f.rows(b, sql), ["u1|ta|bb"], "\(policy)")
        }
    }

    func testDeleteAgainstEditFollowsThePolicy() throws {
        // A deletes u1 and syncs; B edits u1 and syncs.
        for (policy, survives) in [(MergePolicy.serverWins, false), (.propertyServerWins, false),
                                   (.localWins, true), (.propertyLocalWins, true)]
        {
            let f = try MirrorFixture()
            let a = try f.store("a")
            let b = try f.store("b")
            try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('u1', 't0'), ('keep', 'k')")
            try f.sync(a, policy: policy)
            try f.sync(b, policy: policy)
            try f.write(a, "DELETE FROM notes WHERE uuid = 'u1'")
            try f.sync(a, policy: policy)
            try f.write(b, "UPDATE notes SET title = 'edited' WHERE uuid = 'u1'")
            try f.sync(b, policy: policy)
            try f.sync(a, policy: policy)
            let sql = "SELECT uuid, title FROM notes"
            XCTAssertEqual(try f.rows(a, sql), survives ? ["keep|k", "u1|edited"] : ["keep|k"], "\(policy)")
            XCTAssertEqual(try f.rows(b, sql), try f.rows(a, sql), "\(policy)")
        }
    }
}
