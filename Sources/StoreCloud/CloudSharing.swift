import StoreBase

/// What a participant of a shared zone may do with its records.
public enum SharePermission: String, Sendable, Codable, CaseIterable {
    /// Reads every record of the zone; saves nothing.
    case readOnly = "read-only"
    /// Reads and saves records (tombstones included), as the owner does.
    case readWrite = "read-write"
}

/// One participant of a zone's share, as `storectl share list` shows it.
public struct ShareParticipant: Sendable, Equatable, Codable {
    public var account: String
    public var permission: SharePermission
    /// When the share was added, or its permission last changed, in seconds since 1970.
    public var since: Double
    /// The account that added it: the zone's owner, or `upgrade` for an account that had synced the zone before
    /// the container knew shares.
    public var addedBy: String

    public init(account: String, permission: SharePermission, since: Double, addedBy: String) {
        self.account = account
        self.permission = permission
        self.since = since
        self.addedBy = addedBy
    }
}

/// What a connection's account may do in a zone.
///
/// A zone belongs to the account that created it; another account reaches it only through a share
/// (`CKShare`'s participants, each read-only or read-write).
public struct ZoneAccess: Sendable, Equatable, Codable {
    public enum Level: String, Sendable, Codable {
        /// The account owns the zone, or the zone does not exist yet (the account that creates it owns it).
        case owner
        /// A participant that may read and save.
        case readWrite = "read-write"
        /// A participant that may only read.
        case readOnly = "read-only"
        /// No share: the account may neither read nor write the zone.
        case none
    }

    public var zone: String
    /// The account that owns the zone; nil when the zone does not exist yet.
    public var owner: String?
    /// This connection's account.
    public var account: String
    public var level: Level
    /// When the share was added (participants only).
    public var since: Double?

    public init(zone: String, owner: String?, account: String, level: Level, since: Double? = nil) {
        self.zone = zone
        self.owner = owner
        self.account = account
        self.level = level
        self.since = since
    }

    public var canRead: Bool { level != .none }
    public var canWrite: Bool { level == .owner || level == .readWrite }

    /// The error for an account without a share, naming the zone, its owner and what to ask for.
    public func noShareError(container: String) -> CloudError {
        let owner = self.owner ?? "its owner"
        return CloudError(.permission,
                          "account '\(account)' has no share of zone '\(zone)' in container '\(container)'; the zone "
                              + "belongs to account '\(owner)'",
                          hint: "ask '\(owner)' to share the zone with this account (on a store of theirs that syncs "
                              + "it: share add \(account) --permission read-only, or read-write); this store's rows "
                              + "and history are kept, and 'storectl mode local' works")
    }

    /// The error for a save by a read-only participant.
    public func readOnlyError(container: String) -> CloudError {
        CloudError(.permission,
                   "account '\(account)' has read-only access to zone '\(zone)' in container '\(container)' (owned "
                       + "by '\(owner ?? "?")'); nothing was saved",
                   hint: "ask '\(owner ?? "the zone's owner")' for read-write access (on a store of theirs that syncs "
                       + "the zone: share add \(account) --permission read-write)")
    }
}

/// Sharing a zone with other accounts: the zone's owner adds and removes participants, a participant leaves.
///
/// The backend enforces it on every call, never only the client: reads of a zone need a share (or ownership),
/// saves, markers and schema raises need ownership or a read-write share, and a purge is the owner's alone.
/// Refusals are `CloudError(.permission)` (exit 77) naming the zone and its owner.
public protocol CloudSharing: CloudDatabase {
    /// What this connection's account may do in `zone` (`.owner` with a nil owner when the zone does not exist).
    /// - Throws: `CloudError`.
    func zoneAccess(_ zone: String) throws -> ZoneAccess

    /// The zone's owner and participants, by account. Readable by the owner and every participant.
    /// - Throws: `CloudError` (`.zoneNotFound`, `.permission` without a share).
    func shareParticipants(zone: String) throws -> (owner: String, participants: [ShareParticipant])

    /// Shares the zone with `account` (or changes its permission). The zone's owner only.
    /// - Throws: `CloudError` (`.permission` for anyone but the owner, `.unknownAccount` when the account is not
    ///   registered in the container or no such role exists, `.invalid` for the owner itself, `.zoneNotFound`).
    @discardableResult
    func addShare(zone: String, account: String, permission: SharePermission) throws -> ShareParticipant

    /// Ends `account`'s share of the zone. The zone's owner only.
    /// - Throws: `CloudError` (`.permission`, `.invalid` when the account is not a participant).
    func removeShare(zone: String, account: String) throws

    /// Ends this connection's account's own share of the zone.
    /// - Throws: `CloudError` (`.invalid` for the owner, or an account without a share).
    func leaveShare(zone: String) throws
}
