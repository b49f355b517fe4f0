import StoreSQLite

/// Generates the SQL of the four history triggers of one table.
///
/// Every identifier goes through `quoteIdentifier` and every literal through `quoteLiteral`, so a table or column
/// named with quotes, spaces or SQL in it is read as a name and nothing else. The update trigger's work is linear
/// in the number of columns: one test per column in its WHEN clause, and one `CASE` term per column in the
/// concatenation that builds `changed`.
///
/// A value is its type and its bytes: SQLite's `IS NOT` finds the integer 1 and the real 1.0 equal, so from format 3
/// a column that can hold both (no declared type, BLOB, ANY) also counts as changed when its `typeof` changed
/// (`1 -> 1.0`); typed columns, where SQLite's affinity makes that impossible, keep the one test.
struct TriggerSQL {
    /// One trigger: its name and its full `CREATE TRIGGER` statement, exactly as `sqlite_master.sql` stores it.
    struct Trigger: Equatable {
        var name: String
        var sql: String
    }

    let table: TableSchema
    /// Each column name as a JSON string (`"title"`), computed by SQLite's `json_quote`.
    let jsonNames: [String: String]
    /// The store format the triggers belong to: format 1 wrote reals in keys with 15 digits, format 2 with all of
    /// them (`ValueJSON.key`). A store keeps the triggers of its format until it is upgraded.
    var format = StoreFormat.currentVersion

    /// The statements, in the order they are created.
    var triggers: [Trigger] {
        let names = StoreFormat.triggerNames(for: table.name)
        var result = [Trigger(name: names.insert, sql: insertTrigger(names.insert))]
        if !table.nonKeyColumns.isEmpty {
            result.append(Trigger(name: names.update, sql: updateTrigger(names.update)))
        }
        result.append(Trigger(name: names.updatePK, sql: updatePKTrigger(names.updatePK)))
        result.append(Trigger(name: names.delete, sql: deleteTrigger(names.delete)))
        return result
    }

    private var entity: String { quoteLiteral(table.name) }
    private var on: String { quoteIdentifier(table.name) }

    /// The value of `ref` as JSON (`ValueJSON.key`): a user's write must never fail because of its history row.
    private func jsonSafe(_ ref: String) -> String {
        // A rowid alias always holds an integer: nothing to convert (it is a measurable part of the insert cost).
        if table.keyIsRowID && table.primaryKey.count == 1 && ref.hasSuffix("." + quoteIdentifier(table.primaryKey[0])) {
            return ref
        }
        if format < 2 { return "CASE WHEN typeof(\(ref))='blob' THEN json_object('$blob', hex(\(ref))) ELSE \(ref) END" }
        return ValueJSON.key(ref)
    }

    private func pkArray(_ row: String) -> String {
        "json_array(" + table.primaryKey.map { jsonSafe("\(row).\(quoteIdentifier($0))") }.joined(separator: ", ") + ")"
    }

    private func tombstoneObject(_ row: String) -> String {
        "json_object(" + table.tombstone.map {
            "\(quoteLiteral($0)), " + jsonSafe("\(row).\(quoteIdentifier($0))")
        }.joined(separator: ", ") + ")"
    }

    /// The values every history row starts with: tx, author, ts, entity.
    private var common: String {
        "(SELECT tx FROM _storectl_context WHERE id = 1), "
            + "coalesce((SELECT author FROM _storectl_context WHERE id = 1), \(quoteLiteral(StoreFormat.externalAuthor))), "
            + StoreFormat.nowMillisecondsSQL + ", " + entity
    }

    /// Whether column `c` changed between OLD and NEW: its value, or (format 3) only its type. A disjunction
    /// without parentheses: it is only ever OR-ed with others, or a `CASE WHEN` of its own.
    private func changed(_ c: String) -> String {
        let old = "OLD.\(quoteIdentifier(c))", new = newValue(c)
        if format < 3 || !holdsEitherNumber(c) { return "\(old) IS NOT \(new)" }
        return "\(old) IS NOT \(new) OR typeof(\(old)) <> typeof(\(new))"
    }

    /// `NEW.c` as the comparisons read it. SQLite compares two column values under the column's collation, so
    /// under `NOCASE` or `RTRIM` `'alice' IS NOT 'Alice'` is false and a change of case (or of trailing spaces) was
    /// never recorded, so never synced. From format 5 every column outside the primary key compares as `BINARY`: a
    /// value is its bytes. Key columns keep their collation: to SQLite (and its foreign-key actions) `'Urgent'` is
    /// still the row `'urgent'` was, and a change of the key's case only is not sent (docs/sync-guarantees.md).
    private func newValue(_ c: String) -> String {
        let new = "NEW.\(quoteIdentifier(c))"
        if format < 5 || table.primaryKey.contains(c) { return new }
        return new + " COLLATE BINARY"
    }

    /// Whether column `c` can hold both an integer and a real that `IS NOT` finds equal (1 and 1.0), the only
    /// values of different types it finds equal: a column of BLOB affinity (no declared type, or one that names
    /// BLOB; SQLite's "Determination Of Column Affinity"), or `ANY` (a STRICT table's column that converts
    /// nothing). Any other column converts a real that is an integer into an integer (INTEGER, NUMERIC), every
    /// number into a real (REAL) or into text (TEXT), so its update trigger pays for no `typeof` test.
    private func holdsEitherNumber(_ c: String) -> Bool {
        if table.keyIsRowID && table.primaryKey == [c] { return false }  // the rowid alias: always an integer
        let type = (table.columns.first { $0.name == c }?.declaredType ?? "").uppercased()
        if type.contains("INT") || type.contains("CHAR") || type.contains("CLOB") || type.contains("TEXT") {
            return false
        }
        if type.isEmpty || type.contains("BLOB") { return true }
        if type.contains("REAL") || type.contains("FLOA") || type.contains("DOUB") { return false }
        return type == "ANY"
    }

    /// The key did not change: neither its value nor (format 3) its type. Format 2 wrote `OLD.k IS NEW.k`, the
    /// exact text its stores hold (a store keeps its format's triggers until upgraded).
    private var pkUnchanged: String {
        table.primaryKey.map { c -> String in
            let old = "OLD.\(quoteIdentifier(c))", new = newValue(c)
            if format < 3 || !holdsEitherNumber(c) { return "\(old) IS \(new)" }
            return "\(old) IS \(new) AND typeof(\(old)) = typeof(\(new))"
        }.joined(separator: " AND ")
    }

    private var pkChanged: String {
        table.primaryKey.map { changed($0) }.joined(separator: " OR ")
    }

    private func insertTrigger(_ name: String) -> String {
        """
        CREATE TRIGGER \(quoteIdentifier(name)) AFTER INSERT ON \(on) BEGIN
          INSERT INTO _storectl_history(tx, author, ts, entity, pk, op)
            VALUES (\(common), \(pkArray("NEW")), 'I');
        END
        """
    }

    private func updateTrigger(_ name: String) -> String {
        let columns = table.nonKeyColumns
        let differs = columns.map(changed).joined(separator: " OR ")
        let terms = columns.map { c -> String in
            let literal = quoteLiteral("," + (jsonNames[c] ?? "\"\(c)\""))
            return "CASE WHEN \(changed(c)) THEN \(literal) ELSE '' END"
        }.joined(separator: " || ")
        return """
            CREATE TRIGGER \(quoteIdentifier(name)) AFTER UPDATE ON \(on)
            WHEN \(pkUnchanged) AND (\(differs)) BEGIN
              INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed)
                VALUES (\(common), \(pkArray("NEW")), 'U', '[' || substr(\(terms), 2) || ']');
            END
            """
    }

    private func updatePKTrigger(_ name: String) -> String {
        """
        CREATE TRIGGER \(quoteIdentifier(name)) AFTER UPDATE ON \(on)
        WHEN \(pkChanged) BEGIN
          INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, tombstone)
            VALUES (\(common), \(pkArray("OLD")), 'D', \(tombstoneObject("OLD")));
          INSERT INTO _storectl_history(tx, author, ts, entity, pk, op)
            VALUES (\(common), \(pkArray("NEW")), 'I');
        END
        """
    }

    private func deleteTrigger(_ name: String) -> String {
        """
        CREATE TRIGGER \(quoteIdentifier(name)) AFTER DELETE ON \(on) BEGIN
          INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, tombstone)
            VALUES (\(common), \(pkArray("OLD")), 'D', \(tombstoneObject("OLD")));
        END
        """
    }
}
