import StoreSQLite

/// A foreign key that references a UNIQUE key of its parent other than the primary key (`REFERENCES tags(code)`).
/// Merging two duplicates of the parent deletes one of them; its children must then keep a row to reference, which
/// `repoint` (by the primary key) cannot give them. `RecordApplier` (a duplicate met by the import) and
/// `Deduplicator` (a `unique:` rule) both walk these references through this one type.
struct UniqueReference {
    let child: EntityMap
    let fk: ForeignKeyInfo
    /// The parent's columns the child's `fk.columns` reference, in the same order.
    let columns: [String]

    /// The references to `parent` by a UNIQUE key other than its primary key, among `entities`, in the order of
    /// the children's names (so that every store walks them alike).
    static func to(_ parent: EntityMap, among entities: some Sequence<EntityMap>) -> [UniqueReference] {
        var found: [UniqueReference] = []
        for child in entities.sorted(by: { $0.name < $1.name }) {
            for fk in child.foreignKeys where fk.parentTable == parent.name {
                let columns = fk.parentColumns.compactMap { $0 }
                guard columns.count == fk.columns.count, Set(columns) != Set(parent.primaryKey) else { continue }
                found.append(UniqueReference(child: child, fk: fk, columns: columns))
            }
        }
        return found
    }

    /// SQL: the child row (its columns qualified by `alias`, or bare) references the parent values bound at
    /// `?first`, `?first + 1`, ...: compared as the foreign key compares them, under the parent key's collation.
    func matches(_ parent: EntityMap, alias: String? = nil, first: Int = 1) -> String {
        let key = parent.uniqueKeys.first { Set($0) == Set(columns) } ?? columns
        let prefix = alias.map { "\($0)." } ?? ""
        return zip(fk.columns, columns).enumerated().map { i, pair in
            parent.uniqueEquals(key, column: pair.1, prefix + quoteIdentifier(pair.0), "?\(i + first)")
        }.joined(separator: " AND ")
    }

    /// The keys (a JSON array of `pkJSON`) of the child rows that reference `values`; nil when none does.
    func children(on values: [Value], of parent: EntityMap, db: Connection) throws -> String? {
        let keys = try db.scalar("""
            SELECT json_group_array(\(child.pkJSON("c"))) FROM main.\(child.quotedName) c
            WHERE \(matches(parent, alias: "c"))
            """, values)?.string
        return keys == "[]" ? nil : keys
    }

    /// Puts the child rows `keys` (from `children(on:of:db:)`) back on `values`, which their `ON UPDATE` action
    /// moved away. OR IGNORE: a child that would duplicate another on the values (its own UNIQUE key) stays where
    /// it is. Returns how many moved.
    @discardableResult
    func putBack(_ keys: String, on values: [Value], db: Connection) throws -> Int {
        let set = fk.columns.enumerated().map { "\(quoteIdentifier($1)) = ?\($0 + 1)" }.joined(separator: ", ")
        let table = "main.\(child.quotedName)"
        try db.run("""
            UPDATE OR IGNORE \(table) SET \(set)
            WHERE \(child.pkJSON(table)) IN (SELECT value FROM json_each(?\(values.count + 1)))
            """, values + [Value.text(keys)])
        return db.changes
    }
}
