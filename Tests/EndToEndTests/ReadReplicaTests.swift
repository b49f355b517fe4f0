import Foundation
import StoreCloud
import StoreCloudPostgres
import TestSupport
import XCTest

/// `cloud.replica_url`: a PostgreSQL hot standby (made with `pg_basebackup` from the test server) serves the change
/// feed of the store that names it. Each test makes its own standby, so that pausing, stopping or promoting it
/// disturbs no other test.
final class ReadReplicaTests: XCTestCase {
    static let schema = "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, "
        + "title TEXT NOT NULL DEFAULT '', body TEXT NOT NULL DEFAULT '');"

    /// Stores a and b on the test server, a reading from `standby`, both in cloud mode and in step.
    private func pair(_ standby: PostgresStandby, primary: String) throws -> Fleet {
        let fleet = try Fleet(backend: .postgres(url: primary), schema: Self.schema,
                              cloudExtraByStore: ["a": "      replica_url: '\(standby.url)'"],
                              label: "storectl-replica", late: false)
        try fleet.cloudMode("a")
        try fleet.cloudMode("b")
        try fleet.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n0', 'before');")
        try fleet.syncRounds(2, ["b", "a"])
        XCTAssertEqual(try fleet.rows("a"), try fleet.rows("b"))
        return fleet
    }

    private func notes(_ fleet: Fleet, _ store: String) throws -> [String] {
        try fleet.sql(store, "SELECT uuid || '=' || title FROM notes ORDER BY uuid;")
            .split(separator: "\n").map(String.init)
    }

    /// The zone's last seq on the primary.
    private func primaryLastSeq(_ fleet: Fleet) throws -> Int64 {
        Int64(try fleet.psql("SELECT last_seq FROM \"\(fleet.pgSchema)\".zones WHERE name = 'default'")
            .trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    /// The seq of a store's server token.
    private func tokenSeq(_ fleet: Fleet, _ store: String) throws -> Int64? {
        let status = try fleet.json(store, ["status"]).doc
        return (JSONDoc.get(status, "tokens", "server") as? String).flatMap(ServerChangeToken.init(rawValue:))?.seq
    }

    func testFetchesOfTheStoreWithAReplicaGoToTheStandbyAndStoresConverge() throws {
        guard case .postgres(let primary)? = FleetBackend.postgres(),
              let standby = try PostgresStandby.make(logStatements: true)
        else { return }
        let fleet = try pair(standby, primary: primary)
        try fleet.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n1', 'from b'), ('n2', 'also from b');")
        try fleet.run("b", ["sync"])
        try standby.waitForReplay(of: primary)
        let readsBefore = standby.changeFeedReads()
        let (r, doc) = try fleet.json("a", ["sync"])
        XCTAssertEqual(r.stderr, "", "\(r)")
        XCTAssertNil(JSONDoc.get(doc, "warnings"), "\(r)")
        XCTAssertGreaterThanOrEqual(JSONDoc.int(doc, "replica", "pages") ?? 0, 1, "the import read the standby: \(r)")
        XCTAssertEqual(JSONDoc.int(doc, "imported", "applied"), 2, "\(r)")
        XCTAssertGreaterThan(standby.changeFeedReads(), readsBefore, "the standby ran the change-feed statement")
        XCTAssertEqual(try notes(fleet, "a"), ["n0=before", "n1=from b", "n2=also from b"])
        XCTAssertEqual(try tokenSeq(fleet, "a"), try primaryLastSeq(fleet))

        // b has no replica: its reads never reach the standby.
        try fleet.sql("a", "UPDATE notes SET title = 'edited on a' WHERE uuid = 'n1';")
        try fleet.run("a", ["sync"])
        let readsOfA = standby.changeFeedReads()
        try fleet.run("b", ["sync"])
        XCTAssertEqual(standby.changeFeedReads(), readsOfA)
        XCTAssertEqual(try fleet.rows("a"), try fleet.rows("b"))

        let status = try fleet.json("a", ["status"]).doc
        XCTAssertEqual(JSONDoc.get(status, "cloud", "replica", "state") as? String, "streaming", "\(status ?? "")")
        XCTAssertEqual(JSONDoc.get(status, "cloud", "replica", "in_use") as? Bool, true)
        XCTAssertNotNil(JSONDoc.get(status, "cloud", "replica", "lag_seconds"))
        XCTAssertNil(JSONDoc.get(try fleet.json("b", ["status"]).doc, "cloud", "replica"))
    }

    func testALaggingStandbyNeitherHidesNorSkipsAChange() throws {
        guard case .postgres(let primary)? = FleetBackend.postgres(), let standby = try PostgresStandby.make()
        else { return }
        let fleet = try pair(standby, primary: primary)
        try standby.waitForReplay(of: primary)
        try standby.pauseReplay()

        // While the standby replays nothing, b's changes reach a from the primary, and a's token stays at what
        // a read.
        for round in 1...3 {
            try fleet.sql("b", "INSERT INTO notes(uuid, title) VALUES ('p\(round)', 'while paused');")
            try fleet.run("b", ["sync"])
            let (r, doc) = try fleet.json("a", ["sync"])
            XCTAssertEqual(JSONDoc.int(doc, "imported", "applied"), 1, "round \(round): \(r)")
            XCTAssertEqual(JSONDoc.int(doc, "replica", "pages"), 0, "round \(round): \(r)")
            XCTAssertGreaterThanOrEqual(JSONDoc.int(doc, "replica", "behind") ?? 0, 1, "round \(round): \(r)")
            XCTAssertNil(JSONDoc.get(doc, "warnings"), "a lagging standby is no reason to warn: \(r)")
            let seq = try tokenSeq(fleet, "a") ?? -1
            XCTAssertEqual(seq, try primaryLastSeq(fleet), "round \(round): the token is at what a read")
        }
        // a writes too, while the standby still lags: nothing of it is taken for a restore.
        try fleet.sql("a", "INSERT INTO notes(uuid, title) VALUES ('a1', 'from a while paused');")
        try fleet.run("a", ["sync"])
        try fleet.run("b", ["sync"])
        try fleet.run("a", ["sync"])
        let status = try fleet.json("a", ["status"]).doc
        XCTAssertEqual(JSONDoc.get(status, "cloud", "replica", "state") as? String, "paused", "\(status ?? "")")
        XCTAssertGreaterThan(JSONDoc.int(status, "cloud", "replica", "seqs_behind") ?? 0, 0, "\(status ?? "")")
        XCTAssertEqual((JSONDoc.get(status, "problems") as? [Any])?.count ?? 0, 0, "\(status ?? "")")

        try standby.resumeReplay()
        try standby.waitForReplay(of: primary)
        try fleet.sql("b", "INSERT INTO notes(uuid, title) VALUES ('r1', 'after resume');")
        try fleet.run("b", ["sync"])
        try standby.waitForReplay(of: primary)
        let (r, doc) = try fleet.json("a", ["sync"])
        XCTAssertGreaterThanOrEqual(JSONDoc.int(doc, "replica", "pages") ?? 0, 1, "caught up, it serves again: \(r)")
        XCTAssertEqual(try notes(fleet, "a"), ["a1=from a while paused", "n0=before", "p1=while paused",
                                               "p2=while paused", "p3=while paused", "r1=after resume"])
        XCTAssertEqual(try fleet.rows("a"), try fleet.rows("b"))
        XCTAssertEqual(try tokenSeq(fleet, "a"), try primaryLastSeq(fleet))
    }

    func testAStoppedStandbyFallsBackToThePrimaryWithAWarning() throws {
        guard case .postgres(let primary)? = FleetBackend.postgres(), let standby = try PostgresStandby.make()
        else { return }
        let fleet = try pair(standby, primary: primary)
        try standby.stop()
        try fleet.sql("b", "INSERT INTO notes(uuid, title) VALUES ('d1', 'while the standby is down');")
        try fleet.run("b", ["sync"])

        let plain = try fleet.run("a", ["sync"])
        XCTAssertTrue(plain.stderr.contains("warning: the hot standby at \(standby.url) cannot be reached"),
                      "\(plain)")
        XCTAssertTrue(plain.stderr.contains("read from the primary"), "\(plain)")
        XCTAssertEqual(try notes(fleet, "a"), ["d1=while the standby is down", "n0=before"])

        try fleet.sql("b", "UPDATE notes SET title = 'still down' WHERE uuid = 'd1';")
        try fleet.run("b", ["sync"])
        let (r, doc) = try fleet.json("a", ["sync"])
        let warnings = JSONDoc.get(doc, "warnings") as? [String] ?? []
        XCTAssertEqual(warnings.count, 1, "\(r)")
        XCTAssertTrue(warnings.first?.contains("cannot be reached") == true, "\(r)")
        XCTAssertEqual(JSONDoc.int(doc, "imported", "applied"), 1, "\(r)")
        XCTAssertEqual(try fleet.rows("a"), try fleet.rows("b"))

        let status = try fleet.json("a", ["status"]).doc
        XCTAssertEqual(JSONDoc.get(status, "cloud", "replica", "state") as? String, "down", "\(status ?? "")")
        XCTAssertEqual(JSONDoc.get(status, "cloud", "replica", "in_use") as? Bool, false)

        // Back up, it serves again.
        try standby.start()
        try standby.waitForReplay(of: primary)
        let back = try fleet.json("a", ["sync"])
        XCTAssertNil(JSONDoc.get(back.doc, "warnings"), "\(back.result)")
        XCTAssertGreaterThanOrEqual(JSONDoc.int(back.doc, "replica", "pages") ?? 0, 1, "\(back.result)")
    }

    func testAPromotedStandbyIsNotReadAsACopyOfThePrimary() throws {
        guard case .postgres(let primary)? = FleetBackend.postgres(), let standby = try PostgresStandby.make()
        else { return }
        let fleet = try pair(standby, primary: primary)
        try standby.waitForReplay(of: primary)
        try standby.promote()
        // The promoted server goes its own way: a record the primary never had, at seqs far ahead of it.
        let schema = "\"\(fleet.pgSchema)\""
        try standby.psql("""
            UPDATE \(schema).zones SET last_seq = last_seq + 1000 WHERE name = 'default';
            INSERT INTO \(schema).records (zone, record_name, record_type, fields, change_tag, seq, deleted,
                                           modified_by, modified_at)
            SELECT 'default', 'diverged-1', 'notes', '{"uuid":"x1","title":"only on the promoted server","body":""}',
                   to_hex(last_seq) || '-' || left(epoch, 8), last_seq, false, 'elsewhere', 0
            FROM \(schema).zones WHERE name = 'default';
            """)
        try fleet.sql("b", "INSERT INTO notes(uuid, title) VALUES ('n1', 'after the promotion');")
        try fleet.run("b", ["sync"])

        let r = try fleet.run("a", ["sync"])
        XCTAssertTrue(r.stderr.contains("is not a hot standby (pg_is_in_recovery() is false"), "\(r)")
        XCTAssertEqual(try notes(fleet, "a"), ["n0=before", "n1=after the promotion"])
        XCTAssertEqual(try tokenSeq(fleet, "a"), try primaryLastSeq(fleet), "the token follows the primary")
        try fleet.sql("a", "INSERT INTO notes(uuid, title) VALUES ('a1', 'from a');")
        try fleet.syncRounds(2, ["a", "b"])
        XCTAssertEqual(try fleet.rows("a"), try fleet.rows("b"))
        XCTAssertFalse(try notes(fleet, "b").contains { $0.hasPrefix("x1=") })

        let status = try fleet.json("a", ["status"]).doc
        XCTAssertEqual(JSONDoc.get(status, "cloud", "replica", "state") as? String, "not_a_standby",
                       "\(status ?? "")")
    }

    /// A restored primary (its zone behind what a store saw) is still found on the primary, with a standby set.
    func testARestoredPrimaryIsStillDetectedWithAStandby() throws {
        guard case .postgres(let primary)? = FleetBackend.postgres(), let standby = try PostgresStandby.make()
        else { return }
        let fleet = try pair(standby, primary: primary)
        try fleet.psql("UPDATE \"\(fleet.pgSchema)\".zones SET last_seq = 0 WHERE name = 'default'")
        try standby.waitForReplay(of: primary)
        let r = try fleet.run("a", ["sync"], expect: 65)
        XCTAssertTrue(r.stderr.contains("the container was restored from an older copy"), "\(r)")
    }

    func testReplicaURLNeedsAPostgreSQLContainerAndIsRedacted() throws {
        let dir = try TempDirectory("storectl-replica-config")
        try dir.write("config.yaml", """
            version: 1
            stores:
              notes:
                path: notes.sqlite
                cloud:
                  container: iCloud.com.example.notes
                  url: file:cloud/notes.container
                  replica_url: postgres://reader@standby/notes
            """)
        let bad = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(bad.status, 78, "\(bad)")
        XCTAssertTrue(bad.stderr.contains("stores.notes.cloud.replica_url"), "\(bad)")
        XCTAssertTrue(bad.stderr.contains("replica_url needs a PostgreSQL cloud.url"), "\(bad)")
        XCTAssertTrue(bad.stderr.contains("hint: remove replica_url: a container file has no standby to read from"),
                      "\(bad)")

        try dir.write("config.yaml", """
            version: 1
            stores:
              notes:
                path: notes.sqlite
                cloud:
                  container: iCloud.com.example.notes
                  url: postgres://app:primary-pw@db/notes
                  replica_url: ${STANDBY_URL}
            """)
        let env = ["STANDBY_URL": "postgres://app:standby-pw@standby/notes?sslmode=require"]
        let shown = try Binary.storectl(["config", "show"], in: dir.path, environment: env)
        XCTAssertEqual(shown.status, 0, "\(shown)")
        XCTAssertFalse(shown.stdout.contains("standby-pw"), "\(shown)")
        let got = try Binary.storectl(["config", "get", "stores.notes.cloud.replica_url"], in: dir.path,
                                      environment: env)
        XCTAssertEqual(got.status, 0, "\(got)")
        XCTAssertEqual(got.stdout, "postgres://app:<redacted>@standby/notes?sslmode=require\n", "\(got)")
    }
}
