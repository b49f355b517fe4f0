import Foundation
import StoreCloud
import StoreHistory
import StoreMirror
import StoreSQLite
import TestSupport
import XCTest

/// One conflict, met from either direction, ends the same under every policy: `MergePolicy.decide` is the one
/// decision of export and import.
///
/// A and B share note u1 (title 't0', body 'b0'). A changes the title to 'ta' and syncs. B, not synced, changes the
/// title to 'tb' and the body to 'bb'. Export direction: B exports first and meets A's newer record. Import
/// direction: B imports first, and A's record meets B's local change; B's export follows.
final class MergeDirectionTests: XCTestCase {
    enum Direction: String, CaseIterable { case export, `import` }

    /// What each policy documents for this conflict (nil: the sync stops with a conflict, exit 65).
    static let expected: [MergePolicy: String?] = [
        .propertyLocalWins: "u1|tb|bb", .localWins: "u1|tb|bb", .serverWins: "u1|ta|b0",
        .propertyServerWins: "u1|ta|bb", .error: nil,
    ]

    func scenario(_ policy: MergePolicy, _ direction: Direction) throws -> (a: [String], b: [String], error: Error?) {
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
            switch direction {
            case .export:
                _ = try f.mirror(b, policy: policy).exportChanges()
            case .import:
                _ = try f.mirror(b, policy: policy).importChanges()
            }
            try f.sync(b, policy: policy)
            try f.sync(a, policy: policy)
        } catch {
            failure = error
        }
        let sql = "SELECT uuid, title, body FROM notes"
        return (try f.rows(a, sql), try f.rows(b, sql), failure)
    }

    func testEveryPolicyDecidesTheSameInBothDirections() throws {
        XCTAssertEqual(Set(Self.expected.keys), Set(MergePolicy.allCases), "every policy has its expectation")
        for policy in MergePolicy.allCases {
            for direction in Direction.allCases {
                let label = "\(policy.rawValue), \(direction.rawValue) first"
                let r = try scenario(policy, direction)
                if let expected = Self.expected[policy] ?? nil {
                    XCTAssertNil(r.error, "\(label): \(String(describing: r.error))")
                    XCTAssertEqual(r.b, [expected], label)
                    XCTAssertEqual(r.a, [expected], label)
                } else {
                    let conflict = try XCTUnwrap(r.error as? ConflictError, "\(label): \(String(describing: r.error))")
                    XCTAssertEqual(conflict.conflicts.count, 1, label)
                    XCTAssertEqual(conflict.exitCode.rawValue, 65, label)
                    XCTAssertEqual(r.a, ["u1|ta|b0"], "\(label): nothing of B reached A")
                    XCTAssertEqual(r.b, ["u1|tb|bb"], "\(label): B keeps its change")
                }
            }
        }
    }
}
