import StoreBase
import StoreHistory
import StoreSQLite

/// A natural key declared with `entities.<table>.unique`, and which duplicate survives.
public struct UniqueRule: Sendable, Equatable, Codable {
    /// Which duplicate survives. Ties are broken by the lowest record name, so every device picks the same row.
    public enum Keep: Sendable, Equatable, Codable, CustomStringConvertible {
        /// The greatest value in the column.
        case newest(String)
        /// The least value in the column.
        case oldest(String)
        /// The lowest record name.
        case first

        public var description: String {
            switch self {
            case .newest(let c): return "newest(\(c))"
            case .oldest(let c): return "oldest(\(c))"
            case .first: return "first"
            }
        }
    }

    public var columns: [String]
    public var keep: Keep

    public init(columns: [String], keep: Keep = .first) {
        self.columns = columns
        self.keep = keep
    }
}

/// One group of rows that share a natural key.
public struct DedupGroup: Sendable, Codable, Equatable {
    public var entity: String
    /// The unique columns.
    public var columns: [String] = []
    /// The shared key, as a JSON array of the unique columns' values.
    public var key: String
    /// The surviving row's record name and primary key.
    public var winner: String
    public var winnerKey: String
    /// The record names of the rows that are (or, in a dry run, would be) deleted.
    public var losers: [String]
    /// Their primary keys (JSON arrays), in the same order.
    public var loserKeys: [String] = []
}

/// What a dedup pass did (or would do).
public struct DedupReport: Sendable, Codable, Equatable {
    public var groups: [DedupGroup] = []
    /// Rows deleted.
    public var deleted = 0
    /// Child rows re-pointed from a loser to its winner.
    public var repointed = 0
    public var dryRun = false

    public init() {}
}

/// Finds rows that share a `unique:` key and keeps one per key: the same one on every device.
struct Deduplicator {
    let db: Connection
    let entities: [EntityMap]
    let rules: [String: UniqueRule]
    /// A read-only participant's: a row of its own (never saved, so never sent) gives way to the cloud's records,
    /// whatever the rule keeps, as the cloud's value wins over every change of its own.
    var ownRowsGiveWay = false

    /// The author of dedup's own deletes and re-points, which are exported like any local change.
    static let author = "dedupe"

    /// The author of a merge made while importing: dedup's, exported like a local change. `cloudRowsOnly`: a
    /// read-only participant with no change of its own pending, which sends nothing; its merges follow from the
    /// cloud's records as an `ON DELETE` action's changes do: they are the import's, never a change "not sent".
    static func importAuthor(cloudRowsOnly: Bool) -> String { cloudRowsOnly ? MirrorState.cascadeAuthor : author }

    /// Runs dedup. With `touchedOnly`, only keys of rows listed in `temp._storectl_touched` are considered.
    func run(touchedOnly: Bool, entity filter: String? = nil, dryRun: Bool = false) throws -> DedupReport {
        var report = DedupReport()
        report.dryRun = dryRun
        for e in EntityMap.parentFirst(entities) {
            guard let rule = rules[e.name], filter == nil || filter == e.name else { continue }
            let cols = rule.columns.map { "t.\(quoteIdentifier($0))" }
            let notNull = cols.map { "\($0) IS NOT NULL" }.joined(separator: " AND ")
            var scope = ""
            if touchedOnly {
                scope = "AND (\(cols.joined(separator: ", "))) IN (SELECT \(cols.joined(separator: ", ")) FROM main.\(e.quotedName) t "
                    + "JOIN temp._storectl_touched tt ON tt.entity = \(quoteLiteral(e.name)) AND \(e.pkMatches("t", json: "tt.pk")))"
            }
            let keys = try db.query("""
                SELECT json_array(\(cols.joined(separator: ", "))) FROM main.\(e.quotedName) t
                WHERE \(notNull) \(scope) GROUP BY \(cols.joined(separator: ", ")) HAVING count(*) > 1
                """).compactMap { $0[0].string }
            if keys.isEmpty { continue }
            if !dryRun { try assignNames(e) }
            let order: String
            switch rule.keep {
            case .newest(let c): order = "t.\(quoteIdentifier(c)) DESC, "
            case .oldest(let c): order = "t.\(quoteIdentifier(c)) ASC, "
            case .first: order = ""
            }
            let match = rule.columns.enumerated().map { i, c in "t.\(quoteIdentifier(c)) = json_extract(?1, '$[\(i)]')" }
                .joined(separator: " AND ")
            for key in keys {
                let rows = try db.query("""
                    SELECT \(e.pkJSON("t")), coalesce(r.record_name, '~' || \(e.pkJSON("t"))), r.change_tag IS NULL
                    FROM main.\(e.quotedName) t LEFT JOIN _storectl_records r
                      ON r.entity = \(quoteLiteral(e.name)) AND r.pk = \(e.pkJSON("t"))
                    WHERE \(match) ORDER BY \(ownRowsGiveWay ? "r.change_tag IS NULL, " : "")\(order) 2 ASC
                    """, [key])
                guard let winner = rows.first, rows.count > 1 else { continue }
                let winnerKey = winner[0].string ?? "[]"
                let losers = rows.dropFirst()
                report.groups.append(DedupGroup(entity: e.name, columns: rule.columns, key: key,
                                                winner: winner[1].string ?? "", winnerKey: winnerKey,
                                                losers: losers.map { $0[1].string ?? "" },
                                                loserKeys: losers.map { $0[0].string ?? "[]" }))
                if dryRun { continue }
                for loser in losers {
                    let loserKey = loser[0].string ?? "[]"
                    // The loser's name now stands for the winner: a child that names it follows the winner, and its
                    // tombstone tells other devices so (`{"$alias": WINNER}`).
                    if let loserName = loser[1].string, let winnerName = winner[1].string, !loserName.hasPrefix("~") {
                        try RecordMap(db).alias(loserName, to: winnerName, entity: e.name)
                    }
                    report.repointed += try repoint(parent: e, from: loserKey, to: winnerKey)
                    let delete = {
                        try db.run("DELETE FROM main.\(e.quotedName) WHERE \(e.pkMatches("main.\(e.quotedName)", json: "?1"))",
                                   [loserKey])
                        report.deleted += db.changes
                    }
                    if ownRowsGiveWay, loser[2].int64 == 1 {
                        // A read-only participant's own row giving way to the cloud's record: the cloud's doing, as an
                        // `ON DELETE` action's change, never a change of its own "not sent".
                        try HistoryTracker(db: db).transaction(author: MirrorState.cascadeAuthor) { _ in try delete() }
                    } else {
                        try delete()
                    }
                }
            }
        }
        return report
    }

    /// Gives every row of `e` a record name, so that the tie-break is the same on every device.
    private func assignNames(_ e: EntityMap) throws {
        try MirrorState.assignNames(db, e, source: "main.\(e.quotedName) t")
    }

    /// Points children of `from` at `to`; children that would then be duplicates are deleted. Children that
    /// reference a UNIQUE key of the parent rather than its primary key (`REFERENCES tags(code)`) follow the
    /// winner's values of that key, or the loser's deletion would reach them by its `ON DELETE` action.
    private func repoint(parent: EntityMap, from: String, to: String) throws -> Int {
        var count = try takeReferencedValues(parent: parent, from: from, to: to)
        for child in entities {
            for fk in child.foreignKeys where fk.parentTable == parent.name {
                let referenced = fk.parentColumns.compactMap { $0 }
                guard referenced.count == fk.columns.count else { continue }
                // The values the children hold: the row's key, or its values of the referenced UNIQUE key.
                let of = { (row: String) in
                    "(SELECT " + referenced.map { "p.\(quoteIdentifier($0))" }.joined(separator: ", ")
                        + " FROM main.\(parent.quotedName) p WHERE \(parent.pkMatches("p", json: row)))"
                }
                let differ = try db.scalar("SELECT " + referenced.map {
                    "(SELECT p.\(quoteIdentifier($0)) FROM main.\(parent.quotedName) p WHERE \(parent.pkMatches("p", json: "?1"))) IS NOT "
                        + "(SELECT p.\(quoteIdentifier($0)) FROM main.\(parent.quotedName) p WHERE \(parent.pkMatches("p", json: "?2")))"
                }.joined(separator: " OR "), [from, to])?.int64 == 1
                // A winner without a value there (NULL) gives the children nothing to follow.
                let winnerHolds = try db.scalar("SELECT " + referenced.map {
                    "(SELECT p.\(quoteIdentifier($0)) FROM main.\(parent.quotedName) p WHERE \(parent.pkMatches("p", json: "?1"))) IS NOT NULL"
                }.joined(separator: " AND "), [to])?.int64 == 1
                guard differ, winnerHolds else { continue }
                let columns = "(" + fk.columns.map(quoteIdentifier).joined(separator: ", ") + ")"
                try db.run("UPDATE OR IGNORE main.\(child.quotedName) SET \(columns) = \(of("?1")) WHERE \(columns) = \(of("?2"))",
                           [to, from])
                count += db.changes
                try db.run("DELETE FROM main.\(child.quotedName) WHERE \(columns) = \(of("?1"))", [from])
            }
        }
        return count
    }

    /// Where the winner `to` holds NULL in every column of a UNIQUE key that children reference and the loser
    /// `from` holds a value there, the winner takes it (as a SQL UNIQUE duplicate's winner does:
    /// `RecordApplier.valuesTaken`), so that the loser's children keep a row to reference: the loser lets go of the
    /// value (NULL), the winner takes it, and the children its `ON UPDATE` action moved are put back on it. Foreign
    /// keys are checked at the commit. Left to the loser's deletion, as before: a rule that keeps the newest or the
    /// oldest row (a store that meets the two records as a SQL UNIQUE collision picks the lowest record name, and
    /// could merge them the other way), and a reference whose `ON UPDATE` action could not take a NULL and come
    /// back (RESTRICT, SET DEFAULT, a NOT NULL column or one of the child's key). Returns the children put back.
    private func takeReferencedValues(parent: EntityMap, from: String, to: String) throws -> Int {
        guard rules[parent.name]?.keep == .first else { return 0 }
        var keys: [[String]: [UniqueReference]] = [:]
        for reference in UniqueReference.to(parent, among: entities) { keys[reference.columns, default: []].append(reference) }
        var count = 0
        for (referenced, children) in keys.sorted(by: { $0.key.joined(separator: ",") < $1.key.joined(separator: ",") }) {
            guard children.allSatisfy({ reference in
                let action = reference.fk.onUpdate.uppercased()
                return action == "NO ACTION" || (["CASCADE", "SET NULL"].contains(action)
                    && reference.fk.columns.allSatisfy {
                        !reference.child.notNullColumns.contains($0) && !reference.child.primaryKey.contains($0)
                    })
            }) else { continue }
            let select = "SELECT " + referenced.map { "p.\(quoteIdentifier($0))" }.joined(separator: ", ")
                + " FROM main.\(parent.quotedName) p WHERE \(parent.pkMatches("p", json: "?1"))"
            guard let values = try db.query(select, [from]).first?.values, !values.contains(where: \.isNull),
                  let winner = try db.query(select, [to]).first?.values, winner.allSatisfy(\.isNull)
            else { continue }
            // The children on the loser's value, by key, before the loser lets go of it.
            let held = try children.compactMap { reference in
                try reference.children(on: values, of: parent, db: db).map { (reference, $0) }
            }
            try db.deferForeignKeys()
            let setNull = referenced.map { "\(quoteIdentifier($0)) = NULL" }.joined(separator: ", ")
            let setValues = referenced.enumerated().map { "\(quoteIdentifier($1)) = ?\($0 + 2)" }.joined(separator: ", ")
            let table = "main.\(parent.quotedName)"
            try db.run("UPDATE \(table) SET \(setNull) WHERE \(parent.pkMatches(table, json: "?1"))", [from])
            try db.run("UPDATE \(table) SET \(setValues) WHERE \(parent.pkMatches(table, json: "?1"))", [Value.text(to)] + values)
            for (reference, found) in held { count += try reference.putBack(found, on: values, db: db) }
        }
        return count
    }
}
