@testable import StoreMirror
import XCTest

/// `MergePolicy.decide`, the one decision both directions of a sync make (an export that met a newer server
/// record, an import that met a local change): every policy, for each shape of conflict.
final class MergeDecisionTests: XCTestCase {
    let columns = ["title", "body", "done"]
    func live(_ changed: Set<String>) -> MergeSide { MergeSide(deleted: false, changed: changed) }
    let deleted = MergeSide(deleted: true, changed: [])

    func testErrorAlwaysFails() {
        for local in [live(["title"]), deleted] {
            for server in [live(["body"]), deleted] {
                XCTAssertEqual(MergePolicy.error.decide(local: local, server: server, columns: columns), .fail)
            }
        }
    }

    func testTheSameChangeOnBothSidesIsNoConflict() {
        XCTAssertEqual(MergePolicy.error.decide(local: live(["title"]), server: live(["title"]), columns: columns,
                                                serverHoldsLocalValues: true), .live(takeServer: Set(columns)))
        // A deletion on either side is still a conflict, whatever the values.
        XCTAssertEqual(MergePolicy.error.decide(local: deleted, server: live(["title"]), columns: columns,
                                                serverHoldsLocalValues: true), .fail)
        XCTAssertEqual(MergePolicy.error.decide(local: live(["title"]), server: deleted, columns: columns,
                                                serverHoldsLocalValues: true), .fail)
        // The other policies decide as they do without it.
        XCTAssertEqual(MergePolicy.localWins.decide(local: live(["title"]), server: live(["title"]), columns: columns,
                                                    serverHoldsLocalValues: true), .live(takeServer: []))
    }

    func testStorectlsOwnRepointIsNoConflictUnderError() {
        var repoint = live(["title"])
        repoint.derived = true
        XCTAssertEqual(MergePolicy.error.decide(local: repoint, server: live(["title"]), columns: columns),
                       .live(takeServer: Set(columns)))
        XCTAssertEqual(MergePolicy.error.decide(local: repoint, server: deleted, columns: columns), .deleted,
                       "a deletion elsewhere wins over storectl's own re-point")
        XCTAssertEqual(MergePolicy.error.decide(local: live(["title"]), server: live(["title"]), columns: columns), .fail,
                       "a user's edit is still a conflict")
        // The other policies decide as without it.
        for policy in MergePolicy.allCases where policy != .error {
            XCTAssertEqual(policy.decide(local: repoint, server: live(["body"]), columns: columns),
                           policy.decide(local: live(["title"]), server: live(["body"]), columns: columns), "\(policy)")
        }
    }

    func testServerWins() {
        let p = MergePolicy.serverWins
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["body"]), columns: columns),
                       .live(takeServer: ["title", "body", "done"]))
        XCTAssertEqual(p.decide(local: live(["title"]), server: deleted, columns: columns), .deleted)
        XCTAssertEqual(p.decide(local: deleted, server: live(["body"]), columns: columns),
                       .live(takeServer: ["title", "body", "done"]), "the server's record comes back")
    }

    func testLocalWins() {
        let p = MergePolicy.localWins
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["body"]), columns: columns), .live(takeServer: []))
        XCTAssertEqual(p.decide(local: live(["title"]), server: deleted, columns: columns), .live(takeServer: []),
                       "the local row is saved over the tombstone")
        XCTAssertEqual(p.decide(local: deleted, server: live(["body"]), columns: columns), .deleted)
        // A UNIQUE column the server changed (a value moved between rows) and the local side did not: the server's.
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["body"]), columns: columns,
                                uniqueColumns: ["body"]), .live(takeServer: ["body"]))
        XCTAssertEqual(p.decide(local: live(["title", "body"]), server: live(["body"]), columns: columns,
                                uniqueColumns: ["body"]), .live(takeServer: []), "a UNIQUE column changed here stays")
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["title"]), columns: columns,
                                uniqueColumns: ["body"]), .live(takeServer: []), "a UNIQUE column nobody changed")
        XCTAssertEqual(p.decide(local: live(["title"]), server: deleted, columns: columns, uniqueColumns: ["body"]),
                       .live(takeServer: []))
    }

    func testServerWinsKeepsAUniqueValueTheLocalSideMoved() {
        let p = MergePolicy.serverWins
        let all = Set(columns)
        // A UNIQUE column the local side changed (its half of a swap) and the server did not: the local value.
        XCTAssertEqual(p.decide(local: live(["body"]), server: live(["title"]), columns: columns,
                                uniqueColumns: ["body"]), .live(takeServer: all.subtracting(["body"])))
        XCTAssertEqual(p.decide(local: live(["body"]), server: live(["body"]), columns: columns,
                                uniqueColumns: ["body"]), .live(takeServer: all), "the server moved it too: the server's")
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["body"]), columns: columns,
                                uniqueColumns: ["body"]), .live(takeServer: all), "not a UNIQUE column: the server's")
        XCTAssertEqual(p.decide(local: deleted, server: live(["body"]), columns: columns, uniqueColumns: ["body"]),
                       .live(takeServer: all), "a local delete: the server's record comes back whole")
        XCTAssertEqual(p.decide(local: live(["body"]), server: deleted, columns: columns, uniqueColumns: ["body"]),
                       .deleted)
    }

    func testPropertyLocalWins() {
        let p = MergePolicy.propertyLocalWins
        // Both changed the title, only the server the body: the local title, the server's body.
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["title", "body"]), columns: columns),
                       .live(takeServer: ["body", "done"]))
        XCTAssertEqual(p.decide(local: live(["title"]), server: deleted, columns: columns), .live(takeServer: []))
        XCTAssertEqual(p.decide(local: deleted, server: live(["body"]), columns: columns), .deleted,
                       "a local delete wins")
    }

    func testPropertyServerWins() {
        let p = MergePolicy.propertyServerWins
        // Both changed the title: the server's; the local body change (the server did not touch it) stays.
        XCTAssertEqual(p.decide(local: live(["title", "body"]), server: live(["title"]), columns: columns),
                       .live(takeServer: ["title", "done"]))
        XCTAssertEqual(p.decide(local: live(["title"]), server: deleted, columns: columns), .deleted)
        XCTAssertEqual(p.decide(local: deleted, server: live(["body"]), columns: columns),
                       .live(takeServer: ["title", "body", "done"]))
    }

    func testEveryPolicyIsCovered() {
        XCTAssertEqual(Set(MergePolicy.allCases), [.error, .serverWins, .localWins, .propertyLocalWins,
                                                   .propertyServerWins])
    }
}
