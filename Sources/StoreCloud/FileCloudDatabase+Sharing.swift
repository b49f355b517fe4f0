import FoundationEssentials
import StoreBase
import StoreSQLite

/// Zones and their shares in a container file (format 4): `zones.owner` is the account that created the zone,
/// `shares` its participants. Every call that reads or writes a zone checks the account's access in the same
/// transaction as its work.
extension FileCloudDatabase {
    /// The account's access to `zone`, read in the caller's transaction; nil when the zone does not exist.
    func readAccess(_ zone: String) throws -> ZoneAccess? {
        let account = self.account ?? ""
        let statement = try db.cached("""
            SELECT z.owner, s.permission, s.since FROM zones z
            LEFT JOIN shares s ON s.zone = z.name AND s.account = ?2
            WHERE z.name = ?1
            """)
        var access: ZoneAccess?
        try statement.forEach([zone, account]) { row in
            let owner = row.string(0), permission = row.string(1)
            access = ZoneAccess(zone: zone, owner: owner, account: account,
                                level: ZoneAccess.level(account: account, owner: owner, permission: permission),
                                since: permission == nil ? nil : row.column(2).double)
        }
        return access
    }

    /// The account's access to `zone` when it may read it (`write`: save to it); nil when the zone does not exist.
    /// - Throws: `CloudError(.permission)`: no share, or a read-only one for a write.
    @discardableResult
    func checkedAccess(_ zone: String, write: Bool) throws -> ZoneAccess? {
        guard let access = try readAccess(zone) else { return nil }
        if !access.canRead { throw access.noShareError(container: container) }
        if write, let error = access.writeError(container: container) { throw error }
        return access
    }

    public func zoneAccess(_ zone: String) throws -> ZoneAccess {
        try requireAccount()
        return try translated("reading the access to zone '\(zone)'") {
            try readAccess(zone) ?? ZoneAccess(zone: zone, owner: nil, account: account ?? "", level: .owner)
        }
    }

    public func shareParticipants(zone: String) throws -> (owner: String, participants: [ShareParticipant]) {
        try requireAccount()
        return try translated("listing the participants of zone '\(zone)'") {
            try db.transaction(.deferred) {
                guard let access = try checkedAccess(zone, write: false) else { throw zoneNotFound(zone) }
                let participants = try db.query("""
                    SELECT account, permission, since, added_by FROM shares WHERE zone = ? ORDER BY account
                    """, [zone]).map { row in
                    ShareParticipant(account: row[0].string ?? "",
                                     permission: SharePermission(rawValue: row[1].string ?? "") ?? .readOnly,
                                     since: row[2].double ?? 0, addedBy: row[3].string ?? "")
                }
                return (access.owner ?? "", participants)
            }
        }
    }

    @discardableResult
    public func addShare(zone: String, account participant: String, permission: SharePermission) throws
        -> ShareParticipant
    {
        try requireWritable()
        return try translated("sharing zone '\(zone)' with account '\(participant)'") {
            try db.transaction(.immediate) {
                let owner = try requireZoneOwner(zone, to: "share it")
                if participant == owner {
                    throw CloudError(.invalid, "account '\(participant)' owns zone '\(zone)' in container "
                                         + "'\(container)'; it needs no share", hint: "name another account")
                }
                guard try db.scalar("SELECT 1 FROM accounts WHERE id = ?", [participant]) != nil else {
                    throw CloudError(.unknownAccount, "account '\(participant)' is not registered in container "
                                         + "'\(container)' at \(path); zone '\(zone)' was not shared",
                                     hint: "an owner of the container registers it with 'storectl account add "
                                         + "\(participant)'; see 'storectl account list'")
                }
                if permission != .readWrite { try recordFormerWriter(zone: zone, account: participant) }
                let share = ShareParticipant(account: participant, permission: permission,
                                             since: Date().timeIntervalSince1970, addedBy: owner)
                try db.run("""
                    INSERT INTO shares(zone, account, permission, since, added_by) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(zone, account) DO UPDATE SET permission = excluded.permission,
                        since = excluded.since, added_by = excluded.added_by
                    """, [zone, participant, permission.rawValue, share.since, owner])
                return share
            }
        }
    }

    public func removeShare(zone: String, account participant: String) throws {
        try requireWritable()
        try translated("ending the share of zone '\(zone)' with account '\(participant)'") {
            try db.transaction(.immediate) {
                try requireZoneOwner(zone, to: "end its shares")
                try recordFormerWriter(zone: zone, account: participant)
                try db.run("DELETE FROM shares WHERE zone = ? AND account = ?", [zone, participant])
                if db.changes == 0 {
                    throw CloudError(.invalid, "account '\(participant)' is not a participant of zone '\(zone)' in "
                                         + "container '\(container)'", hint: "see 'storectl share list'")
                }
            }
        }
    }

    public func leaveShare(zone: String) throws {
        try requireWritable()
        try translated("leaving the share of zone '\(zone)'") {
            try db.transaction(.immediate) {
                guard let access = try readAccess(zone) else { throw zoneNotFound(zone) }
                switch access.level {
                case .owner:
                    throw CloudError(.invalid, "account '\(access.account)' owns zone '\(zone)' in container "
                                         + "'\(container)'; an owner cannot leave its own zone",
                                     hint: "end the other accounts' shares with 'storectl share remove', or purge it")
                case .none:
                    throw CloudError(.invalid, "account '\(access.account)' has no share of zone '\(zone)' in "
                                         + "container '\(container)' to leave")
                case .readOnly, .readWrite:
                    try recordFormerWriter(zone: zone, account: access.account)
                    try db.run("DELETE FROM shares WHERE zone = ? AND account = ?", [zone, access.account])
                }
            }
        }
    }

    /// When `account` holds a read-write share of `zone` that is about to end or become read-only, records the
    /// zone's last seq (in the caller's transaction): the records it saved until then stay the zone's
    /// (`former_writers`; the latest end is kept).
    private func recordFormerWriter(zone: String, account: String) throws {
        try db.run("""
            INSERT INTO former_writers(zone, account, until_seq)
            SELECT s.zone, s.account, z.last_seq FROM shares s JOIN zones z ON z.name = s.zone
            WHERE s.zone = ?1 AND s.account = ?2 AND s.permission = 'read-write'
            ON CONFLICT(zone, account) DO UPDATE SET until_seq = max(until_seq, excluded.until_seq)
            """, [zone, account])
    }

    /// The zone's owner, when it is this connection's account.
    /// - Throws: `.zoneNotFound`, `.permission` for any other account, `.invalid` for a zone without an owner.
    @discardableResult
    private func requireZoneOwner(_ zone: String, to what: String) throws -> String {
        guard let access = try readAccess(zone) else { throw zoneNotFound(zone) }
        guard let owner = access.owner else {
            throw CloudError(.invalid, "zone '\(zone)' in container '\(container)' has no owner (it dates from before "
                                 + "the container had accounts), so every account may use it and none can \(what)")
        }
        guard access.level == .owner else {
            throw CloudError(.permission, "account '\(access.account)' does not own zone '\(zone)' in container "
                                 + "'\(container)'; only its owner '\(owner)' can \(what)",
                             hint: "ask '\(owner)' to run it")
        }
        return owner
    }
}
