import StoreSQLite

/// How storectl writes a SQLite value into JSON: in history keys and tombstones (the triggers, in any process that
/// writes to the store) and in cloud record fields (storectl's own statements). It lives in one place so that a key
/// computed by a trigger and the same key computed by the sync engine are the same text.
///
/// - A blob becomes `{"$blob": "HEX"}`: JSON has no bytes.
/// - A real becomes a number with enough digits to read back the same double: 17 significant digits, or 18 where
///   SQLite's own formatting needs them (SQLite's `json_array(x)` keeps 15, so `0.30000000000000004` would come
///   back as `0.3`). Infinities become `9e999` and `-9e999`, which read back as infinities (SQLite has no NaN). The
///   sign of a zero is not kept.
/// - Text holding a NUL becomes `{"$text": "HEX"}` (SQLite's JSON functions cut a string at a NUL), and in record
///   fields so does text whose bytes are not valid UTF-8, so that both travel byte for byte.
/// - Anything else is the value itself.
///
/// A key whose text is not valid UTF-8 cannot be synced (record names and keys are text): the export reports such
/// a row instead of sending it.
public enum ValueJSON {
    /// The SQL expression that gives `expr` as a JSON value, for keys and tombstones. Built-in functions only.
    public static func key(_ expr: String) -> String {
        "CASE typeof(\(expr)) WHEN 'blob' THEN json_object('$blob', hex(\(expr))) WHEN 'real' THEN \(real(expr)) "
            + "WHEN 'text' THEN (CASE WHEN instr(CAST(\(expr) AS BLOB), x'00') > 0 "
            + "THEN json_object('$text', hex(\(expr))) ELSE \(expr) END) ELSE \(expr) END"
    }

    /// The SQL value of element `index` of a key's JSON array `json`, the inverse of `key` (an object holding
    /// `$text` or `$blob` back to its bytes). It calls `storectl_unhex`, so it runs only in storectl's own
    /// connections; it does not depend on a table's row, so a lookup by key still uses the table's index.
    public static func keyValue(_ json: String, _ index: Int) -> String {
        "CASE json_type(\(json), '$[\(index)]') WHEN 'object' THEN coalesce("
            + "storectl_unhex(json_extract(\(json), '$[\(index)].\"$text\"'), 'text'), "
            + "storectl_unhex(json_extract(\(json), '$[\(index)].\"$blob\"'), 'blob')) "
            + "ELSE json_extract(\(json), '$[\(index)]') END"
    }

    /// The SQL expression that gives `expr` as a JSON value, for record fields. It calls `storectl_utf8`, so it runs
    /// only in storectl's own connections, never in a trigger.
    public static func field(_ expr: String) -> String {
        "CASE typeof(\(expr)) WHEN 'blob' THEN json_object('$blob', hex(\(expr))) WHEN 'real' THEN \(real(expr)) "
            + "WHEN 'text' THEN (CASE WHEN storectl_plain_text(\(expr)) "
            + "THEN \(expr) ELSE json_object('$text', hex(\(expr))) END) ELSE \(expr) END"
    }

    /// A real as a JSON number that reads back as the same double.
    public static func real(_ expr: String) -> String {
        "json(CASE WHEN \(expr) = 9e999 THEN '9e999' WHEN \(expr) = -9e999 THEN '-9e999' "
            + "WHEN CAST(printf('%!.17g', \(expr)) AS REAL) = \(expr) THEN printf('%!.17g', \(expr)) "
            + "ELSE printf('%!.18g', \(expr)) END)"
    }
}
