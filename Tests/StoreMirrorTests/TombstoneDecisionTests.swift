@testable import StoreMirror
import XCTest

/// `TombstoneAction.decide`: what a tombstone from the cloud does here, for every shape of what the store knows,
/// decided without a database.
final class TombstoneDecisionTests: XCTestCase {
    let columns = ["title", "body"]

    func facts(alias: String? = nil, mapped: Bool = true, exists: Bool = true, winner: String? = nil,
               isWinner: Bool = false, local: MergeSide? = nil, respect: Bool = true,
               reinserted: Bool = false) -> TombstoneFacts
    {
        TombstoneFacts(aliasTarget: alias, mapped: mapped, rowExists: exists, winnerPK: winner, isWinner: isWinner,
                       local: local, respectLocalChanges: respect, reinsertedInLaterSelfsExport: reinserted)
    }

    func decide(_ f: TombstoneFacts, _ policy: MergePolicy = .propertyLocalWins) -> TombstoneAction {
        TombstoneAction.decide(f, policy: policy, columns: columns)
    }

    func testARecordTheStoreNeverKnewChangesNothing() {
        XCTAssertEqual(decide(facts(mapped: false, exists: false)), .nothing)
        XCTAssertEqual(decide(facts(alias: "w", mapped: false, exists: false)), .nothing)
    }

    func testAPlainDeletionDeletesTheRowOrMarksTheRecord() {
        XCTAssertEqual(decide(facts()), .delete)
        XCTAssertEqual(decide(facts(exists: false)), .delete, "the map marks the record deleted")
        for policy in MergePolicy.allCases { XCTAssertEqual(decide(facts(), policy), .delete, "\(policy)") }
    }

    func testAMergedDuplicateGoesToItsWinnerWhenTheWinnerIsHere() {
        XCTAssertEqual(decide(facts(alias: "w", winner: "[2]")), .mergeIntoWinner(winnerPK: "[2]"))
        XCTAssertEqual(decide(facts(alias: "w")), .waitForWinner, "the winner is not here yet")
        XCTAssertEqual(decide(facts(alias: "w", winner: "[1]", isWinner: true)), .waitForWinner,
                       "the row is the winner itself: it never merges into itself")
        XCTAssertEqual(decide(facts(alias: "w", exists: false)), .delete, "no row here: the record is marked")
        // A local edit never keeps a merged duplicate apart: the merge is no deletion of the row's data.
        XCTAssertEqual(decide(facts(alias: "w", winner: "[2]", local: MergeSide(deleted: false, changed: ["title"])),
                              .error), .mergeIntoWinner(winnerPK: "[2]"))
    }

    func testALocalEditMeetingADeletionGoesByThePolicy() {
        let edit = MergeSide(deleted: false, changed: ["title", "body"])
        XCTAssertEqual(decide(facts(local: edit), .error), .conflict(columns: ["body", "title"]))
        XCTAssertEqual(decide(facts(local: edit), .serverWins), .delete)
        XCTAssertEqual(decide(facts(local: edit), .propertyServerWins), .delete)
        XCTAssertEqual(decide(facts(local: edit), .localWins), .keepLocal)
        XCTAssertEqual(decide(facts(local: edit), .propertyLocalWins), .keepLocal)
        XCTAssertEqual(decide(facts(local: edit, respect: false), .localWins), .delete,
                       "the export bringing a row to its own merge respects no local change")
        XCTAssertEqual(decide(facts(local: MergeSide(deleted: true, changed: [])), .error), .delete,
                       "deleted on both sides: no conflict")
    }

    func testARowRecreatedAtTheKeyIsANewRow() {
        var recreated = MergeSide(deleted: false, changed: ["title", "body"])
        recreated.recreated = true
        for policy in MergePolicy.allCases {
            XCTAssertEqual(decide(facts(local: recreated), policy), .bothDeleted, "\(policy)")
            XCTAssertEqual(decide(facts(reinserted: true), policy), .bothDeleted, "\(policy): a restored copy")
        }
        XCTAssertEqual(decide(facts(exists: false, reinserted: true)), .delete, "no row: nothing was re-created")
    }
}
