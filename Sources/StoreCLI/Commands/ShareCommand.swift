import StoreBase
import StoreCloud
import StoreConfig
import StoreControl

/// `storectl share`: who else may read or write the store's zone.
struct ShareCommand: Command {
    static let name = "share"
    static let abstract = "Share the store's zone with other accounts, read-only or read-write."
    static let discussion = """
        A zone belongs to the account that created it (its first sync). Other accounts reach it only through a
        share, as CloudKit's CKShare participants do: read-only participants receive every record and send
        nothing; read-write participants save as the owner does. The server enforces it (PostgreSQL row-level
        security; the container file's own checks), never only this client. A participant's store names the
        owner's container, URL and zone, with its own cloud.account. See docs/sharing.md.
        """
    static let examples = [
        "storectl share add bob --permission read-only",
        "storectl share list --json",
        "storectl share remove bob",
        "storectl share leave            # run by a participant",
    ]
    static var subcommands: [any Command.Type] { shareSubcommands }
}

/// The `share` subcommands, in the order --help lists them.
let shareSubcommands: [any Command.Type] = [
    ShareAddCommand.self,
    ShareListCommand.self,
    ShareRemoveCommand.self,
    ShareLeaveCommand.self,
]

/// The store's container, as one that knows shares, and the store's cloud settings.
func sharingContainer(_ context: CommandContext) throws -> (cloud: CloudSettings, db: any CloudSharing) {
    let (_, cloud) = try context.cloudSettings()
    let db = try CloudConnector.open(settings: cloud, environment: context.environment, createIfMissing: false)
    guard let sharing = db as? any CloudSharing else {
        throw StoreError(.unavailable, "container '\(cloud.container)' at \(db.displayURL) does not support shares",
                         hint: "upgrade storectl on every device that uses it")
    }
    return (cloud, sharing)
}

/// `{"container", "zone", "owner", "account", "permission", "since", "action"}` for add, remove and leave.
struct ShareChangeOutput: Encodable {
    var container: String
    var zone: String
    var owner: String
    var account: String
    var permission: SharePermission?
    var since: String?
    var action: String

    enum CodingKeys: String, CodingKey { case container, zone, owner, account, permission, since, action }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(container, forKey: .container)
        try c.encode(zone, forKey: .zone)
        try c.encode(owner, forKey: .owner)
        try c.encode(account, forKey: .account)
        try c.encode(permission, forKey: .permission)
        try c.encode(since, forKey: .since)
        try c.encode(action, forKey: .action)
    }
}

/// `storectl share add <account> [--permission read-only|read-write]`.
struct ShareAddCommand: Command {
    static let name = "add"
    static let abstract = "Share the store's zone with an account (the zone's owner only)."
    static let arguments = "<account>"
    static let discussion = """
        Run by the zone's owner (exit 77 for anyone else). The account must be registered in the container (a
        PostgreSQL role for a PostgreSQL container; exit 67 otherwise). Adding a participant again changes its
        permission. The participant then syncs with its own account and this store's container, URL and zone.
        """
    static let examples = [
        "storectl share add bob --permission read-only",
        "storectl share add carol --permission read-write --json",
    ]
    static let options = [
        OptionSpec("permission", value: "PERMISSION", help: "read-only or read-write (default: read-only)."),
    ]
    static let positionalRange: ClosedRange<Int> = 1...1

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let account = args.positionals[0]
        let text = args.value("permission") ?? SharePermission.readOnly.rawValue
        guard let permission = SharePermission(rawValue: text) else {
            throw UsageError("--permission must be read-only or read-write, got '\(text)'")
        }
        let (cloud, db) = try sharingContainer(context)
        let before = try db.shareParticipants(zone: cloud.zone)
        let share = try db.addShare(zone: cloud.zone, account: account, permission: permission)
        let action = before.participants.contains { $0.account == account } ? "changed" : "added"
        if context.global.json {
            context.console.json(ShareChangeOutput(container: cloud.container, zone: cloud.zone, owner: before.owner,
                                                   account: account, permission: share.permission,
                                                   since: isoTime(share.since), action: action))
        } else {
            context.console.out("\(action == "added" ? "shared" : "changed the share of") zone '\(cloud.zone)' of "
                                    + "container '\(cloud.container)' with '\(account)' (\(share.permission.rawValue))")
        }
        return .ok
    }
}

/// `storectl share list`.
struct ShareListCommand: Command {
    static let name = "list"
    static let abstract = "List the zone's owner and participants, with their permission and since when."
    static let discussion = "The zone's owner and every participant may list them."
    static let examples = ["storectl share list", "storectl share list --json"]

    struct Entry: Encodable {
        var account: String
        var permission: SharePermission
        var since: String
        var addedBy: String

        enum CodingKeys: String, CodingKey {
            case account, permission, since
            case addedBy = "added_by"
        }
    }

    struct Output: Encodable {
        var container: String
        var zone: String
        var owner: String
        var participants: [Entry]
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let (cloud, db) = try sharingContainer(context)
        let (owner, participants) = try db.shareParticipants(zone: cloud.zone)
        let entries = participants.map {
            Entry(account: $0.account, permission: $0.permission, since: isoTime($0.since), addedBy: $0.addedBy)
        }
        if context.global.json {
            context.console.json(Output(container: cloud.container, zone: cloud.zone, owner: owner,
                                        participants: entries))
            return .ok
        }
        let width = max(7, entries.map { $0.account.count }.max() ?? 0, owner.count) + 2
        func pad(_ s: String, _ n: Int) -> String { s.padded(to: max(n, s.count)) }
        context.console.out("zone '\(cloud.zone)' of container '\(cloud.container)', owned by '\(owner)'")
        context.console.out(pad("ACCOUNT", width) + pad("PERMISSION", 12) + "SINCE")
        for e in entries {
            context.console.out(pad(e.account, width) + pad(e.permission.rawValue, 12) + e.since)
        }
        if entries.isEmpty { context.console.out("(no participants)") }
        return .ok
    }
}

/// `storectl share remove <account>`.
struct ShareRemoveCommand: Command {
    static let name = "remove"
    static let abstract = "End an account's share of the zone (the zone's owner only)."
    static let arguments = "<account>"
    static let discussion = """
        The participant's next sync is refused (exit 77) naming the zone and its owner; its rows and history stay,
        and 'storectl mode local' works there. Adding the share again resumes its sync where it stopped.
        """
    static let examples = ["storectl share remove bob", "storectl share remove bob --json"]
    static let positionalRange: ClosedRange<Int> = 1...1

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let account = args.positionals[0]
        let (cloud, db) = try sharingContainer(context)
        let owner = try db.shareParticipants(zone: cloud.zone).owner
        try db.removeShare(zone: cloud.zone, account: account)
        if context.global.json {
            context.console.json(ShareChangeOutput(container: cloud.container, zone: cloud.zone, owner: owner,
                                                   account: account, permission: nil, since: nil, action: "removed"))
        } else {
            context.console.out("removed '\(account)' from the share of zone '\(cloud.zone)' of container "
                                    + "'\(cloud.container)'")
        }
        return .ok
    }
}

/// `storectl share leave`.
struct ShareLeaveCommand: Command {
    static let name = "leave"
    static let abstract = "Leave a zone shared with this store's account (a participant only)."
    static let discussion = """
        Ends the configured account's own share of the zone. The store keeps its rows and history; its next sync is
        refused (exit 77) until the owner shares the zone again. Run 'storectl mode local' to keep using the store
        without the zone.
        """
    static let examples = ["storectl share leave", "storectl share leave --json"]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let (cloud, db) = try sharingContainer(context)
        let access = try db.zoneAccess(cloud.zone)
        try db.leaveShare(zone: cloud.zone)
        if context.global.json {
            context.console.json(ShareChangeOutput(container: cloud.container, zone: cloud.zone,
                                                   owner: access.owner ?? "", account: access.account,
                                                   permission: nil, since: nil, action: "left"))
        } else {
            context.console.out("left zone '\(cloud.zone)' of container '\(cloud.container)' (owned by "
                                    + "'\(access.owner ?? "?")')")
        }
        return .ok
    }
}
