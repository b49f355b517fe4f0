import Foundation
import TestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A store file put back to a copy taken before an export of a row deleted and inserted again at its rowid was
/// killed; then the restored store deletes and inserts the row once more. Its next sync takes back its later self's
/// records (the old record's tombstone, the new row's record under a fresh name, the tags) while the row the copy
/// holds at that rowid is a third row. Every sync must end, and every store (and one that joins later) must hold
/// the row as the user last wrote it.
final class RestoredReinsertTests: XCTestCase {
    static let schema = ReusedRowidReplayTests.schema
    /// A sync of a few rows takes well under a second; one that has not ended after this never will.
    static let timeout: Double = 40

    struct NeverEnded: Error {}

    enum CopyTaken: String {
        /// Before the row was deleted and inserted again.
        case beforeTheWrites = "copy taken before the writes"
        /// After the writes, before the export that was killed.
        case beforeTheKilledSync = "copy taken before the killed sync"
    }

    /// Runs `storectl --store STORE args`, killing it (and failing the test) when it has not ended in time.
    @discardableResult
    private func run(_ f: Fleet, _ store: String, _ args: [String], env: [String: String] = [:],
                     expect: Int32? = 0, _ what: String, line: UInt = #line) throws -> Int32
    {
        let p = try BackgroundProcess.storectl(["--store", store] + args, in: f.dir.path, environment: env)
        guard let status = p.waitForExit(upTo: Self.timeout) else {
            p.send(SIGKILL)
            _ = p.waitForExit(upTo: 10)
            XCTFail("\(what): storectl \(args.joined(separator: " ")) on \(store) had not ended after "
                    + "\(Int(Self.timeout)) s\n\(p.transcript)", line: line)
            throw NeverEnded()
        }
        if let expect, status != expect {
            XCTFail("\(what): storectl \(args.joined(separator: " ")) on \(store): exit \(status), expected \(expect)\n"
                    + p.transcript, line: line)
        }
        return status
    }

    /// The store file with its `-wal` and `-shm` files, as a file copy of a store in use takes it.
    private func copy(_ f: Fleet, _ store: String, to name: String) throws {
        let fm = FileManager.default
        try fm.createDirectory(atPath: f.dir.file("backups"), withIntermediateDirectories: true)
        for suffix in ["", "-wal", "-shm"] where fm.fileExists(atPath: f.path(store) + suffix) {
            try fm.copyItem(atPath: f.path(store) + suffix, toPath: f.dir.file("backups/\(name).sqlite\(suffix)"))
        }
    }

    private func putBack(_ f: Fleet, _ store: String, from name: String) throws {
        let fm = FileManager.default
        for suffix in ["", "-wal", "-shm"] {
            try? fm.removeItem(atPath: f.path(store) + suffix)
            let source = f.dir.file("backups/\(name).sqlite\(suffix)")
            if fm.fileExists(atPath: source) { try fm.copyItem(atPath: source, toPath: f.path(store) + suffix) }
        }
    }

    static let query = "SELECT n.uuid, n.title, group_concat(t.tag) FROM notes n LEFT JOIN "
        + "(SELECT * FROM tags ORDER BY tag) t ON t.note_id = n.id GROUP BY n.id ORDER BY 1"

    /// - Parameter insertsAgain: whether the user deletes n1 and creates it again on the restored copy before its
    ///   first sync (else the copy only takes back what its later self exported).
    private func scenario(_ backend: FleetBackend, policy: String, failpoint: String, copy taken: CopyTaken,
                          insertsAgain: Bool) throws
    {
        let what = "[\(backend)] \(policy), killed at \(failpoint), \(taken.rawValue)"
            + (insertsAgain ? ", n1 inserted again on the copy" : "")
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)",
                          label: "storectl-restored-reinsert")
        try run(f, "a", ["mode", "cloud"], what)
        try run(f, "b", ["mode", "cloud"], what)
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two'); "
                  + "INSERT INTO tags SELECT id, 'x' FROM notes")
        for s in ["a", "b"] { try run(f, s, ["sync"], what) }
        if taken == .beforeTheWrites { try copy(f, "a", to: "a") }
        // n1 deleted and inserted again at rowid 1, with its tags, in one transaction; the export is killed after
        // part of it reached the cloud.
        try f.sql("a", """
            BEGIN; DELETE FROM notes WHERE uuid = 'n1'; INSERT INTO notes(id, uuid, title) VALUES (1, 'n1', 'one reborn');
            INSERT INTO tags VALUES (1, 'x'), (1, 'y'); UPDATE notes SET title = 'two edited' WHERE uuid = 'n2'; COMMIT;
            """)
        if taken == .beforeTheKilledSync { try copy(f, "a", to: "a") }
        let killed = try run(f, "a", ["sync"], env: ["STORECTL_BATCH_SIZE": "1", "STORECTL_FAILPOINT": failpoint],
                             expect: nil, what)
        XCTAssertEqual(killed, 137, "\(what): the export was not killed")
        // Another device takes in what arrived and tags every note.
        try run(f, "b", ["sync"], what)
        try f.sql("b", "INSERT OR IGNORE INTO tags SELECT id, 'by-b' FROM notes")
        try run(f, "b", ["sync"], what)
        // What b holds now is what the cloud holds: the part of the killed export that reached it.
        let seen = try f.sql("b", Self.query).split(separator: "\n").map { $0.split(separator: "|",
            omittingEmptySubsequences: false).map(String.init) }
        let reborn = seen.first { $0[0] == "n1" && $0[1] == "one reborn" }
        let n2Title = seen.first { $0[0] == "n2" }?[1] ?? "?"
        // The copy is put back; the user deletes n1 and creates it again, with a tag of its own.
        try putBack(f, "a", from: "a")
        if insertsAgain { try f.sql("a", """
            BEGIN; DELETE FROM notes WHERE uuid = 'n1'; INSERT INTO notes(id, uuid, title) VALUES (1, 'n1', 'one again');
            INSERT INTO tags VALUES (1, 'z'); COMMIT;
            """) }
        for _ in 0..<3 {
            for s in ["a", "b"] { try run(f, s, ["sync"], what) }
        }
        try run(f, Fleet.lateStore, ["mode", "cloud"], what)
        // n1 as the user last wrote it on the copy, with its latest title, and the tags that still make sense:
        // - a copy taken before the writes held the first n1, which its later self had deleted already; the user
        //   never saw the n1 its later self created. When that one reached the cloud, the row created again on
        //   the copy stands for it (one uuid, one note) and keeps the tags it was given, by its later self and b;
        // - a copy taken after the writes held the n1 created again, and the user deleted it with its tags: b's tag
        //   of it follows it (a delete wins), and the new n1 is a note of its own.
        // n2's edit was made on the copy, or reached the cloud before the kill.
        // Without those writes, the copy ends as its later self left n1: the n1 created again, with the tags the
        // copy gave it and those of it that reached b; or, on a copy taken before the writes, the one that reached
        // the cloud, or none (its later self deleted the first n1, and its new n1 never left it).
        var n1Tags = Set(insertsAgain ? ["z"] : [])
        var n1Title: String? = insertsAgain ? "one again" : nil
        if !insertsAgain, taken == .beforeTheKilledSync {
            n1Title = "one reborn"
            n1Tags.formUnion(["x", "y"])
        }
        if let reborn, taken == .beforeTheWrites || !insertsAgain {
            n1Title = n1Title ?? "one reborn"
            n1Tags.formUnion(reborn[2].split(separator: ",").map(String.init))
        }
        let n2 = taken == .beforeTheKilledSync ? "two edited" : n2Title
        let expected = (n1Title.map { "n1|\($0)|\(n1Tags.sorted().joined(separator: ","))\n" } ?? "")
            + "n2|\(n2)|by-b,x\n"
        for store in f.stores + [Fleet.lateStore] {
            XCTAssertEqual(try f.integrity(store), [], "\(what): integrity of \(store)")
            let rows = try f.sql(store, Self.query)
            XCTAssertEqual(rows, expected, "\(what): \(store) holds " + rows.split(separator: "\n").joined(separator: "; ")
                           + ", expected " + expected.split(separator: "\n").joined(separator: "; "))
        }
        for store in f.stores { try f.assertHealthy(store, what) }
    }

    private func all(_ backend: FleetBackend, policies: [String], failpoints: [String]) throws {
        for policy in policies {
            for failpoint in failpoints {
                for taken in [CopyTaken.beforeTheWrites, .beforeTheKilledSync] {
                    for insertsAgain in [true, false] {
                        do {
                            try scenario(backend, policy: policy, failpoint: failpoint, copy: taken,
                                         insertsAgain: insertsAgain)
                        } catch is NeverEnded {
                            continue  // reported; the other cases still run
                        }
                    }
                }
            }
        }
    }

    /// Where the export is killed: after the old record's tombstone only (`before-save:2`), after the rows
    /// (`before-save:3`; the children later), after one batch or one save (which the next save in flight may
    /// follow), after every save.
    static let failpoints = ["export.before-save:2", "export.before-save:3", "export.after-batch-commit:1",
                             "export.after-save:1", "export.before-commit:1"]

    func testARestoredStoreThatInsertsARowAgainSyncsToTheEndOnAContainerFile() throws {
        try all(.file, policies: ["error", "property-local-wins"], failpoints: Self.failpoints)
    }

    func testARestoredStoreThatInsertsARowAgainSyncsToTheEndOnPostgreSQL() throws {
        guard let pg = FleetBackend.postgres() else { return }
        try all(pg, policies: ["error"], failpoints: Self.failpoints)
    }
}

/// A restored copy sends again only the changes no save reflects: a change its later self exported, over which
/// another device then saved a newer one, is not sent again (it would undo the newer one).
extension RestoredReinsertTests {
    private func newerElsewhere(_ backend: FleetBackend, policy: String, deletes: Bool) throws {
        let what = "[\(backend)] \(policy), the copy's \(deletes ? "delete" : "edit") replaced by another device's edit"
        let f = try Fleet(backend: backend, schema: Self.schema, cloudExtra: "      merge_policy: \(policy)",
                          label: "storectl-restored-newer")
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try f.syncRounds(1, ["a", "b"])
        let expected: String
        if deletes {
            // b deletes n1 while a edits it; a's edit brings n1 back (a later edit than the delete wins under
            // property-local-wins on a's side), and b takes it in.
            try f.sql("b", "DELETE FROM notes WHERE uuid = 'n1'")
            try f.sql("a", "UPDATE notes SET title = 'one from a' WHERE uuid = 'n1'")
            try copy(f, "b", to: "copy")
            try f.syncRounds(1, ["b", "a", "b"])
            expected = try f.sql("a", Self.query)
            XCTAssertTrue(expected.hasPrefix("n1|one from a|"), "\(what): a's edit brought n1 back\n\(expected)")
        } else {
            // b's edit reaches the cloud and a; a edits n1 again, and b takes that in.
            try f.sql("b", "UPDATE notes SET title = 'one from b' WHERE uuid = 'n1'")
            try copy(f, "b", to: "copy")
            try f.syncRounds(1, ["b", "a"])
            try f.sql("a", "UPDATE notes SET title = 'one from a, later' WHERE uuid = 'n1'")
            try f.syncRounds(1, ["a", "b"])
            expected = "n1|one from a, later|\nn2|two|\n"
        }
        try f.sql("b", "UPDATE notes SET title = 'two from b' WHERE uuid = 'n2'")
        try f.syncRounds(1, ["b", "a"])
        let held = expected.replacingOccurrences(of: "n2|two|", with: "n2|two from b|")
        XCTAssertEqual(try f.sql("a", Self.query), held, "\(what): before the restore")
        try putBack(f, "b", from: "copy")
        try f.syncRounds(3, ["b", "a"])
        for store in f.stores {
            XCTAssertEqual(try f.sql(store, Self.query), held, "\(what): \(store)")
            try f.assertHealthy(store, what)
        }
        try f.joinLate()
        XCTAssertEqual(try f.sql(Fleet.lateStore, Self.query), held, "\(what): a store that joins later")
    }

    func testARestoredCopyDoesNotUndoANewerSaveOfAnotherDevice() throws {
        for policy in ["property-local-wins", "error", "server-wins"] {
            try newerElsewhere(.file, policy: policy, deletes: false)
        }
        try newerElsewhere(.file, policy: "property-local-wins", deletes: true)
    }
}
