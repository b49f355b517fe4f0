@testable import StoreMirror
import XCTest

/// `LiveAction.decide`: what a live record from the cloud does to its row, for every shape of what the store
/// knows, decided without a database.
final class LiveDecisionTests: XCTestCase {
    let columns = ["title", "body", "name"]
    let unique: [Set<String>] = [["name"]]

    func facts(record: Set<String> = ["title", "body", "name"], exists: Bool = true, local: MergeSide? = nil,
               server: Set<String> = [], holds: Bool = false) -> LiveFacts
    {
        LiveFacts(recordColumns: record, rowExists: exists, local: local, serverChanged: server,
                  serverHoldsLocalValues: holds)
    }

    func decide(_ f: LiveFacts, _ policy: MergePolicy = .propertyLocalWins) -> LiveAction {
        LiveAction.decide(f, policy: policy, columns: columns, uniqueKeys: unique)
    }

    func testWithoutALocalChangeTheRecordIsTakenWhole() {
        for policy in MergePolicy.allCases {
            XCTAssertEqual(decide(facts(), policy), .update(columns: ["title", "body", "name"]), "\(policy)")
            XCTAssertEqual(decide(facts(exists: false), policy), .insert(columns: ["title", "body", "name"]),
                           "\(policy): a record new here is inserted")
            XCTAssertEqual(decide(facts(record: ["title"]), policy), .update(columns: ["title"]),
                           "\(policy): only the columns the record carries")
        }
    }

    func testALocalEditMeetingAnEditGoesByThePolicyColumnByColumn() {
        let edit = MergeSide(deleted: false, changed: ["title"])
        let f = facts(local: edit, server: ["title", "body"])
        XCTAssertEqual(decide(f, .error), .conflict(columns: ["title"]))
        XCTAssertEqual(decide(f, .serverWins), .update(columns: ["title", "body", "name"]))
        XCTAssertEqual(decide(f, .localWins), .update(columns: []), "the local row keeps every column")
        XCTAssertEqual(decide(f, .propertyLocalWins), .update(columns: ["body", "name"]),
                       "the server's value where the local side did not change it")
        XCTAssertEqual(decide(f, .propertyServerWins), .update(columns: ["title", "body", "name"]),
                       "the server changed title too: its value wins there")
        XCTAssertEqual(decide(facts(local: edit, server: ["body"]), .propertyServerWins),
                       .update(columns: ["body", "name"]), "a column only the local side changed stays local")
    }

    func testLocalWinsStillTakesAUniqueColumnOnlyTheServerChanged() {
        // A UNIQUE value handed over elsewhere must move here too, or two records hold it.
        let f = facts(local: MergeSide(deleted: false, changed: ["title"]), server: ["name", "body"])
        XCTAssertEqual(decide(f, .localWins), .update(columns: ["name"]))
        let both = facts(local: MergeSide(deleted: false, changed: ["name"]), server: ["name"])
        XCTAssertEqual(decide(both, .localWins), .update(columns: []), "a unique value changed here too stays local")
    }

    func testTheServerHoldingTheLocalValuesIsNoConflictEvenUnderError() {
        let edit = MergeSide(deleted: false, changed: ["title"])
        XCTAssertEqual(decide(facts(local: edit, server: ["title"], holds: true), .error),
                       .update(columns: ["title", "body", "name"]))
        let derived = MergeSide(deleted: false, changed: ["title"], derived: true)
        XCTAssertEqual(decide(facts(local: derived, server: ["title"]), .error),
                       .update(columns: ["title", "body", "name"]), "storectl's own re-points are no user's edit")
    }

    func testALocalDeleteMeetingAnEditGoesByThePolicy() {
        let gone = MergeSide(deleted: true, changed: [])
        let f = facts(exists: false, local: gone, server: ["title"])
        XCTAssertEqual(decide(f, .error), .conflict(columns: []))
        XCTAssertEqual(decide(f, .localWins), .keepLocalDelete)
        XCTAssertEqual(decide(f, .propertyLocalWins), .keepLocalDelete)
        XCTAssertEqual(decide(f, .serverWins), .insert(columns: ["title", "body", "name"]),
                       "the server's record re-creates the row whole")
        XCTAssertEqual(decide(f, .propertyServerWins), .insert(columns: ["title", "body", "name"]))
    }

    func testEveryActionIsOneOfWhatThePolicyAllows() {
        // Randomized: whatever the facts, the action never takes a column the record does not carry, never updates
        // a row that is not here, and never conflicts outside `error`.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let record = Set(columns.filter { _ in Bool.random(using: &generator) })
            let exists = Bool.random(using: &generator)
            let deleted = !exists && Bool.random(using: &generator)
            let local: MergeSide? = Bool.random(using: &generator) ? nil
                : MergeSide(deleted: deleted, changed: deleted ? [] : Set(columns.filter { _ in Bool.random() }),
                            derived: Bool.random(using: &generator))
            let f = facts(record: record, exists: exists, local: local,
                          server: Set(columns.filter { _ in Bool.random(using: &generator) }),
                          holds: Bool.random(using: &generator))
            for policy in MergePolicy.allCases {
                switch decide(f, policy) {
                case .update(let taken):
                    XCTAssertTrue(exists, "\(policy) \(f): an update of a row that is not here")
                    XCTAssertTrue(taken.isSubset(of: record), "\(policy) \(f)")
                case .insert(let taken):
                    XCTAssertFalse(exists, "\(policy) \(f): an insert over a row that is here")
                    XCTAssertEqual(taken, record, "\(policy) \(f): an inserted row takes the whole record")
                case .conflict:
                    XCTAssertEqual(policy, .error, "\(f)")
                    XCTAssertNotNil(local, "\(f): a conflict needs a local change")
                case .keepLocalDelete:
                    XCTAssertEqual(local?.deleted, true, "\(policy) \(f)")
                }
            }
        }
    }
}
