import FoundationEssentials
import StoreBase
import StoreCloud

/// A role's access to one zone, as a statement read it from `{s}.zone_access(zone, current_user)`.
struct ZoneAccessRow {
    var access: ZoneAccess
    /// The zone's owner, the role's level and the share's `since`, as the server wrote them: what a quiet state's
    /// digest compares.
    var signature: String

    /// The access in `r`'s row `row`, columns `column...` as `PostgresCloudDatabase.accessColumns` lists them;
    /// nil when there is no such row or the zone does not exist (the level is NULL).
    init?(_ r: PGResult, row: Int, at column: Int, zone: String) {
        guard row < r.rowCount, let levelText = r.string(row, column + 1) else { return nil }
        let owner = r.string(row, column), since = r.string(row, column + 2)
        access = ZoneAccess(zone: zone, owner: owner, account: r.string(row, column + 3) ?? "",
                            level: ZoneAccess.Level(rawValue: levelText) ?? .none, since: since.flatMap(Double.init))
        signature = [owner ?? "", levelText, since ?? ""].joined(separator: "|")
    }

    /// - Throws: the no-share error, for a role that may not read the zone.
    func requireRead(container: String) throws {
        if !access.canRead { throw access.noShareError(container: container) }
    }
}

/// A write refused by `{s}.require_writable` (SQLSTATE SH001): the role may not write the zone. Turned into the
/// error that names the zone's owner (`writeRefusal`).
struct ZoneWriteRefused: Error {
    static let sqlState = "SH001"
}

/// Shares of zones in a PostgreSQL container. The server enforces them itself (row-level security, migration 5);
/// storectl also checks every call explicitly, so that a role without a share hears why rather than finding a
/// zone empty, and so that the container's owner (whom the policies do not bind) keeps to the same rules.
extension PostgresCloudDatabase: CloudSharing {
    /// The columns of a `zone_access` row aliased `alias`, as `ZoneAccessRow` reads them: owner, level, since, and
    /// the role (`current_user`).
    static func accessColumns(_ alias: String) -> String {
        "\(alias).owner, \(alias).level, \(alias).since, current_user"
    }

    /// The zone `param` (`$1`, `$2`) as this role sees it, read inline (no function call): a FROM item with the
    /// columns of `zone_access` (owner, level, since, epoch, last seq). No row when the zone does not exist, or
    /// when the policies hide it from a role without a share: `hiddenZoneError` then tells the two apart.
    func zoneRow(_ param: String) -> String {
        """
        (SELECT z.owner, CASE WHEN z.owner IS NULL OR z.owner = current_user THEN 'owner'
                              ELSE coalesce(sh.permission, 'none') END AS level,
                sh.since, z.epoch, z.last_seq
         FROM \(s).zones z LEFT JOIN \(s).shares sh ON sh.zone = \(param) AND sh.account = current_user
         WHERE z.name = \(param))
        """
    }

    /// A column of a statement that reads the zone `param` as `zoneRow` aliased `alias`: true when that found no
    /// row though the zone exists (the policies hide it from a role without a share). The function is asked only
    /// then (an init plan runs when its value is first needed), so a statement that finds its zone pays nothing.
    func hiddenColumn(_ alias: String, _ param: String) -> String {
        """
        CASE WHEN \(alias).level IS NULL AND \(param)::text IS NOT NULL
             THEN EXISTS (SELECT 1 FROM \(s).zone_access(\(param), current_user)) END
        """
    }

    /// For a read that found no row of `zone` (`zoneRow`): nil when the zone does not exist; the no-share error
    /// when it exists and the policies hid it from this role (asked of `zone_access`, which sees every zone).
    func hiddenZoneError(_ c: PGConnection, zone: String) throws -> CloudError? {
        let r = try c.execute("SELECT \(Self.accessColumns("a")) FROM \(s).zone_access($1, current_user) a", [zone])
        guard let access = ZoneAccessRow(r, row: 0, at: 0, zone: zone) else { return nil }
        return access.access.canRead
            ? CloudError(.temporary, "zone \(zone) of \(container) changed while it was read", hint: "retry")
            : access.access.noShareError(container: container)
    }

    /// The statement that aborts a write's transaction unless the role may write `zone` (its first statement).
    static func requireWritable(schema: String, zone: String) -> PGQuery {
        PGQuery("SELECT \(schema).require_writable($1, current_user)", [zone])
    }

    /// Runs a write to `zone` on the container's connection (`run`), a refusal by the server turned into the
    /// error that names the zone's owner.
    func writing<T>(_ zone: String, _ what: @autoclosure () -> String, _ body: (PGConnection) throws -> T) throws
        -> T
    {
        do {
            return try run(what(), body)
        } catch is ZoneWriteRefused {
            throw try writeRefusal(zone)
        }
    }

    /// The error for a write the role may not make in `zone`: no share, or a read-only one.
    func writeRefusal(_ zone: String) throws -> CloudError {
        let access = try zoneAccess(zone)
        return access.writeError(container: container)
            ?? CloudError(.temporary, "the access of role \(access.account) to zone \(zone) of \(container) "
                              + "changed while it was writing; nothing was saved", hint: "retry")
    }

    /// The role's access to `zone` and whether `participant` names an existing role, in one statement; the access
    /// is nil when the zone does not exist.
    private func readAccess(_ c: PGConnection, zone: String, participant: String? = nil) throws
        -> (access: ZoneAccessRow?, role: String, participantExists: Bool)
    {
        let r = try c.execute("""
            SELECT \(Self.accessColumns("a")), current_user, EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $2)
            FROM (SELECT 1) one LEFT JOIN LATERAL \(s).zone_access($1, current_user) a ON true
            """, [zone, participant])
        return (ZoneAccessRow(r, row: 0, at: 0, zone: zone), r.string(0, 4) ?? (role ?? ""), r.bool(0, 5) == true)
    }

    public func zoneAccess(_ zone: String) throws -> ZoneAccess {
        try run("cannot read the access to zone \(zone) of \(container)") { c in
            let read = try readAccess(c, zone: zone)
            return read.access?.access ?? ZoneAccess(zone: zone, owner: nil, account: read.role, level: .owner)
        }
    }

    public func shareParticipants(zone: String) throws -> (owner: String, participants: [ShareParticipant]) {
        try run("cannot list the participants of zone \(zone) of \(container)") { c in
            let r = try c.execute("""
                SELECT \(Self.accessColumns("a")), sh.account, sh.permission, sh.since, sh.added_by
                FROM \(s).zone_access($1, current_user) a
                LEFT JOIN \(s).shares sh ON sh.zone = $1 AND a.level <> 'none'
                ORDER BY sh.account
                """, [zone])
            guard let access = ZoneAccessRow(r, row: 0, at: 0, zone: zone) else { throw zoneNotFound(zone) }
            try access.requireRead(container: container)
            let participants = (0..<r.rowCount).compactMap { row -> ShareParticipant? in
                guard let account = r.string(row, 4) else { return nil }
                return ShareParticipant(account: account,
                                        permission: SharePermission(rawValue: r.string(row, 5) ?? "") ?? .readOnly,
                                        since: r.double(row, 6) ?? 0, addedBy: r.string(row, 7) ?? "")
            }
            return (access.access.owner ?? "", participants)
        }
    }

    @discardableResult
    public func addShare(zone: String, account participant: String, permission: SharePermission) throws
        -> ShareParticipant
    {
        try run("cannot share zone \(zone) of \(container) with role \(participant)") { c in
            let read = try readAccess(c, zone: zone, participant: participant)
            let owner = try requireZoneOwner(read.access, zone: zone, to: "share it")
            if participant == owner {
                throw CloudError(.invalid, "role \(participant) owns zone \(zone) of \(container); it needs no share",
                                 hint: "name another role")
            }
            guard read.participantExists else {
                throw CloudError(.unknownAccount, "no role \(participant) exists at \(displayURL); zone \(zone) was "
                                     + "not shared",
                                 hint: "a database administrator creates it ('CREATE ROLE \(participant) LOGIN') and "
                                     + "grants it the container ('storectl cloud init --print-grants')")
            }
            let r = try c.execute("""
                INSERT INTO \(s).shares AS sh (zone, account, permission, since, added_by)
                VALUES ($1, $2, $3, extract(epoch FROM statement_timestamp())::float8, current_user)
                ON CONFLICT (zone, account) DO UPDATE SET permission = excluded.permission, since = excluded.since,
                    added_by = excluded.added_by
                RETURNING sh.since, sh.added_by
                """, [zone, participant, permission.rawValue])
            return ShareParticipant(account: participant, permission: permission, since: r.double(0, 0) ?? 0,
                                    addedBy: r.string(0, 1) ?? owner)
        }
    }

    public func removeShare(zone: String, account participant: String) throws {
        try run("cannot end the share of zone \(zone) of \(container) with role \(participant)") { c in
            try requireZoneOwner(try readAccess(c, zone: zone).access, zone: zone, to: "end its shares")
            let r = try c.execute("DELETE FROM \(s).shares WHERE zone = $1 AND account = $2 RETURNING 1",
                                  [zone, participant])
            if r.rowCount == 0 {
                throw CloudError(.invalid, "role \(participant) is not a participant of zone \(zone) of \(container)",
                                 hint: "see 'storectl share list'")
            }
        }
    }

    public func leaveShare(zone: String) throws {
        try run("cannot leave the share of zone \(zone) of \(container)") { c in
            guard let access = try readAccess(c, zone: zone).access?.access else { throw zoneNotFound(zone) }
            switch access.level {
            case .owner:
                throw CloudError(.invalid, "role \(access.account) owns zone \(zone) of \(container); an owner cannot "
                                     + "leave its own zone",
                                 hint: "end the other roles' shares with 'storectl share remove', or purge it")
            case .none:
                throw CloudError(.invalid, "role \(access.account) has no share of zone \(zone) of \(container) to "
                                     + "leave")
            case .readOnly, .readWrite:
                try c.execute("DELETE FROM \(s).shares WHERE zone = $1 AND account = current_user", [zone])
            }
        }
    }

    /// The zone's owner, when it is this connection's role.
    /// - Throws: `.zoneNotFound`, `.permission` for any other role, `.invalid` for a zone without an owner.
    @discardableResult
    private func requireZoneOwner(_ row: ZoneAccessRow?, zone: String, to what: String) throws -> String {
        guard let access = row?.access else { throw zoneNotFound(zone) }
        guard let owner = access.owner else {
            throw CloudError(.invalid, "zone \(zone) of \(container) has no owner, so every role may use it and none "
                                 + "can \(what)")
        }
        guard access.level == .owner else {
            throw CloudError(.permission, "role \(access.account) does not own zone \(zone) of \(container); only "
                                 + "its owner \(owner) can \(what)", hint: "ask role \(owner) to run it")
        }
        return owner
    }
}
