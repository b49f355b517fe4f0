import StoreBase

/// `storectl debug`: tools for testing storectl itself.
struct DebugCommand: Command {
    static let name = "debug"
    static let abstract = "Tools for testing storectl itself: failpoints."
    static let discussion = """
        Failpoints are named places where storectl can be made to die abruptly, as a `kill -9` would, to prove that
        a rerun loses nothing and duplicates nothing. Set STORECTL_FAILPOINT=NAME (or NAME:N, "on the Nth hit")
        in the environment of any storectl command.
        """
    static let examples = [
        "storectl debug failpoints",
        "STORECTL_FAILPOINT=export.after-save:2 storectl sync   # die after the second saved batch",
    ]
    static var subcommands: [any Command.Type] { debugSubcommands }
}

/// The `debug` subcommands, in the order --help lists them.
let debugSubcommands: [any Command.Type] = [
    DebugFailpointsCommand.self,
]
