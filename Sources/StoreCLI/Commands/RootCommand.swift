import StoreBase

/// `storectl`: the top of the command tree.
struct RootCommand: Command {
    static let name = "storectl"
    static let abstract = "Switch a SQLite store between local-only and cloud-synced modes, with history tracking always on."
    static let discussion = """
        The config is found from --config, else $STORECTL_CONFIG, else ./config.yaml, else
        $XDG_CONFIG_HOME/storectl/config.yaml ('storectl config path' says which). With --json every command prints
        one JSON document (docs/json.md); hints are commands that work when pasted.
        Exit codes follow sysexits.h: 0 ok, 64 usage, 65 bad data, 66 missing input, 69 account or cloud
        unavailable, 70 internal, 73 can't create, 74 I/O, 75 temporary failure, 77 permission, 78 configuration.
        """
    static let examples = [
        "storectl mode cloud          # check the account, sync, and switch the store to cloud mode",
        "storectl status --json       # mode, pending changes, tokens and account, as JSON",
        "storectl config validate     # check config.yaml",
    ]
    static var subcommands: [any Command.Type] { CommandLineTool.commands }
}

/// The top-level commands, in the order --help lists them.
let registeredCommands: [any Command.Type] = [
    ModeCommand.self,
    StatusCommand.self,
    SyncCommand.self,
    WatchCommand.self,
    VerifyCommand.self,
    InitCommand.self,
    HistoryCommand.self,
    MigrateCommand.self,
    DedupeCommand.self,
    SeedCommand.self,
    ConfigCommand.self,
    StoreCommand.self,
    AccountCommand.self,
    ShareCommand.self,
    CloudCommand.self,
    DoctorCommand.self,
    DebugCommand.self,
    HelpCommand.self,
    CompletionsCommand.self,
    ManCommand.self,
]
