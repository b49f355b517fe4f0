import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud

/// What `initializeContainer()` did.
public struct PostgresContainerSetup: Sendable, Equatable, Codable {
    /// The schema that holds the container.
    public var schema: String
    /// Whether the schema was created by this call.
    public var created: Bool
    /// The schema version before the call (0 when it was created).
    public var previousVersion: Int
    /// The schema version now.
    public var version: Int

    public init(schema: String, created: Bool, previousVersion: Int, version: Int) {
        self.schema = schema
        self.created = created
        self.previousVersion = previousVersion
        self.version = version
    }
}

/// A cloud container in a PostgreSQL database, reached through libpq.
///
/// Each container lives in its own schema (`schemaName(container:)`) with the tables `meta`, `zones`, `records`,
/// `markers` and `devices`. `initializeContainer()` (`storectl cloud init`) creates or migrates it; every other
/// call expects it to exist at the current version.
///
/// The connection is opened on first use and opened again after it was lost, so that a server restart is a
/// `CloudError(.temporary)` (exit 75) for the call that saw it, and the next call simply works.
///
///     let cloud = try PostgresCloudDatabase(url: "postgres://alice@db.example.com/notes?sslmode=require",
///                                           container: "iCloud.com.example.notes", password: secret)
///     try cloud.ensureZone("default")
///
/// ## Why a reader never misses a change
///
/// Every save to a zone first locks that zone's row (`SELECT ... FROM zones WHERE name = $1 FOR UPDATE`), then,
/// in the same transaction, assigns the new records seqs after `zones.last_seq`, raises `last_seq`, and commits.
/// The lock is released only when the transaction ends, so the transactions of one zone pass the lock one after
/// another: the one that assigned seqs up to S committed (and became visible) before the next one could read
/// `last_seq` = S and assign S + 1. Seq order is therefore commit order. A reader fetches in one statement, so in
/// one snapshot: the zone's `last_seq` L and the records with seq > its token. The snapshot that shows L shows
/// every transaction that assigned a seq ≤ L (they all committed before the one that wrote L took the lock), and
/// every transaction not yet visible will assign seqs > L. So after a reader has fetched up to S it can never
/// later see a commit with seq ≤ S. A sequence (`nextval`) would not do: it hands out numbers at the start of
/// transactions, which then commit in any order, and a reader could pass a number whose transaction commits later.
/// See docs/postgres.md.
public final class PostgresCloudDatabase: CloudDatabase {
    public let container: String
    public let displayURL: String
    /// The schema that holds the container.
    public let schemaName: String
    /// The role the connection logs in as, when known before connecting (config account, URL user, `PGUSER`).
    public let role: String?

    private let url: String
    private let account: String?
    private let password: String?
    let timeout: Double
    private var connection: PGConnection? {
        // A new session is checked and registered again: the role may have lost a privilege, its password or its
        // LOGIN while no session was open.
        didSet { if connection == nil { session = nil } }
    }
    /// What the account check found on the open connection (`accountStatus()`), while that connection lives.
    var session: SessionCheck?
    /// The quoted schema name, ready for SQL.
    let s: String

    /// The hot standby that serves the change feed (`cloud.replica_url`), nil without one; see
    /// `PostgresCloudDatabase+Standby.swift`.
    let standby: (url: String, displayURL: String)?
    /// The open connection to the standby.
    var standbyConnection: PGConnection?
    /// When the standby may be tried again (monotonic seconds) after it could not be reached; `.infinity` once it
    /// was found not to be a standby.
    var standbyRetryAt = 0.0
    /// Each zone's epoch as the primary last gave it: a standby's page of another epoch is not read.
    var primaryEpochs: [String: String] = [:]
    /// Each zone's last seq as the primary last gave it: a standby's page must have replayed that far.
    var primaryLastSeqs: [String: Int64] = [:]
    /// How the standby served the change feed since `takeReplicaUse()`.
    var standbyUse = ReplicaUse()
    /// What was worked around since the last `takeWarnings()` (the standby down, not a standby).
    var warnings: [String] = []

    /// The account check of one session, and what the session wrote once: a watcher's rounds ask the server
    /// nothing of this again until the connection is replaced, a statement is refused for want of a privilege, or
    /// `sessionCheckLimit` seconds pass.
    struct SessionCheck {
        var report: AccountStatusReport
        /// The container's owner and whether the role is it or a member of it, as the check read them.
        var owner: (owner: String, isMember: Bool)?
        /// When the check was made (monotonic seconds).
        var at: Double
        /// The device `registerDevice` wrote in this session, and the name it gave.
        var device: (storeID: String, name: String)?
        /// Each zone's access as this session last read it (`ZoneAccessRow.signature`): what a quiet state vouches
        /// for without reading the server.
        var access: [String: String] = [:]
    }

    /// The longest one account check stands, in seconds: then the next `accountStatus()` logs in again and checks
    /// everything (a password changed, a role disabled, a grant revoked on a table not yet written), and the next
    /// `registerDevice` refreshes the device's `last_seen`. The idle heartbeat of a `storectl watch`.
    public static let sessionCheckLimit = 300.0

    /// The session's account check, when it still stands and the server still agrees, asked in one statement;
    /// nil otherwise, the session then dropped (a new check follows, on a new connection when the server ended
    /// this one). `zone` is read in the same statement.
    ///
    /// The zone's access (its owner, this role's share) is read in the same statement: a share removed or changed
    /// shows in `access` (nil when the zone does not exist, or is hidden), and a role without a share gets no
    /// token; `hidden` says the zone exists but the policies hide it from this role (a share removed).
    func revalidatedSession(zone: String? = nil)
        -> (session: SessionCheck, zone: ServerChangeToken?, access: ZoneAccessRow?, hidden: Bool)?
    {
        guard let standing = standingSession, let connection else { return nil }
        do {
            let r = try connection.execute("""
                SELECT (SELECT value FROM \(s).meta WHERE key = 'schema_version'), pg_get_userbyid(n.nspowner),
                       pg_has_role(current_user, n.nspowner, 'MEMBER'), r.rolcanlogin, z.epoch, z.last_seq,
                       \(Self.accessColumns("z")), \(hiddenColumn("z", "$2"))
                FROM pg_namespace n JOIN pg_roles r ON r.rolname = current_user
                LEFT JOIN LATERAL \(zoneRow("$2")) z ON true
                WHERE n.nspname = $1
                """, [schemaName, zone])
            // The container's format, its owner and the role's LOGIN as the check saw them: a newer storectl's
            // migration, an owner changed, a role disabled are met at the next round, not at the next check.
            guard r.rowCount == 1, r.string(0, 0) == String(PostgresSchema.currentVersion),
                  r.string(0, 1) == standing.owner?.owner, r.bool(0, 2) == standing.owner?.isMember,
                  r.bool(0, 3) == true
            else {
                session = nil
                return nil
            }
            let token = r.string(0, 4).map { ServerChangeToken(epoch: $0, seq: r.int64(0, 5) ?? 0) }
            return (standing, token, zone.flatMap { ZoneAccessRow(r, row: 0, at: 6, zone: $0) }, r.bool(0, 10) == true)
        } catch {
            // A session the server ended: the next call connects again, and checks again.
            self.connection = nil
            return nil
        }
    }

    /// The session's account check, when it still stands.
    var standingSession: SessionCheck? {
        guard let session, let connection, connection.isHealthy,
              monotonicNow() - session.at < Self.sessionCheckLimit
        else { return nil }
        return session
    }

    /// Test hook: seconds to sleep inside each save transaction before taking the zone lock and after assigning
    /// seqs, to make concurrent transactions start and commit in different orders.
    var saveDelays: (beforeLock: Double, beforeCommit: Double)?

    /// Prepares a connection to `container` at `url`. Nothing is sent to the server until the first call.
    ///
    /// - Parameters:
    ///   - url: a libpq URL (`postgres://user@host:port/db?sslmode=require`) or `key=value` connection string,
    ///     passed to libpq as written (`sslmode` and every other option included).
    ///   - account: the role to log in as; overrides the URL's user.
    ///   - password: the role's password (from the config's secret). When nil, libpq looks in the URL,
    ///     `PGPASSWORD` and `~/.pgpass`, as it always does.
    ///   - timeout: seconds to wait for the server to answer a connection, unless the URL sets `connect_timeout`.
    ///   - environment: the caller's environment; its `PGUSER` names the role when neither `account` nor the URL
    ///     does (libpq itself still reads its own variables, `PGPASSWORD`, `PGHOST` and the rest, as it always does).
    ///   - replicaURL: a hot standby of the server at `url` (`cloud.replica_url`), which then serves the change
    ///     feed (`fetchChanges`) whenever it has replayed what the caller already knows of; it is logged in to
    ///     with the same role and password.
    /// - Throws: `CloudError(.invalid)` when `url` or `replicaURL` is not a valid connection string.
    public init(url: String, container: String, account: String? = nil, password: String? = nil,
                timeout: Double = 10, environment: [String: String] = [:], replicaURL: String? = nil) throws
    {
        self.url = url
        self.container = container
        self.account = account
        self.password = password
        self.timeout = timeout
        self.displayURL = Redaction.connectionString(url)
        self.schemaName = PostgresSchema.schemaName(for: container)
        self.s = PostgresSchema.quoted(schemaName)
        let options: [String: String]
        do {
            options = try PGConnInfo.parse(url)
        } catch let error as PGError {
            // libpq may quote a piece of the string; say nothing of it when the string holds a password.
            let why = displayURL == url ? ": \(error.message)" : ""
            throw CloudError(.invalid, "\(displayURL) is not a valid PostgreSQL connection URL\(why)",
                             hint: "write it as postgres://USER@HOST:PORT/DATABASE?sslmode=...")
        }
        if let replicaURL {
            let shown = Redaction.connectionString(replicaURL)
            do {
                _ = try PGConnInfo.parse(replicaURL)
            } catch let error as PGError {
                let why = shown == replicaURL ? ": \(error.message)" : ""
                throw CloudError(.invalid, "\(shown) is not a valid PostgreSQL connection URL\(why)",
                                 hint: "write cloud.replica_url as postgres://USER@HOST:PORT/DATABASE?sslmode=...")
            }
            self.standby = (replicaURL, shown)
        } else {
            self.standby = nil
        }
        if let account, !account.isEmpty {
            self.role = account
        } else if let user = options["user"], !user.isEmpty {
            self.role = user
        } else {
            self.role = environment["PGUSER"].flatMap { $0.isEmpty ? nil : $0 }
        }
    }

    /// The schema name for a container (see `PostgresCloudDatabase` for the layout).
    public static func schemaName(container: String) -> String {
        PostgresSchema.schemaName(for: container)
    }

    /// The SQL a database owner runs to let `role` sync with `container` (`storectl cloud init --print-grants`).
    public static func grantSQL(container: String, role: String) -> String {
        PostgresSchema.grantSQL(container: container, role: role)
    }

    /// The DDL of the container's schema: every migration's statements, oldest first (`storectl cloud schema
    /// --format sql`).
    public static func schemaSQL(container: String) -> [String] {
        let schema = PostgresSchema.schemaName(for: container)
        return ["CREATE SCHEMA \(PostgresSchema.quoted(schema))"]
            + PostgresSchema.migrations.indices.flatMap { PostgresSchema.statements(migration: $0, schema: schema) }
    }

    /// The schema version this release creates and expects.
    public static var schemaVersion: Int { PostgresSchema.currentVersion }

    /// Closes the connections; the next call opens a new one.
    public func close() {
        connection = nil
        standbyConnection = nil
    }

    // MARK: - Connecting

    /// Opens a new connection to the primary (or to `target`, the standby), without checking the container.
    /// - Throws: `PGError`.
    func connect(to target: String? = nil, timeout: Double? = nil) throws -> PGConnection {
        guard role != nil else {
            // Rather than log in as whoever libpq would default to (the local user name).
            throw CloudError(.account, "no PostgreSQL role is configured for \(displayURL)",
                             hint: "set cloud.account, or put the user in cloud.url (postgres://USER@HOST/DATABASE)")
        }
        // "When expand_dbname is non-zero, the value for the first dbname key word is checked to see if it is a
        // connection string. If so, it is expanded into the individual connection parameters ... when key words
        // are repeated, the last processed value is retained." So the URL comes first, and what follows overrides.
        var parameters: [(keyword: String, value: String)] = [
            ("dbname", target ?? url),
            ("fallback_application_name", "storectl"),
            ("client_encoding", "UTF8"),
        ]
        if let account, !account.isEmpty { parameters.append(("user", account)) }
        if let password { parameters.append(("password", password)) }
        let c = try PGConnection(parameters: parameters, timeout: timeout ?? self.timeout)
        // Saves rely on READ COMMITTED (a fresh snapshot per statement, after the zone lock is taken), whatever the
        // server's default; a zone lock held too long (a stuck client) surfaces as a temporary failure.
        // JIT compiling takes the server 100 ms and more, and pays off only for long queries over many rows, which
        // storectl never runs: a page of the change feed is cheap, but a table never analysed can make its
        // estimated cost look high enough to start the compiler.
        try c.execute("SELECT set_config('default_transaction_isolation', 'read committed', false), "
            + "set_config('lock_timeout', '30s', false), set_config('jit', 'off', false)")
        return c
    }

    /// A new connection, a libpq failure turned into the `CloudError` that explains it.
    /// - Throws: `CloudError`.
    private func connectOrExplain() throws -> PGConnection {
        do {
            return try connect()
        } catch let error as PGError {
            throw cloudError(error, "cannot connect to \(displayURL)")
        }
    }

    /// The open connection to a verified container, opened (again) when needed.
    /// - Throws: `CloudError`.
    private func database() throws -> PGConnection {
        if let connection, connection.isHealthy { return connection }
        connection = nil
        let c = try connectOrExplain()
        try checkContainer(c)
        connection = c
        return c
    }

    /// Makes `c`, on which the account was just checked, the session's connection, once it reaches the container.
    /// - Throws: `CloudError` when it does not (the container missing or at another version): then nothing changes,
    ///   and the next call meets the error on a connection of its own.
    func adopt(_ c: PGConnection, check: SessionCheck) throws {
        try checkContainer(c)
        connection = c
        session = check
    }

    /// Reads the container's meta on `c`: its id and schema version. An older container is migrated in place by
    /// the first storectl that may (the migrations are one transaction: all or nothing); a role that may not gets
    /// the error that names `cloud init`.
    /// - Throws: `CloudError`.
    private func checkContainer(_ c: PGConnection, migrated: Bool = false) throws {
        let meta: PGResult
        do {
            meta = try c.execute("SELECT key, value FROM \(s).meta WHERE key IN ('schema_version', 'container')")
        } catch let error as PGError {
            if error.sqlState == "3F000" || error.sqlState == "42P01" {
                throw CloudError(.containerMissing,
                                 "container \(container) does not exist in \(displayURL) (no schema \(schemaName))",
                                 hint: "run 'storectl cloud init' to create it")
            }
            throw cloudError(error, "cannot read container \(container) in \(displayURL)")
        }
        var values: [String: String] = [:]
        for row in 0..<meta.rowCount {
            if let key = meta.string(row, 0) { values[key] = meta.string(row, 1) }
        }
        if !migrated, let version = values["schema_version"].flatMap({ Int($0) }),
           version < PostgresSchema.currentVersion, values["container"] == nil || values["container"] == container
        {
            do {
                _ = try initializeContainer()
                return try checkContainer(c, migrated: true)
            } catch let error as CloudError where error.kind == .permission {
                try checkMeta(values)
            }
        }
        try checkMeta(values)
    }

    /// Checks the container's meta: its id and schema version.
    private func checkMeta(_ values: [String: String]) throws {
        let version = try CloudContract.checkMeta(version: values["schema_version"], container: values["container"],
                                                  expected: container, newest: PostgresSchema.currentVersion,
                                                  place: "schema \(schemaName) in \(displayURL)")
        if version < PostgresSchema.currentVersion {
            throw CloudError(.containerMissing, "container \(container) in \(displayURL) has schema version "
                + "\(version) and needs version \(PostgresSchema.currentVersion)",
                hint: "run 'storectl cloud init' to migrate it")
        }
    }

    /// Runs `body` on the container's connection, turning libpq errors into `CloudError`s and dropping a
    /// connection that was lost.
    @discardableResult
    func run<T>(_ what: @autoclosure () -> String, _ body: (PGConnection) throws -> T) throws -> T {
        let c = try database()
        do {
            return try body(c)
        } catch let error as PGError {
            if error.sqlState == ZoneWriteRefused.sqlState { throw ZoneWriteRefused() }
            if error.connectionLost || !c.isHealthy { connection = nil }
            // A privilege revoked during the session: the next round checks the account again, and says so.
            if error.sqlState == "42501" { session = nil }
            throw cloudError(error, what())
        }
    }

    /// The `CloudError` for a libpq error met while doing `what`.
    func cloudError(_ error: PGError, _ what: String) -> CloudError {
        let summary = "\(what): \(error)"
        let state = error.sqlState ?? ""
        let klass = error.sqlStateClass ?? ""
        let retry = "retry later; nothing was lost"
        if error.duringConnect {
            switch state {
            case "28000" where error.message.contains("does not exist"):
                return CloudError(.account, summary,
                                  hint: "create the role, or set cloud.account to a role that exists")
            case "28P01":
                return CloudError(.account, summary,
                                  hint: "check the password in cloud.secret, PGPASSWORD or ~/.pgpass")
            case "28000":
                return CloudError(.account, summary,
                                  hint: "check the role's LOGIN right and the server's pg_hba.conf")
            case "3D000":
                return CloudError(.containerMissing, summary, hint: "check the database name in cloud.url")
            case "":
                if error.message.contains("no password supplied") {
                    return CloudError(.account, summary,
                                      hint: "set cloud.secret, or give the password in PGPASSWORD or ~/.pgpass")
                }
                // libpq checks option values ("invalid sslmode value: ...") before it reaches any server.
                if error.message.hasPrefix("invalid ") || error.message.contains("SSL") {
                    return CloudError(.invalid, summary,
                                      hint: "check cloud.url (sslmode and the other options) and the server's SSL set-up")
                }
                return CloudError(.temporary, summary,
                                  hint: "check that the server is running and reachable, then retry")
            default:
                break
            }
        }
        // A prepared statement the session lost (26000) or that its table's new shape outdated (0A000) inside a
        // transaction: the session prepares it again (`PGConnection`), so the next try goes through.
        let statementLost = state == "26000" || error.preparedStatementLost
        if error.connectionLost || klass == "08" || klass == "53" || klass == "40" || state == "57P01"
            || state == "57P02" || state == "57P03" || state == "55P03" || state == "57014" || state == "25006"
            || statementLost
        {
            return CloudError(.temporary, summary, hint: state == "25006"
                ? "the server is read-only (a standby, or default_transaction_read_only); \(retry)" : retry)
        }
        switch state {
        case "42501":
            return CloudError(.permission, summary,
                              hint: "the role lacks privileges on schema \(schemaName); a database owner can grant "
                                  + "them with the SQL from 'storectl cloud init --print-grants'")
        case "3F000", "42P01":
            return CloudError(.containerMissing, summary, hint: "run 'storectl cloud init' to create the container")
        default:
            return CloudError(.other, summary)
        }
    }

    // MARK: - Container set-up

    /// Creates the container's schema and tables, or migrates them to the current version, in one transaction.
    /// Safe to run again, and from several machines at once (an advisory lock serialises them).
    ///
    /// - Throws: `CloudError(.notAContainer)` when the schema exists but is not this container; `.permission`
    ///   when the role may not create it; `.temporary` when the connection failed.
    @discardableResult
    public func initializeContainer() throws -> PostgresContainerSetup {
        connection = nil
        let c = try connectOrExplain()
        do {
            let setup = try c.transaction { () throws -> PostgresContainerSetup in
                try c.execute("SELECT pg_advisory_xact_lock(hashtext($1))", ["storectl:" + schemaName])
                let existing = try c.execute("""
                    SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid),
                           to_regclass($2) IS NOT NULL
                    FROM pg_namespace n WHERE n.nspname = $1
                    """, [schemaName, "\(s).meta"])
                var previous = 0
                let created = existing.rowCount == 0
                if created {
                    try c.execute("CREATE SCHEMA \(s)")
                }
                if created || existing.bool(0, 1) != true {
                    if !created, (existing.int64(0, 0) ?? 0) > 0 {
                        throw CloudError(.notAContainer, "schema \(schemaName) in \(displayURL) already exists and "
                            + "is not a storectl container", hint: "check cloud.container; storectl did not change it")
                    }
                    try c.execute("CREATE TABLE \(s).meta (key text PRIMARY KEY, value text NOT NULL)")
                    try c.execute("INSERT INTO \(s).meta (key, value) VALUES ('container', $1), "
                        + "('schema_version', '0')", [container])
                } else {
                    let meta = try c.execute("SELECT key, value FROM \(s).meta FOR UPDATE")
                    var values: [String: String] = [:]
                    for row in 0..<meta.rowCount {
                        if let key = meta.string(row, 0) { values[key] = meta.string(row, 1) }
                    }
                    if let stored = values["container"], stored != container {
                        throw CloudError(.notAContainer, "schema \(schemaName) in \(displayURL) holds container "
                            + "\(stored), not \(container)", hint: "check cloud.container; storectl did not change it")
                    }
                    guard let version = values["schema_version"].flatMap({ Int($0) }) else {
                        throw CloudError(.notAContainer, "schema \(schemaName) in \(displayURL) has no schema_version",
                                         hint: "check cloud.container; storectl did not change it")
                    }
                    if version > PostgresSchema.currentVersion {
                        throw CloudError(.notAContainer, "container \(container) in \(displayURL) has schema version "
                            + "\(version); this storectl knows versions up to \(PostgresSchema.currentVersion)",
                            hint: "upgrade storectl")
                    }
                    previous = version
                }
                for index in previous..<PostgresSchema.currentVersion {
                    for statement in PostgresSchema.statements(migration: index, schema: schemaName) {
                        try c.execute(statement)
                    }
                }
                try c.execute("UPDATE \(s).meta SET value = $1 WHERE key = 'schema_version'",
                              [String(PostgresSchema.currentVersion)])
                return PostgresContainerSetup(schema: schemaName, created: created, previousVersion: previous,
                                              version: PostgresSchema.currentVersion)
            }
            connection = c
            return setup
        } catch let error as PGError {
            if error.sqlState == "42501" {
                // Creating the schema needs CREATE on the database, which --print-grants does not give.
                let who = role ?? "the configured role"
                throw CloudError(.permission, "cannot set up container \(container) in \(displayURL): \(error)",
                                 hint: "creating a container needs CREATE on the database: a database owner runs "
                                     + "'GRANT CREATE ON DATABASE <database> TO \(who)', or runs 'storectl cloud init' "
                                     + "as a role that has it (then 'storectl cloud init --print-grants' gives the "
                                     + "grants that let \(who) use the container)")
            }
            throw cloudError(error, "cannot set up container \(container) in \(displayURL)")
        }
    }

    /// Drops the container's schema with everything in it. Nothing asks for confirmation here: callers do.
    /// - Throws: `CloudError`.
    public func deleteContainer() throws {
        connection = nil
        do {
            let c = try connect()
            try c.execute("DROP SCHEMA IF EXISTS \(s) CASCADE")
        } catch let error as PGError {
            throw cloudError(error, "cannot delete container \(container) in \(displayURL)")
        }
    }

    // MARK: - Zones

    /// The zone with its owner and this role's access. Throws `.permission` for a zone the role has no share of,
    /// never nil as if it did not exist.
    public func zoneInfo(_ zone: String, countLive: Bool) throws -> ZoneInfo? {
        try zoneInfo(zone, countLive: countLive, device: nil)
    }

    /// One statement: the zone, its schema version, and `device`'s export state.
    public func roundZoneInfo(_ zone: String, device: String) throws -> ZoneInfo? {
        try zoneInfo(zone, countLive: false, device: device)
    }

    private func zoneInfo(_ zone: String, countLive: Bool, device: String?) throws -> ZoneInfo? {
        try run("cannot read zone \(zone) of \(container)") { c in
            let count = "(SELECT count(*) FROM \(s).records WHERE zone = $1 AND NOT deleted)"
            let live = countLive ? "CASE WHEN a.level <> 'none' THEN \(count) END" : "-1"
            let r = try c.execute("""
                SELECT a.epoch, a.last_seq, \(live), \(Self.accessColumns("a")), \(Self.schemaMarkerColumns),
                       e.last_seq, e.serial, e.history_seq, e.saved_at
                FROM \(zoneRow("$1")) a \(schemaMarkerJoin(zone: "$1", from: "$2", to: "$3"))
                LEFT JOIN LATERAL (SELECT last_seq, serial, history_seq, saved_at FROM \(s).export_marks
                                   WHERE zone = $1 AND device = $4 ORDER BY last_seq DESC LIMIT 1) e
                    ON a.level <> 'none' AND $4 IS NOT NULL
                """, [zone] + Self.schemaMarkerRange + [device])
            guard let access = ZoneAccessRow(r, row: 0, at: 3, zone: zone) else {
                if let hidden = try hiddenZoneError(c, zone: zone) { throw hidden }
                return nil
            }
            session?.access[zone] = access.signature
            try access.requireRead(container: container)
            var info = ZoneInfo(name: zone, epoch: r.string(0, 0) ?? "", lastSeq: r.int64(0, 1) ?? 0,
                                liveRecords: r.int64(0, 2) ?? 0)
            info.owner = access.access.owner
            info.access = access.access.level
            info.schemaVersion = .read(schemaMarker(r, row: 0, at: 7, zone: zone))
            if device != nil {
                info.exportState = .read(r.string(0, 11) == nil ? nil : DeviceExportState(
                    mark: ExportMark(serial: r.int64(0, 12) ?? 0, historySeq: r.int64(0, 13) ?? 0,
                                     time: r.int64(0, 14) ?? 0),
                    lastSeq: r.int64(0, 11) ?? 0))
            }
            primaryEpochs[zone] = info.epoch
            primaryLastSeqs[zone] = info.lastSeq
            return info
        }
    }

    /// Creates the zone, owned by this role, or returns it when it exists and the role may write it (`.permission`
    /// otherwise: a zone name is never taken twice).
    @discardableResult
    public func ensureZone(_ zone: String) throws -> ZoneInfo {
        try CloudContract.checkZone(zone)
        try run("cannot create zone \(zone) of \(container)") { c in
            try c.execute("""
                INSERT INTO \(s).zones (name, epoch, last_seq, created_at, owner)
                VALUES ($1, gen_random_uuid()::text, 0, extract(epoch FROM statement_timestamp())::float8,
                        current_user)
                ON CONFLICT (name) DO NOTHING
                """, [zone])
        }
        guard let info = try zoneInfo(zone) else {
            // Only a purge-and-drop racing with us could get here.
            throw CloudError(.temporary, "zone \(zone) of \(container) vanished while it was being created",
                             hint: "retry")
        }
        if info.access == .readOnly { throw try writeRefusal(zone) }
        return info
    }

    /// Purges the zone: its owner may, and so may the role that owns the container's schema or a member of it; a
    /// participant never.
    public func purgeZone(_ zone: String) throws {
        let found = try run("cannot purge zone \(zone) of \(container)") { c -> Bool in
            try requirePurgeRight(c, zone: zone)
            // The zone lock orders the purge with saves: a save sees the zone either before or after it, whole.
            let results = try c.pipeline([
                PGQuery("SELECT 1 FROM \(s).zones WHERE name = $1 FOR UPDATE", [zone]),
                PGQuery("""
                    WITH r AS (DELETE FROM \(s).records WHERE zone = $1),
                         m AS (DELETE FROM \(s).markers WHERE zone = $1),
                         e AS (DELETE FROM \(s).export_marks WHERE zone = $1),
                         k AS (DELETE FROM \(s).superseded_saves WHERE zone = $1)
                    UPDATE \(s).zones SET epoch = gen_random_uuid()::text WHERE name = $1
                    """, [zone]),
            ])
            return results.first?.rowCount == 1
        }
        if !found { throw zoneNotFound(zone) }
    }

    /// The role that owns the container's schema, the role this connection acts as, and whether that role is the
    /// owner or a member of it (a superuser is a member of every role); nil when the schema does not exist.
    func containerOwner(_ c: PGConnection) throws -> (owner: String, current: String, isMember: Bool)? {
        let r = try c.execute("""
            SELECT pg_get_userbyid(n.nspowner), current_user, pg_has_role(current_user, n.nspowner, 'MEMBER')
            FROM pg_namespace n WHERE n.nspname = $1
            """, [schemaName])
        guard r.rowCount == 1, let owner = r.string(0, 0) else { return nil }
        return (owner, r.string(0, 1) ?? (role ?? ""), r.bool(0, 2) == true)
    }

    func zoneNotFound(_ zone: String) -> CloudError {
        CloudError(.zoneNotFound, "zone \(zone) does not exist in container \(container) at \(displayURL)",
                   hint: "it is created on the first sync; if it was deleted on purpose, sync again to recreate it")
    }

    /// Refuses a purge by a role that neither owns the zone nor owns the container (or is a member of its owner).
    private func requirePurgeRight(_ c: PGConnection, zone: String) throws {
        let r = try c.execute("""
            SELECT a.owner, current_user, pg_get_userbyid(n.nspowner), pg_has_role(current_user, n.nspowner, 'MEMBER')
            FROM pg_namespace n LEFT JOIN LATERAL \(s).zone_access($2, current_user) a ON true
            WHERE n.nspname = $1
            """, [schemaName, zone])
        guard r.rowCount == 1, r.bool(0, 3) != true else { return }
        let (owner, current) = (r.string(0, 0), r.string(0, 1) ?? (role ?? ""))
        if let owner, owner == current { return }
        let whose = owner.map { " nor of zone \(zone), which belongs to role \($0)" } ?? ""
        throw CloudError(.permission, "role \(current) is not an owner of container \(container) at \(displayURL) "
                             + "(its owner is role \(r.string(0, 2) ?? "?"))" + whose,
                         hint: "only the zone's owner, the container's owner role or a role granted it can purge a "
                             + "zone; ask one to purge it (cloud purge --yes, on a store of theirs)")
    }

    // MARK: - Records

    /// The columns of a record, in the order `record(from:row:at:zone:)` reads them.
    static let recordColumns =
        "record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at"

    func record(from r: PGResult, row: Int, at column: Int, zone: String) -> CloudRecord? {
        guard let name = r.string(row, column) else { return nil }
        return CloudRecord(zone: zone, recordName: name, recordType: r.string(row, column + 1) ?? "",
                           fields: r.string(row, column + 2) ?? "{}", changeTag: r.string(row, column + 3) ?? "",
                           seq: r.int64(row, column + 4) ?? 0, deleted: r.bool(row, column + 5) ?? false,
                           modifiedBy: r.string(row, column + 6) ?? "", modifiedAt: r.double(row, column + 7) ?? 0)
    }

    /// A record read with `checkedRecords`: its columns, then the account of its saver when that account may not
    /// write the zone (the record's `rejection`).
    func checkedRecord(from r: PGResult, row: Int, at column: Int, zone: String) -> CloudRecord? {
        guard var record = record(from: r, row: row, at: column, zone: zone) else { return nil }
        if let saver = r.string(row, column + 8) {
            record.rejection = CloudRecord.rejection(device: record.modifiedBy, saver: saver, zone: zone)
        }
        return record
    }

    /// The records of zone `$1` that `filter` (and `tail`: order, limit) selects, each followed by `rejected_by`,
    /// set when the account that saved it (`records.account`, written by the server: `current_user` in the save)
    /// could not write the zone at the record's seq, and naming it. It could as the owner `a.owner` of the
    /// enclosing zone row `a` (`zoneRow`; NULL, a zone without an owner, refuses nothing), as a read-write
    /// participant (their list is read once per statement, hashed), as one whose read-write share ended at or
    /// after the record's seq (`former_writers`, one key lookup), or as `''` (saved before the container knew
    /// shares). A record without an account was written outside storectl: it is judged as the account its device
    /// is registered to (looked up only then), and named with `CloudRecord.unrecordedSaverPrefix`; from a device no
    /// account registered, it stands only in a zone no other role ever had a share of. For a `LATERAL` join on `a`.
    func checkedRecords(_ filter: String, _ tail: String = "") -> String {
        """
        SELECT rr.record_name, rr.record_type, rr.fields, rr.change_tag, rr.seq, rr.deleted, rr.modified_by,
               rr.modified_at,
               CASE WHEN a.owner IS NULL THEN NULL
                    WHEN rr.saver IS NULL
                        THEN CASE WHEN EXISTS (SELECT 1 FROM \(s).shares sh WHERE sh.zone = $1)
                                    OR EXISTS (SELECT 1 FROM \(s).former_writers f WHERE f.zone = $1)
                                  THEN chr(31) END
                    WHEN rr.saver = '' OR rr.saver = a.owner THEN NULL
                    WHEN rr.saver IN (SELECT sh.account FROM \(s).shares sh
                                      WHERE sh.zone = $1 AND sh.permission = 'read-write') THEN NULL
                    WHEN EXISTS (SELECT 1 FROM \(s).former_writers f WHERE f.zone = $1 AND f.account = rr.saver
                                   AND f.until_seq >= rr.seq) THEN NULL
                    ELSE (CASE WHEN rr.account IS NULL THEN chr(31) ELSE '' END) || rr.saver END AS rejected_by
        FROM (SELECT \(Self.recordColumns), account,
                     coalesce(account, (SELECT d.account FROM \(s).devices d
                                        WHERE d.store_id = \(s).records.modified_by)) AS saver
              FROM \(s).records WHERE zone = $1 AND \(filter) \(tail)) rr
        """
    }

    public func fetchChanges(zone: String, since token: ServerChangeToken?, limit: Int, excludingDevice: String?)
        throws -> ChangeBatch
    {
        try CloudContract.checkPageSize(limit)
        if standby != nil,
           let batch = try fetchChangesFromStandby(zone: zone, since: token, limit: limit, excludingDevice: excludingDevice)
        {
            return batch
        }
        let page = try run("cannot fetch changes of zone \(zone) of \(container)") { c in
            let page = try changePage(c, zone: zone, after: token?.seq ?? 0, limit: limit,
                                      excludingDevice: excludingDevice)
            if page == nil, let hidden = try hiddenZoneError(c, zone: zone) { throw hidden }
            return page
        }
        guard let page else { throw zoneNotFound(zone) }
        try page.access.requireRead(container: container)
        primaryEpochs[zone] = page.epoch
        primaryLastSeqs[zone] = page.lastSeq
        try CloudContract.checkToken(token, epoch: page.epoch, zone: zone, container: container)
        return page.batch(after: token?.seq ?? 0, limit: limit)
    }

    /// One page of a zone's change feed as one snapshot shows it, on the primary or on the standby.
    struct ChangePage {
        var epoch: String
        var lastSeq: Int64
        /// Up to `limit + 1` records after the token, in seq order.
        var records: [CloudRecord]
        /// `pg_is_in_recovery()` in the same snapshot: true on a standby.
        var inRecovery: Bool
        /// The role's access to the zone, in the same snapshot (no records come for a role without a share).
        var access: ZoneAccessRow
        /// The zone's schema version, in the same snapshot.
        var schemaVersion: ZoneSchemaVersion?

        /// The batch of at most `limit` records, with the token after it.
        func batch(after: Int64, limit: Int) -> ChangeBatch {
            var records = self.records
            let moreComing = records.count > limit
            if moreComing { records.removeLast(records.count - limit) }
            // A complete page has seen everything up to last_seq, so the token may jump there; a partial page
            // stops at its last record.
            var batch = ChangeBatch(records: records,
                                    token: CloudContract.nextToken(epoch: epoch, after: after, zoneLastSeq: lastSeq,
                                                                   page: records, moreComing: moreComing),
                                    moreComing: moreComing)
            batch.schemaVersion = .read(schemaVersion)
            return batch
        }
    }

    /// Reads a page of the change feed on `c`; nil when the zone does not exist there.
    ///
    /// One statement, so one snapshot: the zone's last_seq and the records after the token are seen together.
    /// Every transaction that assigned a seq ≤ last_seq is visible in that snapshot (see the type's comment).
    /// - Throws: `PGError`.
    func changePage(_ c: PGConnection, zone: String, after: Int64, limit: Int, excludingDevice: String?) throws
        -> ChangePage?
    {
        // The page must come from walking the (zone, seq) index in order and stopping after `limit + 1` rows.
        // A table that grew since it was last analysed (or never was) looks tiny to the planner, which then
        // prefers a bitmap scan of every row of the zone after the token, then a sort: O(zone) per page. So,
        // for this transaction only, bitmap scans are off; an ordered index scan is then cheaper than anything
        // that must sort (a plain index scan of the same rows plus a sort, or a scan of the whole table).
        // The zone's row `a` (`zoneRow`) gives its epoch, last seq and this role's access, and none of its records
        // to a role without a share, whose policies would hide them anyway.
        let r = try c.pipeline([
            PGQuery("SELECT set_config('enable_bitmapscan', 'off', true)"),
            PGQuery("""
            SELECT a.epoch, a.last_seq, pg_is_in_recovery(), r.record_name, r.record_type, r.fields, r.change_tag,
                   r.seq, r.deleted, r.modified_by, r.modified_at, r.rejected_by, \(Self.accessColumns("a")),
                   \(Self.schemaMarkerColumns)
            FROM \(zoneRow("$1")) a
            \(schemaMarkerJoin(zone: "$1", from: "$5", to: "$6"))
            LEFT JOIN LATERAL (
                \(checkedRecords("seq > $2 AND modified_by IS DISTINCT FROM $4", "ORDER BY seq LIMIT $3"))
            ) r ON a.level <> 'none'
            ORDER BY r.seq
            """, [zone, String(after), String(limit + 1), excludingDevice] + Self.schemaMarkerRange),
        ])[1]
        guard let access = ZoneAccessRow(r, row: 0, at: 12, zone: zone) else { return nil }
        var records: [CloudRecord] = []
        for row in 0..<r.rowCount {
            if let record = checkedRecord(from: r, row: row, at: 3, zone: zone) { records.append(record) }
        }
        return ChangePage(epoch: r.string(0, 0) ?? "", lastSeq: r.int64(0, 1) ?? 0, records: records,
                          inRecovery: r.bool(0, 2) ?? false, access: access,
                          schemaVersion: schemaMarker(r, row: 0, at: 16, zone: zone))
    }

    /// The zone's schema-version marker read in the same statement as the zone (`zoneInfo`) or a page of its feed
    /// (`changePage`): the columns, the join (after the zone's row `a`), and its parameters (the marker range).
    static let schemaMarkerColumns = "m.name, m.created_by, m.created_at, m.payload"
    static var schemaMarkerRange: [String?] { [CloudContract.schemaMarkerPrefix, CloudContract.schemaMarkerPrefix + "~"] }
    func schemaMarkerJoin(zone: String, from: String, to: String) -> String {
        """
        LEFT JOIN LATERAL (SELECT name, created_by, created_at, payload FROM \(s).markers
                           WHERE zone = \(zone) AND name COLLATE "C" >= \(from) AND name COLLATE "C" < \(to)
                           ORDER BY name COLLATE "C" DESC LIMIT 1) m ON a.level <> 'none'
        """
    }

    /// The schema version from the columns `schemaMarkerColumns` at `at` of row `row`, or nil (version 0).
    func schemaMarker(_ r: PGResult, row: Int, at: Int, zone: String) -> ZoneSchemaVersion? {
        guard let name = r.string(row, at) else { return nil }
        return CloudContract.schemaVersion(Marker(zone: zone, name: name, createdBy: r.string(row, at + 1) ?? "",
                                                  createdAt: r.double(row, at + 2) ?? 0, payload: r.string(row, at + 3) ?? ""))
    }

    public func fetchRecord(zone: String, recordName: String) throws -> CloudRecord? {
        try run("cannot fetch record \(recordName) of zone \(zone)") { c in
            let r = try c.execute("""
                SELECT \(Self.accessColumns("a")), r.*
                FROM \(zoneRow("$1")) a
                LEFT JOIN LATERAL (\(checkedRecords("record_name = $2"))) r ON a.level <> 'none'
                """, [zone, recordName])
            guard let access = ZoneAccessRow(r, row: 0, at: 0, zone: zone) else {
                if let hidden = try hiddenZoneError(c, zone: zone) { throw hidden }
                return nil
            }
            try access.requireRead(container: container)
            return checkedRecord(from: r, row: 0, at: 4, zone: zone)
        }
    }

    /// The SQL of `CloudContract.changeTag(seq:epoch:)` for the SQL expressions `seq` (bigint) and `epoch` (text):
    /// the server computes the tags of a batch in the statement that saves it (`to_hex` is lowercase hex).
    private static func tagSQL(seq: String, epoch: String) -> String {
        "to_hex(\(seq)) || '-' || left(\(epoch), 8)"
    }

    /// Saves the batch in one network round trip and one transaction (see the type's comment for the ordering).
    ///
    /// The statements go to the server together through libpq's pipeline mode, so the zone lock is held for the
    /// server's work only, never for a network round trip:
    ///
    /// 1. `SELECT last_seq, epoch ... FOR UPDATE` on the zone's row: waits for any other save to the zone to
    ///    commit. Every write to a zone's records holds this lock, so what the next statement reads of them stays
    ///    true until the commit.
    /// 2. The batch, as arrays (`unnest`; the fields as one text split with `string_to_array`). When no record of
    ///    the batch expects a tag (a first export), a plain `INSERT` (`saveNew`): no lookups; a record that exists
    ///    after all makes it fail with a unique violation, and the batch is sent again the general way. Otherwise
    ///    one statement (`saveConditionally`) looks each record up by its key, inserts the new ones, updates the
    ///    matching ones in place, raises `last_seq`, and returns the conflicts only. A batch of `copyThreshold`
    ///    records or more goes instead through `COPY` into a temporary table, in the same transaction and before
    ///    the lock (`withCopiedBatch`), and the same statements read it from there.
    ///
    /// The k-th record written gets seq `last_seq + k` and the tag `changeTag(seq:epoch:)`, so the client knows
    /// both from the lock's row, and only conflicts travel back.
    ///
    /// - Throws: `CloudError`: `.invalid` for a malformed batch (nothing of it is saved), `.zoneNotFound`,
    ///   `.temporary` when the connection was lost or a lock timed out.
    public func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, schemaVersion: Int?,
                     atomic: Bool) throws -> [SaveOutcome]
    {
        do {
            return try save(zone: zone, saves, device: device, mark: mark, writtenAt: schemaVersion, atomic: atomic)
        } catch is ZoneWriteRefused {
            throw try writeRefusal(zone)
        } catch let error as CloudError where error.kind == .schemaAhead {
            throw CloudContract.schemaAhead(zone: zone, container: container, writer: schemaVersion ?? 0,
                                            zoneVersion: try? self.schemaVersion(zone: zone))
        }
    }

    private func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, writtenAt: Int?,
                      atomic: Bool) throws -> [SaveOutcome]
    {
        if saves.isEmpty { return [] }
        try CloudContract.checkBatch(saves, zone: zone, device: device)
        let texts = saves.map { $0.deleted ? RecordSave.tombstoneFields($0.fields) : $0.fields }
        // The fields go as one text split on the server, or as COPY rows. A value the split would not give back
        // (empty, or with a control character) is no JSON object anyway; both paths refuse it the same way.
        if let bad = texts.indices.first(where: {
            texts[$0].isEmpty || texts[$0].utf8.contains(PGConnInfo.recordSeparator)
        }) {
            throw CloudError(.invalid, "cannot save \(saves.count) records to zone \(zone): the fields of record "
                + "\(saves[bad].recordName) are not a JSON object (empty, or a control character outside a "
                + "string); nothing of the batch was saved",
                hint: "fields must be JSON object text, e.g. {\"title\":\"hi\"}")
        }
        let what = "cannot save \(saves.count) records to zone \(zone) of \(container)"
        // The batch as arrays, for the statements that take it so (built only when one of them runs).
        func arrays() -> BatchSource {
            .arrays([PGConnInfo.textArrayLiteral(saves.map { $0.recordName }),
                     PGConnInfo.textArrayLiteral(saves.map { $0.recordType }), PGConnInfo.separatedText(texts) ?? "",
                     PGConnInfo.boolArray(saves.map { $0.deleted }),
                     PGConnInfo.textArrayLiteral(saves.map { $0.expectedTag })])
        }
        // A large batch goes through COPY, unless a value holds a NUL byte (COPY's text format cannot carry it;
        // the arrays path reports it).
        let copyRows = saves.count < copyThreshold ? nil : PGConnInfo.copyText(saves.indices.map { k in
            [String(k + 1), saves[k].recordName, saves[k].recordType, texts[k], saves[k].deleted ? "t" : "f",
             saves[k].expectedTag]
        })
        if saves.allSatisfy({ $0.expectedTag == nil }) {
            let inserted = try run(what) { c -> [SaveOutcome]? in
                do {
                    if let copyRows {
                        return try withCopiedBatch(c, copyRows) {
                            try saveNew(c, zone: zone, count: saves.count, from: .copied, device: device, mark: mark,
                                        writtenAt: writtenAt)
                        }
                    }
                    return try saveNew(c, zone: zone, count: saves.count, from: arrays(), device: device,
                                       mark: mark, writtenAt: writtenAt)
                } catch let error as PGError where error.sqlState == "23505" {
                    return nil  // a record exists after all; rolled back, nothing was saved
                }
            }
            if let inserted { return inserted }
        }
        return try run(what) { c in
            if let copyRows {
                return try withCopiedBatch(c, copyRows) {
                    try saveConditionally(c, zone: zone, saves, from: .copied, device: device, mark: mark,
                                          writtenAt: writtenAt, atomic: atomic)
                }
            }
            return try saveConditionally(c, zone: zone, saves, from: arrays(), device: device, mark: mark,
                                         writtenAt: writtenAt, atomic: atomic)
        }
    }

    /// The statement that records `mark` for `device` with the zone's last seq as it stands when it runs (after
    /// the batch's records), and forgets the device's marks, and superseded saves, of older serials in the zone.
    /// `$1` is the zone.
    private func markQuery(zone: String, device: String, mark: ExportMark, count: Int) -> PGQuery {
        PGQuery("""
            WITH old AS (DELETE FROM \(s).export_marks WHERE zone = $1 AND device = $2 AND serial < $3),
                 unkept AS (DELETE FROM \(s).superseded_saves WHERE zone = $1 AND device = $2 AND serial < $3)
            INSERT INTO \(s).export_marks (zone, device, last_seq, first_seq, serial, history_seq, saved_at)
            SELECT $1, $2, last_seq, last_seq - $6 + 1, $3, $4, $5 FROM \(s).zones WHERE name = $1
            ON CONFLICT (zone, device, last_seq) DO UPDATE SET first_seq = excluded.first_seq,
                serial = excluded.serial, history_seq = excluded.history_seq, saved_at = excluded.saved_at
            """, [zone, device, String(mark.serial), String(mark.historySeq), String(mark.time), String(count)])
    }

    public func exportState(zone: String, device: String) throws -> DeviceExportState? {
        try run("cannot read the export marks of device \(device) in zone \(zone) of \(container)") { c in
            let r = try c.execute("""
                SELECT m.last_seq, m.serial, m.history_seq, m.saved_at, \(Self.accessColumns("a"))
                FROM \(zoneRow("$1")) a
                LEFT JOIN LATERAL (SELECT last_seq, serial, history_seq, saved_at FROM \(s).export_marks
                                   WHERE zone = $1 AND device = $2 ORDER BY last_seq DESC LIMIT 1) m
                    ON a.level <> 'none'
                """, [zone, device])
            guard let access = ZoneAccessRow(r, row: 0, at: 4, zone: zone) else {
                if let hidden = try hiddenZoneError(c, zone: zone) { throw hidden }
                return nil
            }
            try access.requireRead(container: container)
            guard r.string(0, 0) != nil else { return nil }
            return DeviceExportState(mark: ExportMark(serial: r.int64(0, 1) ?? 0, historySeq: r.int64(0, 2) ?? 0,
                                                      time: r.int64(0, 3) ?? 0),
                                     lastSeq: r.int64(0, 0) ?? 0)
        }
    }

    public func fetchDeviceRecords(zone: String, device: String, after seq: Int64, limit: Int) throws
        -> (records: [DeviceRecord], moreComing: Bool)
    {
        try CloudContract.checkPageSize(limit)
        let (r, hidden) = try run("cannot fetch the records of device \(device) in zone \(zone) of \(container)") {
            c -> (PGResult, CloudError?) in
            let r = try c.execute("""
                SELECT $1, r.record_name, r.record_type, r.fields, r.change_tag, r.seq, r.deleted, r.modified_by,
                       r.modified_at,
                       (SELECT m.history_seq FROM \(s).export_marks m WHERE m.zone = $1 AND m.device = $2
                          AND m.last_seq >= r.seq AND m.first_seq <= r.seq ORDER BY m.last_seq LIMIT 1),
                       r.superseded, \(Self.accessColumns("a"))
                FROM \(zoneRow("$1")) a
                LEFT JOIN LATERAL (
                    -- The device's records as they stand, and its saves another device's save replaced since.
                    (SELECT \(Self.recordColumns), false AS superseded FROM \(s).records
                     WHERE zone = $1 AND seq > $3 AND modified_by = $2 ORDER BY seq LIMIT $4)
                    UNION ALL
                    (SELECT record_name, record_type, fields, change_tag, seq, deleted, device, modified_at, true
                     FROM \(s).superseded_saves WHERE zone = $1 AND device = $2 AND seq > $3 ORDER BY seq LIMIT $4)
                    ORDER BY seq LIMIT $4
                ) r ON a.level <> 'none'
                ORDER BY r.seq
                """, [zone, device, String(seq), String(limit + 1)])
            return (r, ZoneAccessRow(r, row: 0, at: 11, zone: zone) == nil ? try hiddenZoneError(c, zone: zone) : nil)
        }
        guard let access = ZoneAccessRow(r, row: 0, at: 11, zone: zone) else { throw hidden ?? zoneNotFound(zone) }
        try access.requireRead(container: container)
        var records: [DeviceRecord] = []
        for row in 0..<r.rowCount {
            if let record = record(from: r, row: row, at: 1, zone: zone) {
                records.append(DeviceRecord(record: record, historySeq: r.int64(row, 9),
                                            superseded: r.bool(row, 10) ?? false))
            }
        }
        let more = records.count > limit
        if more { records.removeLast(records.count - limit) }
        return (records, more)
    }

    /// The pipeline of a save: the zone lock, `statements`, the test delays; returns the lock's row and the
    /// results of `statements`.
    /// - Throws: `CloudError(.invalid)` when a record's fields are not a JSON object, `.zoneNotFound`; `PGError`.
    private func pipelinedSave(_ c: PGConnection, zone: String, device: String, count: Int, writtenAt: Int?,
                               _ statements: [PGQuery]) throws -> (lastSeq: Int64, epoch: String, results: [PGResult])
    {
        var queries: [PGQuery] = []
        if let delays = saveDelays, delays.beforeLock > 0 {
            queries.append(PGQuery("SELECT pg_sleep($1::float8)", [String(delays.beforeLock)]))
        }
        // Refuses the whole transaction (SQLSTATE SH001) unless the role may write the zone.
        queries.append(Self.requireWritable(schema: s, zone: zone))
        queries.append(PGQuery("SELECT last_seq, epoch FROM \(s).zones WHERE name = $1 FOR UPDATE", [zone]))
        let lockIndex = queries.count - 1
        if let writtenAt {
            // A zone at a later schema version refuses the batch: a division by zero (SQLSTATE 22012), the one error
            // plain SQL can raise on a condition, aborts the transaction before any record is written. Read under
            // the zone's lock, which a raise takes too.
            queries.append(PGQuery("""
                SELECT 1 / (CASE WHEN EXISTS (SELECT 1 FROM \(s).markers WHERE zone = $1
                    AND name COLLATE "C" > $2 AND name COLLATE "C" < $3) THEN 0 ELSE 1 END)
                """, [zone, CloudContract.schemaMarkerName(writtenAt), CloudContract.schemaMarkerPrefix + "~"]))
        }
        let firstStatement = queries.count
        queries += statements
        // Wakes the `storectl watch` processes listening on the container (delivered when the save commits).
        queries.append(PostgresChangeListener.notifyQuery(channel: schemaName, schema: s, zone: zone, device: device))
        if let delays = saveDelays, delays.beforeCommit > 0 {
            queries.append(PGQuery("SELECT pg_sleep($1::float8)", [String(delays.beforeCommit)]))
        }
        let results: [PGResult]
        do {
            results = try c.pipeline(queries)
        } catch let error as PGError where writtenAt != nil && error.sqlState == "22012" {
            throw CloudError(.schemaAhead, "zone \(zone) is at a later schema version")
        } catch let error as PGError where error.sqlState == "22P02" || error.sqlState == "23514" {
            throw CloudError(.invalid, "cannot save \(count) records to zone \(zone): the fields of a "
                + "record are not a JSON object (\(error.message)); nothing of the batch was saved",
                hint: "fields must be JSON object text, e.g. {\"title\":\"hi\"}")
        }
        let lock = results[lockIndex]
        guard lock.rowCount == 1, let lastSeq = lock.int64(0, 0), let epoch = lock.string(0, 1) else {
            throw zoneNotFound(zone)
        }
        return (lastSeq, epoch, Array(results[firstStatement..<(firstStatement + statements.count)]))
    }

    /// Where the statements of a save read the batch from: `unnest` of arrays sent as parameters (names, types,
    /// the fields joined by `recordSeparator`, deleted, expected tags), or the temporary table `COPY` filled.
    enum BatchSource {
        case arrays([String])
        case copied

        /// The `FROM` item of the batch, `i(record_name, record_type, fields, deleted, expected_tag, ord)` with
        /// `ord` the position from 1, and its parameters, numbered from `$2`.
        var from: (sql: String, parameters: [String?]) {
            switch self {
            case .arrays(let values):
                return ("""
                    unnest($2::text[], $3::text[], string_to_array($4, chr(30)), $5::boolean[], $6::text[])
                        WITH ORDINALITY AS i(record_name, record_type, fields, deleted, expected_tag, ord)
                    """, values)
            case .copied:
                return ("pg_temp.storectl_batch i", [])
            }
        }
    }

    /// Saves records that nobody expects to exist: one plain `INSERT` with seqs `last_seq + 1...`, then
    /// `last_seq` raised. Without the zone's lock this would race; with it, a unique violation (SQLSTATE 23505)
    /// means a record of the batch exists, and the caller sends the batch the general way.
    /// - Throws: `PGError` (23505 among others), `CloudError`.
    private func saveNew(_ c: PGConnection, zone: String, count: Int, from batch: BatchSource, device: String,
                         mark: ExportMark?, writtenAt: Int?) throws -> [SaveOutcome]
    {
        let seq = "z.last_seq + i.ord"
        let (from, parameters) = batch.from
        let next = parameters.count + 2
        let (lastSeq, epoch, _) = try pipelinedSave(c, zone: zone, device: device, count: count,
                                                    writtenAt: writtenAt, [
            PGQuery("""
                INSERT INTO \(s).records
                    (zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at,
                     account)
                SELECT $1, i.record_name, i.record_type, i.fields, \(Self.tagSQL(seq: seq, epoch: "z.epoch")),
                       \(seq), i.deleted, $\(next), extract(epoch FROM statement_timestamp())::float8, current_user
                FROM \(s).zones z, \(from)
                WHERE z.name = $1
                """, [zone] + parameters + [device]),
            PGQuery("UPDATE \(s).zones SET last_seq = last_seq + $2 WHERE name = $1", [zone, String(count)]),
        ] + (mark.map { [markQuery(zone: zone, device: device, mark: $0, count: count)] } ?? []))
        return Self.saved(count, after: lastSeq, epoch: epoch)
    }

    /// Batches of at least this many records (an export's full batch) go through `COPY` (`withCopiedBatch`); a
    /// smaller one goes as arrays in one round trip. COPY's extra round trips (BEGIN, the COPY itself, COMMIT)
    /// cost more than they save on a few hundred records; at a thousand the two paths take the same time, the
    /// server's work being the records table's two unique indexes and its JSON check either way (BENCHMARKS.md).
    var copyThreshold = 1000

    /// The connection whose session holds the temporary batch table (it lives as long as the session; a new
    /// connection is a new object, so the table is made again on it).
    private(set) weak var copyTableConnection: PGConnection?

    /// Runs `body` in a transaction that first puts a batch into the temporary table `storectl_batch` through
    /// `COPY ... FROM STDIN`, before `body` takes the zone's lock: the lock is then held for the server's work
    /// only, as with arrays. The table empties itself when the transaction ends (`ON COMMIT DELETE ROWS`; a
    /// rollback takes the rows too). `rows` is the batch in COPY's text format: position (from 1), name, type,
    /// fields, deleted (`t`/`f`), expected tag (`\N` for none).
    /// - Throws: `PGError`, what `body` throws.
    private func withCopiedBatch<T>(_ c: PGConnection, _ rows: [UInt8], _ body: () throws -> T) throws -> T {
        if copyTableConnection !== c {
            // In a transaction of its own, so that a save rolled back does not take the table with it.
            try c.execute("""
                CREATE TEMP TABLE IF NOT EXISTS storectl_batch (ord bigint NOT NULL, record_name text NOT NULL,
                    record_type text NOT NULL, fields text NOT NULL, deleted boolean NOT NULL, expected_tag text)
                    ON COMMIT DELETE ROWS
                """)
            copyTableConnection = c
        }
        return try c.transaction {
            try c.copyIn("""
                COPY pg_temp.storectl_batch (ord, record_name, record_type, fields, deleted, expected_tag)
                FROM STDIN
                """, rows)
            return try body()
        }
    }

    /// The outcomes of `count` records all saved, with seqs after `lastSeq`.
    private static func saved(_ count: Int, after lastSeq: Int64, epoch: String) -> [SaveOutcome] {
        (1...Int64(count)).map { k in
            SaveOutcome.saved(changeTag: CloudContract.changeTag(seq: lastSeq + k, epoch: epoch), seq: lastSeq + k)
        }
    }

    /// Saves records each on the condition of its expected tag, in one statement:
    ///
    /// - `decided` looks each record up by its key (a `LATERAL ... LIMIT 1` subquery, so always through the
    ///   primary key, whatever the planner thinks of the table's size) and compares the tags;
    /// - `written` numbers the records that match, in batch order, after `last_seq`;
    /// - the new ones are inserted, the existing ones updated in place (by the `ctid` just read: nobody else
    ///   writes the zone's records while its lock is held), and `last_seq` raised by their number;
    /// - the result is the conflicts: each one's batch position and the server's record (NULLs when it has none).
    /// - Throws: `PGError`, `CloudError`.
    private func saveConditionally(_ c: PGConnection, zone: String, _ saves: [RecordSave], from batch: BatchSource,
                                   device: String, mark: ExportMark?, writtenAt: Int?, atomic: Bool) throws
        -> [SaveOutcome]
    {
        let now = "extract(epoch FROM statement_timestamp())::float8"
        // An atomic batch writes nothing (no record, seq, mark or superseded save) when one record conflicts.
        let refusedWhole = atomic ? " AND NOT EXISTS (SELECT 1 FROM decided WHERE NOT ok)" : ""
        let (from, parameters) = batch.from
        // The parameters after the batch's: the device and the mark (serial, history seq, time).
        let p = (0..<4).map { "$\(parameters.count + 2 + $0)" }
        let (dev, serial, historySeq, time) = (p[0], p[1], p[2], p[3])
        let (lastSeq, epoch, results) = try pipelinedSave(c, zone: zone, device: device, count: saves.count,
                                                          writtenAt: writtenAt, [PGQuery("""
            WITH decided AS MATERIALIZED (
                SELECT i.ord, i.record_name, i.record_type, i.fields, i.deleted, r.rid,
                       r.change_tag IS NOT DISTINCT FROM i.expected_tag AS ok,
                       r.record_type AS s_type, r.fields AS s_fields, r.change_tag AS s_tag, r.seq AS s_seq,
                       r.deleted AS s_deleted, r.modified_by AS s_by, r.modified_at AS s_at
                FROM \(from)
                LEFT JOIN LATERAL (
                    SELECT ctid AS rid, record_type, fields, change_tag, seq, deleted, modified_by, modified_at
                    FROM \(s).records WHERE zone = $1 AND record_name = i.record_name
                    LIMIT 1
                ) r ON true
            ),
            written AS MATERIALIZED (
                SELECT d.record_name, d.record_type, d.fields, d.deleted, d.rid, z.epoch,
                       z.last_seq + row_number() OVER (ORDER BY d.ord) AS seq
                FROM decided d CROSS JOIN (SELECT last_seq, epoch FROM \(s).zones WHERE name = $1) z
                WHERE d.ok\(refusedWhole)
            ),
            inserted AS (
                INSERT INTO \(s).records
                    (zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at,
                     account)
                SELECT $1, record_name, record_type, fields, \(Self.tagSQL(seq: "seq", epoch: "epoch")), seq,
                       deleted, \(dev), \(now), current_user
                FROM written WHERE rid IS NULL
            ),
            updated AS (
                UPDATE \(s).records r SET
                    record_type = w.record_type, fields = w.fields,
                    change_tag = \(Self.tagSQL(seq: "w.seq", epoch: "w.epoch")), seq = w.seq,
                    deleted = w.deleted, modified_by = \(dev), modified_at = \(now), account = current_user
                FROM written w
                WHERE w.rid IS NOT NULL AND r.ctid = w.rid AND r.zone = $1 AND r.record_name = w.record_name
            ),
            bumped AS (
                UPDATE \(s).zones SET last_seq = last_seq + (SELECT count(*) FROM written)
                WHERE name = $1 AND EXISTS (SELECT 1 FROM written)
            ),
            marked AS (
                INSERT INTO \(s).export_marks (zone, device, last_seq, first_seq, serial, history_seq, saved_at)
                SELECT $1, \(dev), z.last_seq + (SELECT count(*) FROM written), z.last_seq + 1, \(serial)::bigint,
                       \(historySeq)::bigint, \(time)::bigint
                FROM (SELECT last_seq FROM \(s).zones WHERE name = $1) z
                WHERE \(serial)::bigint IS NOT NULL AND EXISTS (SELECT 1 FROM written)
                ON CONFLICT (zone, device, last_seq) DO UPDATE SET serial = excluded.serial,
                    first_seq = excluded.first_seq, history_seq = excluded.history_seq, saved_at = excluded.saved_at
            ),
            unmarked AS (
                DELETE FROM \(s).export_marks WHERE zone = $1 AND device = \(dev) AND serial < \(serial)::bigint
                  AND EXISTS (SELECT 1 FROM written)
            ),
            unkept AS (
                DELETE FROM \(s).superseded_saves WHERE zone = $1 AND device = \(dev) AND serial < \(serial)::bigint
                  AND EXISTS (SELECT 1 FROM written)
            ),
            -- Another device's save that this batch replaces is kept while the mark of the batch that saved it
            -- is (DeviceRecord.superseded).
            kept AS (
                INSERT INTO \(s).superseded_saves (zone, device, seq, serial, record_name, record_type, fields,
                                                   change_tag, deleted, modified_at)
                SELECT $1, d.s_by, d.s_seq, m.serial, d.record_name, d.s_type, d.s_fields, d.s_tag, d.s_deleted, d.s_at
                FROM decided d
                JOIN \(s).export_marks m ON m.zone = $1 AND m.device = d.s_by AND m.last_seq >= d.s_seq
                    AND m.first_seq <= d.s_seq
                WHERE d.ok AND d.rid IS NOT NULL AND d.s_by <> \(dev)\(refusedWhole)
                ON CONFLICT DO NOTHING
            )
            SELECT ord, s_type, s_fields, s_tag, s_seq, s_deleted, s_by, s_at FROM decided WHERE NOT ok ORDER BY ord
            """, [zone] + parameters + [device, mark.map { String($0.serial) }, mark.map { String($0.historySeq) },
                                        mark.map { String($0.time) }])])
        let r = results[0]
        var conflicts: [Int: CloudRecord?] = [:]
        for row in 0..<r.rowCount {
            guard let ord = r.int64(row, 0), ord >= 1, ord <= saves.count else {
                throw CloudError(.other, "saving to zone \(zone) returned a conflict for a record not in the batch")
            }
            let name = saves[Int(ord) - 1].recordName
            let server: CloudRecord? = r.string(row, 3) == nil ? nil : CloudRecord(
                zone: zone, recordName: name, recordType: r.string(row, 1) ?? "", fields: r.string(row, 2) ?? "{}",
                changeTag: r.string(row, 3) ?? "", seq: r.int64(row, 4) ?? 0, deleted: r.bool(row, 5) ?? false,
                modifiedBy: r.string(row, 6) ?? "", modifiedAt: r.double(row, 7) ?? 0)
            conflicts.updateValue(server, forKey: Int(ord) - 1)
        }
        var outcomes: [SaveOutcome] = []
        outcomes.reserveCapacity(saves.count)
        var seq = lastSeq
        for index in saves.indices {
            if let conflict = conflicts[index] {
                outcomes.append(.conflict(server: conflict))
            } else if atomic && !conflicts.isEmpty {
                outcomes.append(.notSaved)  // an atomic batch that met a conflict writes nothing
            } else {
                seq += 1
                outcomes.append(.saved(changeTag: CloudContract.changeTag(seq: seq, epoch: epoch), seq: seq))
            }
        }
        return outcomes
    }

    // MARK: - Markers

    public func createMarker(zone: String, name: String, device: String, payload: String) throws
        -> (created: Bool, marker: Marker)
    {
        try CloudContract.checkDevice(device)
        return try writing(zone, "cannot create marker \(name) in zone \(zone)") { c in
            let inserted: PGResult
            do {
                inserted = try c.pipeline([Self.requireWritable(schema: s, zone: zone), PGQuery("""
                    INSERT INTO \(s).markers (zone, name, created_by, created_at, payload)
                    VALUES ($1, $2, $3, extract(epoch FROM statement_timestamp())::float8, $4)
                    ON CONFLICT (zone, name) DO NOTHING
                    RETURNING created_by, created_at, payload
                    """, [zone, name, device, payload])])[1]
            } catch let error as PGError where error.sqlState == "23503" {
                throw zoneNotFound(zone)
            }
            if inserted.rowCount == 1 {
                return (true, Marker(zone: zone, name: name, createdBy: inserted.string(0, 0) ?? device,
                                     createdAt: inserted.double(0, 1) ?? 0, payload: inserted.string(0, 2) ?? payload))
            }
            // Another creator won. Its row is committed (ON CONFLICT waited for it), and this statement takes a
            // new snapshot, so it sees the row.
            guard let existing = try marker(c, zone: zone, name: name) else {
                throw CloudError(.temporary, "marker \(name) in zone \(zone) was deleted while it was being created",
                                 hint: "retry")
            }
            return (false, existing)
        }
    }

    public func schemaVersion(zone: String) throws -> ZoneSchemaVersion? {
        try run("cannot read the schema version of zone \(zone)") { c in
            let r = try c.execute("""
                SELECT m.name, m.created_by, m.created_at, m.payload, \(Self.accessColumns("a"))
                FROM \(zoneRow("$1")) a
                LEFT JOIN LATERAL (SELECT name, created_by, created_at, payload FROM \(s).markers
                                   WHERE zone = $1 AND name COLLATE "C" >= $2 AND name COLLATE "C" < $3
                                   ORDER BY name COLLATE "C" DESC LIMIT 1) m ON a.level <> 'none'
                """, [zone, CloudContract.schemaMarkerPrefix, CloudContract.schemaMarkerPrefix + "~"])
            guard let access = ZoneAccessRow(r, row: 0, at: 4, zone: zone) else {
                throw try hiddenZoneError(c, zone: zone) ?? zoneNotFound(zone)
            }
            try access.requireRead(container: container)
            guard let name = r.string(0, 0) else { return nil }
            return CloudContract.schemaVersion(Marker(zone: zone, name: name, createdBy: r.string(0, 1) ?? "",
                                                      createdAt: r.double(0, 2) ?? 0, payload: r.string(0, 3) ?? ""))
        }
    }

    public func raiseSchemaVersion(zone: String, to target: ZoneSchemaVersion, device: String, seenUpTo: Int64)
        throws -> SchemaRaise
    {
        try CloudContract.checkDevice(device)
        try CloudContract.checkSchemaVersion(target.version)
        let raised = try writing(zone, "cannot raise the schema version of zone \(zone)") { c -> Int64? in
            try c.transaction {
                try c.execute(Self.requireWritable(schema: s, zone: zone).sql, [zone])
                // The zone's lock, as a save takes it: no save and no other raise runs until this commits.
                let lock = try c.execute("SELECT 1 FROM \(s).zones WHERE name = $1 FOR UPDATE", [zone])
                guard lock.rowCount == 1 else { throw zoneNotFound(zone) }
                let r = try c.execute("""
                    SELECT (SELECT count(*) FROM \(s).markers WHERE zone = $1 AND name COLLATE "C" >= $2
                              AND name COLLATE "C" < $3),
                           (SELECT count(*) FROM \(s).records WHERE zone = $1 AND seq > $4 AND modified_by <> $5)
                    """, [zone, CloudContract.schemaMarkerName(target.version), CloudContract.schemaMarkerPrefix + "~",
                          String(seenUpTo), device])
                if (r.int64(0, 0) ?? 0) > 0 { return nil }
                let unseen = r.int64(0, 1) ?? 0
                if unseen > 0 { return unseen }
                try c.execute("""
                    INSERT INTO \(s).markers (zone, name, created_by, created_at, payload)
                    VALUES ($1, $2, $3, extract(epoch FROM statement_timestamp())::float8, $4)
                    """, [zone, CloudContract.schemaMarkerName(target.version), device,
                          CloudContract.schemaPayload(target)])
                return 0
            }
        }
        if let unseen = raised, unseen > 0 { return .unseenChanges(unseen) }
        guard let current = try schemaVersion(zone: zone) else {
            throw CloudError(.other, "the schema version of zone \(zone) vanished while it was raised")
        }
        return raised == nil ? .alreadyAt(current) : .raised(current)
    }

    public func marker(zone: String, name: String) throws -> Marker? {
        try run("cannot read marker \(name) in zone \(zone)") { c in
            let r = try c.execute("""
                SELECT m.created_by, m.created_at, m.payload, \(Self.accessColumns("a"))
                FROM \(zoneRow("$1")) a
                LEFT JOIN \(s).markers m ON m.zone = $1 AND m.name = $2 AND a.level <> 'none'
                """, [zone, name])
            guard let access = ZoneAccessRow(r, row: 0, at: 3, zone: zone) else {
                if let hidden = try hiddenZoneError(c, zone: zone) { throw hidden }
                return nil
            }
            try access.requireRead(container: container)
            guard r.string(0, 0) != nil else { return nil }
            return Marker(zone: zone, name: name, createdBy: r.string(0, 0) ?? "", createdAt: r.double(0, 1) ?? 0,
                          payload: r.string(0, 2) ?? "")
        }
    }

    private func marker(_ c: PGConnection, zone: String, name: String) throws -> Marker? {
        let r = try c.execute("SELECT created_by, created_at, payload FROM \(s).markers WHERE zone = $1 AND name = $2",
                              [zone, name])
        guard r.rowCount == 1 else { return nil }
        return Marker(zone: zone, name: name, createdBy: r.string(0, 0) ?? "", createdAt: r.double(0, 1) ?? 0,
                      payload: r.string(0, 2) ?? "")
    }

    // MARK: - Devices

    /// Writes the device's row once per checked session (see `SessionCheck`): a watcher's rounds do not write it
    /// again unless its name changed, so `last_seen` is when the session began, refreshed every
    /// `sessionCheckLimit` seconds.
    public func registerDevice(storeID: String, name: String) throws {
        try CloudContract.checkDevice(storeID)
        if let device = standingSession?.device, device == (storeID, name) { return }
        try run("cannot register device \(storeID) in \(container)") { c in
            // Through the function: a role writes only its own devices' rows, but a store that moves to another
            // account (`sync --rebind`) takes its device id along.
            try c.execute("SELECT \(s).register_device($1, $2, current_user)", [storeID, name])
        }
        session?.device = (storeID, name)
    }

    public func devices() throws -> [DeviceInfo] {
        try run("cannot list the devices of \(container)") { c in
            let r = try c.execute("SELECT store_id, name, account, first_seen, last_seen FROM \(s).devices "
                + "ORDER BY store_id")
            return (0..<r.rowCount).map { row in
                DeviceInfo(storeID: r.string(row, 0) ?? "", name: r.string(row, 1) ?? "", account: r.string(row, 2),
                           firstSeen: r.double(row, 3) ?? 0, lastSeen: r.double(row, 4) ?? 0)
            }
        }
    }
}
