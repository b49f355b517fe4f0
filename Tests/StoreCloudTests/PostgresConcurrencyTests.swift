import Foundation
import StoreBase
import StoreCloud
@testable import StoreCloudPostgres
import XCTest

/// Many savers at once: seq order must be commit order, so a reader following the feed misses nothing.
final class PostgresConcurrencyTests: PostgresTestCase {
    /// 4 writers, each on its own connection and thread, save batches of new records into one zone. Inside each
    /// save transaction they sleep a random while before taking the zone lock and again before committing, so
    /// transactions start and commit in different orders. A fifth connection follows the change feed meanwhile
    /// with small pages. At the end it has seen every saved record exactly once, in increasing seq order.
    func testAReaderFollowingTheFeedSeesEveryRecordOfConcurrentWritersExactlyOnce() throws {
        guard let db = try makeContainer("concurrency"), let url = PostgresTestServer.url() else { return }
        try db.ensureZone("z")
        let container = db.container
        let writers = 4
        let batches = 15
        let perBatch = 8

        let saved = ResultBox<(name: String, seq: Int64)>()
        let starts = ResultBox<(started: Double, firstSeq: Int64)>()
        let failures = ResultBox<String>()
        let done = ResultBox<Int>()
        let group = DispatchGroup()
        for w in 0..<writers {
            group.enter()
            Thread.detachNewThread {
                defer {
                    done.append(w)
                    group.leave()
                }
                do {
                    let mine = try PostgresCloudDatabase(url: url, container: container)
                    for b in 0..<batches {
                        mine.saveDelays = (beforeLock: Double.random(in: 0...0.012),
                                           beforeCommit: Double.random(in: 0...0.004))
                        let saves = (0..<perBatch).map {
                            RecordSave(recordName: "w\(w)-b\(b)-r\($0)", recordType: "T", fields: fields($0),
                                       expectedTag: nil)
                        }
                        let started = Date().timeIntervalSince1970
                        let outcomes = try mine.save(zone: "z", saves, device: "writer-\(w)")
                        for (save, outcome) in zip(saves, outcomes) {
                            guard case .saved(_, let seq) = outcome else {
                                failures.append("\(save.recordName): \(outcome)")
                                continue
                            }
                            saved.append((save.recordName, seq))
                        }
                        if case .saved(_, let seq) = outcomes[0] { starts.append((started, seq)) }
                    }
                } catch {
                    failures.append("writer \(w): \(error)")
                }
            }
        }

        let reader = try PostgresCloudDatabase(url: url, container: container)
        var seen: [String: Int] = [:]
        var token: ServerChangeToken?
        var lastSeq: Int64 = 0
        var pages = 0
        while true {
            let writersDone = done.values.count == writers
            let batch = try reader.fetchChanges(zone: "z", since: token, limit: 7)
            pages += 1
            for record in batch.records {
                XCTAssertGreaterThan(record.seq, lastSeq, "the feed went back from \(lastSeq) to \(record.seq)")
                lastSeq = record.seq
                seen[record.recordName, default: 0] += 1
            }
            XCTAssertGreaterThanOrEqual(batch.token.seq, token?.seq ?? 0)
            token = batch.token
            // Stop only after a fetch that started once every writer had finished came back complete.
            if writersDone && !batch.moreComing { break }
            if !batch.moreComing { Thread.sleep(forTimeInterval: 0.002) }
        }
        group.wait()

        XCTAssertEqual(failures.values, [])
        let total = writers * batches * perBatch
        XCTAssertEqual(saved.values.count, total)
        XCTAssertEqual(Set(saved.values.map(\.seq)).count, total, "each seq is given once")
        XCTAssertEqual(saved.values.map(\.seq).max(), Int64(total), "seqs have no gaps")
        XCTAssertEqual(seen.count, total, "the reader saw every saved record")
        XCTAssertEqual(seen.values.filter { $0 != 1 }.count, 0, "the reader saw each record once")
        XCTAssertEqual(Set(seen.keys), Set(saved.values.map(\.name)))
        XCTAssertGreaterThan(pages, 10, "the reader followed the feed while the writers were saving")

        // The test did make transactions commit in another order than they started.
        let byStart = starts.values.sorted { $0.started < $1.started }.map(\.firstSeq)
        let inversions = zip(byStart, byStart.dropFirst()).filter { $0 > $1 }.count
        XCTAssertGreaterThan(inversions, 0, "no save committed out of its start order; the test proved nothing")
    }

    /// Savers racing to update one record from the same tag: exactly one wins, the others get its record.
    func testRacingUpdatesOfOneRecordHaveOneWinner() throws {
        guard let db = try makeContainer("race"), let url = PostgresTestServer.url() else { return }
        try db.ensureZone("z")
        guard case .saved(let tag, _) = try db.save(zone: "z", [
            RecordSave(recordName: "shared", recordType: "T", fields: fields(0), expectedTag: nil),
        ], device: "d")[0] else { return XCTFail() }
        let container = db.container
        let outcomes = ResultBox<(Int, SaveOutcome)>()
        let group = DispatchGroup()
        for w in 1...4 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                do {
                    let mine = try PostgresCloudDatabase(url: url, container: container)
                    mine.saveDelays = (beforeLock: 0, beforeCommit: 0.02)
                    let out = try mine.save(zone: "z", [
                        RecordSave(recordName: "shared", recordType: "T", fields: fields(w), expectedTag: tag),
                    ], device: "writer-\(w)")
                    outcomes.append((w, out[0]))
                } catch {
                    XCTFail("\(error)")
                }
            }
        }
        group.wait()
        let final = try XCTUnwrap(db.fetchRecord(zone: "z", recordName: "shared"))
        let winners = outcomes.values.filter { if case .saved = $0.1 { return true } else { return false } }
        XCTAssertEqual(winners.count, 1)
        XCTAssertEqual(final.modifiedBy, "writer-\(winners.first?.0 ?? 0)")
        XCTAssertEqual(final.seq, 2)
        for (_, outcome) in outcomes.values {
            if case .conflict(let server) = outcome { XCTAssertEqual(server, final) }
        }
    }
}
