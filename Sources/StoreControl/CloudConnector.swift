import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreConfig

/// Opens the cloud container a store's `cloud:` settings name, whatever its backend.
///
///     let cloud = try CloudConnector.open(settings: cloudSettings, createIfMissing: nil)
///     let report = CloudConnector.accountStatus(settings: cloudSettings)
public enum CloudConnector {
    /// The backend a URL names.
    public enum Backend: Equatable, Sendable {
        /// A SQLite container file at this absolute path.
        case file(path: String)
        /// A PostgreSQL server.
        case postgres(url: String)
    }

    /// Works out the backend from `cloud.url`: `file:`, or PostgreSQL for a `postgres://` URI or libpq
    /// `keyword=value` settings (`host=db dbname=notes`).
    /// - Throws: `StoreError` (exit 78) for anything else.
    public static func backend(of url: String) throws -> Backend {
        if PostgresConnectionString.isURI(url) || PostgresConnectionString.isKeywordValue(url) {
            return .postgres(url: url)
        }
        if url.hasPrefix("file:") {
            var path = String(url.dropFirst("file:".count))
            // file:///abs and file://localhost/abs are accepted too.
            if path.hasPrefix("//localhost/") { path = String(path.dropFirst("//localhost".count)) }
            if path.hasPrefix("///") { path = String(path.dropFirst(2)) }
            path = PercentEncoding.decoded(path) ?? path
            guard path.hasPrefix("/") else {
                throw StoreError(.config, "cloud.url '\(redacted(url))' does not name an absolute path",
                                 hint: "write file:PATH; a relative PATH is resolved against the config's folder")
            }
            return .file(path: path)
        }
        throw StoreError(.config, "cloud.url '\(redacted(url))' is neither a file: URL nor a PostgreSQL connection string",
                         hint: "use file:cloud/notes.container for a container file, or postgres://HOST/DB "
                             + "(or 'host=HOST dbname=DB')")
    }

    /// Opens the container.
    ///
    /// - Parameter createIfMissing: overrides `cloud.create_if_missing` when not nil.
    /// - Throws: `CloudError` (a missing container is exit 69 with a hint to run `storectl cloud init`),
    ///   `StoreError` for a bad URL or an unavailable backend.
    public static func open(settings: CloudSettings, environment: [String: String], createIfMissing: Bool? = nil)
        throws -> any CloudDatabase
    {
        switch try backend(of: settings.url) {
        case .file(let path):
            return try FileCloudDatabase.open(path: path, container: settings.container, account: settings.account,
                                              secret: settings.secret?.value,
                                              createIfMissing: createIfMissing ?? settings.createIfMissing,
                                              secretCache: VerifiedSecretCache.forUser(environment: environment))
        case .postgres(let url):
            return try PostgresCloudDatabase(url: url, container: settings.container, account: settings.account,
                                             password: settings.secret?.value, environment: environment,
                                             replicaURL: settings.replicaURL)
        }
    }

    /// What `cloud.replica_url`'s hot standby is doing (`storectl status`); nil without one.
    public static func replicaStatus(settings: CloudSettings, environment: [String: String]) -> PostgresStandbyStatus? {
        guard let replica = settings.replicaURL else { return nil }
        guard case .postgres(let url)? = try? backend(of: settings.url),
              let db = try? PostgresCloudDatabase(url: url, container: settings.container, account: settings.account,
                                                  password: settings.secret?.value, environment: environment,
                                                  replicaURL: replica)
        else {
            return PostgresStandbyStatus(url: redacted(replica), state: "down", inUse: false,
                                         reason: "cloud.url or cloud.replica_url is not a PostgreSQL connection string")
        }
        defer { db.close() }
        return db.standbyStatus(zone: settings.zone)
    }

    /// A container file opened for a quiet round's state read only (`FileCloudDatabase.openForQuietState`); nil
    /// for PostgreSQL (a quiet round keeps the full round's session) or when the file cannot be opened so.
    static func openForQuietRound(settings: CloudSettings, environment: [String: String]) -> (any CloudDatabase)? {
        guard case .file(let path)? = try? backend(of: settings.url) else { return nil }
        return FileCloudDatabase.openForQuietState(path: path, container: settings.container,
                                                   account: settings.account, secret: settings.secret?.value,
                                                   secretCache: VerifiedSecretCache.forUser(environment: environment))
    }

    /// Creates the container (`storectl cloud init`) and registers the configured account as its owner.
    /// Returns the container, and whether this call created it.
    /// - Throws: `CloudError` or `StoreError`.
    public static func initialize(settings: CloudSettings, environment: [String: String]) throws -> (database: any CloudDatabase, created: Bool) {
        switch try backend(of: settings.url) {
        case .file(let path):
            let (db, created) = try FileCloudDatabase.create(path: path, container: settings.container,
                                                             account: settings.account,
                                                             secret: settings.secret?.value,
                                                             secretCache: VerifiedSecretCache.forUser(
                                                                environment: environment))
            return (db, created)
        case .postgres(let url):
            let db = try PostgresCloudDatabase(url: url, container: settings.container, account: settings.account,
                                               password: settings.secret?.value, environment: environment)
            let setup = try db.initializeContainer()
            return (db, setup.created)
        }
    }

    /// The SQL a PostgreSQL administrator runs to let the configured role use the container
    /// (`storectl cloud init --print-grants`); nil for a container file, which needs no grants.
    /// - Parameter role: the role to grant to; by default `cloud.account`, else the user in `cloud.url`.
    /// - Throws: `CloudError(.invalid)` for a malformed URL, `.account` when no role is known.
    public static func grantSQL(settings: CloudSettings, environment: [String: String], role: String? = nil) throws
        -> String?
    {
        guard case .postgres(let url) = try backend(of: settings.url) else { return nil }
        let db = try PostgresCloudDatabase(url: url, container: settings.container, account: settings.account,
                                           environment: environment)
        guard let role = role ?? db.role else {
            throw CloudError(.account, "no PostgreSQL role to grant to for \(db.displayURL)",
                             hint: "set cloud.account, or put the user in cloud.url (postgres://USER@HOST/DATABASE)")
        }
        return PostgresCloudDatabase.grantSQL(container: settings.container, role: role)
    }

    /// The DDL of the container the settings name: the container file's tables, or the PostgreSQL schema's
    /// statements. Contacts nothing.
    /// - Throws: `CloudError(.invalid)` for a URL that names no backend.
    public static func containerSQL(settings: CloudSettings) throws -> String {
        switch try backend(of: settings.url) {
        case .postgres:
            return PostgresCloudDatabase.schemaSQL(container: settings.container).map { $0 + ";" }
                .joined(separator: "\n\n")
        default:
            return FileCloudDatabase.containerSQL
        }
    }

    /// The DDL of a container file, for a store without cloud settings.
    public static var containerSQLForFile: String { FileCloudDatabase.containerSQL }

    /// The account status of the configured account, with its reason. Never throws: a container that cannot be
    /// opened is itself a status (`couldNotDetermine`, `restricted` or `temporarilyUnavailable`).
    public static func accountStatus(settings: CloudSettings, environment: [String: String]) -> AccountStatusReport {
        let account = settings.account
        let backend: Backend
        do {
            backend = try self.backend(of: settings.url)
        } catch let error as any DiagnosedError {
            return AccountStatusReport(status: .couldNotDetermine,
                                       reason: error.summary + (error.hint.map { "; " + $0 } ?? ""), account: account)
        } catch {
            return AccountStatusReport(status: .couldNotDetermine, reason: "\(error)", account: account)
        }
        switch backend {
        case .file(let path):
            return FileCloudDatabase.accountStatus(path: path, container: settings.container, account: account,
                                                   secret: settings.secret?.value,
                                                   createIfMissing: settings.createIfMissing,
                                                   secretCache: VerifiedSecretCache.forUser(environment: environment))
        case .postgres(let url):
            do {
                return try PostgresCloudDatabase(url: url, container: settings.container, account: account,
                                                 password: settings.secret?.value, environment: environment).accountStatus()
            } catch let error as CloudError {
                return FileCloudDatabase.statusReport(for: error, account: account)
            } catch let error as any DiagnosedError {
                // libpq could not be loaded: say which library and how to install it.
                return AccountStatusReport(status: .couldNotDetermine,
                                           reason: error.summary + (error.hint.map { "; " + $0 } ?? ""),
                                           account: account)
            } catch {
                return AccountStatusReport(status: .couldNotDetermine, reason: "\(error)", account: account)
            }
        }
    }

    /// The account status, as `accountStatus(settings:)` gives it, and the container it opened to find it out, so
    /// that a caller about to use the container does not open it (and check the account's secret) again. The
    /// container is nil when it could not be opened, or when it does not exist yet (`create_if_missing`).
    public static func accountStatusAndContainer(settings: CloudSettings, environment: [String: String])
        -> (report: AccountStatusReport, container: (any CloudDatabase)?)
    {
        guard let backend = try? self.backend(of: settings.url) else { return (accountStatus(settings: settings, environment: environment), nil) }
        switch backend {
        case .file(let path):
            guard FileManager.default.fileExists(atPath: path),
                  let cloud = try? FileCloudDatabase.open(path: path, container: settings.container,
                                                          account: settings.account, secret: settings.secret?.value,
                                                          secretCache: VerifiedSecretCache.forUser(
                                                            environment: environment))
            else {
                // Missing or not openable: the status explains why, exactly as without the container.
                return (accountStatus(settings: settings, environment: environment), nil)
            }
            return (cloud.accountStatus(), cloud)
        case .postgres(let url):
            guard let cloud = try? PostgresCloudDatabase(url: url, container: settings.container,
                                                         account: settings.account,
                                                         password: settings.secret?.value, environment: environment,
                                                         replicaURL: settings.replicaURL)
            else { return (accountStatus(settings: settings, environment: environment), nil) }
            return (cloud.accountStatus(), cloud)
        }
    }

    /// The URL or connection string for messages, every password in it replaced by `<redacted>`.
    public static func redacted(_ url: String) -> String { Redaction.connectionString(url) }
}
