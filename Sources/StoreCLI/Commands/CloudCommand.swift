import StoreBase

/// `storectl cloud`: the container itself.
struct CloudCommand: Command {
    static let name = "cloud"
    static let abstract = "Create, check and purge the cloud container; change its encryption key."
    static let discussion = """
        The container is named by the store's cloud: section: a SQLite container file (url: file:PATH) or
        PostgreSQL (url: postgres://...).
        """
    static let examples = [
        "storectl cloud init              # create the container and register the configured account as owner",
        "storectl cloud purge --yes       # delete every record of the store's zone in the container",
    ]
    static var subcommands: [any Command.Type] { cloudSubcommands }
}

/// The `cloud` subcommands, in the order --help lists them. A new subcommand is added here.
let cloudSubcommands: [any Command.Type] = [
    CloudInitCommand.self,
    CloudCheckCommand.self,
    CloudPurgeCommand.self,
    CloudSchemaCommand.self,
    CloudRekeyCommand.self,
]
