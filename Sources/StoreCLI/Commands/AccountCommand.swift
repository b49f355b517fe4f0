import StoreBase

/// `storectl account`: the cloud account a store uses.
struct AccountCommand: Command {
    static let name = "account"
    static let abstract = "Check the cloud account, and manage a container file's accounts."
    static let discussion = """
        The account comes from the store's cloud.account and cloud.secret (an environment reference such as
        ${STORECTL_SECRET}). A container file keeps only a salted hash of each secret.
        """
    static let examples = [
        "storectl account status          # prints the status and why; exit 0 only when available",
        "BOB_SECRET=... storectl account add bob --secret-env BOB_SECRET",
        "storectl account list --json",
        "storectl account disable bob && storectl account enable bob",
    ]
    static var subcommands: [any Command.Type] { accountSubcommands }
}

/// The `account` subcommands, in the order --help lists them.
let accountSubcommands: [any Command.Type] = [
    AccountStatusCommand.self,
    AccountAddCommand.self,
    AccountDisableCommand.self,
    AccountEnableCommand.self,
    AccountRemoveCommand.self,
    AccountListCommand.self,
]
