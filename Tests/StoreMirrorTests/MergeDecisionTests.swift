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
                                uniqueKeys: [["body"]]), .live(takeServer: ["body"]))
        XCTAssertEqual(p.decide(local: live(["title", "body"]), server: live(["body"]), columns: columns,
                                uniqueKeys: [["body"]]), .live(takeServer: []), "a UNIQUE column changed here stays")
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["title"]), columns: columns,
                                uniqueKeys: [["body"]]), .live(takeServer: []), "a UNIQUE column nobody changed")
        XCTAssertEqual(p.decide(local: live(["title"]), server: deleted, columns: columns, uniqueKeys: [["body"]]),
                       .live(takeServer: []))
    }

    func testServerWinsKeepsAUniqueValueTheLocalSideMoved() {
        let p = MergePolicy.serverWins
        let all = Set(columns)
        // A UNIQUE column the local side changed (its half of a swap) and the server did not: the local value.
        XCTAssertEqual(p.decide(local: live(["body"]), server: live(["title"]), columns: columns,
                                uniqueKeys: [["body"]]), .live(takeServer: all.subtracting(["body"])))
        XCTAssertEqual(p.decide(local: live(["body"]), server: live(["body"]), columns: columns,
                                uniqueKeys: [["body"]]), .live(takeServer: all), "the server moved it too: the server's")
        XCTAssertEqual(p.decide(local: live(["title"]), server: live(["body"]), columns: columns,
                                uniqueKeys: [["body"]]), .live(takeServer: all), "not a UNIQUE column: the server's")
        XCTAssertEqual(p.decide(local: deleted, server: live(["body"]), columns: columns, uniqueKeys: [["body"]]),
                       .live(takeServer: all), "a local delete: the server's record comes back whole")
        XCTAssertEqual(p.decide(local: live(["body"]), server: deleted, columns: columns, uniqueKeys: [["body"]]),
                       .deleted)
    }

    /// A key of several columns (`UNIQUE(list, pos)`) is decided whole: one column from each side would make a
    /// value neither side had, which another row may hold.
    func testAUniqueKeyOfSeveralColumnsIsDecidedWhole() {
        let all = Set(columns)
        let key: [Set<String>] = [["body", "done"]]
        // The local side moved the row to another list (body), the server to another position (done).
        let split = (local: live(["body"]), server: live(["done", "title"]))
        XCTAssertEqual(MergePolicy.serverWins.decide(local: split.local, server: split.server, columns: columns,
                                                     uniqueKeys: key), .live(takeServer: all),
                       "server-wins: the server changed the key, so the whole key is the server's")
        XCTAssertEqual(MergePolicy.localWins.decide(local: split.local, server: split.server, columns: columns,
                                                    uniqueKeys: key), .live(takeServer: []),
                       "local-wins: the local side changed the key, so the whole key is the local row's")
        XCTAssertEqual(MergePolicy.propertyLocalWins.decide(local: split.local, server: split.server,
                                                            columns: columns, uniqueKeys: key),
                       .live(takeServer: ["title"]), "property-local-wins: the local side touched the key")
        XCTAssertEqual(MergePolicy.propertyServerWins.decide(local: split.local, server: split.server,
                                                             columns: columns, uniqueKeys: key),
                       .live(takeServer: all), "property-server-wins: the server touched the key")
        // Only one side touched the key: that side's value (the column nobody changed is the same on both).
        XCTAssertEqual(MergePolicy.serverWins.decide(local: live(["body"]), server: live(["title"]), columns: columns,
                                                     uniqueKeys: key), .live(takeServer: ["title", "done"]))
        XCTAssertEqual(MergePolicy.localWins.decide(local: live(["title"]), server: live(["done"]), columns: columns,
                                                    uniqueKeys: key), .live(takeServer: ["done"]))
        // Keys that share a changed column: a key both sides changed follows the key only one side changed, so
        // the shared column comes from one side (list = body, pos = done, title).
        XCTAssertEqual(MergePolicy.serverWins.decide(local: live(["body", "done"]), server: live(["title"]),
                                                     columns: columns, uniqueKeys: [["body", "done"], ["body", "title"]]),
                       .live(takeServer: []),
                       "the local side moved (list, pos) alone: its move stands, and (list, title) follows it")
        XCTAssertEqual(MergePolicy.propertyLocalWins.decide(local: live(["title"]), server: live(["body", "done"]),
                                                            columns: columns,
                                                            uniqueKeys: [["body", "title"], ["done", "body"]]),
                       .live(takeServer: all),
                       "the server moved (list, pos) alone: its move stands, and (list, title) follows it")
        // Two keys: each is decided on its own.
        XCTAssertEqual(MergePolicy.serverWins.decide(local: live(["body", "done"]), server: live(["done"]),
                                                     columns: columns, uniqueKeys: [["body"], ["done"]]),
                       .live(takeServer: all.subtracting(["body"])))
    }

    /// Randomized: random keys over five columns, random changes on each side, every policy but `error`. The merged
    /// row's value of every key is one side's (a side's value of a column: what it changed it to, or the base),
    /// a key only one side changed is that side's, and a column in no key goes by the policy column by column.
    /// The one allowed mix is the documented chain: a key only the local side changed and a key only the server
    /// changed, joined through keys both changed.
    func testEveryMergedKeyIsOneSidesValue() {
        let columns = ["a", "b", "c", "d", "e"]
        var generator = SystemRandomNumberGenerator()
        func some(_ n: ClosedRange<Int>) -> Set<String> {
            Set(columns.shuffled(using: &generator).prefix(Int.random(in: n, using: &generator)))
        }
        var checked = 0
        for _ in 0..<5000 {
            let keys = (0..<Int.random(in: 1...3, using: &generator)).map { _ in some(1...3) }
            let (local, server) = (some(0...3), some(0...3))
            let differing = keys.map { $0.intersection(local.union(server)) }
            let onlyLocal = keys.map { !$0.isDisjoint(with: local) && $0.isDisjoint(with: server) }
            let onlyServer = keys.map { $0.isDisjoint(with: local) && !$0.isDisjoint(with: server) }
            // Keys joined by shared differing columns: a group holding a key of each kind may keep a mix.
            var group = Array(keys.indices)
            for _ in keys.indices {
                for i in keys.indices {
                    for j in keys.indices where !differing[i].isDisjoint(with: differing[j]) {
                        group[i] = min(group[i], group[j])
                    }
                }
            }
            for policy in MergePolicy.allCases where policy != .error {
                guard case .live(let take) = policy.decide(local: live(local), server: live(server), columns: columns,
                                                           uniqueKeys: keys) else {
                    XCTFail("\(policy): no live decision")
                    continue
                }
                let what = "\(policy), keys \(keys), local \(local), server \(server): takes \(take)"
                func merged(_ column: String) -> String {
                    take.contains(column) ? (server.contains(column) ? "S" : "B") : (local.contains(column) ? "L" : "B")
                }
                for (i, key) in keys.enumerated() {
                    let value = key.sorted().map(merged)
                    let localValue = key.sorted().map { local.contains($0) ? "L" : "B" }
                    let serverValue = key.sorted().map { server.contains($0) ? "S" : "B" }
                    if onlyLocal[i] { XCTAssertEqual(value, localValue, "\(what): key \(key) only the local side changed") }
                    if onlyServer[i] { XCTAssertEqual(value, serverValue, "\(what): key \(key) only the server changed") }
                    let chain = keys.indices.contains { group[$0] == group[i] && onlyLocal[$0] }
                        && keys.indices.contains { group[$0] == group[i] && onlyServer[$0] }
                    if !chain {
                        XCTAssertTrue(value == localValue || value == serverValue, "\(what): key \(key) is a mix \(value)")
                        checked += 1
                    }
                }
                let inKeys = Set(keys.joined())
                let perColumn: Set<String>
                switch policy {
                case .serverWins: perColumn = Set(columns)
                case .localWins: perColumn = []
                case .propertyLocalWins: perColumn = Set(columns).subtracting(local)
                default: perColumn = Set(columns).subtracting(local.subtracting(server))
                }
                XCTAssertEqual(take.subtracting(inKeys), perColumn.subtracting(inKeys), "\(what): a column in no key")
            }
        }
        XCTAssertGreaterThan(checked, 10_000, "the random keys were checked")
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
