import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCrypto
import StoreSQLite

/// The embedded container: one SQLite file in WAL mode (`file:PATH` URLs).
///
/// Several stores, on one machine or on a shared mount, can use one container at the same time: each save batch
/// is one `BEGIN IMMEDIATE` transaction, so seqs are handed out under SQLite's write lock and seq order is commit
/// order. The file holds the container's meta, accounts (salted hashes only), zones, records, markers and devices.
///
///     let (cloud, _) = try FileCloudDatabase.create(path: "/srv/notes.cloud", container: "iCloud.com.example.notes",
///                                                   account: "alice", secret: secret)
///     try cloud.ensureZone("default")
///     let outcomes = try cloud.save(zone: "default", saves, device: storeID)
public final class FileCloudDatabase: CloudDatabase, CloudAccountAdministration, CloudSharing {
    /// The value of `format` in the container meta: what tells a container from any other SQLite file.
    public static let formatMarker = "storectl-cloud-container"
    /// The container format version this build reads and writes.
    ///
    /// - 1: the first format.
    /// - 2: seqs are unique per zone (a UNIQUE index: two records with one seq would make a reader skip one), and
    ///   the `export_marks` table records where each device's export stood (`ExportMark`). A format-1 container
    ///   is upgraded in place the first time a storectl that can write it opens it, after a copy of it is saved
    ///   beside it (`<file>.format1.bak`).
    /// - 3: a device's save that another device's save replaced, while the mark of the batch that saved it is kept,
    ///   is kept too (`superseded_saves`, written by a trigger on `records`): a store killed after the cloud saved
    ///   its batch, and before it recorded the save, finds the saves others have built on since
    ///   (`fetchDeviceRecords`). A format-2 container is upgraded in place, after a copy (`<file>.format2.bak`).
    /// - 4: a zone belongs to the account that created it (`zones.owner`), and other accounts reach it through a
    ///   share (`shares`: read-only or read-write, `CloudSharing`). A format-3 container is upgraded in place, after
    ///   a copy (`<file>.format3.bak`): its zones go to the container's first owner, and every other account with a
    ///   device in it becomes a read-write participant of each (`added_by` = `upgrade`). A container without
    ///   accounts keeps zones without an owner, which every account may use as before.
    public static let formatVersion = 4
    /// How long, in milliseconds, a call waits for another process's lock before giving up (75, retry).
    public static let defaultBusyTimeout: Int32 = 5000

    public let container: String
    /// The container file's absolute path.
    public let path: String
    /// The account this connection acts as.
    public let account: String?
    private let secret: String?
    /// Where secrets verified by earlier processes are remembered (nil: in this process only). Passed in by the
    /// caller, who knows the user's environment; never looked up here.
    private let secretCache: VerifiedSecretCache?
    private let busyTimeout: Int32
    let db: Connection
    /// Whether the file and its folder may be written (checked from the permission bits too, since root ignores
    /// them when writing).
    private let writeProblem: String?
    private var verifiedRole: AccountRole?
    /// The file this connection reads, as it was when it was opened: a file put in its place later (a restored
    /// copy moved over it) is another container for `quietState`.
    private let identity: FileIdentity?
    /// The PBKDF2 iterations `addAccount` hashes new secrets with, and that an older, weaker hash is raised to on
    /// its next successful check: the count the container was created with (`hash_iterations` in its meta), else
    /// `PasswordHash.defaultIterations`.
    public var hashIterations: Int {
        get {
            if let hashIterationsOverride { return hashIterationsOverride }
            let recorded = try? db.scalar("SELECT value FROM container_meta WHERE key = 'hash_iterations'")?.string
            return recorded.flatMap { Int($0) }.map { min(max($0, 1), PasswordHash.maximumIterations) }
                ?? PasswordHash.defaultIterations
        }
        set { hashIterationsOverride = newValue }
    }
    private var hashIterationsOverride: Int?

    public var displayURL: String { "file:" + path }

    private init(path: String, container: String, account: String?, secret: String?,
                 secretCache: VerifiedSecretCache?, busyTimeout: Int32, db: Connection, writeProblem: String?,
                 identity: FileIdentity?)
    {
        self.identity = identity
        self.path = path
        self.container = container
        self.account = account
        self.secret = secret
        self.secretCache = secretCache
        self.busyTimeout = busyTimeout
        self.db = db
        self.writeProblem = writeProblem
    }

    // MARK: Opening and creating

    /// Opens the container at `path`, creating it (with `account` as its owner) when it is missing and
    /// `createIfMissing` is true.
    ///
    /// - Throws: `CloudError`: `.containerMissing` (exit 69, hint: `storectl cloud init`), `.notAContainer` for any
    ///   other file or another container's file, `.temporary` when it stays locked beyond the busy timeout.
    /// - Parameter secretCache: where verified secrets are remembered across processes
    ///   (`VerifiedSecretCache.forUser(environment:)`); nil keeps them in this process only.
    public static func open(path: String, container: String, account: String?, secret: String?,
                            createIfMissing: Bool = false, busyTimeout: Int32 = defaultBusyTimeout,
                            secretCache: VerifiedSecretCache? = nil) throws -> FileCloudDatabase
    {
        if createIfMissing {
            return try create(path: path, container: container, account: account, secret: secret,
                              busyTimeout: busyTimeout, secretCache: secretCache).database
        }
        guard FileManager.default.fileExists(atPath: path) else { throw missing(path: path, container: container) }
        try refuseIfDamaged(path: path)
        let problem = writeProblem(path: path)
        // Taken before the file is opened: a file moved in between is then never taken for the one opened.
        let identity = FileIdentity(path: path)
        let db = try connect(path: path, readOnly: problem != nil, busyTimeout: busyTimeout)
        let meta = try readMeta(db, path: path)
        guard let meta else { throw missing(path: path, container: container) }
        try check(meta, path: path, container: container)
        if problem == nil { try upgrade(db, path: path, meta: meta) }
        return FileCloudDatabase(path: path, container: container, account: account, secret: secret,
                                 secretCache: secretCache, busyTimeout: busyTimeout, db: db, writeProblem: problem,
                                 identity: identity)
    }

    /// Opens the container at `path` for `quietState` only: the meta is neither read nor checked here, because
    /// the state read digests it and checks it again (with the account's secret) whenever it differs from the last
    /// state that passed, which a full round's `open` checked. Nil when the file is missing, damaged or cannot be
    /// written (the full round reports why).
    public static func openForQuietState(path: String, container: String, account: String?, secret: String?,
                                         busyTimeout: Int32 = defaultBusyTimeout,
                                         secretCache: VerifiedSecretCache? = nil) -> FileCloudDatabase?
    {
        guard writeProblem(path: path) == nil, let identity = FileIdentity(path: path),
              !FileManager.default.fileExists(atPath: damageMarker(path: path)),
              let db = try? Connection(path: path, mode: .readWrite, busyTimeout: busyTimeout, wal: true,
                                       foreignKeys: false)
        else { return nil }
        return FileCloudDatabase(path: path, container: container, account: account, secret: secret,
                                 secretCache: secretCache, busyTimeout: busyTimeout, db: db, writeProblem: nil,
                                 identity: identity)
    }

    /// Creates the container at `path` (and its folder) and registers `account` as its owner. When the container
    /// already exists it is opened as it is, and `created` is false.
    ///
    /// - Parameter iterations: the PBKDF2 iterations for the owner's secret hash.
    /// - Throws: `CloudError` (`.notAContainer` when the file is some other SQLite database, `.permission` or
    ///   `.other` when it cannot be created).
    public static func create(path: String, container: String, account: String?, secret: String?,
                              iterations: Int = PasswordHash.defaultIterations,
                              busyTimeout: Int32 = defaultBusyTimeout,
                              secretCache: VerifiedSecretCache? = nil) throws
        -> (database: FileCloudDatabase, created: Bool)
    {
        if let account, let secret, !secret.isEmpty { try validateAccountID(account) }
        let folder = Path.parent(path)
        if !folder.isEmpty && !FileManager.default.fileExists(atPath: folder) {
            do {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            } catch {
                throw CloudError(.permission, "cannot create the folder \(folder) for container '\(container)'",
                                 hint: "check the permissions of its parent folder, or change cloud.url")
            }
        }
        if FileManager.default.fileExists(atPath: path) { try refuseIfDamaged(path: path) }
        if FileManager.default.fileExists(atPath: path), let problem = writeProblem(path: path) {
            // An existing read-only container is fine to open; anything else needs writing.
            let db = try connect(path: path, readOnly: true, busyTimeout: busyTimeout)
            guard let meta = try readMeta(db, path: path) else {
                throw CloudError(.permission, "cannot create container '\(container)' at \(path): \(problem)",
                                 hint: "check the permissions of the file and its folder")
            }
            try check(meta, path: path, container: container)
            return (FileCloudDatabase(path: path, container: container, account: account, secret: secret,
                                      secretCache: secretCache, busyTimeout: busyTimeout, db: db, writeProblem: problem,
                                      identity: nil), false)
        }
        let db = try connect(path: path, readOnly: false, busyTimeout: busyTimeout, create: true)
        if let meta = try readMeta(db, path: path) {
            try check(meta, path: path, container: container)
            try upgrade(db, path: path, meta: meta)
        }
        let created: Bool = try translated(path: path, "creating the container") {
            try db.transaction(.immediate) {
                if let meta = try readMeta(db, path: path) {
                    try check(meta, path: path, container: container)
                    return false
                }
                try db.execute(schemaSQL)
                let now = Date().timeIntervalSince1970
                for (key, value) in [("format", formatMarker), ("version", String(formatVersion)),
                                     ("container", container), ("created_at", String(now)),
                                     ("hash_iterations", String(iterations))]
                {
                    try db.run("INSERT INTO container_meta(key, value) VALUES (?, ?)", [key, value])
                }
                if let account, let secret, !secret.isEmpty {
                    try validateAccountID(account)
                    try db.run("""
                        INSERT INTO accounts(id, secret_hash, role, disabled, created_at) VALUES (?, ?, 'owner', 0, ?)
                        """, [account, try PasswordHash.make(secret: secret, iterations: iterations), now])
                }
                return true
            }
        }
        return (FileCloudDatabase(path: path, container: container, account: account, secret: secret,
                                  secretCache: secretCache, busyTimeout: busyTimeout, db: db, writeProblem: nil,
                                  identity: nil), created)
    }

    /// The account status for a container that may not even exist: never throws, always explains.
    ///
    /// With `createIfMissing`, a missing container that can be created is `available`: the first use creates it
    /// with `account` as its owner. Checking never creates anything.
    public static func accountStatus(path: String, container: String, account: String?, secret: String?,
                                     createIfMissing: Bool = false,
                                     busyTimeout: Int32 = defaultBusyTimeout,
                                     secretCache: VerifiedSecretCache? = nil) -> AccountStatusReport
    {
        if let report = configurationStatus(account: account, secret: secret) { return report }
        if createIfMissing && !FileManager.default.fileExists(atPath: path) {
            var folder = Path.parent(path)
            while !folder.isEmpty && folder != "/" && !FileManager.default.fileExists(atPath: folder) {
                folder = Path.parent(folder)
            }
            if let problem = writeProblem("folder", folder.isEmpty ? "." : folder) {
                return AccountStatusReport(status: .restricted,
                                           reason: "container '\(container)' does not exist at \(path) and cannot "
                                               + "be created: \(problem)", account: account, containerMissing: true)
            }
            return AccountStatusReport(status: .available,
                                       reason: "container '\(container)' does not exist yet at \(path); it is "
                                           + "created on first use (create_if_missing), with account "
                                           + "'\(account ?? "")' as its owner", account: account,
                                       containerMissing: true)
        }
        do {
            let cloud = try open(path: path, container: container, account: account, secret: secret,
                                 busyTimeout: busyTimeout, secretCache: secretCache)
            return cloud.accountStatus()
        } catch let error as CloudError {
            return statusReport(for: error, account: account)
        } catch {
            return AccountStatusReport(status: .couldNotDetermine, reason: "\(error)", account: account)
        }
    }

    /// The status an error met while opening a container stands for.
    public static func statusReport(for error: CloudError, account: String?) -> AccountStatusReport {
        let reason = Self.reason(error)
        switch error.kind {
        case .temporary: return AccountStatusReport(status: .temporarilyUnavailable, reason: reason, account: account)
        case .permission, .account: return AccountStatusReport(status: .restricted, reason: reason, account: account)
        default:
            return AccountStatusReport(status: .couldNotDetermine, reason: reason, account: account,
                                       containerMissing: error.kind == .containerMissing)
        }
    }

    /// The summary and hint of `error`, as one line.
    static func reason(_ error: CloudError) -> String {
        error.summary + (error.hint.map { "; " + $0 } ?? "")
    }

    /// `noAccount` when no account or no secret is configured; nil when both are.
    static func configurationStatus(account: String?, secret: String?) -> AccountStatusReport? {
        guard let account, !account.isEmpty else {
            return AccountStatusReport(status: .noAccount,
                                       reason: "no account is configured; set cloud.account and cloud.secret",
                                       account: nil)
        }
        guard let secret, !secret.isEmpty else {
            return AccountStatusReport(status: .noAccount,
                                       reason: "account '\(account)' has no secret configured; set cloud.secret "
                                           + "to an environment reference such as ${STORECTL_SECRET}",
                                       account: account)
        }
        return nil
    }

    /// The DDL of a container file (`storectl cloud schema --format sql`).
    public static var containerSQL: String { schemaSQL }

    static let schemaSQL = """
        CREATE TABLE container_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE accounts(
            id TEXT PRIMARY KEY,
            secret_hash TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('owner', 'member')),
            disabled INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE zones(
            name TEXT PRIMARY KEY,
            epoch TEXT NOT NULL,
            last_seq INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            owner TEXT
        ) WITHOUT ROWID;
        \(sharesSQL)
        \(saversSQL)
        CREATE TABLE records(
            zone TEXT NOT NULL,
            record_name TEXT NOT NULL,
            record_type TEXT NOT NULL,
            fields TEXT NOT NULL
                CHECK (CASE WHEN json_valid(fields) THEN json_type(fields) = 'object' ELSE 0 END),
            change_tag TEXT NOT NULL,
            seq INTEGER NOT NULL,
            deleted INTEGER NOT NULL DEFAULT 0,
            modified_by TEXT NOT NULL,
            modified_at REAL NOT NULL,
            PRIMARY KEY (zone, record_name)
        ) WITHOUT ROWID;
        CREATE UNIQUE INDEX records_by_seq ON records(zone, seq);
        CREATE TABLE export_marks(
            zone TEXT NOT NULL,
            device TEXT NOT NULL,
            last_seq INTEGER NOT NULL,
            first_seq INTEGER NOT NULL,
            serial INTEGER NOT NULL,
            history_seq INTEGER NOT NULL,
            saved_at INTEGER NOT NULL,
            PRIMARY KEY (zone, device, last_seq)
        ) WITHOUT ROWID;
        \(supersededSQL)
        CREATE TABLE markers(
            zone TEXT NOT NULL,
            name TEXT NOT NULL,
            created_by TEXT NOT NULL,
            created_at REAL NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (zone, name)
        ) WITHOUT ROWID;
        CREATE TABLE devices(
            store_id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            account TEXT,
            first_seen REAL NOT NULL,
            last_seen REAL NOT NULL
        ) WITHOUT ROWID;
        """

    /// The participants of shared zones (format 4; the format-3 upgrade adds it).
    static let sharesSQL = """
        CREATE TABLE IF NOT EXISTS shares(
            zone TEXT NOT NULL,
            account TEXT NOT NULL,
            permission TEXT NOT NULL CHECK (permission IN ('read-only', 'read-write')),
            since REAL NOT NULL,
            added_by TEXT NOT NULL,
            PRIMARY KEY (zone, account)
        ) WITHOUT ROWID;
        """

    /// Who saved what (format 4; the format-3 upgrade adds them). `saved_by`: the account that saved each batch,
    /// by the range of seqs its records took (a batch's saved records take consecutive seqs), written in the
    /// batch's transaction with the connection's verified account: a record's saver is the account of the range
    /// holding its seq, and a record whose seq no range holds was not saved by storectl (`''` for records saved
    /// before the container knew shares). `former_writers`: for each account whose read-write share of a zone
    /// ended (removed, left, or made read-only), the zone's last seq then: its records up to that seq stand.
    static let saversSQL = """
        CREATE TABLE IF NOT EXISTS saved_by(
            zone TEXT NOT NULL,
            last_seq INTEGER NOT NULL,
            first_seq INTEGER NOT NULL,
            account TEXT NOT NULL,
            PRIMARY KEY (zone, last_seq)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS former_writers(
            zone TEXT NOT NULL,
            account TEXT NOT NULL,
            until_seq INTEGER NOT NULL,
            PRIMARY KEY (zone, account)
        ) WITHOUT ROWID;
        """

    /// The table of superseded saves and the trigger that fills it (format 3; the format-2 upgrade adds them).
    static let supersededSQL = """
        CREATE TABLE superseded_saves(
            zone TEXT NOT NULL,
            device TEXT NOT NULL,
            seq INTEGER NOT NULL,
            serial INTEGER NOT NULL,
            record_name TEXT NOT NULL,
            record_type TEXT NOT NULL,
            fields TEXT NOT NULL,
            change_tag TEXT NOT NULL,
            deleted INTEGER NOT NULL,
            modified_at REAL NOT NULL,
            PRIMARY KEY (zone, device, seq)
        ) WITHOUT ROWID;
        CREATE TRIGGER records_superseded AFTER UPDATE ON records
        WHEN old.modified_by <> new.modified_by
        BEGIN
            INSERT OR IGNORE INTO superseded_saves(zone, device, seq, serial, record_name, record_type, fields,
                                                   change_tag, deleted, modified_at)
            SELECT old.zone, old.modified_by, old.seq, m.serial, old.record_name, old.record_type, old.fields,
                   old.change_tag, old.deleted, old.modified_at
            FROM export_marks m
            WHERE m.zone = old.zone AND m.device = old.modified_by AND m.last_seq >= old.seq
              AND m.first_seq <= old.seq;
        END;
        """

    private static func missing(path: String, container: String) -> CloudError {
        CloudError(.containerMissing, "container '\(container)' does not exist at \(path)",
                   hint: "run 'storectl cloud init' to create it, or set cloud.create_if_missing: true")
    }

    private static func connect(path: String, readOnly: Bool, busyTimeout: Int32, create: Bool = false) throws
        -> Connection
    {
        try translated(path: path, "opening the container") {
            do {
                return try Connection(path: path, mode: create ? .readWriteCreate : (readOnly ? .readOnly : .readWrite),
                                      busyTimeout: busyTimeout, wal: !readOnly, foreignKeys: false)
            } catch let error as SQLiteError where !create && (error.isReadOnly || error.isCantOpen) && !readOnly {
                // The file cannot be written by this process: read it, and report writes as refused.
                return try Connection(path: path, mode: .readOnly, busyTimeout: busyTimeout, wal: false,
                                      foreignKeys: false)
            }
        }
    }

    /// The meta key/values, or nil for an empty SQLite file.
    /// - Throws: `CloudError(.notAContainer)` when the file holds other tables.
    private static func readMeta(_ db: Connection, path: String) throws -> [String: String]? {
        try translated(path: path, "reading the container meta") {
            guard try db.tableExists("container_meta") else {
                let tables = try db.scalar("SELECT count(*) FROM sqlite_master")?.int64 ?? 0
                if tables == 0 { return nil }
                throw CloudError(.notAContainer, "\(path) is a SQLite database but not a storectl container",
                                 hint: "check cloud.url; storectl never writes into a file that is not its container")
            }
            var meta: [String: String] = [:]
            for row in try db.query("SELECT key, value FROM container_meta") {
                if let key = row[0].string, let value = row[1].string { meta[key] = value }
            }
            return meta
        }
    }

    private static func check(_ meta: [String: String], path: String, container: String) throws {
        guard meta["format"] == formatMarker else {
            throw CloudError(.notAContainer, "\(path) is a SQLite database but not a storectl container",
                             hint: "check cloud.url; storectl never writes into a file that is not its container")
        }
        try CloudContract.checkMeta(version: meta["version"], container: meta["container"], expected: container,
                                    newest: formatVersion, place: path)
    }

    /// Upgrades a container of an older format in place: a copy of the file first (`VACUUM INTO`, consistent while
    /// others write; kept if one is there already), then one transaction. Format 1 -> 2: records that share a seq
    /// in a zone get new seqs after the zone's last one (all but the lowest record name), so that the seq index can
    /// be UNIQUE and a reader following the feed sees each of them; the `export_marks` table is created. Format 2 -> 3:
    /// the `superseded_saves` table and its trigger are created. Format 3 -> 4: zones get owners and the
    /// `shares` table (`addOwnersAndShares`).
    private static func upgrade(_ db: Connection, path: String, meta: [String: String]) throws {
        guard let version = meta["version"].flatMap({ Int($0) }), version < formatVersion else { return }
        let backup = path + ".format\(version).bak"
        try translated(path: path, "upgrading the container from format \(version)") {
            if !FileManager.default.fileExists(atPath: backup) {
                do {
                    try db.run("VACUUM INTO ?", [backup])
                } catch let error as SQLiteError where !error.isBusy {
                    throw CloudError(.permission, "cannot save a copy of the container \(path) at \(backup) before "
                                         + "upgrading it from format \(version) (\(error.message))",
                                     hint: "free some space or fix the permissions of the folder; the container "
                                         + "was not changed")
                }
            }
            try db.transaction(.immediate) {
                guard let current = try db.scalar("SELECT value FROM container_meta WHERE key = 'version'")?.string
                        .flatMap({ Int($0) }), current < formatVersion else { return }
                if current < 2 {
                    let duplicates = try db.query("""
                        SELECT zone, record_name FROM records r
                        WHERE EXISTS (SELECT 1 FROM records o WHERE o.zone = r.zone AND o.seq = r.seq
                                      AND o.record_name < r.record_name)
                        ORDER BY zone, seq, record_name
                        """)
                    for row in duplicates {
                        try db.run("UPDATE zones SET last_seq = max(last_seq, (SELECT max(seq) FROM records "
                                       + "WHERE zone = ?1)) + 1 WHERE name = ?1", [row[0]])
                        try db.run("UPDATE records SET seq = (SELECT last_seq FROM zones WHERE name = ?1) "
                                       + "WHERE zone = ?1 AND record_name = ?2", [row[0], row[1]])
                    }
                    try db.execute("""
                        DROP INDEX IF EXISTS records_by_seq;
                        CREATE UNIQUE INDEX records_by_seq ON records(zone, seq);
                        CREATE TABLE IF NOT EXISTS export_marks(
                            zone TEXT NOT NULL,
                            device TEXT NOT NULL,
                            last_seq INTEGER NOT NULL,
                            first_seq INTEGER NOT NULL,
                            serial INTEGER NOT NULL,
                            history_seq INTEGER NOT NULL,
                            saved_at INTEGER NOT NULL,
                            PRIMARY KEY (zone, device, last_seq)
                        ) WITHOUT ROWID;
                        """)
                }
                if current < 3 { try db.execute(Self.supersededSQL) }
                if current < 4 { try Self.addOwnersAndShares(db) }
                try db.run("UPDATE container_meta SET value = ? WHERE key = 'version'", [String(formatVersion)])
                try db.run("INSERT OR REPLACE INTO container_meta(key, value) VALUES ('upgraded_from', ?)",
                           [String(current)])
            }
        }
    }

    /// Format 3 -> 4: every zone goes to the container's owner (the earliest-created enabled account with role
    /// `owner`), and every other account that registered a device becomes a read-write participant of each zone
    /// (`added_by` = `upgrade`): whoever synced before keeps syncing. Without accounts, zones keep no owner.
    private static func addOwnersAndShares(_ db: Connection) throws {
        let columns = try db.query("PRAGMA table_info(zones)").compactMap { $0[1].string }
        if !columns.contains("owner") { try db.execute("ALTER TABLE zones ADD COLUMN owner TEXT") }
        try db.execute(sharesSQL)
        try db.execute(saversSQL)
        // The records already there keep the account their device was registered to, or '' (saved before the
        // container knew shares, by no known account): both stand as the owner's or a participant's would.
        try db.run("""
            INSERT OR IGNORE INTO saved_by(zone, last_seq, first_seq, account)
            SELECT r.zone, r.seq, r.seq, coalesce((SELECT d.account FROM devices d WHERE d.store_id = r.modified_by), '')
            FROM records r
            """)
        try db.run("""
            UPDATE zones SET owner = (SELECT id FROM accounts WHERE role = 'owner' AND disabled = 0
                                      ORDER BY created_at, id LIMIT 1)
            WHERE owner IS NULL
            """)
        try db.run("""
            INSERT OR IGNORE INTO shares(zone, account, permission, since, added_by)
            SELECT z.name, d.account, 'read-write', ?, 'upgrade'
            FROM zones z JOIN (SELECT DISTINCT account FROM devices WHERE account IS NOT NULL) d
            WHERE z.owner IS NOT NULL AND d.account <> z.owner
            """, [Date().timeIntervalSince1970])
    }

    /// Why the container cannot be written, or nil when it can. Root ignores permission bits when writing, so a
    /// file or folder without any write bit counts as read-only for everyone.
    static func writeProblem(path: String) -> String? {
        let folder = Path.parent(path)
        for (what, target) in [("file", path), ("folder", folder.isEmpty ? "." : folder)] {
            if let problem = writeProblem(what, target) { return problem }
        }
        return nil
    }

    private static func writeProblem(_ what: String, _ target: String) -> String? {
        var info = stat()
        guard stat(target, &info) == 0 else { return nil }
        if info.st_mode & 0o222 == 0 { return "the container \(what) \(target) has no write permission" }
        if access(target, W_OK) != 0 { return "the container \(what) \(target) is not writable by this user" }
        return nil
    }

    private static func validateAccountID(_ id: String) throws {
        if let problem = AccountID.problem(id) { throw CloudError(.invalid, problem, hint: AccountID.rule) }
    }

    private static func newEpoch() -> String {
        var rng = SystemRandomNumberGenerator()
        return Hex.string((0..<8).map { _ in UInt8.random(in: 0...255, using: &rng) })
    }

    /// Runs `body`, turning SQLite errors into `CloudError`s that name the container.
    private static func translated<T>(path: String, _ what: String, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as SQLiteError {
            if error.isCorrupt {
                // Whatever touched the damaged pages, nothing more is written into the file, by this process or any
                // later one, until someone looks at it.
                markDamaged(path: path, what: what, error: error)
                throw damagedError(path: path, detail: "\(what): \(error.message)")
            }
            if error.isFull {
                throw CloudError(.io, "the file system of the container \(path) is full (\(what))",
                                 hint: "free disk space where \(Path.parent(path)) lives, then retry; the failed "
                                     + "transaction was rolled back, so nothing was lost")
            }
            if error.isIOError {
                throw CloudError(.io, "I/O error on the container \(path) (\(what)): \(error.message)",
                                 hint: "check the disk and the file system that hold it (dmesg), then retry")
            }
            if error.isBusy {
                throw CloudError(.temporary, "the container \(path) is locked by another process (\(what))",
                                 hint: "retry later; another store is writing to it")
            }
            if error.isReadOnly {
                throw CloudError(.permission, "the container \(path) is read-only (\(what))",
                                 hint: "check the permissions of the file and its folder")
            }
            if error.isNotADatabase {
                throw CloudError(.notAContainer, "\(path) is not a SQLite database (\(error.message))",
                                 hint: "check cloud.url; storectl never writes into a file that is not its container")
            }
            if error.isCantOpen {
                throw CloudError(.permission, "cannot open the container \(path) (\(error.message))",
                                 hint: "check that the file and its folder exist and are accessible")
            }
            throw CloudError(.other, "the container \(path): \(what) failed: SQLite error \(error.extendedCode): "
                                 + error.message)
        }
    }

    /// The file next to a container that says it reported damage: `notes.container-damaged`.
    public static func damageMarker(path: String) -> String { path + "-damaged" }

    /// Leaves the damage marker, with what was being done and SQLite's message. Best effort: a file system that
    /// cannot take it still got the error.
    private static func markDamaged(path: String, what: String, error: SQLiteError) {
        let text = "storectl met a damaged page in \(path) while \(what): \(error.message) (SQLite error "
            + "\(error.extendedCode)) at \(Date().timeIntervalSince1970)\n"
        try? AtomicFile.write(Array(text.utf8), to: damageMarker(path: path))
    }

    private static func damagedError(path: String, detail: String) -> CloudError {
        CloudError(.io, "the container \(path) is damaged (\(detail)); storectl writes nothing more into it",
                   hint: "check it with 'sqlite3 \(path) \"PRAGMA integrity_check\"', restore it from a backup (or "
                       + "move it away and run 'storectl sync --reupload' on each store), then remove "
                       + "\(damageMarker(path: path))")
    }

    /// Refuses a container that reported damage before (its marker is there).
    private static func refuseIfDamaged(path: String) throws {
        guard FileManager.default.fileExists(atPath: damageMarker(path: path)) else { return }
        let reason = (try? String(contentsOfFile: damageMarker(path: path), encoding: .utf8))?
            .trimmingWhitespace() ?? "it reported damage before"
        throw damagedError(path: path, detail: reason.isEmpty ? "it reported damage before" : reason)
    }

    func translated<T>(_ what: String, _ body: () throws -> T) throws -> T {
        try Self.translated(path: path, what, body)
    }

    // MARK: Accounts

    public func accountStatus() -> AccountStatusReport {
        if let report = Self.configurationStatus(account: account, secret: secret) { return report }
        let account = self.account ?? ""
        let role: AccountRole
        do {
            switch try checkCredentials() {
            case .valid(let valid): role = valid
            case .noAccount(let error):
                return AccountStatusReport(status: .noAccount, reason: Self.reason(error), account: account)
            case .restricted(let error):
                return AccountStatusReport(status: .restricted, reason: Self.reason(error), account: account)
            }
        } catch let error as CloudError {
            return Self.statusReport(for: error, account: account)
        } catch {
            return AccountStatusReport(status: .couldNotDetermine, reason: "\(error)", account: account)
        }
        if let writeProblem {
            return AccountStatusReport(status: .restricted, reason: writeProblem
                                           + "; check the permissions of the container file and its folder",
                                       account: account)
        }
        // A lock held beyond the busy timeout means every write would fail now: try to take it.
        do {
            try db.execute("BEGIN IMMEDIATE")
            try db.execute("ROLLBACK")
        } catch let error as SQLiteError {
            if db.isInTransaction { try? db.execute("ROLLBACK") }
            if error.isBusy {
                return AccountStatusReport(status: .temporarilyUnavailable,
                                           reason: "the container \(path) is locked by another process beyond the "
                                               + "busy timeout (\(busyTimeout) ms); retry later",
                                           account: account)
            }
            if error.isReadOnly {
                return AccountStatusReport(status: .restricted, reason: "the container \(path) is read-only; check "
                                               + "the permissions of the file and its folder", account: account)
            }
            return AccountStatusReport(status: .couldNotDetermine,
                                       reason: "could not write to the container \(path): \(error.message)",
                                       account: account)
        } catch {
            return AccountStatusReport(status: .couldNotDetermine, reason: "\(error)", account: account)
        }
        return AccountStatusReport(status: .available,
                                   reason: "account '\(account)' (\(role.rawValue)) can read and write container "
                                       + "'\(container)' at \(path)",
                                   account: account)
    }

    /// The outcome of checking the configured account's credentials.
    private enum Credentials {
        case valid(AccountRole)
        case noAccount(CloudError)
        case restricted(CloudError)
    }

    /// Checks the configured account against the container: registered, secret matching, not disabled.
    /// - Throws: `CloudError` met while reading the container.
    private func checkCredentials() throws -> Credentials {
        if let verifiedRole { return .valid(verifiedRole) }
        guard let account, !account.isEmpty, let secret, !secret.isEmpty else {
            return .noAccount(CloudError(.account, Self.configurationStatus(account: account, secret: secret)?.reason
                                             ?? "no account is configured"))
        }
        let row = try translated("reading the accounts") {
            try db.query("SELECT secret_hash, role, disabled FROM accounts WHERE id = ?", [account]).first
        }
        guard let row else {
            return .noAccount(CloudError(.account, "account '\(account)' is not registered in container "
                                             + "'\(container)' at \(path)",
                                         hint: "an owner can register it with 'storectl account add \(account)'"))
        }
        let stored = row[0].string ?? ""
        guard try PasswordHash.verify(secret: secret, stored: stored, cache: secretCache) else {
            return .restricted(CloudError(.account,
                                          "the secret configured for account '\(account)' does not match the one "
                                              + "registered in container '\(container)'",
                                          hint: "check cloud.secret and the environment variable it names"))
        }
        if row[2].int64 != 0 {
            return .restricted(CloudError(.account, "account '\(account)' is disabled in container '\(container)'",
                                          hint: "ask an owner of the container to enable a new account for you"))
        }
        let role = AccountRole(rawValue: row[1].string ?? "") ?? .member
        verifiedRole = role
        upgradeHashIfWeak(account: account, secret: secret, stored: stored)
        return .valid(role)
    }

    /// Replaces a hash made with fewer iterations than the container's count, now that the secret is known to be
    /// right. Best effort: a read-only or busy container keeps the old hash, which still verifies, until next time.
    private func upgradeHashIfWeak(account: String, secret: String, stored: String) {
        let target = hashIterations
        guard writeProblem == nil, PasswordHash.needsUpgrade(stored, target: target),
              let upgraded = try? PasswordHash.make(secret: secret, iterations: target)
        else { return }
        let changed = try? db.transaction(.immediate) { () -> Bool in
            try db.run("UPDATE accounts SET secret_hash = ? WHERE id = ? AND secret_hash = ?",
                       [upgraded, account, stored])
            return db.changes > 0
        }
        if changed == true { PasswordHash.remember(secret: secret, stored: upgraded, cache: secretCache) }
    }

    /// The configured account's role, once its credentials are checked (once per connection).
    /// - Throws: `CloudError(.account)` with the reason, or the error met while reading.
    @discardableResult
    func requireAccount() throws -> AccountRole {
        switch try checkCredentials() {
        case .valid(let role): return role
        case .noAccount(let error), .restricted(let error): throw error
        }
    }

    func requireWritable() throws {
        try requireAccount()
        if let writeProblem {
            throw CloudError(.permission, "cannot write to container '\(container)': \(writeProblem)",
                             hint: "check the permissions of the container file and its folder")
        }
    }

    public func addAccount(id: String, secret newSecret: String, role: AccountRole) throws {
        try Self.validateAccountID(id)
        guard !newSecret.isEmpty else { throw CloudError(.invalid, "the secret for account '\(id)' is empty") }
        if let writeProblem {
            throw CloudError(.permission, "cannot write to container '\(container)': \(writeProblem)",
                             hint: "check the permissions of the container file and its folder")
        }
        let hash = try PasswordHash.make(secret: newSecret, iterations: hashIterations)
        try translated("adding an account") {
            try db.transaction(.immediate) {
                let count = try db.scalar("SELECT count(*) FROM accounts")?.int64 ?? 0
                if count > 0 { try requireOwner() }
                if try db.scalar("SELECT 1 FROM accounts WHERE id = ?", [id]) != nil {
                    throw CloudError(.invalid, "account '\(id)' already exists in container '\(container)'",
                                     hint: "choose another id, or see 'storectl account list'")
                }
                try db.run("INSERT INTO accounts(id, secret_hash, role, disabled, created_at) VALUES (?, ?, ?, 0, ?)",
                           [id, hash, role.rawValue, Date().timeIntervalSince1970])
            }
        }
    }

    public func disableAccount(id: String) throws {
        try changeAccount(id: id, "disabling", sql: "UPDATE accounts SET disabled = 1 WHERE id = ?", losesOwner: true)
    }

    public func enableAccount(id: String) throws {
        try changeAccount(id: id, "enabling", sql: "UPDATE accounts SET disabled = 0 WHERE id = ?", losesOwner: false)
    }

    public func removeAccount(id: String) throws {
        try changeAccount(id: id, "removing", sql: "DELETE FROM accounts WHERE id = ?", losesOwner: true)
    }

    /// Runs `sql` on account `id` as an owner, in one transaction. When the change takes an owner away
    /// (`losesOwner`), the last enabled owner is refused, so that someone can always manage the container.
    private func changeAccount(id: String, _ doing: String, sql: String, losesOwner: Bool) throws {
        try requireOwner()
        if let writeProblem {
            throw CloudError(.permission, "cannot write to container '\(container)': \(writeProblem)",
                             hint: "check the permissions of the container file and its folder")
        }
        try translated("\(doing) an account") {
            try db.transaction(.immediate) {
                guard let row = try db.query("SELECT role, disabled FROM accounts WHERE id = ?", [id]).first else {
                    throw CloudError(.invalid, "no account '\(id)' in container '\(container)'",
                                     hint: "see 'storectl account list'")
                }
                if losesOwner, row[0].string == AccountRole.owner.rawValue && row[1].int64 == 0 {
                    let owners = try db.scalar("SELECT count(*) FROM accounts WHERE role = 'owner' AND disabled = 0")?
                        .int64 ?? 0
                    if owners <= 1 {
                        let verb = doing == "removing" ? "removed" : "disabled"
                        throw CloudError(.invalid, "account '\(id)' is the last enabled owner of container "
                                             + "'\(container)' and cannot be \(verb)",
                                         hint: "add another owner first, e.g. 'storectl account add alice --role owner'")
                    }
                }
                try db.run(sql, [id])
            }
        }
    }

    public func listAccounts() throws -> [AccountInfo] {
        try requireAccount()
        return try translated("listing the accounts") {
            try db.query("SELECT id, role, disabled, created_at FROM accounts ORDER BY id").map {
                AccountInfo(id: $0[0].string ?? "", role: $0[1].string ?? "", disabled: $0[2].int64 != 0,
                            createdAt: $0[3].double ?? 0)
            }
        }
    }

    /// Refuses an account that is not an owner: destructive operations (managing accounts, purging a zone) are
    /// an owner's alone. Exit 77: the account is fine, it just may not do this.
    private func requireOwner(_ what: String = "manage accounts") throws {
        let role = try requireAccount()
        guard role == .owner else {
            throw CloudError(.permission, "account '\(account ?? "")' is not an owner of container '\(container)'",
                             hint: "only an owner can \(what)")
        }
    }

    // MARK: Zones

    /// The zone with its owner and this account's access. Throws `.permission` for a zone the account has no share
    /// of, never nil as if it did not exist.
    public func zoneInfo(_ zone: String, countLive: Bool) throws -> ZoneInfo? {
        try requireAccount()
        return try translated("reading zone '\(zone)'") {
            try db.transaction(.deferred) { try readZone(zone, countLive: countLive) }
        }
    }

    private func readZone(_ zone: String, countLive: Bool = true) throws -> ZoneInfo? {
        guard let row = try db.query("SELECT epoch, last_seq FROM zones WHERE name = ?", [zone]).first,
              let access = try checkedAccess(zone, write: false)
        else { return nil }
        let live = countLive
            ? try db.scalar("SELECT count(*) FROM records WHERE zone = ? AND deleted = 0", [zone])?.int64 ?? 0 : -1
        var info = ZoneInfo(name: zone, epoch: row[0].string ?? "", lastSeq: row[1].int64 ?? 0, liveRecords: live)
        info.owner = access.owner
        info.access = access.level
        return info
    }

    /// Creates the zone, owned by this connection's account, or returns it when it exists and the account may
    /// write it (`.permission` otherwise: a zone name is never taken twice).
    @discardableResult
    public func ensureZone(_ zone: String) throws -> ZoneInfo {
        try CloudContract.checkZone(zone)
        try requireWritable()
        return try translated("creating zone '\(zone)'") {
            try db.transaction(.immediate) {
                try db.run("INSERT INTO zones(name, epoch, last_seq, created_at, owner) VALUES (?, ?, 0, ?, ?) "
                               + "ON CONFLICT(name) DO NOTHING",
                           [zone, Self.newEpoch(), Date().timeIntervalSince1970, account])
                _ = try checkedAccess(zone, write: true)
                guard let info = try readZone(zone) else {
                    throw CloudError(.other, "zone '\(zone)' vanished while it was created")
                }
                return info
            }
        }
    }

    /// One read of the container meta, the account's registration and the zone, with the file's identity. The
    /// account and container are checked as a full round checks them (registered, the secret matching, enabled,
    /// the container's own meta) unless the digest equals `known`'s; nil when they fail, when the file at the path
    /// is no longer the one this connection reads, when it is marked damaged or cannot be written.
    ///
    /// Meant for a connection opened for this one read: a connection kept open while someone removes the
    /// container's `-wal` and `-shm` files reads the old ones, and on closing deletes the new WAL by its path.
    public func quietState(zone: String, known: QuietState?) throws -> QuietState? {
        // `writeProblem` and the damage marker were read when this connection was opened, for this round.
        guard let account, let secret, let identity, FileIdentity(path: path) == identity, writeProblem == nil
        else { return nil }
        let row = try translated("reading the state of zone '\(zone)'") {
            try db.query("""
                SELECT (SELECT group_concat(key || '=' || value, char(10))
                          FROM (SELECT key, value FROM container_meta ORDER BY key)),
                       (SELECT secret_hash FROM accounts WHERE id = ?1),
                       (SELECT role || ',' || disabled FROM accounts WHERE id = ?1),
                       (SELECT epoch FROM zones WHERE name = ?2), (SELECT last_seq FROM zones WHERE name = ?2),
                       (SELECT coalesce(owner, '') FROM zones WHERE name = ?2),
                       (SELECT permission || ',' || since FROM shares WHERE zone = ?2 AND account = ?1)
                """, [account, zone]).first
        }
        guard let row, let meta = row[0].string, let stored = row[1].string, let registration = row[2].string else {
            return nil
        }
        // The account's access to the zone: a share removed or changed ends the quiet rounds, and the full round
        // that follows meets the refusal.
        let owner = row[5].string, share = row[6].string
        if let owner, !owner.isEmpty, owner != account, share == nil { return nil }
        let file = "\(identity.device):\(identity.inode)"
        let access = (owner ?? "-") + "/" + (share ?? "-")
        let digest = try Crypto.sha256(Array([file, meta, stored, registration, access]
            .joined(separator: "\n\u{0}\n").utf8))
        if digest != known?.digest {
            guard let values = try translated("reading the container meta", { try Self.readMeta(db, path: path) }),
                  (try? Self.check(values, path: path, container: container)) != nil,
                  registration.hasSuffix(",0"), try PasswordHash.verify(secret: secret, stored: stored, cache: secretCache)
            else { return nil }
        }
        // As the account check of a full round: a lock held beyond the busy timeout means every write would fail
        // now, which that round reports (temporarily unavailable).
        do {
            try db.execute("BEGIN IMMEDIATE")
            try db.execute("ROLLBACK")
        } catch {
            if db.isInTransaction { try? db.execute("ROLLBACK") }
            return nil
        }
        let epoch = row[3].string
        return QuietState(digest: digest, zone: epoch.map { ServerChangeToken(epoch: $0, seq: row[4].int64 ?? 0) })
    }

    func zoneNotFound(_ zone: String) -> CloudError {
        CloudError(.zoneNotFound, "zone '\(zone)' does not exist in container '\(container)'",
                   hint: "it is created by the first sync of a store that uses it")
    }

    /// Purges the zone: its owner, or an owner of the container, may; a participant never.
    public func purgeZone(_ zone: String) throws {
        try requireWritable()
        let role = try requireAccount()
        try translated("purging zone '\(zone)'") {
            try db.transaction(.immediate) {
                let row = try db.query("SELECT owner FROM zones WHERE name = ?", [zone]).first
                let owner = row?[0].string
                if role != .owner && (owner == nil || owner != account) {
                    throw purgeRefused(zone: zone, owner: owner)
                }
                guard row != nil else { throw zoneNotFound(zone) }
                try db.run("DELETE FROM records WHERE zone = ?", [zone])
                try db.run("DELETE FROM markers WHERE zone = ?", [zone])
                try db.run("DELETE FROM export_marks WHERE zone = ?", [zone])
                try db.run("DELETE FROM superseded_saves WHERE zone = ?", [zone])
                try db.run("DELETE FROM saved_by WHERE zone = ?", [zone])
                try db.run("DELETE FROM former_writers WHERE zone = ?", [zone])
                // The seq keeps counting up: only the epoch says "start over".
                try db.run("UPDATE zones SET epoch = ? WHERE name = ?", [Self.newEpoch(), zone])
            }
        }
    }

    /// Why this account may not purge `zone` (owned by `owner`, nil when it has none or does not exist).
    private func purgeRefused(zone: String, owner: String?) -> CloudError {
        let whose = owner.map { " nor of zone '\(zone)', which belongs to account '\($0)'" } ?? ""
        return CloudError(.permission, "account '\(account ?? "")' is not an owner of container '\(container)'"
                              + whose,
                          hint: "only the zone's owner or an owner of the container can purge a zone; ask one to run "
                              + "cloud purge --yes, on a store of theirs")
    }

    // MARK: Records

    static let recordColumns =
        "zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at"

    fileprivate static func record(_ s: Statement) -> CloudRecord {
        CloudRecord(zone: s.string(0) ?? "", recordName: s.string(1) ?? "", recordType: s.string(2) ?? "",
                    fields: s.string(3) ?? "{}", changeTag: s.string(4) ?? "", seq: s.int64(5) ?? 0,
                    deleted: (s.int64(6) ?? 0) != 0, modifiedBy: s.string(7) ?? "",
                    modifiedAt: s.column(8).double ?? 0)
    }

    /// The columns and tables of a record read with a check of its last save (`checkedRecord`): the tenth column is
    /// set when the account that saved it could not write the zone at the record's seq, and names it. The saver is
    /// the account of the `saved_by` range holding the record's seq (one seek of its key, then the row): it may
    /// write when it owns the zone (`?5`; NULL, a zone without an owner, refuses nothing), holds a read-write
    /// share, held one until a seq at or after the record's (`former_writers`), or is `''` (saved before the
    /// container knew shares). A record whose seq no range holds was written by something else than storectl: it
    /// is judged as the account its device is registered to, and named with `CloudRecord.unrecordedSaverPrefix`;
    /// from a device no account registered, it stands only in a zone no other account ever had a share of.
    static let checkedRecordSQL = """
        r.zone, r.record_name, r.record_type, r.fields, r.change_tag, r.seq, r.deleted, r.modified_by, r.modified_at,
        CASE WHEN ?5 IS NULL THEN NULL
             WHEN coalesce(sb.account, d.account) IS NULL
                 THEN CASE WHEN EXISTS (SELECT 1 FROM shares s WHERE s.zone = r.zone)
                             OR EXISTS (SELECT 1 FROM former_writers f WHERE f.zone = r.zone) THEN char(31) END
             WHEN coalesce(sb.account, d.account) IN ('', ?5) THEN NULL
             WHEN EXISTS (SELECT 1 FROM shares s WHERE s.zone = r.zone AND s.account = coalesce(sb.account, d.account)
                          AND s.permission = 'read-write') THEN NULL
             WHEN EXISTS (SELECT 1 FROM former_writers f WHERE f.zone = r.zone
                          AND f.account = coalesce(sb.account, d.account) AND f.until_seq >= r.seq) THEN NULL
             ELSE (CASE WHEN sb.account IS NULL THEN char(31) ELSE '' END) || coalesce(sb.account, d.account) END
        FROM records r
        LEFT JOIN saved_by sb ON sb.zone = r.zone
            AND sb.last_seq = (SELECT x.last_seq FROM saved_by x WHERE x.zone = r.zone AND x.last_seq >= r.seq
                               ORDER BY x.last_seq LIMIT 1)
            AND sb.first_seq <= r.seq
        LEFT JOIN devices d ON sb.account IS NULL AND d.store_id = r.modified_by
        """

    /// A record read with `checkedRecordSQL`, its `rejection` set when its saver may not write the zone.
    fileprivate static func checkedRecord(_ s: Statement) -> CloudRecord {
        var record = record(s)
        if let saver = s.string(9) {
            record.rejection = CloudRecord.rejection(device: record.modifiedBy, saver: saver, zone: record.zone)
        }
        return record
    }

    public func fetchChanges(zone: String, since token: ServerChangeToken?, limit: Int, excludingDevice: String?)
        throws -> ChangeBatch
    {
        try CloudContract.checkPageSize(limit)
        try requireAccount()
        return try translated("fetching changes of zone '\(zone)'") {
            // One read transaction: the zone's epoch and its records come from the same snapshot.
            try db.transaction(.deferred) {
                guard let row = try db.query("SELECT epoch, last_seq FROM zones WHERE name = ?", [zone]).first else {
                    throw zoneNotFound(zone)
                }
                let owner = try checkedAccess(zone, write: false)?.owner
                let epoch = row[0].string ?? ""
                let lastSeq = row[1].int64 ?? 0
                try CloudContract.checkToken(token, epoch: epoch, zone: zone, container: container)
                let after = token?.seq ?? 0
                let statement = try db.cached("""
                    SELECT \(Self.checkedRecordSQL)
                    WHERE r.zone = ?1 AND r.seq > ?2 AND r.modified_by IS NOT ?4 ORDER BY r.seq LIMIT ?3
                    """)
                var records: [CloudRecord] = []
                try statement.forEach([zone, after, limit + 1, excludingDevice, owner]) {
                    records.append(Self.checkedRecord($0))
                }
                let moreComing = records.count > limit
                if moreComing {
                    let next = records.removeLast()
                    if let last = records.last, last.seq == next.seq {
                        // A page never ends inside a run of records with one seq (a damaged or hand-written
                        // container): the token would then move past the rest of the run.
                        let rest = try db.cached("""
                            SELECT \(Self.checkedRecordSQL)
                            WHERE r.zone = ?1 AND r.seq = ?2 AND r.modified_by IS NOT ?3 ORDER BY r.record_name
                            """)
                        let seen = Set(records.filter { $0.seq == last.seq }.map(\.recordName))
                        try rest.forEach([zone, last.seq, excludingDevice, nil as String?, owner]) { row in
                            let record = Self.checkedRecord(row)
                            if !seen.contains(record.recordName) { records.append(record) }
                        }
                    }
                }
                return ChangeBatch(records: records,
                                   token: CloudContract.nextToken(epoch: epoch, after: after, zoneLastSeq: lastSeq,
                                                                  page: records, moreComing: moreComing),
                                   moreComing: moreComing)
            }
        }
    }

    public func fetchRecord(zone: String, recordName: String) throws -> CloudRecord? {
        try requireAccount()
        return try translated("reading record '\(recordName)'") {
            try db.transaction(.deferred) {
                guard let access = try checkedAccess(zone, write: false) else { return nil }
                let statement = try db.cached(
                    "SELECT \(Self.checkedRecordSQL) WHERE r.zone = ?1 AND r.record_name = ?2")
                var found: CloudRecord?
                try statement.forEach([zone, recordName, nil as String?, nil as String?, access.owner]) {
                    found = Self.checkedRecord($0)
                }
                return found
            }
        }
    }

    /// Saves the batch in one `BEGIN IMMEDIATE` transaction, in three phases: take the zone (`SaveBatch.init`:
    /// its epoch and last seq under the write lock, the statements prepared), write each record on the condition of
    /// its expected tag (`SaveBatch.write`), then raise the zone's last seq and record the export mark
    /// (`SaveBatch.finish`).
    public func save(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?, schemaVersion: Int?,
                     atomic: Bool) throws -> [SaveOutcome]
    {
        if saves.isEmpty { return [] }
        try CloudContract.checkBatch(saves, zone: zone, device: device)
        try requireWritable()
        return try translated("saving \(saves.count) records to zone '\(zone)'") {
            do {
                return try saveBatch(zone: zone, saves, device: device, mark: mark, schemaVersion: schemaVersion,
                                     atomic: atomic)
            } catch let refused as AtomicBatchRefused {
                return refused.outcomes.map { if case .conflict = $0 { $0 } else { .notSaved } }
            }
        }
    }

    /// An atomic batch that met a conflict: thrown to roll its transaction back, with the outcomes it had.
    private struct AtomicBatchRefused: Error {
        let outcomes: [SaveOutcome]
    }

    private func saveBatch(zone: String, _ saves: [RecordSave], device: String, mark: ExportMark?,
                           schemaVersion: Int?, atomic: Bool) throws -> [SaveOutcome]
    {
        try db.transaction(.immediate) {
            _ = try checkedAccess(zone, write: true)
            guard var batch = try SaveBatch(db: db, zone: zone, device: device, account: account ?? "") else {
                throw zoneNotFound(zone)
            }
            if let schemaVersion, let current = try readSchemaVersion(zone: zone),
               current.version > schemaVersion
            {
                throw CloudContract.schemaAhead(zone: zone, container: container, writer: schemaVersion,
                                                zoneVersion: current)
            }
            var outcomes: [SaveOutcome] = []
            outcomes.reserveCapacity(saves.count)
            for save in saves { outcomes.append(try batch.write(save)) }
            if atomic, outcomes.contains(where: { if case .conflict = $0 { true } else { false } }) {
                throw AtomicBatchRefused(outcomes: outcomes)
            }
            try batch.finish(mark: mark)
            return outcomes
        }
    }

    /// One save batch inside its transaction: the zone's state and the prepared statements.
    private struct SaveBatch {
        let db: Connection
        let zone: String
        let device: String
        /// The connection's verified account, recorded as the saver of the batch's records (`saved_by`).
        let account: String
        let epoch: String
        /// The zone's last seq when the batch started, and as the batch's records take seqs.
        let firstSeq: Int64
        var seq: Int64
        let select: Statement
        let insert: Statement
        let update: Statement

        /// Takes the zone; nil when it does not exist.
        init?(db: Connection, zone: String, device: String, account: String) throws {
            guard let zoneRow = try db.query("SELECT epoch, last_seq FROM zones WHERE name = ?", [zone]).first
            else { return nil }
            self.db = db
            self.zone = zone
            self.device = device
            self.account = account
            epoch = zoneRow[0].string ?? ""
            firstSeq = zoneRow[1].int64 ?? 0
            seq = firstSeq
            select = try db.cached("SELECT \(FileCloudDatabase.recordColumns) FROM records WHERE zone = ? AND record_name = ?")
            // The write is itself the check: an insert that must not find the record, or an update that must
            // find the expected tag. Only a write that changed nothing reads the server's record back.
            insert = try db.cached("""
                INSERT INTO records(\(FileCloudDatabase.recordColumns)) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                ON CONFLICT(zone, record_name) DO NOTHING
                """)
            update = try db.cached("""
                UPDATE records SET record_type = ?3, fields = ?4, change_tag = ?5, seq = ?6, deleted = ?7,
                    modified_by = ?8, modified_at = ?9
                WHERE zone = ?1 AND record_name = ?2 AND change_tag = ?10
                """)
            // The batch's constant values are bound once; each record binds only its own (a finished step
            // resets the statement and keeps its bindings).
            let now = Date().timeIntervalSince1970
            for statement in [insert, update] {
                try statement.bind(.text(zone), at: 1)
                try statement.bind(.text(device), at: 8)
                try statement.bind(.real(now), at: 9)
            }
        }

        /// Writes one record if its expected tag matches; otherwise reads the server's record for the conflict.
        mutating func write(_ save: RecordSave) throws -> SaveOutcome {
            let tag = CloudContract.changeTag(seq: seq + 1, epoch: epoch)
            let statement = save.expectedTag == nil ? insert : update
            do {
                try statement.bind(.text(save.recordName), at: 2)
                try statement.bind(.text(save.recordType), at: 3)
                try statement.bind(.text(save.deleted ? RecordSave.tombstoneFields(save.fields) : save.fields), at: 4)
                try statement.bind(.text(tag), at: 5)
                try statement.bind(.integer(seq + 1), at: 6)
                try statement.bind(.integer(save.deleted ? 1 : 0), at: 7)
                if let expected = save.expectedTag { try statement.bind(.text(expected), at: 10) }
                while try statement.step() {}
            } catch let error as SQLiteError where error.isConstraint {
                throw CloudError(.invalid, "record '\(save.recordName)': its fields are not a JSON object; "
                                     + "nothing of the batch was saved",
                                 hint: "fields must be JSON object text, e.g. {\"title\":\"hi\"}")
            }
            if db.changes == 1 {
                seq += 1
                return .saved(changeTag: tag, seq: seq)
            }
            var current: CloudRecord?
            try select.bind([zone, save.recordName])
            if try select.step() {
                current = FileCloudDatabase.record(select)
                try select.reset()
            }
            return .conflict(server: current)
        }

        /// Raises the zone's last seq; with `mark`, when the batch saved anything, records where the device's
        /// export stands and forgets its marks, and its superseded saves, of older serials (a new serial means the
        /// store has recorded, or reconciled, every save of the older ones).
        func finish(mark: ExportMark?) throws {
            try db.run("UPDATE zones SET last_seq = ? WHERE name = ?", [seq, zone])
            if seq > firstSeq {
                try db.run("INSERT OR REPLACE INTO saved_by(zone, last_seq, first_seq, account) VALUES (?, ?, ?, ?)",
                           [zone, seq, firstSeq + 1, account])
            }
            guard let mark, seq > firstSeq else { return }
            try db.run("DELETE FROM export_marks WHERE zone = ? AND device = ? AND serial < ?",
                       [zone, device, mark.serial])
            try db.run("DELETE FROM superseded_saves WHERE zone = ? AND device = ? AND serial < ?",
                       [zone, device, mark.serial])
            try db.run("""
                INSERT OR REPLACE INTO export_marks(zone, device, last_seq, first_seq, serial, history_seq, saved_at)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """, [zone, device, seq, firstSeq + 1, mark.serial, mark.historySeq, mark.time])
        }
    }

    public func exportState(zone: String, device: String) throws -> DeviceExportState? {
        try requireAccount()
        return try translated("reading the export marks of device '\(device)'") {
            _ = try checkedAccess(zone, write: false)
            let rows = try db.query("""
                SELECT last_seq, serial, history_seq, saved_at FROM export_marks WHERE zone = ? AND device = ?
                ORDER BY last_seq DESC LIMIT 1
                """, [zone, device])
            guard let row = rows.first else { return nil }
            return DeviceExportState(mark: ExportMark(serial: row[1].int64 ?? 0, historySeq: row[2].int64 ?? 0,
                                                      time: row[3].int64 ?? 0),
                                     lastSeq: row[0].int64 ?? 0)
        }
    }

    public func fetchDeviceRecords(zone: String, device: String, after seq: Int64, limit: Int) throws
        -> (records: [DeviceRecord], moreComing: Bool)
    {
        try CloudContract.checkPageSize(limit)
        try requireAccount()
        return try translated("fetching the records of device '\(device)'") {
            try db.transaction(.deferred) {
                guard try checkedAccess(zone, write: false) != nil else { throw zoneNotFound(zone) }
                // The device's records as they stand, and its saves that another device's save replaced since.
                let statement = try db.cached("""
                    SELECT zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by, modified_at,
                           (SELECT m.history_seq FROM export_marks m WHERE m.zone = ?1 AND m.device = ?2
                              AND m.last_seq >= u.seq AND m.first_seq <= u.seq ORDER BY m.last_seq LIMIT 1),
                           superseded
                    FROM (SELECT \(Self.recordColumns), 0 AS superseded FROM records
                          WHERE zone = ?1 AND seq > ?3 AND modified_by = ?2
                          UNION ALL
                          SELECT zone, record_name, record_type, fields, change_tag, seq, deleted, device, modified_at, 1
                          FROM superseded_saves WHERE zone = ?1 AND device = ?2 AND seq > ?3) u
                    ORDER BY seq LIMIT ?4
                    """)
                var records: [DeviceRecord] = []
                try statement.forEach([zone, device, seq, limit + 1]) { row in
                    records.append(DeviceRecord(record: Self.record(row), historySeq: row.int64(9),
                                                superseded: row.int64(10) == 1))
                }
                let more = records.count > limit
                if more { records.removeLast() }
                return (records, more)
            }
        }
    }

    // MARK: Markers

    public func createMarker(zone: String, name: String, device: String, payload: String) throws
        -> (created: Bool, marker: Marker)
    {
        try CloudContract.checkDevice(device)
        try requireWritable()
        return try translated("creating marker '\(name)'") {
            try db.transaction(.immediate) {
                guard try checkedAccess(zone, write: true) != nil else { throw zoneNotFound(zone) }
                try db.run("""
                    INSERT INTO markers(zone, name, created_by, created_at, payload) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(zone, name) DO NOTHING
                    """, [zone, name, device, Date().timeIntervalSince1970, payload])
                let created = db.changes == 1
                guard let marker = try readMarker(zone: zone, name: name) else {
                    throw CloudError(.other, "marker '\(name)' vanished while it was created")
                }
                return (created, marker)
            }
        }
    }

    public func schemaVersion(zone: String) throws -> ZoneSchemaVersion? {
        try requireAccount()
        return try translated("reading the schema version of zone '\(zone)'") {
            try db.transaction(.deferred) {
                guard try checkedAccess(zone, write: false) != nil else { throw zoneNotFound(zone) }
                return try readSchemaVersion(zone: zone)
            }
        }
    }

    /// The newest schema-version marker of the zone.
    private func readSchemaVersion(zone: String) throws -> ZoneSchemaVersion? {
        guard let row = try db.query("""
            SELECT name, created_by, created_at, payload FROM markers
            WHERE zone = ? AND name >= ? AND name < ? ORDER BY name DESC LIMIT 1
            """, [zone, CloudContract.schemaMarkerPrefix, CloudContract.schemaMarkerPrefix + "\u{7f}"]).first
        else { return nil }
        return CloudContract.schemaVersion(Marker(zone: zone, name: row[0].string ?? "", createdBy: row[1].string ?? "",
                                                  createdAt: row[2].double ?? 0, payload: row[3].string ?? ""))
    }

    public func raiseSchemaVersion(zone: String, to target: ZoneSchemaVersion, device: String, seenUpTo: Int64)
        throws -> SchemaRaise
    {
        try CloudContract.checkDevice(device)
        try CloudContract.checkSchemaVersion(target.version)
        try requireWritable()
        return try translated("raising the schema version of zone '\(zone)'") {
            try db.transaction(.immediate) {
                guard try checkedAccess(zone, write: true) != nil else { throw zoneNotFound(zone) }
                if let current = try readSchemaVersion(zone: zone), current.version >= target.version {
                    return .alreadyAt(current)
                }
                let unseen = try db.scalar("""
                    SELECT count(*) FROM records WHERE zone = ? AND seq > ? AND modified_by <> ?
                    """, [zone, seenUpTo, device])?.int64 ?? 0
                if unseen > 0 { return .unseenChanges(unseen) }
                try db.run("""
                    INSERT INTO markers(zone, name, created_by, created_at, payload) VALUES (?, ?, ?, ?, ?)
                    """, [zone, CloudContract.schemaMarkerName(target.version), device, Date().timeIntervalSince1970,
                          CloudContract.schemaPayload(target)])
                guard let raised = try readSchemaVersion(zone: zone) else {
                    throw CloudError(.other, "the schema version of zone '\(zone)' vanished while it was raised")
                }
                return .raised(raised)
            }
        }
    }

    public func marker(zone: String, name: String) throws -> Marker? {
        try requireAccount()
        return try translated("reading marker '\(name)'") {
            try db.transaction(.deferred) {
                _ = try checkedAccess(zone, write: false)
                return try readMarker(zone: zone, name: name)
            }
        }
    }

    private func readMarker(zone: String, name: String) throws -> Marker? {
        guard let row = try db.query("SELECT created_by, created_at, payload FROM markers WHERE zone = ? AND name = ?",
                                     [zone, name]).first
        else { return nil }
        return Marker(zone: zone, name: name, createdBy: row[0].string ?? "", createdAt: row[1].double ?? 0,
                      payload: row[2].string ?? "")
    }

    // MARK: Devices

    public func registerDevice(storeID: String, name: String) throws {
        try CloudContract.checkDevice(storeID)
        try requireWritable()
        try translated("registering device '\(storeID)'") {
            try db.transaction(.immediate) {
                let now = Date().timeIntervalSince1970
                try db.run("""
                    INSERT INTO devices(store_id, name, account, first_seen, last_seen) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(store_id) DO UPDATE SET name = excluded.name, account = excluded.account,
                        last_seen = excluded.last_seen
                    """, [storeID, name, account, now, now])
            }
        }
    }

    public func devices() throws -> [DeviceInfo] {
        try requireAccount()
        return try translated("listing the devices") {
            try db.query("SELECT store_id, name, account, first_seen, last_seen FROM devices ORDER BY store_id").map {
                DeviceInfo(storeID: $0[0].string ?? "", name: $0[1].string ?? "", account: $0[2].string,
                           firstSeen: $0[3].double ?? 0, lastSeen: $0[4].double ?? 0)
            }
        }
    }
}

