import Foundation
import StoreCloud
import TestSupport
import XCTest

/// The notes fleet: the schema and config the reliability tests share (notes with a UUID, tags, a link table with
/// a compound key, settings), on one container file, no `late` store, and `sql` that writes as a plain `sqlite3`
/// shell does (foreign keys off).
extension Fleet {
    static let notesSchema = """
        CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                         body TEXT NOT NULL DEFAULT '');
        CREATE TABLE IF NOT EXISTS tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS note_tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                                             tag_id INTEGER NOT NULL REFERENCES tags(id) ON DELETE CASCADE,
                                             PRIMARY KEY (note_id, tag_id));
        CREATE TABLE IF NOT EXISTS settings(key TEXT PRIMARY KEY, value TEXT);
        """
    static let notesContainer = "iCloud.com.example.notes"
    static let notesSecret = "demo-secret"

    /// - Parameter extra: extra YAML under each store (`entities:`, `seed:`), indented by four spaces.
    static func notes(stores: [String] = ["a", "b"], extra: String = "", label: String = "storectl-shared") throws
        -> Fleet
    {
        let fleet = try Fleet(stores: stores, backend: .file, schema: notesSchema, storeYAML: extra, label: label,
                              container: notesContainer, secret: notesSecret, late: false)
        fleet.foreignKeysByDefault = false
        return fleet
    }

    /// Runs SQL on any SQLite file with the sqlite3 shell.
    @discardableResult
    func sqlFile(_ path: String, _ statement: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> String
    {
        let r = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", path, statement], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(statement)\n\(r)", file: file, line: line)
        return r.stdout
    }

    /// `PRAGMA integrity_check` of every store that exists and of the container file: "ok" each.
    func integrity() throws -> [String: String] {
        var out: [String: String] = [:]
        for s in stores where FileManager.default.fileExists(atPath: path(s)) {
            out[s] = try sqlFile(path(s), "PRAGMA integrity_check").trimmingCharacters(in: .whitespacesAndNewlines)
        }
        out["cloud"] = try sqlFile(dir.file("cloud/shared.container"), "PRAGMA integrity_check")
            .trimmingCharacters(in: .whitespacesAndNewlines)
        return out
    }

    /// A notes store's rows by natural values, one line per row (duplicates show as repeated lines).
    func noteRows(_ store: String) throws -> [String] {
        let text = try sql(store, """
            SELECT 'note|' || uuid || '|' || title || '|' || body FROM notes;
            SELECT 'tag|' || name FROM tags;
            SELECT 'link|' || n.uuid || '|' || t.name FROM note_tags nt JOIN notes n ON n.id = nt.note_id
              JOIN tags t ON t.id = nt.tag_id;
            SELECT 'setting|' || key || '|' || coalesce(value, '~') FROM settings;
            SELECT 'dangling-link|' || count(*) FROM note_tags
              WHERE note_id NOT IN (SELECT id FROM notes) OR tag_id NOT IN (SELECT id FROM tags) HAVING count(*) > 0;
            """, foreignKeys: false)
        return text.split(separator: "\n").map(String.init).sorted()
    }

    /// The container file's live records by natural values, in the same form as `noteRows`.
    func cloudNoteRows() throws -> [String] {
        let ref = { (col: String) in "json_extract(l.fields, '$.\(col).\"$ref\"')" }
        let text = try sqlFile(dir.file("cloud/shared.container"), """
            SELECT 'note|' || json_extract(fields, '$.uuid') || '|' || json_extract(fields, '$.title') || '|'
                   || json_extract(fields, '$.body') FROM records WHERE record_type = 'notes' AND deleted = 0;
            SELECT 'tag|' || json_extract(fields, '$.name') FROM records WHERE record_type = 'tags' AND deleted = 0;
            SELECT 'link|' || coalesce(json_extract(n.fields, '$.uuid'), '?') || '|'
                   || coalesce(json_extract(t.fields, '$.name'), '?')
              FROM records l LEFT JOIN records n ON n.record_name = \(ref("note_id")) AND n.deleted = 0
              LEFT JOIN records t ON t.record_name = \(ref("tag_id")) AND t.deleted = 0
              WHERE l.record_type = 'note_tags' AND l.deleted = 0;
            SELECT 'setting|' || json_extract(fields, '$.key') || '|' || coalesce(json_extract(fields, '$.value'), '~')
              FROM records WHERE record_type = 'settings' AND deleted = 0;
            """)
        return text.split(separator: "\n").map(String.init).sorted()
    }
}
