import StoreBase

/// `storectl config path`: where the config is, and how it was found.
struct ConfigPathCommand: Command {
    static let name = "path"
    static let abstract = "Print the path of the config storectl uses, and how it was found."
    static let discussion = """
        The config is --config, else $STORECTL_CONFIG, else ./config.yaml, else
        $XDG_CONFIG_HOME/storectl/config.yaml (~/.config when XDG_CONFIG_HOME is not set). Prints the absolute path
        (exit 0), or, when no config exists, the places searched (exit 66).
        """
    static let examples = [
        "storectl config path",
        "storectl config path --json     # {\"path\": ..., \"source\": \"working_directory\", ...}",
        "$EDITOR \"$(storectl config path)\"",
    ]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let location = context.configLocation
        if context.global.json {
            context.console.json(location)
        } else if location.exists {
            context.console.out(location.absolutePath)
        } else {
            context.console.err("no config found; searched: " + location.searched.joined(separator: ", "))
        }
        return location.exists ? .ok : .noInput
    }
}
