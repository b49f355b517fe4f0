import Foundation
import StoreBase
import StoreSQLite

/// The store the benchmarks measure.
///
/// - `realistic` (the default): the shape synced apps use. N rows split 60% / 2% / 38% over
///   `notes(uuid TEXT PRIMARY KEY, ...)` (a natural text key: random version-4 UUIDs),
///   `tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)` (a surrogate key and a UNIQUE column) and
///   `note_tags(id INTEGER PRIMARY KEY, note TEXT REFERENCES notes(uuid), tag INTEGER REFERENCES tags(id))` (two
///   foreign keys, one to a natural key, one to a surrogate key, which travels as `{"$ref": record name}`).
///   None of the three takes the engine's set-based import path; each goes record by record.
/// - `single`: one table `notes(id INTEGER PRIMARY KEY, uuid, title, body, updated_at)`, no references and no
///   UNIQUE column: the one shape the set-based import path takes. The figures before the realistic schema.
enum Shape: String, CaseIterable, Sendable {
    case realistic
    case single

    static let body = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut "
        + "labore et dolore magna aliqua."

    /// The record-name prefix the references use (any 16 hex digits: the reference's records are its own).
    static let referencePrefix = "0123456789abcdef"

    var sql: String {
        switch self {
        case .single:
            return """
                CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                                   body TEXT NOT NULL DEFAULT '', updated_at INTEGER NOT NULL DEFAULT 0);
                """
        case .realistic:
            return """
                CREATE TABLE notes(uuid TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL,
                                   updated_at INTEGER NOT NULL);
                CREATE TABLE tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
                CREATE TABLE note_tags(id INTEGER PRIMARY KEY,
                                       note TEXT NOT NULL REFERENCES notes(uuid) ON DELETE CASCADE,
                                       tag INTEGER NOT NULL REFERENCES tags(id) ON DELETE CASCADE);
                CREATE INDEX note_tags_note ON note_tags(note);
                CREATE INDEX note_tags_tag ON note_tags(tag);
                """
        }
    }

    /// The user's tables, parents first.
    var tables: [String] {
        switch self {
        case .single: return ["notes"]
        case .realistic: return ["notes", "tags", "note_tags"]
        }
    }

    /// What the tables hold, for the reports.
    var summary: String {
        switch self {
        case .single: return "one table notes(id INTEGER PRIMARY KEY, ...)"
        case .realistic:
            return "notes(uuid TEXT PRIMARY KEY) 60%, tags(id INTEGER PRIMARY KEY, name UNIQUE) 2%, "
                + "note_tags(id, note -> notes, tag -> tags) 38%"
        }
    }

    /// Rows per table for N rows in all (the same order as `tables`).
    func split(_ rows: Int) -> [Int] {
        switch self {
        case .single: return [rows]
        case .realistic:
            let tags = max(1, rows * 2 / 100)
            let notes = max(1, rows * 60 / 100)
            return [notes, tags, max(0, rows - notes - tags)]
        }
    }

    /// `SELECT` of the rows of every user table.
    var countSQL: String {
        "SELECT " + tables.map { "(SELECT count(*) FROM main.\($0))" }.joined(separator: " + ")
    }

    /// Fills an empty store with `rows` rows (the caller wraps it in the history tracker's write).
    func fill(_ db: Connection, rows: Int) throws {
        let n = split(rows)
        switch self {
        case .single:
            try db.run("""
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                INSERT INTO notes(id, uuid, title, body, updated_at)
                SELECT i, printf('6f1c2a4e-0000-4000-8000-%012d', i), 'Note number ' || i, ?2,
                       1700000000000 + i FROM n
                """, [rows, Self.body])
        case .realistic:
            // Random version-4 UUIDs, as apps make them: the key index grows everywhere, not at its end.
            try db.run("""
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                INSERT INTO notes(uuid, title, body, updated_at)
                SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-'
                           || substr('89ab', 1 + (i % 4), 1) || substr(h, 18, 3) || '-' || substr(h, 21, 12),
                       'Note number ' || i, ?2, 1700000000000 + i
                FROM (SELECT i, lower(hex(randomblob(16))) AS h FROM n)
                """, [n[0], Self.body])
            try db.run("""
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                INSERT INTO tags(id, name) SELECT i, 'tag ' || i FROM n
                """, [n[1]])
            guard n[2] > 0 else { return }
            // Each link: a note spread over the table (by rowid, so in no key order) and a tag.
            try db.run("""
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                INSERT INTO note_tags(id, note, tag)
                SELECT i, (SELECT uuid FROM notes WHERE rowid = (i * 7919) % ?2 + 1), (i * 31) % ?3 + 1 FROM n
                """, [n[2], n[0], n[1]])
        }
    }

    /// The statements of the export reference: every row of `main` turned into a record of `c.records` (a
    /// container with the engine's records schema), one `INSERT ... SELECT` per table.
    var exportReference: [String] {
        let columns = "zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at"
        let p = Self.referencePrefix
        switch self {
        case .single:
            return ["""
                INSERT INTO c.records(\(columns))
                SELECT 'default', printf('notes/%s%012x', '\(p)', id), 'notes',
                       json_object('uuid', uuid, 'title', title, 'body', body, 'updated_at', updated_at),
                       printf('%x-reference', id), id, 0, 'reference-device', 1700000000.0
                FROM main.notes ORDER BY id
                """]
        case .realistic:
            // A natural key names its record `notes:["<uuid>"]`; a surrogate key gets a name of its own; the
            // reference to a tag travels as that tag's record name.
            return [
                """
                INSERT INTO c.records(\(columns))
                SELECT 'default', 'notes:' || json_array(uuid), 'notes',
                       json_object('uuid', uuid, 'title', title, 'body', body, 'updated_at', updated_at),
                       printf('%x-reference', rowid), rowid, 0, 'reference-device', 1700000000.0
                FROM main.notes ORDER BY rowid
                """,
                """
                INSERT INTO c.records(\(columns))
                SELECT 'default', printf('tags/%s%012x', '\(p)', id), 'tags', json_object('name', name),
                       printf('%x-reference', id), (SELECT max(rowid) FROM main.notes) + id, 0, 'reference-device',
                       1700000000.0
                FROM main.tags ORDER BY id
                """,
                """
                INSERT INTO c.records(\(columns))
                SELECT 'default', printf('note_tags/%s%012x', '\(p)', id), 'note_tags',
                       json_object('note', note, 'tag', json_object('$ref', printf('tags/%s%012x', '\(p)', tag))),
                       printf('%x-reference', id),
                       (SELECT max(rowid) FROM main.notes) + (SELECT max(id) FROM main.tags) + id, 0,
                       'reference-device', 1700000000.0
                FROM main.note_tags ORDER BY id
                """,
            ]
        }
    }

    /// The statements of the import reference: every live record of `c.records` inserted into the empty store
    /// `main`, one `INSERT ... SELECT` per table, parents first. A tag reference is resolved to the local tag id
    /// through the parent record and the tag's UNIQUE name (the shortest way one statement can do it).
    var importReference: [String] {
        let live = "zone = 'default' AND deleted = 0"
        switch self {
        case .single:
            return ["""
                INSERT INTO main.notes(uuid, title, body, updated_at)
                SELECT json_extract(fields, '$.uuid'), json_extract(fields, '$.title'), json_extract(fields, '$.body'),
                       json_extract(fields, '$.updated_at')
                FROM c.records WHERE \(live) AND record_type = 'notes' ORDER BY seq
                """]
        case .realistic:
            return [
                """
                INSERT INTO main.notes(uuid, title, body, updated_at)
                SELECT json_extract(fields, '$.uuid'), json_extract(fields, '$.title'), json_extract(fields, '$.body'),
                       json_extract(fields, '$.updated_at')
                FROM c.records WHERE \(live) AND record_type = 'notes' ORDER BY seq
                """,
                """
                INSERT INTO main.tags(name)
                SELECT json_extract(fields, '$.name') FROM c.records WHERE \(live) AND record_type = 'tags' ORDER BY seq
                """,
                """
                INSERT INTO main.note_tags(note, tag)
                SELECT json_extract(r.fields, '$.note'), t.id
                FROM c.records r
                JOIN c.records p ON p.zone = r.zone AND p.record_name = json_extract(r.fields, '$.tag."$ref"')
                JOIN main.tags t ON t.name = json_extract(p.fields, '$.name')
                WHERE r.\(live.replacingOccurrences(of: " AND ", with: " AND r.")) AND r.record_type = 'note_tags'
                ORDER BY r.seq
                """,
            ]
        }
    }

    /// The `entities:` block of the store's config.yaml (indented for `stores.notes`).
    var entitiesYAML: String {
        tables.map { "      \($0): {}" }.joined(separator: "\n")
    }
}
