import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// Keeping values across schema changes that happen on one device before the others.
///
/// The record map keeps, for each row, a fingerprint of the fields of the last synced record (`base`, see
/// `FieldHashes`) and the values of those of its fields the local table does not have (`extra`). From them:
/// - a column added here later (`ALTER TABLE` + `storectl migrate`) is filled with the values other devices sent
///   for it before (`backfill`), where the row has no value of its own;
/// - values written while the triggers were stale (a column added and filled before `migrate` ran, so no history
///   was written) are found by comparing each row with its last synced record, and exported (`rescan`);
/// - a column dropped here keeps travelling with the row, with the value last synced (`rescan` takes it from the
///   cloud's record into `extra`), so that devices which still have it never lose it.
enum SchemaEvolution {
    /// Whether `backfill` or `rescan` could do anything: `backfill` reads only records that hold `extra` fields,
    /// and `rescan` only entities whose columns differ from what the last export recorded (meta `columns:<table>`).
    static func hasWork(_ db: Connection, entities: [EntityMap], readOnly: Bool = false) throws -> Bool {
        if try db.scalar("""
            SELECT 1 FROM _storectl_records INDEXED BY _storectl_records_extra WHERE extra IS NOT NULL LIMIT 1
            """) != nil
        {
            return true
        }
        for e in entities where try MirrorState.meta(db, comparedKey(e, readOnly: readOnly)) != e.fieldColumnsJSON(db) {
            return true
        }
        return false
    }

    /// Fills, for every entity, the local columns that the `extra` fields of its rows name, where the row has no
    /// value of its own (NULL, or the column's constant default, which `ALTER TABLE ... ADD COLUMN` wrote into every
    /// row); the filled keys leave `extra`. Runs inside a transaction with author `cloud-import` (the values came
    /// from the cloud). Returns how many values were filled.
    static func backfill(_ db: Connection, entities: [EntityMap], applier: RecordApplier) throws -> Int {
        var filled = 0
        for e in entities {
            var defaults: [String: Value] = [:]
            for column in try db.columns(of: e.name) {
                guard let sql = column.defaultSQL, !sql.uppercased().hasPrefix("CURRENT_"), !sql.contains("(") else {
                    continue
                }
                if let value = try? db.scalar("SELECT \(sql)") { defaults[column.name] = value }
            }
            // Through the partial index of the rows that have extra fields (few, or none): the primary key, which
            // the planner would take for `entity = ?1`, reads every row of the table.
            let rows = try db.query("""
                SELECT r.pk, r.extra FROM _storectl_records r INDEXED BY _storectl_records_extra
                WHERE r.entity = ?1 AND r.extra IS NOT NULL AND r.deleted = 0
                  AND EXISTS (SELECT 1 FROM json_each(r.extra) x WHERE x.key IN (SELECT value FROM json_each(?2)))
                """, [e.name, try e.fieldColumnsJSON(db)])
            for row in rows {
                guard let pk = row[0].string, let extra = row[1].string else { continue }
                let decoded = try applier.codec.decodeRecord(extra, columns: e.fieldColumns)
                var values: [String: Value] = [:]
                for (column, value) in decoded.values {
                    let current = try db.scalar("SELECT t.\(quoteIdentifier(column)) FROM main.\(e.quotedName) t "
                                                    + "WHERE \(e.pkMatches("t", json: "?1"))", [pk])
                    guard current == nil || current?.isNull == true || current == defaults[column] else { continue }
                    switch value {
                    case .value(let v): values[column] = v
                    case .ref(let name):
                        if let name, let ref = e.reference(for: column),
                           let key = try applier.parentKey(parent: ref.parent, recordName: name)
                        {
                            values[column] = key
                        }
                    }
                }
                if try applier.rowExists(e, pk: pk), !values.isEmpty {
                    try applier.update(e, pk: pk, values: values)
                    filled += values.count
                }
                try RecordMap(db).setExtra(entity: e.name, pk: pk, extra: decoded.extra)
            }
        }
        return filled
    }

    /// The meta key of the columns `e`'s rows were last compared with: `columns:` (recorded by the export), or a
    /// read-only participant's own `columns_compared:` (recorded by its rescan), so that a participant later given
    /// write access still compares its rows once before its first export.
    private static func comparedKey(_ e: EntityMap, readOnly: Bool) -> MetaKey {
        readOnly ? .columnsCompared(e.name) : .columns(e.name)
    }

    /// For every entity whose columns changed since the last export (meta `columns:<table>`): writes a history row (author `rescan`) for each row whose values differ from
    /// its last synced record, so that the export sends it. Returns how many rows it found.
    /// `readOnly`: a read-only participant, which sends nothing, compares its rows once per change of columns (it
    /// records them itself) and leaves out the references: a child whose parent's record was merged into another
    /// names the winner here and the loser in its last record, which is the import's doing, not a change of its own.
    static func rescan(_ db: Connection, entities: [EntityMap], readOnly: Bool = false) throws -> Int {
        var found = 0
        for e in entities {
            let now = try e.fieldColumnsJSON(db)
            let key = comparedKey(e, readOnly: readOnly)
            let before = try MirrorState.meta(db, key)
            if before == now { continue }
            // In the transaction of the comparison: both are kept, or neither.
            if readOnly { try MirrorState.setMeta(db, key, now) }
            if before == nil,
               try db.scalar("SELECT 1 FROM _storectl_records WHERE entity = ? LIMIT 1", [e.name]) == nil { continue }
            // A column the last synced record lacks differs only when the row holds something other than the
            // column's default: `ALTER TABLE ... ADD COLUMN` writes the default into every row, which is no change.
            var defaults = "NULL"
            let columns = try db.columns(of: e.name)
            let constant = columns.compactMap { c -> String? in
                guard let sql = c.defaultSQL, !sql.uppercased().hasPrefix("CURRENT_"), !sql.contains("(") else { return nil }
                return "WHEN \(quoteLiteral(c.name)) THEN \(sql)"
            }
            if !constant.isEmpty { defaults = "CASE f.key " + constant.joined(separator: " ") + " ELSE NULL END" }
            let fields = e.fieldsJSON("t")
            let references = Set(e.foreignKeys.flatMap(\.columns)).sorted()
            let skipped = readOnly && !references.isEmpty
                ? "f.key NOT IN (" + references.map(quoteLiteral).joined(separator: ", ") + ") AND" : ""
            let rows = try db.query("""
                SELECT pk, changed FROM (
                    SELECT r.pk AS pk, (
                        SELECT json_group_array(f.key) FROM json_each(\(fields)) f
                        WHERE \(skipped) CASE storectl_base_has(r.base, json_quote(f.key),
                                                     \(FieldHashes.canonicalSQL(type: "f.type", value: "f.value")))
                            WHEN 1 THEN 0 WHEN 0 THEN 1 ELSE f.value IS NOT (\(defaults)) END) AS changed
                    FROM _storectl_records r CROSS JOIN main.\(e.quotedName) t
                    WHERE r.entity = ?1 AND r.deleted = 0 AND r.change_tag IS NOT NULL AND typeof(r.base) = 'blob'
                      AND \(e.pkMatches("t", json: "r.pk")))
                WHERE changed <> '[]'
                """, [e.name])
            for row in rows {
                guard let pk = row[0].string else { continue }
                try db.run("""
                    INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed)
                    VALUES (NULL, ?1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER), ?2, ?3, 'U', ?4)
                    """, [MirrorState.rescanAuthor, e.name, pk, row[1].string ?? now])
                found += 1
            }
        }
        return found
    }

    /// The fields of columns dropped here since the last export (meta `columns:<table>` minus the table's
    /// columns) travel on with each synced row in `extra`, so that devices which still have the column never
    /// lose its value. The record map keeps no values (`FieldHashes`): they come from the cloud's records that are
    /// still the version last synced here (a newer one brings its fields with the import). One walk of the zone,
    /// only while a row waits for them, each page in a short transaction of its own (app writes go on between
    /// them; the walk can stop anywhere and starts again at the next sync). Returns how many rows it filled.
    static func keepDroppedFields(_ db: Connection, entities: [EntityMap], cloud: any CloudDatabase, zone: String)
        throws -> Int
    {
        var waiting: [(EntityMap, String)] = []
        for e in entities {
            let now = try e.fieldColumnsJSON(db)
            guard let before = try MirrorState.meta(db, .columns(e.name)), before != now else { continue }
            if try droppedFieldsWait(db, e, before: before, now: now) { waiting.append((e, now)) }
        }
        guard !waiting.isEmpty else { return 0 }
        let byType = Dictionary(uniqueKeysWithValues: waiting.map { ($0.0.name, $0.1) })
        let update = try RecordMap(db).keepFieldsStatement()
        var filled = 0
        var token: ServerChangeToken?
        while true {
            let batch = try cloud.fetchChanges(zone: zone, since: token, limit: 1000, excludingDevice: nil)
            try db.transaction {
                for record in batch.records where !record.deleted {
                    guard let now = byType[record.recordType] else { continue }
                    try update.bind([record.recordName, record.recordType, record.fields, now, record.changeTag])
                    _ = try update.step()
                    filled += db.changes
                }
            }
            token = batch.token
            if !batch.moreComing { break }
        }
        return filled
    }

    /// Whether a synced row of `e` has, in its base, a field of a column dropped since `before` that its `extra`
    /// does not hold.
    private static func droppedFieldsWait(_ db: Connection, _ e: EntityMap, before: String, now: String) throws -> Bool {
        let droppedJSON = try db.scalar("""
            SELECT json_group_array(value) FROM json_each(?1) WHERE value NOT IN (SELECT value FROM json_each(?2))
            """, [before, now])?.string ?? "[]"
        // Only rows whose base holds one of them and whose extra does not yet.
        let waiting = try db.scalar("""
            SELECT 1 FROM _storectl_records r WHERE r.entity = ?1 AND r.deleted = 0 AND typeof(r.base) = 'blob'
              AND EXISTS (SELECT 1 FROM json_each(?2) d WHERE storectl_base_has(r.base, json_quote(d.value), '') IS NOT NULL
                          AND (r.extra IS NULL OR json_type(r.extra, '$.' || json_quote(d.value)) IS NULL))
            LIMIT 1
            """, [e.name, droppedJSON])
        return waiting != nil
    }
}
