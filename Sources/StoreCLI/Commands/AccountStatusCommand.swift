import StoreBase
import StoreCloud
import StoreControl

/// `storectl account status`: the account's CKAccountStatus-style status, and why.
struct AccountStatusCommand: Command {
    static let name = "status"
    static let abstract = "Print the cloud account's status and the reason for it."
    static let discussion = """
        The statuses are CloudKit's: available (exit 0); noAccount, restricted and couldNotDetermine (exit 69);
        temporarilyUnavailable (exit 75, retry later). For a container file:
          noAccount               no account or secret configured, or the account is not registered
          restricted              wrong secret, account disabled, or the container is not writable
          couldNotDetermine       the container is missing, unreadable or not a container
          temporarilyUnavailable  the container is locked beyond the busy timeout
        It works in local mode too: check the account before 'storectl mode cloud'.
        """
    static let examples = [
        "storectl account status",
        "storectl account status --json && storectl mode cloud",
    ]

    struct Output: Encodable {
        var store: String
        var container: String
        var url: String
        var account: String?
        var status: AccountStatus
        var reason: String
        var owner: String?
        /// What the account may do in the store's zone, when the account is available.
        var share: StatusReport.Share?

        enum CodingKeys: String, CodingKey { case store, container, url, account, status, reason, owner, share }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(store, forKey: .store)
            try c.encode(container, forKey: .container)
            try c.encode(url, forKey: .url)
            try c.encode(account, forKey: .account)
            try c.encode(status, forKey: .status)
            try c.encode(reason, forKey: .reason)
            try c.encode(owner, forKey: .owner)
            try c.encodeIfPresent(share, forKey: .share)
        }
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let (store, cloud) = try context.cloudSettings()
        // Through the store: the container of a store bound to one is never "available" because it could be made.
        let checked = (try? context.openStore(store.name))?.accountStatusAndContainer(cloud)
        let report = checked?.report ?? CloudConnector.accountStatus(settings: cloud, environment: context.environment)
        var share: StatusReport.Share?
        if report.status == .available, let sharing = checked?.container as? any CloudSharing {
            share = (try? sharing.zoneAccess(cloud.zone)).map(StatusReport.Share.init)
        }
        let url = CloudConnector.redacted(cloud.url)
        if context.global.json {
            context.console.json(Output(store: store.name, container: cloud.container, url: url,
                                        account: report.account, status: report.status, reason: report.reason,
                                        owner: report.owner, share: share))
        } else {
            context.console.out("""
                status: \(report.status.rawValue)
                account: \(report.account ?? "(none)")
                container: \(cloud.container) (\(url))
                reason: \(report.reason)
                """ + (report.owner.map { "\nowner: \($0)" } ?? "")
                + (share.map { "\nzone: \(cloud.zone), " + Self.describe($0) } ?? ""))
        }
        return report.status.exitCode
    }

    /// The account's place in the zone, in words.
    static func describe(_ share: StatusReport.Share) -> String {
        switch share.permission {
        case ZoneAccess.Level.owner.rawValue:
            return share.owner == nil ? "not created yet (this account will own it)" : "owned by this account"
        case ZoneAccess.Level.none.rawValue:
            return "owned by '\(share.owner ?? "?")', not shared with this account"
        default:
            return "\(share.permission) share from '\(share.owner ?? "?")'" + (share.since.map { " since \($0)" } ?? "")
        }
    }
}
