import StoreSQLite

extension EntityMap {
    /// A query of every row of the table as the exporter would send it: `(pk, record_name, fields)`, with the pk
    /// as the canonical JSON array the history triggers write, the record name from the record map (else the
    /// name this device gives the row), and the fields in the exporter's own encoding (`fieldsJSON`), so that
    /// whatever compares a store with its zone (`storectl verify`, a switch plan's content hash) agrees with sync.
    public var localRecordsSQL: String {
        """
        SELECT \(pkJSON("t")) AS pk, coalesce(r.record_name, \(derivedName("t"))) AS record_name,
               \(fieldsJSON("t", extra: "r.extra")) AS fields
        FROM main.\(quotedName) t
        LEFT JOIN _storectl_records r ON r.entity = \(quoteLiteral(name)) AND r.pk = \(pkJSON("t"))
        """
    }
}
