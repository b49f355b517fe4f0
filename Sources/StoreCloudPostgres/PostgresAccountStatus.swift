import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreCloud

extension PostgresCloudDatabase {
    /// The account status of the role this connection logs in as, mapped as CloudKit's statuses:
    ///
    /// | status | when |
    /// |---|---|
    /// | `available` | it can log in and has USAGE on the container's schema plus the privileges on its tables |
    /// | `noAccount` | no role is configured, the role does not exist (28000), or no password was supplied |
    /// | `restricted` | wrong password (28P01), login refused (28000), or privileges missing |
    /// | `couldNotDetermine` | the server cannot be reached |
    /// | `temporarilyUnavailable` | too many connections (53300), starting or shutting down (57P03, 57P01), |
    /// |   | in recovery (`pg_is_in_recovery()`), or read-only (`default_transaction_read_only`) |
    ///
    /// When the container's schema does not exist yet, the role is `available` if it may create it (`cloud init`
    /// will work), and `restricted` otherwise.
    public func accountStatus() -> AccountStatusReport {
        guard let role else {
            return AccountStatusReport(status: .noAccount, reason: "no PostgreSQL role is configured: set "
                + "cloud.account, or put the user in cloud.url (postgres://USER@HOST/DATABASE)", account: nil)
        }
        // Once per session: a watcher's rounds ask again only on a new connection, after a refused statement, or
        // when the check is `sessionCheckLimit` old (`SessionCheck`).
        if let standing = revalidatedSession() { return standing.session.report }
        let c: PGConnection
        do {
            close()
            c = try connect()
        } catch let error as PGError {
            return connectFailureStatus(error, role: role)
        } catch {
            return AccountStatusReport(status: .couldNotDetermine, reason: "\(error)", account: role)
        }
        do {
            let (report, owner) = try privilegeStatus(c, role: role)
            if report.status == .available, !report.containerMissing {
                // The checked connection becomes the session's, when it reaches the container.
                try? adopt(c, check: SessionCheck(report: report, owner: owner, at: monotonicNow()))
            }
            return report
        } catch let error as PGError {
            if error.connectionLost || error.sqlStateClass == "08" || error.sqlState == "57P01" {
                return AccountStatusReport(status: .temporarilyUnavailable,
                                           reason: "the connection to \(displayURL) was lost: \(error.message)",
                                           account: role)
            }
            return AccountStatusReport(status: .couldNotDetermine,
                                       reason: "cannot check the privileges of role \(role) at \(displayURL): \(error)",
                                       account: role)
        } catch {
            return AccountStatusReport(status: .couldNotDetermine, reason: "\(error)", account: role)
        }
    }

    private func connectFailureStatus(_ error: PGError, role: String) -> AccountStatusReport {
        let at = "at \(displayURL)"
        func report(_ status: AccountStatus, _ reason: String) -> AccountStatusReport {
            AccountStatusReport(status: status, reason: reason, account: role)
        }
        switch error.sqlState {
        case "28000" where error.message.contains("does not exist"):
            return report(.noAccount, "role \(role) does not exist \(at)")
        case "28P01":
            return report(.restricted, "the password of role \(role) was refused \(at)")
        case "28000":
            return report(.restricted, "role \(role) is disabled or refused \(at): \(error.message)")
        case "53300":
            return report(.temporarilyUnavailable, "the server \(at) has too many connections: \(error.message)")
        case "57P03", "57P01", "57P02":
            return report(.temporarilyUnavailable, "the server \(at) is starting up or shutting down: \(error.message)")
        case "3D000":
            return report(.couldNotDetermine, "the database named in \(displayURL) does not exist: \(error.message)")
        case nil:
            if error.message.contains("no password supplied") {
                return report(.noAccount, "no password for role \(role) \(at): set cloud.secret, PGPASSWORD or "
                    + "~/.pgpass")
            }
            return report(.couldNotDetermine, "cannot reach the server \(at): \(error.message)")
        default:
            if error.sqlStateClass == "08" || error.sqlStateClass == "53" {
                return report(.temporarilyUnavailable, "the server \(at) refused the connection: \(error.message)")
            }
            return report(.couldNotDetermine, "cannot connect \(at): \(error)")
        }
    }

    /// Checks, on a live connection, whether the server accepts writes and the role holds what it needs.
    private func privilegeStatus(_ c: PGConnection, role: String) throws
        -> (AccountStatusReport, owner: (owner: String, isMember: Bool)?)
    {
        func report(_ status: AccountStatus, _ reason: String, missing: Bool = false)
            -> (AccountStatusReport, owner: (owner: String, isMember: Bool)?)
        {
            (AccountStatusReport(status: status, reason: reason, account: role, containerMissing: missing), nil)
        }
        let state = try c.execute("""
            SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only'), current_user,
                   n.oid IS NOT NULL, COALESCE(has_schema_privilege(n.oid, 'USAGE'), false),
                   has_database_privilege(current_database(), 'CREATE')
            FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1
            """, [schemaName])
        let user = state.string(0, 2) ?? role
        if state.bool(0, 0) == true {
            return report(.temporarilyUnavailable, "the server at \(displayURL) is in recovery (a standby); "
                + "connect to the primary, or retry when it is promoted")
        }
        if state.bool(0, 1) == true {
            return report(.temporarilyUnavailable, "the server at \(displayURL) is read-only "
                + "(default_transaction_read_only is on)")
        }
        guard state.bool(0, 3) == true else {
            if state.bool(0, 5) == true {
                return report(.available, "role \(user) can log in at \(displayURL); container \(container) does "
                    + "not exist yet (no schema \(schemaName)): 'storectl cloud init' creates it", missing: true)
            }
            return report(.restricted, "container \(container) does not exist at \(displayURL) (no schema "
                + "\(schemaName)), and role \(user) may not create it: a database owner runs 'storectl cloud init'",
                missing: true)
        }
        guard state.bool(0, 4) == true else {
            return report(.restricted, "role \(user) lacks USAGE on schema \(schemaName) at \(displayURL): a "
                + "database owner can grant it with the SQL from 'storectl cloud init --print-grants'")
        }
        let tables = PostgresSchema.tablePrivileges
        let privileges = try c.execute("""
            SELECT t.name, t.privilege, c.oid IS NOT NULL AND has_table_privilege(c.oid, t.privilege)
            FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(name, privilege, ord)
            LEFT JOIN pg_class c ON c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
                AND c.relname = t.name
            ORDER BY t.ord
            """, [
                schemaName,
                PGConnInfo.textArray(tables.flatMap { t in t.privileges.map { _ in t.table } }),
                PGConnInfo.textArray(tables.flatMap { $0.privileges }),
            ])
        var missing: [String] = []
        for row in 0..<privileges.rowCount where privileges.bool(row, 2) != true {
            missing.append("\(privileges.string(row, 1) ?? "?") on \(privileges.string(row, 0) ?? "?")")
        }
        if !missing.isEmpty {
            return report(.restricted, "role \(user) lacks privileges in schema \(schemaName) at \(displayURL): "
                + missing.joined(separator: ", ") + "; a database owner can grant them with the SQL from "
                + "'storectl cloud init --print-grants'")
        }
        guard let owner = try containerOwner(c) else {
            return report(.available, "role \(user) can log in at \(displayURL) and use container \(container)")
        }
        let whose = owner.isMember ? " (its owner)" : ", which role \(owner.owner) owns"
        return (AccountStatusReport(status: .available, reason: "role \(user) can log in at \(displayURL) and use "
                                        + "container \(container)" + whose, account: role, owner: owner.owner),
                (owner.owner, owner.isMember))
    }

    /// On the open session: the account checks a full round makes (`privilegeStatus`: the server writable, the
    /// schema's USAGE, every table privilege, the container's owner) and the zone's epoch and last seq; nil unless
    /// the role is available. The session was authenticated when it was opened: a password changed since then
    /// is met by the next full round, which logs in again (`StoreHandle.quietRoundLimit`).
    public func quietState(zone: String, known: QuietState?) throws -> QuietState? {
        guard let role else { return nil }
        // A standing session was checked when it began: one statement asks whether it still stands, and reads the
        // zone.
        if standingSession != nil {
            // One that no longer stands (the format, the owner, the LOGIN changed): a full round checks again.
            // So does a role without a share: the full round meets the refusal.
            guard let standing = revalidatedSession(zone: zone), !standing.hidden,
                  standing.access?.access.canRead ?? true
            else { return nil }
            return QuietState(digest: Self.quietDigest(standing.session.report, access: standing.access?.signature),
                              zone: standing.zone)
        }
        return try run("cannot read the state of zone \(zone) of \(container)") { c in
            let status = try privilegeStatus(c, role: role).0
            guard status.status == .available else { return nil }
            let r = try c.execute("""
                SELECT a.epoch, a.last_seq, \(Self.accessColumns("a")), \(hiddenColumn("a", "$1"))
                FROM (SELECT 1) one LEFT JOIN LATERAL \(zoneRow("$1")) a ON true
                """, [zone])
            let access = ZoneAccessRow(r, row: 0, at: 2, zone: zone)
            guard access?.access.canRead ?? true, r.bool(0, 6) != true else { return nil }
            return QuietState(digest: Self.quietDigest(status, access: access?.signature),
                              zone: r.string(0, 0).map { ServerChangeToken(epoch: $0, seq: r.int64(0, 1) ?? 0) })
        }
    }

    /// With a standing session, the state a quiet round will compare with is the import's token, the session's
    /// check and the zone's access as the round read it: nothing needs reading. A save after that import moves the
    /// zone past the token, which the next quiet round's read (or, under `watch`, the notification) sees.
    public func quietState(zone: String, importedUpTo token: ServerChangeToken) -> QuietState? {
        guard let standing = standingSession, standing.report.status == .available,
              let access = standing.access[zone]
        else { return nil }
        return QuietState(digest: Self.quietDigest(standing.report, access: access), zone: token)
    }

    /// What a quiet state's digest holds on PostgreSQL: the account check's words, the container's owner, and the
    /// zone's owner with the role's share (`ZoneAccessRow.signature`; nil without the zone): a share removed or
    /// changed makes the next round a full one.
    private static func quietDigest(_ report: AccountStatusReport, access: String?) -> [UInt8] {
        Array([report.reason, report.owner ?? "", access ?? "-"].joined(separator: "\n").utf8)
    }

    /// The role that owns the container, and whether the configured role is it (or a member of it); nil when the
    /// container does not exist.
    /// - Throws: `CloudError` when the server cannot be asked.
    public func ownership() throws -> (owner: String, isOwner: Bool)? {
        if let owner = standingSession?.owner { return (owner.owner, owner.isMember) }
        return try run("cannot read the owner of container \(container)") { c in
            try containerOwner(c).map { ($0.owner, $0.isMember) }
        }
    }
}
