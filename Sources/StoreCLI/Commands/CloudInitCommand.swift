import StoreBase
import StoreCloud
import StoreControl

/// `storectl cloud init`: creates the container and registers the configured account as its owner.
struct CloudInitCommand: Command {
    static let name = "init"
    static let abstract = "Create the cloud container and register the configured account as its owner."
    static let discussion = """
        For a container file (url: file:PATH) this creates the file and its folder, and registers cloud.account
        with a salted hash of cloud.secret as the container's owner. A container that already exists is left as
        it is. With cloud.create_if_missing: true the container is also created on first use.
        """
    static let examples = [
        "STORECTL_SECRET=... storectl cloud init",
        "storectl cloud init --store notes --json",
        "storectl cloud init --print-grants   # PostgreSQL: the GRANT statements an administrator runs",
    ]
    static let options = [
        OptionSpec("print-grants", help: "Print the grants a PostgreSQL administrator runs, and change nothing."),
    ]

    struct Output: Encodable {
        var container: String
        var url: String
        var created: Bool
        var owner: String?
        var accountStatus: AccountStatus

        enum CodingKeys: String, CodingKey {
            case container, url, created, owner
            case accountStatus = "account_status"
        }

        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(container, forKey: .container)
            try c.encode(url, forKey: .url)
            try c.encode(created, forKey: .created)
            try c.encode(owner, forKey: .owner)
            try c.encode(accountStatus, forKey: .accountStatus)
        }
    }

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let (store, cloud) = try context.cloudSettings()
        let backend = try CloudConnector.backend(of: cloud.url)
        if args.flag("print-grants") {
            guard case .postgres = backend else {
                let note = "--print-grants applies to PostgreSQL containers; a container file needs no grants "
                    + "(its file permissions decide who can use it)"
                if context.global.json {
                    context.console.json(["grants": [String](), "note": [note]])
                } else {
                    context.console.out(note)
                }
                return .ok
            }
            let sql = try CloudConnector.grantSQL(settings: cloud, environment: context.environment) ?? ""
            if context.global.json {
                context.console.json(["grants": sql.split(separator: "\n").map(String.init)])
            } else {
                context.console.out(sql)
            }
            return .ok
        }
        let (db, created) = try CloudConnector.initialize(settings: cloud, environment: context.environment)
        let status = db.accountStatus()
        let isPostgres: Bool
        if case .postgres = backend { isPostgres = true } else { isPostgres = false }
        // On PostgreSQL the owner is the role that created the schema (it needs no secret in the config).
        let owner = isPostgres ? status.owner : created ? cloud.account : nil
        if context.global.json {
            context.console.json(Output(container: cloud.container, url: db.displayURL, created: created,
                                        owner: owner, accountStatus: status.status))
        } else if created, isPostgres {
            context.console.out("created container '\(cloud.container)' at \(db.displayURL); role "
                                    + "'\(owner ?? cloud.account ?? "?")' owns it")
            context.console.note("hint: other roles need grants to use it: run 'storectl cloud init --print-grants' "
                                     + "for the SQL")
        } else if created {
            if let account = cloud.account, cloud.secret != nil {
                context.console.out("created container '\(cloud.container)' at \(db.displayURL); "
                                        + "account '\(account)' is its owner")
            } else {
                context.console.out("created container '\(cloud.container)' at \(db.displayURL) with no account")
                context.console.note("hint: set stores.\(store.name).cloud.account and .secret, then run "
                                         + "'storectl account add \(store.cloud?.account ?? "alice") --role owner'")
            }
        } else {
            context.console.out("container '\(cloud.container)' already exists at \(db.displayURL); nothing changed")
            if status.status != .available {
                context.console.note("note: account status is \(status.status.rawValue): \(status.reason)")
            }
        }
        return .ok
    }
}
