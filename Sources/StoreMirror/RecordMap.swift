import StoreBase
import StoreCloud
import StoreHistory
import StoreSQLite

/// The record map, its aliases and its rename marks (`RecordMapEntry`, `RecordAlias`, `RenameMark`): which record
/// each local row is, which names stand for another record, and which keys an export renamed.
///
/// The one writer of those three tables: every statement that inserts, updates or deletes one of them is here
/// (a test reads the sources to hold that). Reads stay where they are needed, often joined to a user's table.
/// Set-based writes that depend on the caller's SQL (the import's staged page, a migration's temporary tables)
/// take that SQL as arguments; the statement that changes the map is still this type's.
public struct RecordMap {
    let db: Connection

    public init(_ db: Connection) {
        self.db = db
    }

    // MARK: Names kept or derived

    /// What the map keeps in `stored_name` for record `name` of (entity, pk): nothing when the name is
    /// `entity:pk` (compared as bytes, as SQLite does) and the table's name has no colon, so that the name can be
    /// read back from the key alone; the name otherwise.
    static func storedName(_ name: String, entity: String, pk: String) -> String? {
        let n = name.utf8, e = entity.utf8, colon = UInt8(ascii: ":")
        if !e.contains(colon), n.count == e.count + 1 + pk.utf8.count, n.starts(with: e),
           n.dropFirst(e.count).first == colon, n.dropFirst(e.count + 1).elementsEqual(pk.utf8)
        {
            return nil
        }
        return name
    }

    /// `storedName` in SQL, over the expressions `name`, `entity` and `pk`.
    static func storedNameSQL(_ name: String, entity: String, pk: String) -> String {
        "CASE WHEN \(name) = \(entity) || ':' || \(pk) AND instr(\(entity), ':') = 0 THEN NULL ELSE \(name) END"
    }

    /// A condition: the entry aliased `alias` (nil: the statement's one table) is record `name` (an SQL
    /// expression, evaluated more than once). A kept name is found through the name index, a derived one through
    /// the primary key (its table is the name up to the first colon, its key the rest); SQLite uses both. Another
    /// condition on the entry's `entity` must be written `+entity = ...`: as an index term it makes SQLite scan
    /// every entry of the table instead.
    public static func named(_ name: String, _ alias: String? = nil) -> String {
        let a = alias.map { "\($0)." } ?? ""
        // The last term compares every byte (`substr` stops at a NUL a name could hold); it is no index term.
        return "(\(a)stored_name = \(name) OR (\(a)stored_name IS NULL AND \(a)entity = substr(\(name), 1, "
            + "instr(\(name), ':') - 1) AND \(a)pk = substr(\(name), instr(\(name), ':') + 1) "
            + "AND \(a)entity || ':' || \(a)pk = \(name)))"
    }

    // MARK: One entry

    /// The upsert of an entry, prepared once per connection: ?8 is the name, ?3 what the map keeps of it. Nothing
    /// is written when another key holds the name. `holder` finds that other key.
    private static func upsertSQL(holder: String) -> String {
        """
        INSERT INTO _storectl_records(entity, pk, stored_name, change_tag, base, deleted, extra)
        SELECT ?1, ?2, ?3, ?4, \(FieldHashes.sql("?5")), ?6, ?7
        WHERE NOT EXISTS (SELECT 1 FROM _storectl_records o WHERE \(holder) AND NOT (o.entity = ?1 AND o.pk = ?2))
        ON CONFLICT(entity, pk) DO UPDATE SET stored_name = excluded.stored_name, change_tag = excluded.change_tag,
            base = excluded.base, deleted = excluded.deleted, extra = excluded.extra
        """
    }

    /// For a name derived from its own key: another key can hold it only as a kept name (the key a derived name
    /// reads back to is this one).
    private static let upsertDerivedSQL = upsertSQL(holder: "o.stored_name = ?8")
    /// For a kept name: another key holds it kept, or derived from that key.
    private static let upsertKeptSQL = upsertSQL(holder: named("?8", "o"))

    /// Points `name` at (entity, pk), detaching the name from any other key first.
    /// `base`: a record's fields (JSON text, hashed here) or a base already hashed (`FieldHashes`).
    func set(entity: String, pk: String, name: String, tag: String?, base: Value?, extra: String? = nil,
             deleted: Bool) throws
    {
        try db.run("DELETE FROM _storectl_records WHERE \(Self.named("?1")) AND NOT (entity = ?2 AND pk = ?3)",
                   [name, entity, pk])
        try upsert(entity: entity, pk: pk, name: name, tag: tag, base: base, extra: extra, deleted: deleted,
                   detached: true)
    }

    /// Records (entity, pk) as record `name` at `tag`: the same as `set`, on the hot path of an import or an
    /// export of a million rows (one prepared statement, values bound in place), detaching the name from another
    /// key only when it is attached to one.
    func record(entity: String, pk: String, name: String, tag: String?, base: Value?, extra: String?,
                deleted: Bool) throws
    {
        try upsert(entity: entity, pk: pk, name: name, tag: tag, base: base, extra: extra, deleted: deleted,
                   detached: false)
    }

    private func upsert(entity: String, pk: String, name: String, tag: String?, base: Value?, extra: String?,
                        deleted: Bool, detached: Bool) throws
    {
        let stored = Self.storedName(name, entity: entity, pk: pk)
        let s = try db.cached(stored == nil ? Self.upsertDerivedSQL : Self.upsertKeptSQL)
        try s.bind(.text(entity), at: 1)
        try s.bind(.text(pk), at: 2)
        try s.bind(stored.map { .text($0) } ?? .null, at: 3)
        try s.bind(tag.map { .text($0) } ?? .null, at: 4)
        try s.bind(base ?? .null, at: 5)
        try s.bind(.integer(deleted ? 1 : 0), at: 6)
        try s.bind(extra.map { .text($0) } ?? .null, at: 7)
        try s.bind(.text(name), at: 8)
        try s.step()
        if db.changes == 0 {
            // The name belongs to another key of the map (a row renamed, a deleted row's old rowid): move it here.
            guard !detached else {
                throw StoreError(.software, "record \(name) is still held by another row of the record map after "
                                 + "it was detached", hint: "run 'storectl doctor' and report it")
            }
            try set(entity: entity, pk: pk, name: name, tag: tag, base: base, extra: extra, deleted: deleted)
        }
    }

    /// Marks record `name` deleted here (a tombstone with no base).
    func markDeleted(name: String) throws {
        try db.run("UPDATE _storectl_records SET deleted = 1, base = NULL WHERE \(Self.named("?1"))", [name])
    }

    /// Forgets record `name`.
    func remove(name: String) throws {
        try db.run("DELETE FROM _storectl_records WHERE \(Self.named("?1"))", [name])
    }

    /// Forgets the entry of (entity, pk) when it never reached the cloud (no change tag): nothing to delete there.
    func removeUnsaved(entity: String, pk: String) throws {
        try db.run("DELETE FROM _storectl_records WHERE entity = ? AND pk = ? AND change_tag IS NULL", [entity, pk])
    }

    /// Forgets the change tag `name` was last applied at, so that the record is applied again whole
    /// (`sync --discard-local`, which puts a row back to its record's values).
    func forgetTag(name: String) throws {
        try db.run("UPDATE _storectl_records SET change_tag = NULL WHERE \(Self.named("?1"))", [name])
    }

    /// Moves record `name` from change tag `old` to `new` when the map has it at `old`: the record was saved
    /// again with the same values (sealed with the zone's current key, `ZoneReencryption`).
    func retag(name: String, from old: String, to new: String) throws {
        try db.cached("UPDATE _storectl_records SET change_tag = ?1 WHERE \(Self.named("?2")) AND change_tag = ?3")
            .forEach([new, name, old]) { _ in }
    }

    /// Records that record `name` was last synced at `tag` with `fields` (hashed here).
    func setSynced(name: String, tag: String, fields: String) throws {
        try db.run("UPDATE _storectl_records SET change_tag = ?1, base = \(FieldHashes.sql("?2")) WHERE \(Self.named("?3"))",
                   [tag, fields, name])
    }

    /// Sets the fields the local table lacks of (entity, pk).
    func setExtra(entity: String, pk: String, extra: String?) throws {
        try db.run("UPDATE _storectl_records SET extra = ?3 WHERE entity = ?1 AND pk = ?2", [entity, pk, extra])
    }

    /// Sets the base (already hashed) of (entity, pk).
    func setBase(entity: String, pk: String, base: Value) throws {
        let s = try db.cached("UPDATE _storectl_records SET base = ?1 WHERE entity = ?2 AND pk = ?3")
        try s.bind([base, entity, pk])
        try s.step()
    }

    /// Gives (entity, pk) the name `name` when it has none, or renames it (a default row seeded under a name every
    /// device derives alike). Tags and bases stay.
    func assignName(entity: String, pk: String, name: String) throws {
        try db.run("""
            INSERT INTO _storectl_records(entity, pk, stored_name, change_tag, base, deleted) VALUES (?, ?, ?, NULL, NULL, 0)
            ON CONFLICT(entity, pk) DO UPDATE SET stored_name = excluded.stored_name
            """, [entity, pk, Self.storedName(name, entity: entity, pk: pk)])
    }

    // MARK: Names

    /// Gives a record name to every row that `source` (SQL with alias `t` for the table) selects and that has none
    /// yet (`EntityMap.derivedName`).
    func assignDerivedNames(_ e: EntityMap, source: String) throws {
        try db.run("""
            INSERT OR IGNORE INTO _storectl_records(entity, pk, stored_name, change_tag, base, deleted)
            SELECT \(quoteLiteral(e.name)), \(e.pkJSON("t")),
                   \(Self.storedNameSQL(e.derivedName("t"), entity: quoteLiteral(e.name), pk: e.pkJSON("t"))),
                   NULL, NULL, 0 FROM \(source)
            WHERE NOT EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = \(quoteLiteral(e.name))
                              AND r.pk = \(e.pkJSON("t")))
              AND NOT EXISTS (SELECT 1 FROM _storectl_records o WHERE \(Self.holderOfDerivedName(e, "t", "o")))
            """)
    }

    /// A condition: entry `o` holds the name `e` derives for its row aliased `t`, which the map does not know. A
    /// surrogate name, or a natural one made of the row's own key values, reads back to no key but the row's own
    /// (a JSON key always starts with `[`): only a kept name can be it. A natural name made of parents' names
    /// (`EntityMap.naturalName` of a key that is a reference) is looked up both ways.
    static func holderOfDerivedName(_ e: EntityMap, _ t: String, _ o: String) -> String {
        let keyIsAReference = !e.isSurrogate && e.primaryKey.contains { e.reference(for: $0) != nil }
        return keyIsAReference ? named(e.derivedName(t), o) : "\(o).stored_name = \(e.derivedName(t))"
    }

    /// Rows `source` selects (`t`, filtered by `changed`) that the map does not know and whose derived name
    /// another entry holds: each gets a name of its own (the derived name and a random suffix).
    func nameRowsWhoseNameIsTaken(_ e: EntityMap, source: String, changed: String) throws {
        try db.execute("""
            INSERT INTO _storectl_records(entity, pk, stored_name, change_tag, base, deleted)
            SELECT \(quoteLiteral(e.name)), \(e.pkJSON("t")),
                   \(e.derivedName("t")) || '.' || lower(hex(randomblob(6))), NULL, NULL, 0
            FROM \(source)
            WHERE \(changed) NOT EXISTS (SELECT 1 FROM _storectl_records m WHERE m.entity = \(quoteLiteral(e.name))
                                       AND m.pk = \(e.pkJSON("t")))
              AND EXISTS (SELECT 1 FROM _storectl_records o WHERE \(Self.holderOfDerivedName(e, "t", "o")))
            """)
    }

    /// Deleted entries of `e` (rowid keys) whose key a live row holds again, within `scope` (a condition on `r`,
    /// or empty for all): each becomes a new record (a new name, never synced).
    func renameRevived(_ e: EntityMap, scope: String) throws {
        let revived = """
            r.entity = \(quoteLiteral(e.name)) AND r.deleted = 1 \(scope)
              AND EXISTS (SELECT 1 FROM main.\(e.quotedName) t WHERE \(e.pkMatches("t", json: "r.pk")))
            """
        guard try db.scalar("SELECT EXISTS (SELECT 1 FROM _storectl_records AS r WHERE \(revived))")?.int64 == 1
        else { return }
        // The latest insert at each such key, in one pass over the history since the export token.
        try db.execute("""
            DROP TABLE IF EXISTS temp._storectl_inserted;
            CREATE TEMP TABLE _storectl_inserted(pk TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
            """)
        defer { try? db.execute("DROP TABLE IF EXISTS temp._storectl_inserted") }
        try db.run("""
            INSERT INTO temp._storectl_inserted(pk, seq)
            SELECT h.pk, max(h.seq) FROM _storectl_history h
            WHERE h.seq > ?1 AND h.entity = ?2 AND h.op = 'I' AND h.author <> ?3
                AND h.pk IN (SELECT r.pk FROM _storectl_records AS r WHERE \(revived))
            GROUP BY h.pk
            """, [try MirrorState.exportToken(db), e.name, MirrorState.importAuthor])
        let insert = "(SELECT i.seq FROM temp._storectl_inserted i WHERE i.pk = r.pk)"
        try db.execute("""
            UPDATE _storectl_records AS r SET stored_name = \(Self.reusedNameSQL(e, pk: "r.pk", insertSeq: insert)),
                change_tag = NULL, base = NULL, extra = NULL, deleted = 0
            WHERE \(revived)
            """)
    }

    /// Gives the live row at rowid key `pk` a new record (a new name, never synced): its rowid was reused, by the
    /// insert at history seq `insertSeq`.
    func renameReused(_ e: EntityMap, pk: String, insertSeq: Int64?) throws {
        try db.run("""
            UPDATE _storectl_records SET stored_name = \(Self.reusedNameSQL(e, pk: "?2", insertSeq: "?3")),
                change_tag = NULL, base = NULL, extra = NULL
            WHERE entity = ?1 AND pk = ?2
            """, [e.name, pk, insertSeq.map(Value.integer) ?? .null])
    }

    /// SQL for the new name of the row at rowid key `pk` (an expression) of `e`, a row inserted at the rowid of
    /// another by the insert at history seq `insertSeq` (an expression): the store's name for the rowid, and after a
    /// dot that insert's history seq and time (random hex digits when `insertSeq` is NULL or history no longer
    /// holds it). Made from the store's own history, the name is the same whenever it is made for that insert: a
    /// copy of the store taken after the insert and restored after its later self sent the row finds the record
    /// the row was sent as (`Reconciler`), instead of sending the row again under a name of its own.
    static func reusedNameSQL(_ e: EntityMap, pk: String, insertSeq: String) -> String {
        """
        \(e.surrogateName("json_extract(\(pk), '$[0]')")) || '.' || coalesce(
            (SELECT printf('%x-%x', h.seq, h.ts) FROM _storectl_history h WHERE h.seq = \(insertSeq) AND h.op = 'I'),
            lower(hex(randomblob(6))))
        """
    }

    /// The entry of the row `pk` of `entity`, or nil.
    func entry(entity: String, pk: String) throws -> RecordMapEntry? {
        try first(db.cached("SELECT \(RecordMapEntry.columns) FROM _storectl_records WHERE entity = ?1 AND pk = ?2"),
                  [entity, pk])
    }

    /// The entry of record `name` (a kept name or one derived from its key), or nil.
    func entry(named name: String) throws -> RecordMapEntry? {
        try first(db.cached("SELECT \(RecordMapEntry.columns) FROM _storectl_records WHERE \(Self.named("?1"))"), [name])
    }

    private func first(_ s: Statement, _ values: [any SQLBindable]) throws -> RecordMapEntry? {
        try s.bind(values)
        defer { try? s.reset() }
        return try s.step() ? RecordMapEntry(s) : nil
    }

    /// A read-only participant's row at key `pk` is not the record its entry names (the row was deleted here and
    /// another inserted at its key): `renaming` gives the row a new record, and the old record, when it was saved,
    /// is kept under a key no row has (`goneKey`), for the cloud's later changes (the import takes it for a new
    /// record: the cloud's value comes back as a row of its own, `forgetGone`) and `sync --discard-local`
    /// (`goneEntries`). Nothing is sent: the participant's deletion stays its own.
    func keepGone(entity: String, pk: String, renaming: () throws -> Void) throws {
        let old = try self.entry(entity: entity, pk: pk)
        try renaming()
        guard let old, let tag = old.changeTag, !old.deleted else { return }
        let gone = try db.scalar("SELECT \(Self.goneKey("?1", name: "?2"))", [pk, old.recordName])?.string ?? ""
        try db.run("""
            INSERT OR REPLACE INTO _storectl_records(entity, pk, stored_name, change_tag, base, deleted, extra)
            VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6)
            """, [entity, gone, Self.storedName(old.recordName, entity: entity, pk: gone), tag, old.base ?? .null,
                  old.extra])
    }

    /// The key an entry kept under `gone` (`goneKey`) had.
    func keyBeforeGone(_ gone: String) throws -> String? {
        try db.scalar("SELECT json_extract(?, '$[1]')", [gone])?.string
    }

    /// The key no row has that a record no longer at `pk` is kept under: `["$gone", <pk>, <name>]` (a key's
    /// values are never an array, so no row's key reads the same).
    static func goneKey(_ pk: String, name: String) -> String { "json_array('$gone', json(\(pk)), \(name))" }

    /// A condition on entry `m`: it is kept under a key no row has (`goneKey`): the only keys whose second value
    /// is an array (a key's values never are).
    public static func keptGone(_ m: String) -> String { "json_type(\(m).pk, '$[1]') IS 'array'" }

    /// SQL for the key entry `m` stands for: the key it had when it is kept under a key no row has (`keptGone`),
    /// else its own.
    public static func keyHeld(_ m: String) -> String {
        "CASE WHEN \(keptGone(m)) THEN json_extract(\(m).pk, '$[1]') ELSE \(m).pk END"
    }

    /// A condition on entry `m` of `entity`: it is kept under a key no row has (`keptGone`), searched as a range of
    /// the map's primary key.
    static func isGone(_ m: String, entity: String) -> String {
        "\(m).entity = \(entity) AND \(m).pk >= '[\"$gone\",[' AND \(m).pk < '[\"$gone\",\\' AND \(keptGone(m))"
    }

    /// Forgets the entries kept under a key no row has (`keepGone`) whose record arrives in this import (a
    /// record of `staged`, a table with `record_name`): a live record is then a new record here, applied as a
    /// row of its own, and a tombstone finds nothing to delete.
    func forgetGone(arriving staged: String, entities: [String]) throws {
        for entity in entities {
            try db.run("""
                DELETE FROM _storectl_records WHERE (entity, pk) IN (
                    SELECT g.entity, g.pk FROM _storectl_records g
                    WHERE \(Self.isGone("g", entity: "?1"))
                      AND EXISTS (SELECT 1 FROM \(staged) s WHERE s.record_name = g.record_name))
                """, [entity])
        }
    }

    /// The saved records of `entity` kept under a key no row has (`keepGone`).
    func goneEntries(entity: String) throws -> [RecordMapEntry] {
        var entries: [RecordMapEntry] = []
        try db.prepare("SELECT \(RecordMapEntry.columns) FROM _storectl_records g WHERE \(Self.isGone("g", entity: "?1")) "
                       + "AND g.change_tag IS NOT NULL").forEach([entity]) { entries.append(RecordMapEntry($0)) }
        return entries
    }

    /// Puts the entry kept under `gone` (`keepGone`) back at key `pk`, which no entry holds.
    func moveGone(entity: String, from gone: String, to pk: String, name: String) throws {
        try db.run("UPDATE _storectl_records SET pk = ?3, stored_name = ?4 WHERE entity = ?1 AND pk = ?2",
                   [entity, gone, pk, Self.storedName(name, entity: entity, pk: pk)])
    }

    /// Forgets the entry at `pk` (`goneEntries`).
    func forget(entity: String, pk: String) throws {
        try db.run("DELETE FROM _storectl_records WHERE entity = ? AND pk = ?", [entity, pk])
    }

    /// Gives (entity, pk) the record name `wanted` (with a random suffix when another entry holds it), never
    /// synced. With `carryingOn`, the row is its old record still under the new name: the entry keeps the old
    /// record's base and the fields the table lacks, so that the new record starts from them (and a change the
    /// old record got elsewhere meanwhile is told from this row's own, `Exporter.followOldRecord`).
    func rename(entity: String, pk: String, to wanted: String, carryingOn: Bool = false) throws {
        let taken = try db.scalar("SELECT EXISTS (SELECT 1 FROM _storectl_records WHERE \(Self.named("?1")))",
                                  [wanted])?.int64 == 1
        let name = taken ? try db.scalar("SELECT ?1 || '.' || lower(hex(randomblob(6)))", [wanted])?.string ?? wanted
            : wanted
        try db.run("""
            UPDATE _storectl_records SET stored_name = ?1, change_tag = NULL, base = CASE WHEN ?5 THEN base END,
                extra = CASE WHEN ?5 THEN extra END, deleted = 0
            WHERE entity = ?3 AND pk = ?4
            """, [Self.storedName(name, entity: entity, pk: pk), taken, entity, pk, carryingOn])
    }

    /// A condition on history row `h`: it is past what a rename of its key already looked at.
    static let notRenamedFor = """
        h.seq > coalesce((SELECT x.upto FROM _storectl_renamed x WHERE x.entity = h.entity AND x.pk = h.pk), 0)
        """

    /// Records that the key was renamed for its history up to `upto`.
    func markRenamed(entity: String, pk: String, upto: Int64) throws {
        try db.run("INSERT OR REPLACE INTO _storectl_renamed(entity, pk, upto) VALUES (?, ?, ?)", [entity, pk, upto])
    }

    /// Marks the keys of `entity` that no record names yet and whose history after `token` deletes a row and
    /// inserts one again: the name an export derives for such a row covers that history, so that a resumed export
    /// does not take the row for a reused rowid once the map holds that name.
    func markReinsertedNewRows(entity: String, after token: Int64) throws {
        try db.run("""
            INSERT OR REPLACE INTO _storectl_renamed(entity, pk, upto)
            SELECT h.entity, h.pk, max(h.seq) FROM _storectl_history h
            WHERE h.seq > ?1 AND h.entity = ?2 AND h.author <> ?3 AND \(Self.notRenamedFor)
              AND NOT EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = h.entity AND r.pk = h.pk)
            GROUP BY h.pk
            HAVING min(CASE WHEN h.op = 'D' THEN h.seq END) < max(CASE WHEN h.op = 'I' THEN h.seq END)
            """, [token, entity, MirrorState.importAuthor])
    }

    /// Forgets the rename marks whose history the export token has passed.
    func forgetRenames(upTo token: Int64) throws {
        try db.run("DELETE FROM _storectl_renamed WHERE upto <= ?", [token])
    }

    /// The last history seq an export's rename of a reused rowid looked at for this key.
    func renamedUpTo(entity: String, pk: String) throws -> Int64? {
        try db.scalar("SELECT upto FROM _storectl_renamed WHERE entity = ? AND pk = ?", [entity, pk])?.int64
    }

    // MARK: Aliases

    /// Record `name` (of `entity`) was merged into `target` as a duplicate: the name stands for `target` from now
    /// on. An alias never points at another alias.
    func alias(_ name: String, to target: String, entity: String) throws {
        try db.run("INSERT OR REPLACE INTO _storectl_aliases(record_name, entity, target) VALUES (?, ?, ?)",
                   [name, entity, target])
        try db.run("UPDATE _storectl_aliases SET target = ?2 WHERE target = ?1", [name, target])
    }

    /// Where record `name` was merged, or nil.
    func aliasTarget(of name: String) throws -> String? {
        try db.scalar("SELECT target FROM _storectl_aliases WHERE record_name = ?", [name])?.string
    }

    // MARK: The whole map

    /// Forgets every change tag, base and tombstone, keeping the names (a baseline upload follows).
    func forgetSyncedState() throws {
        try db.execute("""
            DELETE FROM _storectl_records WHERE deleted = 1;
            UPDATE _storectl_records SET change_tag = NULL, base = NULL, extra = NULL;
            """)
    }

    /// Converts, once, the bases of a record map made before they were fingerprints (`FieldHashes`); see
    /// `MirrorState.hashBases`. Runs inside the caller's transaction.
    func convertBasesToHashes() throws {
        // `extra` keeps what it holds (a column added here since, not filled yet, is filled from it by the next
        // sync) and gains the fields of the base the table lacks.
        try db.execute("""
            UPDATE _storectl_records SET extra = (
                SELECT CASE WHEN count(*) = 0 THEN NULL ELSE json_group_object(k, v) END FROM (
                    SELECT x.key AS k, \(FieldCodec.jsonOf("x.type", "x.value")) AS v
                    FROM json_each(coalesce(_storectl_records.extra, '{}')) x
                    UNION ALL
                    SELECT b.key, \(FieldCodec.jsonOf("b.type", "b.value")) FROM json_each(_storectl_records.base) b
                    WHERE b.key NOT IN (SELECT name FROM pragma_table_info(_storectl_records.entity))
                      AND b.key NOT IN (SELECT key FROM json_each(coalesce(_storectl_records.extra, '{}')))))
            WHERE typeof(base) = 'text' AND deleted = 0 AND json_valid(base) AND json_type(base) = 'object'
              AND (extra IS NULL OR json_valid(extra));
            UPDATE _storectl_records SET base = CASE WHEN json_valid(base) AND json_type(base) = 'object'
                THEN \(FieldHashes.sql("base")) END WHERE typeof(base) = 'text';
            """)
    }

    /// The statement that keeps, in `extra`, the fields of a cloud record that the local table lacks (columns
    /// dropped here): bind record name, entity, the record's fields, the table's field columns (JSON array) and
    /// the record's change tag; only an entry still at that tag changes.
    func keepFieldsStatement() throws -> Statement {
        try db.cached("""
            UPDATE _storectl_records SET extra = (
                SELECT CASE WHEN count(*) = 0 THEN NULL ELSE json_group_object(f.key, \(FieldCodec.jsonOf("f.type", "f.value"))) END
                FROM json_each(?3) f WHERE f.key NOT IN (SELECT value FROM json_each(?4)))
            WHERE \(Self.named("?1")) AND +entity = ?2 AND change_tag = ?5 AND deleted = 0 AND typeof(base) = 'blob'
            """)
    }

    // MARK: Set-based writes with the caller's SQL

    /// The entries of a run of an import's staged page (`PageApplier`): `source` joins the decisions `k` (`kind`,
    /// `pk`) to the staged records `p` (`record_name`, `change_tag`, `fields`), `filter` picks the run's rows of
    /// `entity` (whose field columns are `columns`).
    enum PageWrite {
        /// Tombstones applied (`delete`) or of rows already gone (`gone`).
        case tombstones
        /// Newer versions of known rows (`update`).
        case updates
        /// New rows (`new`), at the keys `k.pk`.
        case inserts
    }

    /// The SQL of one `PageWrite` (bind the run's bounds as the caller's `filter` expects).
    static func pageSQL(_ write: PageWrite, entity: String, columns: [String], source: String, filter: String)
        -> String
    {
        let name = quoteLiteral(entity)
        switch write {
        case .tombstones:
            return """
                UPDATE main._storectl_records AS r SET change_tag = p.change_tag, base = NULL, deleted = 1, extra = NULL
                FROM \(source) WHERE \(filter) AND k.kind IN ('delete', 'gone') AND r.entity = \(name) AND r.pk = k.pk
                """
        case .updates:
            return """
                UPDATE main._storectl_records AS r SET change_tag = p.change_tag,
                    base = \(FieldHashes.sql(record: "p.fields", columns: columns)), deleted = 0, extra = NULL
                FROM \(source) WHERE \(filter) AND k.kind = 'update' AND r.entity = \(name) AND r.pk = k.pk
                """
        case .inserts:
            return """
                INSERT INTO main._storectl_records(entity, pk, stored_name, change_tag, base, deleted, extra)
                SELECT \(name), k.pk, \(storedNameSQL("p.record_name", entity: name, pk: "k.pk")), p.change_tag,
                       \(FieldHashes.sql(record: "p.fields", columns: columns)), 0, NULL
                FROM \(source) WHERE \(filter) AND k.kind = 'new' ORDER BY k.pk
                ON CONFLICT(entity, pk) DO UPDATE SET stored_name = excluded.stored_name,
                    change_tag = excluded.change_tag, base = excluded.base, deleted = 0, extra = NULL
                """
        }
    }

    /// Sets the base of the live entries of `entity` that `condition` (on `r`, with `local` rows `l` from
    /// `localSQL`) picks to the hashes of `fields` (an expression over `r` and `l`). Returns how many changed.
    func rebase(entity: String, localSQL: String, fields: String, condition: String,
                _ arguments: [any SQLBindable]) throws -> Int
    {
        try db.run("""
            UPDATE _storectl_records AS r SET base = \(FieldHashes.sql(fields))
            FROM (\(localSQL)) AS l
            WHERE r.entity = ?1 AND r.pk = l.pk AND r.deleted = 0 AND \(condition)
            """, [entity] + arguments)
        return db.changes
    }

    /// Forgets the live entries of `entity` that `condition` (on `r`) picks and whose row `localSQL` no longer
    /// selects. Returns how many.
    func removeRowless(entity: String, localSQL: String, condition: String, _ arguments: [any SQLBindable]) throws
        -> Int
    {
        try db.run("""
            DELETE FROM _storectl_records AS r WHERE r.entity = ?1 AND r.deleted = 0 AND \(condition)
              AND NOT EXISTS (SELECT 1 FROM (\(localSQL)) l WHERE l.pk = r.pk)
            """, [entity] + arguments)
        return db.changes
    }

    /// Moves the entries of `entity` to new keys in one go (the keys may be a permutation): `pairs` (a table with
    /// `old_pk`, `new_pk`) says where each row went, `was` (a table with `pk`) the keys the rows had. A synced
    /// row that matched nothing and whose key another row now has keeps its record under a key no row can have,
    /// for its deletion.
    public func rekey(entity: String, pairs: String, was: String) throws {
        let name = quoteLiteral(entity)
        try db.execute("""
            DROP TABLE IF EXISTS temp._storectl_moved;
            CREATE TEMP TABLE _storectl_moved AS
                SELECT r.record_name, r.change_tag, r.base, r.deleted, r.extra,
                       coalesce(p.new_pk, json_array('$gone', r.pk)) AS pk
                FROM _storectl_records r LEFT JOIN \(pairs) p ON p.old_pk = r.pk
                WHERE r.entity = \(name) AND r.pk IN (SELECT pk FROM \(was))
                  AND (p.old_pk IS NOT NULL AND p.old_pk <> p.new_pk
                       OR p.old_pk IS NULL AND r.pk IN (SELECT new_pk FROM \(pairs)));
            DELETE FROM _storectl_records WHERE entity = \(name)
                AND (pk IN (SELECT old_pk FROM \(pairs) WHERE old_pk <> new_pk)
                     OR pk IN (SELECT new_pk FROM \(pairs) WHERE old_pk <> new_pk));
            DELETE FROM _storectl_records WHERE (entity, pk) IN (
                SELECT r.entity, r.pk FROM temp._storectl_moved m JOIN _storectl_records r
                ON \(Self.named("m.record_name", "r")));
            INSERT INTO _storectl_records(entity, pk, stored_name, change_tag, base, deleted, extra)
                SELECT \(name), pk, \(Self.storedNameSQL("record_name", entity: name, pk: "pk")), change_tag, base,
                       deleted, extra FROM temp._storectl_moved;
            DROP TABLE temp._storectl_moved;
            """)
    }

    /// Rebuilds a record map made before `stored_name` (sync tables version 3) in this shape, keeping only the
    /// names not derived from their key. Runs inside `SyncTables.install`'s transaction, before the tables are made.
    /// The entries wait in a temporary table while the map is made again under its own name: no `ALTER TABLE
    /// RENAME`, which would rewrite a user's views and triggers that read the map to name the old table.
    func adoptStoredNames() throws {
        try db.execute("""
            DROP TABLE IF EXISTS temp._storectl_records_before_v3;
            CREATE TEMP TABLE _storectl_records_before_v3 AS
                SELECT entity, pk, record_name, change_tag, base, deleted, extra FROM main._storectl_records;
            DROP TABLE main._storectl_records;
            \(RecordMapEntry.createSQL)
            INSERT INTO main._storectl_records(entity, pk, stored_name, change_tag, base, deleted, extra)
                SELECT entity, pk, \(Self.storedNameSQL("record_name", entity: "entity", pk: "pk")), change_tag, base,
                       deleted, extra FROM temp._storectl_records_before_v3 ORDER BY entity, pk;
            DROP TABLE temp._storectl_records_before_v3;
            """)
    }

    /// SQL that makes the record map (`_storectl_records`) or the aliases (`_storectl_aliases`) as an empty
    /// temporary table of this version's shape, from their one declaration (`RecordMapEntry`, `RecordAlias`): a
    /// reader of a store that never synced (`verify`) reads them as it reads a synced store's. Nil for another table.
    public static func standInSQL(_ table: String) -> String? {
        let declared: [any SyncTable.Type] = [RecordMapEntry.self, RecordAlias.self]
        guard let found = declared.first(where: { $0.tableName == table }) else { return nil }
        // An index of a temporary table is made in the temporary database too.
        return found.createSQL.replacingText("CREATE TABLE IF NOT EXISTS", with: "CREATE TEMP TABLE IF NOT EXISTS")
    }

    /// Lets this version's readers read the record map of an older storectl's store opened without writing (it is
    /// rebuilt by the first command that writes): a temporary view `_storectl_records` with this version's columns,
    /// every name kept, in front of the table.
    public static func readOlderMap(_ db: Connection) throws {
        guard try db.tableExists(RecordMapEntry.tableName) else { return }
        let columns = try db.query("SELECT name FROM pragma_table_xinfo('_storectl_records', 'main')")
            .compactMap { $0[0].string }
        guard !columns.contains("stored_name") else { return }
        try db.execute("""
            CREATE TEMP VIEW IF NOT EXISTS _storectl_records AS
                SELECT entity, pk, record_name AS stored_name, change_tag, base, deleted,
                       \(columns.contains("extra") ? "extra" : "NULL AS extra"), record_name
                FROM main._storectl_records
            """)
    }

    /// Copies the record map `source` (another store's, attached) into a new table `table`, for `replace`.
    public func copy(from source: String, into table: String) throws {
        try db.execute("CREATE TABLE \(table) AS SELECT * FROM \(source)")
    }

    /// Replaces the whole map with the entries of `table` (a copy of a record map, same columns).
    public func replace(with table: String) throws {
        try db.execute("""
            DELETE FROM main._storectl_records;
            INSERT INTO main._storectl_records(entity, pk, stored_name, change_tag, base, deleted, extra)
                SELECT entity, pk, \(Self.storedNameSQL("record_name", entity: "entity", pk: "pk")), change_tag, base,
                       deleted, extra FROM \(table);
            """)
    }
}
