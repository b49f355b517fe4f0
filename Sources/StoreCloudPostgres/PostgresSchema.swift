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
        ("shares", ["SELECT", "INSERT", "UPDATE", "DELETE"]),
        ("former_writers", ["SELECT"]),
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
        // 5: a zone belongs to the role that created it (`zones.owner`); other roles reach it through a share
        // (`shares`), and the server itself enforces it with row-level security (see `sharingStatements`).
        sharingStatements,
    ]

    /// Migration 5. Existing zones go to the role that owns the container's schema, and every other role that
    /// registered a device becomes a read-write participant of each (`added_by` = `upgrade`): whoever synced
    /// keeps syncing. Roles that could save records may use the shares table (its rows are guarded by policies).
    ///
    /// Row-level security on the zone tables: a role reads a zone's rows only as its owner or a participant, and
    /// writes them only as its owner or a read-write participant. The policies ask SECURITY DEFINER functions
    /// owned by the tables' owner (`readable_zones`, `writable_zones`, `owned_zones`), which the table owner's RLS
    /// exemption lets read zones and shares without recursion; each policy's `IN (SELECT ...)` is evaluated once
    /// per statement (a hashed subplan), not per row. The tables' owner, superusers and BYPASSRLS roles are not
    /// bound by the policies: they administer the container, and storectl checks them like anyone else.
    static let sharingStatements: [String] = [
        // Quiet: the IF EXISTS of the statements below would tell `cloud init` of every policy not there yet.
        "SET LOCAL client_min_messages = warning",
        #"ALTER TABLE {s}.zones ADD COLUMN IF NOT EXISTS owner text COLLATE "C""#,
        """
        CREATE TABLE IF NOT EXISTS {s}.shares (
            zone text COLLATE "C" NOT NULL,
            account text COLLATE "C" NOT NULL,
            permission text NOT NULL CHECK (permission IN ('read-only', 'read-write')),
            since double precision NOT NULL,
            added_by text NOT NULL,
            PRIMARY KEY (zone, account)
        )
        """,
        "CREATE INDEX IF NOT EXISTS shares_by_account ON {s}.shares (account)",
        "CREATE INDEX IF NOT EXISTS zones_by_owner ON {s}.zones (owner)",
        """
        UPDATE {s}.zones SET owner = (SELECT pg_get_userbyid(nspowner) FROM pg_namespace
                                      WHERE nspname = replace('{s}', '"', ''))
        WHERE owner IS NULL
        """,
        """
        INSERT INTO {s}.shares (zone, account, permission, since, added_by)
        SELECT z.name, d.account, 'read-write', extract(epoch FROM statement_timestamp())::float8, 'upgrade'
        FROM {s}.zones z
        JOIN (SELECT DISTINCT account FROM {s}.devices WHERE account IS NOT NULL) d ON d.account <> z.owner
        WHERE EXISTS (SELECT 1 FROM pg_roles WHERE rolname = d.account)
        ON CONFLICT DO NOTHING
        """,
        zoneFunction("readable_zones", """
            SELECT name COLLATE "C" FROM {s}.zones WHERE owner IS NULL OR owner = p_role COLLATE "C"
            UNION ALL SELECT zone FROM {s}.shares WHERE account = p_role COLLATE "C"
            """),
        zoneFunction("writable_zones", """
            SELECT name COLLATE "C" FROM {s}.zones WHERE owner IS NULL OR owner = p_role COLLATE "C"
            UNION ALL SELECT zone FROM {s}.shares WHERE account = p_role COLLATE "C" AND permission = 'read-write'
            """),
        zoneFunction("owned_zones", """
            SELECT name COLLATE "C" FROM {s}.zones WHERE owner = p_role COLLATE "C"
            """),
        // One zone as `p_role` may use it, whatever the policies would show that role: no row when the zone does
        // not exist; its epoch and last seq only for a role that may read it. PL/pgSQL keeps the plan per session.
        """
        CREATE OR REPLACE FUNCTION {s}.zone_access(p_zone text, p_role text)
        RETURNS TABLE (owner text, level text, since double precision, epoch text, last_seq bigint)
        LANGUAGE plpgsql STABLE SECURITY DEFINER ROWS 1 SET search_path = pg_catalog, pg_temp AS $f$
        #variable_conflict use_column
        BEGIN
            IF NOT (\(sessionMayActAs)) THEN
                RETURN;
            END IF;
            RETURN QUERY
            SELECT z.owner, a.level, sh.since,
                   CASE WHEN a.level <> 'none' THEN z.epoch END, CASE WHEN a.level <> 'none' THEN z.last_seq END
            FROM {s}.zones z
            LEFT JOIN {s}.shares sh ON sh.zone = p_zone COLLATE "C" AND sh.account = p_role COLLATE "C"
            CROSS JOIN LATERAL (SELECT CASE WHEN z.owner IS NULL OR z.owner = p_role COLLATE "C" THEN 'owner'
                                            ELSE coalesce(sh.permission, 'none') END AS level) a
            WHERE z.name = p_zone;
        END
        $f$
        """,
        // Aborts the statement (SQLSTATE SH001) unless `p_role` may write the zone (or the zone does not exist):
        // the first statement of every write's transaction.
        """
        CREATE OR REPLACE FUNCTION {s}.require_writable(p_zone text, p_role text) RETURNS void
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
        BEGIN
            IF NOT (\(sessionMayActAs)) OR EXISTS (SELECT 1 FROM {s}.zones z
                       WHERE z.name = p_zone AND z.owner IS NOT NULL AND z.owner <> p_role COLLATE "C"
                         AND NOT EXISTS (SELECT 1 FROM {s}.shares sh WHERE sh.zone = p_zone COLLATE "C"
                                         AND sh.account = p_role COLLATE "C" AND sh.permission = 'read-write'))
            THEN
                RAISE EXCEPTION 'role % may not write zone %', p_role, p_zone USING ERRCODE = 'SH001';
            END IF;
        END
        $f$
        """,
        // A zone's owner changes only by its table owner's hand: an owner may share its zone, so taking one over
        // would take its records.
        """
        CREATE OR REPLACE FUNCTION {s}.zones_keep_owner() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
        BEGIN
            IF NEW.owner IS DISTINCT FROM OLD.owner
               AND NOT pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER') THEN
                RAISE EXCEPTION 'only the owner of the container can give zone % another owner', OLD.name
                    USING ERRCODE = '42501';
            END IF;
            RETURN NEW;
        END
        $f$
        """,
        "DROP TRIGGER IF EXISTS zones_keep_owner ON {s}.zones",
        """
        CREATE TRIGGER zones_keep_owner BEFORE UPDATE OF owner ON {s}.zones
        FOR EACH ROW EXECUTE FUNCTION {s}.zones_keep_owner()
        """,
        // Only a zone's owner (or the container's owner) starts it over (a new epoch: a purge), and no role the
        // policies bind takes its last seq back (every store would refuse the zone as an older copy of itself).
        // The container's administrators (the tables' owner, superusers, BYPASSRLS roles) are not refused: they
        // restore backups. Saves raise last_seq and keep the epoch: the trigger's condition spares them the call.
        """
        CREATE OR REPLACE FUNCTION {s}.zones_guard() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
        BEGIN
            IF pg_has_role(current_user, (SELECT relowner FROM pg_class WHERE oid = TG_RELID), 'MEMBER')
               OR EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolbypassrls)) THEN
                RETURN NEW;
            END IF;
            IF NEW.last_seq < OLD.last_seq THEN
                RAISE EXCEPTION 'the last seq of zone % cannot go back', OLD.name USING ERRCODE = '42501';
            END IF;
            IF NEW.epoch IS DISTINCT FROM OLD.epoch AND OLD.owner IS NOT NULL AND OLD.owner <> current_user THEN
                RAISE EXCEPTION 'only the owner of zone % can start it over', OLD.name USING ERRCODE = '42501';
            END IF;
            RETURN NEW;
        END
        $f$
        """,
        "DROP TRIGGER IF EXISTS zones_guard ON {s}.zones",
        """
        CREATE TRIGGER zones_guard BEFORE UPDATE ON {s}.zones
        FOR EACH ROW WHEN (NEW.last_seq < OLD.last_seq OR NEW.epoch IS DISTINCT FROM OLD.epoch)
        EXECUTE FUNCTION {s}.zones_guard()
        """,
        // Each record carries the account that saved it (`account`), written by the server: the save statements
        // write `current_user`, and the trigger below gives any other write the role that made it (a
        // participant's `psql`), whatever it names; the policies refuse any other name too. A write by a role that
        // no policy binds (a superuser, BYPASSRLS) is left without an account, which the change feed refuses
        // (`checkedRecords`). The records already there take the account their device was registered to, or `''`
        // (saved before the container knew shares), which stands. The trigger's condition spares storectl's
        // saves the call.
        #"ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS account text COLLATE "C""#,
        """
        UPDATE {s}.records r SET account = coalesce((SELECT d.account FROM {s}.devices d
                                                     WHERE d.store_id = r.modified_by), '')
        WHERE r.account IS NULL
        """,
        """
        CREATE OR REPLACE FUNCTION {s}.records_saver() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
        BEGIN
            NEW.account := CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user
                                                 AND (rolsuper OR rolbypassrls))
                                THEN NULL ELSE current_user END;
            RETURN NEW;
        END
        $f$
        """,
        "DROP TRIGGER IF EXISTS records_saver ON {s}.records",
        """
        CREATE TRIGGER records_saver BEFORE INSERT OR UPDATE ON {s}.records
        FOR EACH ROW WHEN (NEW.account IS DISTINCT FROM current_user) EXECUTE FUNCTION {s}.records_saver()
        """,
        // For each role whose read-write share of a zone ended (removed, left or made read-only), the zone's last
        // seq then: the records it saved until that seq stay the zone's. Kept by the server (a trigger on
        // `shares`, run as the tables' owner, which waits for a save in progress to commit); roles only read it.
        """
        CREATE TABLE IF NOT EXISTS {s}.former_writers (
            zone text COLLATE "C" NOT NULL,
            account text COLLATE "C" NOT NULL,
            until_seq bigint NOT NULL,
            PRIMARY KEY (zone, account)
        )
        """,
        """
        CREATE OR REPLACE FUNCTION {s}.shares_former_writer() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
        BEGIN
            IF TG_OP = 'DELETE' OR NEW.permission <> 'read-write' THEN
                INSERT INTO {s}.former_writers AS f (zone, account, until_seq)
                SELECT OLD.zone, OLD.account, z.last_seq FROM {s}.zones z WHERE z.name = OLD.zone FOR UPDATE
                ON CONFLICT (zone, account) DO UPDATE SET until_seq = greatest(f.until_seq, excluded.until_seq);
            END IF;
            RETURN NULL;
        END
        $f$
        """,
        "DROP TRIGGER IF EXISTS shares_former_writer ON {s}.shares",
        """
        CREATE TRIGGER shares_former_writer AFTER DELETE OR UPDATE OF permission ON {s}.shares
        FOR EACH ROW WHEN (OLD.permission = 'read-write') EXECUTE FUNCTION {s}.shares_former_writer()
        """,
        // A device's row is written by its own role only; reading stays open. A store that moves to another
        // account (`sync --rebind`) takes its device id along through `register_device`, as the role the session
        // may act as.
        """
        CREATE OR REPLACE FUNCTION {s}.register_device(p_store_id text, p_name text, p_role text) RETURNS void
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
        BEGIN
            IF NOT (\(sessionMayActAs)) THEN
                RAISE EXCEPTION 'role % cannot register a device as role %', session_user, p_role
                    USING ERRCODE = '42501';
            END IF;
            INSERT INTO {s}.devices AS d (store_id, name, account, first_seen, last_seen)
            VALUES (p_store_id, p_name, p_role, extract(epoch FROM statement_timestamp())::float8,
                    extract(epoch FROM statement_timestamp())::float8)
            ON CONFLICT (store_id) DO UPDATE SET
                name = excluded.name, account = excluded.account, last_seen = excluded.last_seen;
        END
        $f$
        """,
        grantToSavers("SELECT, INSERT, UPDATE, DELETE", on: "shares"),
        grantToSavers("SELECT", on: "former_writers"),
        // The functions run as the tables' owner whoever ran the migration, so that RLS never applies inside them.
        """
        DO $own$
        DECLARE tables_owner text := (SELECT pg_get_userbyid(relowner) FROM pg_class
                                      WHERE oid = '{s}.zones'::regclass);
        BEGIN
            EXECUTE format('ALTER TABLE {s}.shares OWNER TO %I', tables_owner);
            EXECUTE format('ALTER FUNCTION {s}.readable_zones(text) OWNER TO %I', tables_owner);
            EXECUTE format('ALTER FUNCTION {s}.writable_zones(text) OWNER TO %I', tables_owner);
            EXECUTE format('ALTER FUNCTION {s}.owned_zones(text) OWNER TO %I', tables_owner);
            EXECUTE format('ALTER FUNCTION {s}.zone_access(text, text) OWNER TO %I', tables_owner);
            EXECUTE format('ALTER FUNCTION {s}.require_writable(text, text) OWNER TO %I', tables_owner);
            EXECUTE format('ALTER TABLE {s}.former_writers OWNER TO %I', tables_owner);
            EXECUTE format('ALTER FUNCTION {s}.shares_former_writer() OWNER TO %I', tables_owner);
            EXECUTE format('ALTER FUNCTION {s}.register_device(text, text, text) OWNER TO %I', tables_owner);
        END
        $own$
        """,
    ] + rowSecurity(table: "zones", key: "name", insert: "owner = current_user", own: "owner = current_user OR ")
        + rowSecurity(table: "records", saver: "account = current_user", purgeOnly: true)
        + rowSecurity(table: "markers") + rowSecurity(table: "export_marks")
        + rowSecurity(table: "superseded_saves")
        + rowSecurity(table: "shares", owners: true, ownRead: "account = current_user OR ")
        + rowSecurity(table: "former_writers", readOnly: true) + deviceSecurity

    /// The condition every SECURITY DEFINER function asks of its `p_role` argument: the session's own role, or one
    /// it may act as (`SET ROLE`). A role asking as another gets nothing (or a refusal).
    static let sessionMayActAs = "p_role IS NOT NULL AND pg_has_role(session_user, p_role::name, 'MEMBER')"

    /// A SECURITY DEFINER function `{s}.NAME(p_role text) RETURNS SETOF text` returning the rows of the query
    /// `body` (PL/pgSQL, so that its plan is kept per session), nothing to a role asking as another.
    private static func zoneFunction(_ name: String, _ body: String) -> String {
        """
        CREATE OR REPLACE FUNCTION {s}.\(name)(p_role text) RETURNS SETOF text
        LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
        BEGIN
            IF \(sessionMayActAs) THEN
                RETURN QUERY \(body);
            END IF;
        END
        $f$
        """
    }

    /// Row-level security on `table`, whose zone is the column `key`: SELECT for the roles that may read the zone,
    /// INSERT, UPDATE and DELETE for those that may write it (`insert` replaces the check of new rows). With
    /// `owners`, writes are the zone owner's, and a participant may delete its own row (`shares`). `own` comes
    /// before every condition: on `zones`, the row's own owner (a zone just inserted is not in the functions'
    /// snapshot, and `INSERT ... ON CONFLICT` checks the new row against the SELECT policy too); `ownRead` before
    /// the SELECT condition only (a participant reads its own share without the function being asked).
    private static func rowSecurity(table: String, key: String = "zone", insert: String? = nil, owners: Bool = false,
                                    own: String = "", ownRead: String = "", saver: String? = nil,
                                    purgeOnly: Bool = false, readOnly: Bool = false) -> [String]
    {
        let zone = "(\(key) COLLATE \"C\")"
        let readable = "\(own)\(ownRead)\(zone) IN (SELECT {s}.readable_zones(current_user))"
        let writable = "\(own)\(zone) IN (SELECT {s}.\(owners ? "owned_zones" : "writable_zones")(current_user))"
        let owned = "\(zone) IN (SELECT {s}.owned_zones(current_user))"
        let delete = owners ? "\(writable) OR account = current_user"
            : table == "zones" ? "owner = current_user" : purgeOnly ? owned : writable
        let checked = saver.map { "(\(writable)) AND \($0)" } ?? writable
        var policies = [("read", "SELECT USING (\(readable))")]
        if !readOnly {
            policies += [("insert", "INSERT WITH CHECK (\(insert ?? checked))"),
                         ("update", "UPDATE USING (\(writable)) WITH CHECK (\(checked))"),
                         ("delete", "DELETE USING (\(delete))")]
        }
        return ["ALTER TABLE {s}.\(table) ENABLE ROW LEVEL SECURITY"] + policies.flatMap { name, rule in
            ["DROP POLICY IF EXISTS \(table)_\(name) ON {s}.\(table)",
             "CREATE POLICY \(table)_\(name) ON {s}.\(table) FOR \(rule)"]
        }
    }

    /// Row-level security on `devices`: every role reads them, and writes only the rows of its own account
    /// (`register_device` moves a device to the session's role).
    private static let deviceSecurity: [String] = ["ALTER TABLE {s}.devices ENABLE ROW LEVEL SECURITY"]
        + [("read", "SELECT USING (true)"), ("insert", "INSERT WITH CHECK (account = current_user)"),
           ("update", "UPDATE USING (account = current_user) WITH CHECK (account = current_user)"),
           ("delete", "DELETE USING (account = current_user)")].flatMap { name, rule in
            ["DROP POLICY IF EXISTS devices_\(name) ON {s}.devices",
             "CREATE POLICY devices_\(name) ON {s}.devices FOR \(rule)"]
        }

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
