import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreCrypto
import StoreHistory
import StoreSQLite

/// Default data to insert once across every device that shares an account.
public struct SeedDefinition: Sendable {
    public var name: String
    /// SQL statements (INSERTs), run as they are.
    public var sql: String?
    /// Rows given in the config: table -> rows of column -> value (nil: NULL).
    public var rows: [(table: String, rows: [[(column: String, value: String?)]])]

    public init(name: String, sql: String?, rows: [(table: String, rows: [[(column: String, value: String?)]])]) {
        self.name = name
        self.sql = sql
        self.rows = rows
    }

    /// The marker's name in the cloud.
    public var markerName: String { "seed:" + name }
}

/// Inserting seed rows with deterministic record names.
public enum Seeder {
    /// The author of seed rows.
    public static let author = "seed"

    /// Whether this store already holds the seed (inserted here, or known to be seeded elsewhere).
    public static func isDone(_ db: Connection, _ seed: SeedDefinition) throws -> Bool {
        try MirrorState.meta(db, .seedDone(seed.name)) != nil
    }

    /// Records that the seed is in this store (or was seeded elsewhere), without inserting anything.
    public static func markDone(_ db: Connection, _ seed: SeedDefinition, how: String) throws {
        try MirrorState.setMeta(db, .seedDone(seed.name), how)
    }

    /// Seeds in local mode leave their cloud marker to be claimed when sync is enabled.
    public static func pendingMarkers(_ db: Connection) throws -> [String] {
        try StoreMeta.entries(db, .seedMarkerPending).map(\.name)
    }

    /// Claims the pending markers of seeds made while local. Returns their names.
    public static func reconcileMarkers(_ db: Connection, cloud: any CloudDatabase, zone: String, device: String)
        throws -> [String]
    {
        let names = try pendingMarkers(db)
        for name in names {
            _ = try cloud.createMarker(zone: zone, name: "seed:" + name, device: device, payload: "{}")
            try MirrorState.setMeta(db, .seedMarkerPending(name), nil)
        }
        return names
    }

    /// Inserts the seed's rows in one transaction, giving each new row of a surrogate-keyed table the record name
    /// UUIDv5(seed name + table + natural key), so that two devices that seed offline create the same records.
    /// Returns how many rows were inserted.
    /// - Throws: `StoreError` (exit 65) when the seed SQL fails; nothing is inserted then.
    public static func insert(_ db: Connection, _ seed: SeedDefinition, entities: [EntityMap],
                              rules: [String: UniqueRule], markerPending: Bool) throws -> Int
    {
        try MirrorState.install(db)
        let byName = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })
        return try HistoryTracker(db: db).transaction(author: author) { tx in
            do {
                if let sql = seed.sql { try db.execute(sql) }
                for (table, rows) in seed.rows {
                    for row in rows {
                        let cols = row.map { quoteIdentifier($0.column) }.joined(separator: ", ")
                        let params = row.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
                        try db.run("INSERT INTO main.\(quoteIdentifier(table))(\(cols)) VALUES (\(params))",
                                   row.map { $0.value.map { Value.text($0) } ?? .null })
                    }
                }
            } catch let error as SQLiteError {
                throw StoreError(.dataError, "seed '\(seed.name)' failed: \(error.message)",
                                 details: error.details, hint: "fix the seed's SQL or rows; nothing was inserted")
            }
            var inserted = 0
            let rowsOfTx = try db.query("SELECT entity, pk FROM _storectl_history WHERE tx = ? AND op = 'I' ORDER BY seq", [tx])
            for row in rowsOfTx {
                guard let table = row[0].string, let pk = row[1].string, let e = byName[table] else { continue }
                inserted += 1
                guard e.isSurrogate else { continue }  // natural keys already name their records
                let keyColumns = rules[table]?.columns ?? e.fieldColumns
                let keyExpr = "json_array(" + keyColumns.map { EntityMap.jsonValue("t.\(quoteIdentifier($0))") }
                    .joined(separator: ", ") + ")"
                guard let key = try db.scalar("SELECT \(keyExpr) FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "?1"))",
                                              [pk])?.string else { continue }
                let name = try UUIDv5.make(namespace: UUIDv5.storectl, name: "\(seed.name)/\(table)/\(key)")
                if try db.scalar("SELECT 1 FROM _storectl_records WHERE \(RecordMap.named("?1"))", [name]) != nil {
                    // This default row already came from another device: keep that one.
                    try db.run("DELETE FROM main.\(e.quotedName) WHERE \(e.pkMatches("main.\(e.quotedName)", json: "?1"))", [pk])
                    inserted -= 1
                    continue
                }
                try RecordMap(db).assignName(entity: table, pk: pk, name: name)
            }
            try markDone(db, seed, how: "seeded")
            if markerPending { try MirrorState.setMeta(db, .seedMarkerPending(seed.name), "1") }
            Failpoint.hit("seed.before-commit")
            return inserted
        }
    }
}
