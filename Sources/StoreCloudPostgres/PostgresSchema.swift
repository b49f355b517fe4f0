import FoundationEssentials
import StoreBase
#if canImport(Glibc)
import Glibc
#endif

/// The layout of a container in PostgreSQL: one schema per container, its tables, and the migrations that build
/// them.
///
/// Every migration is applied once, in order, inside the transaction of `cloud init`, and the schema's `meta`
/// table records the version reached (`schema_version`). A later release appends migrations; it never edits one.
enum PostgresSchema {
    /// The version this release creates and expects.
    static var currentVersion: Int { migrations.count }

    /// The tables of a container, with the privileges a role needs on each to sync.
    static let tablePrivileges: [(table: String, privileges: [String])] = [
        ("meta", ["SELECT"]),
        ("zones", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("records", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("markers", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("devices", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("export_marks", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("superseded_saves", ["SELECT", "INSERT", "DELETE"]),
    ]

    /// The migrations, oldest first: migration `i` takes the schema from version `i` to `i + 1`.
    /// `{s}` stands for the quoted schema name.
    static let migrations: [[String]] = [
        // 1: the first layout.
        [
            """
            CREATE TABLE {s}.zones (
                name text PRIMARY KEY,
                epoch text NOT NULL,
                last_seq bigint NOT NULL DEFAULT 0,
                created_at double precision NOT NULL
            )
            """,
            """
            CREATE TABLE {s}.records (
                zone text NOT NULL REFERENCES {s}.zones (name) ON DELETE CASCADE,
                record_name text NOT NULL,
                record_type text NOT NULL,
                fields text NOT NULL CHECK (jsonb_typeof(fields::jsonb) = 'object'),
                change_tag text NOT NULL,
                seq bigint NOT NULL,
                deleted boolean NOT NULL,
                modified_by text NOT NULL,
                modified_at double precision NOT NULL,
                PRIMARY KEY (zone, record_name)
            )
            """,
            // The change feed reads `WHERE zone = $1 AND seq > $2 ORDER BY seq LIMIT n`; each seq is used once.
            "CREATE UNIQUE INDEX records_zone_seq ON {s}.records (zone, seq)",
            """
            CREATE TABLE {s}.markers (
                zone text NOT NULL REFERENCES {s}.zones (name) ON DELETE CASCADE,
                name text NOT NULL,
                created_by text NOT NULL,
                created_at double precision NOT NULL,
                payload text NOT NULL,
                PRIMARY KEY (zone, name)
            )
            """,
            """
            CREATE TABLE {s}.devices (
                store_id text PRIMARY KEY,
                name text NOT NULL,
                account text,
                first_seen double precision NOT NULL,
                last_seen double precision NOT NULL
            )
            """,
        ],
        // 2: cheaper writes. Every write to a zone's records holds the zone's row lock (`FOR UPDATE`) until it
        // commits, and zones are never deleted, so the foreign key only cost a lookup per record written. The
        // keys compare bytes (collation "C") instead of following the database's locale: nothing sorts records by
        // name, equality is the same, and each index insert makes a dozen comparisons. The fields are checked as
        // `json` (validated as they are read, no tree built) rather than `jsonb`; rows already there passed the
        // stricter check, hence NOT VALID (new and changed rows are still checked).
        [
            "ALTER TABLE {s}.records DROP CONSTRAINT IF EXISTS records_zone_fkey",
            """
            ALTER TABLE {s}.records ALTER COLUMN zone TYPE text COLLATE "C",
                ALTER COLUMN record_name TYPE text COLLATE "C"
            """,
            "ALTER TABLE {s}.records DROP CONSTRAINT IF EXISTS records_fields_check",
            """
            ALTER TABLE {s}.records ADD CONSTRAINT records_fields_object
                CHECK (json_typeof(fields::json) = 'object') NOT VALID
            """,
        ],
        // 3: where each device's export stood (`ExportMark`), written in the same transaction as each batch, so that
        // a store finds the saves it did not record before a crash and a restored copy of a store is recognised.
        // Roles that could save records before may write the marks too.
        [
            """
            CREATE TABLE {s}.export_marks (
                zone text COLLATE "C" NOT NULL,
                device text COLLATE "C" NOT NULL,
                last_seq bigint NOT NULL,
                first_seq bigint NOT NULL,
                serial bigint NOT NULL,
                history_seq bigint NOT NULL,
                saved_at bigint NOT NULL,
                PRIMARY KEY (zone, device, last_seq)
            )
            """,
            grantToSavers("SELECT, INSERT, UPDATE, DELETE", on: "export_marks"),
        ],
        // 4: a device's save that another device's save replaced, kept while the mark of the batch that saved it is
        // kept (`DeviceRecord.superseded`), so that a store killed after the cloud saved its batch, and before it
        // recorded the save, does not send it again over the newer version built on it. Written by the save
        // statement itself; roles that could save records before may write it too.
        [
            """
            CREATE TABLE {s}.superseded_saves (
                zone text COLLATE "C" NOT NULL,
                device text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                serial bigint NOT NULL,
                record_name text COLLATE "C" NOT NULL,
                record_type text NOT NULL,
                fields text NOT NULL,
                change_tag text NOT NULL,
                deleted boolean NOT NULL,
                modified_at double precision NOT NULL,
                PRIMARY KEY (zone, device, seq)
            )
            """,
            grantToSavers("SELECT, INSERT, DELETE", on: "superseded_saves"),
        ],
    ]

    /// A statement that grants `privileges` on table `table` to every role (but the one running it) that may insert
    /// records: a migration's new table is then usable by the roles that could sync before it. The text is the one
    /// migration 3 was first written with, for its table.
    static func grantToSavers(_ privileges: String, on table: String) -> String {
        """
        DO $grant$
        DECLARE grantee text;
        BEGIN
            FOR grantee IN
                SELECT DISTINCT g.grantee FROM information_schema.role_table_grants g
                WHERE g.table_schema = replace('{s}', '"', '') AND g.table_name = 'records'
                  AND g.privilege_type = 'INSERT' AND g.grantee <> current_user
            LOOP
                EXECUTE format('GRANT \(privileges) ON %s.\(table) TO %I', '{s}', grantee);
            END LOOP;
        END
        $grant$
        """
    }

    /// The schema name for a container: `storectl_`, the container id lowercased with anything but letters, digits
    /// and `_` turned into `_` (at most 40 characters), then `_` and 8 hex digits of a hash of the exact id, so
    /// that ids which sanitize alike (`a.b`, `a_b`) never share a schema. At most 58 bytes, under PostgreSQL's 63.
    ///
    ///     schemaName(for: "iCloud.com.example.notes") // "storectl_icloud_com_example_notes_028bddc9"
    static func schemaName(for container: String) -> String {
        var sanitized = ""
        for scalar in container.lowercased().unicodeScalars {
            let ok = (scalar >= "a" && scalar <= "z") || (scalar >= "0" && scalar <= "9") || scalar == "_"
            sanitized.unicodeScalars.append(ok ? scalar : "_")
        }
        sanitized = String(sanitized.prefix(40))
        // FNV-1a, 64 bits: stable across releases and platforms (unlike Hasher, which is seeded per process).
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in container.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash & 0xffff_ffff, radix: 16)
        return "storectl_" + sanitized + "_" + String(repeating: "0", count: 8 - hex.count) + hex
    }

    /// `name` as a quoted SQL identifier: in double quotes, with inner double quotes doubled.
    /// (libpq's `PQescapeIdentifier` does the same but needs a connection; grants are printed without one.)
    static func quoted(_ name: String) -> String {
        "\"" + name.replacingText("\"", with: "\"\"") + "\""
    }

    /// The migration statements with the schema name filled in.
    static func statements(migration index: Int, schema: String) -> [String] {
        migrations[index].map { $0.replacingText("{s}", with: quoted(schema)) }
    }

    /// The SQL that grants `role` what it needs to sync with `container`: USAGE on the schema, SELECT on its
    /// `meta` table, and SELECT, INSERT, UPDATE, DELETE on its other tables.
    static func grantSQL(container: String, role: String) -> String {
        let s = quoted(schemaName(for: container))
        let r = quoted(role)
        var lines = [
            "-- storectl: access for role \(r) to container \(oneLine(container)) (schema \(s))",
            "GRANT USAGE ON SCHEMA \(s) TO \(r);",
        ]
        for (table, privileges) in tablePrivileges {
            lines.append("GRANT \(privileges.joined(separator: ", ")) ON TABLE \(s).\(quoted(table)) TO \(r);")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `text` with line breaks replaced by spaces, so that it cannot end an SQL `--` comment.
    private static func oneLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }
}
