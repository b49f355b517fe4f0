import StoreBase
import StoreConfig

/// `storectl config`: validate, show, get and set configuration.
struct ConfigCommand: Command {
    static let name = "config"
    static let abstract = "Validate, show, read and edit config.yaml."
    static let discussion = """
        The config is found from --config, else $STORECTL_CONFIG, else ./config.yaml, else
        $XDG_CONFIG_HOME/storectl/config.yaml ('storectl config path' prints which). ${VAR} and ${VAR:-default}
        are expanded inside values (not with --no-expand-env). Every key is described in docs/config-reference.md.
        """
    static let examples = [
        "storectl config validate",
        "storectl config show --resolved",
        "storectl config get stores.notes.mode",
        "storectl config set stores.notes.history.retention 30d",
    ]
    static var subcommands: [any Command.Type] {
        [ConfigValidateCommand.self, ConfigShowCommand.self, ConfigGetCommand.self, ConfigSetCommand.self,
         ConfigPathCommand.self]
    }

    /// Prints the config's warnings on stderr as `warning: ...`.
    static func printWarnings(_ config: Config, _ context: CommandContext) {
        guard !context.warnedAboutConfig else { return }
        context.warnedAboutConfig = true
        for warning in config.warnings {
            context.console.err(context.console.paint("warning:", "33;1") + " " + warning)
        }
    }

    /// Loads the config with the global options, also returning its document.
    /// - Parameter allowingStoreProblems: true lets stores whose own section is wrong through (in
    ///   `Config.problems`); false, for the commands about the whole file, fails with the first one's error.
    /// - Throws: the loader's `DiagnosedError` (66 missing, 77 unreadable, 78 invalid).
    static func load(_ context: CommandContext, allowingStoreProblems: Bool = false) throws -> LoadedConfig {
        let loaded = try ConfigLoader.loadDetailed(path: context.configPath, displayPath: context.configDisplayPath,
                                                   environment: context.environment,
                                                   expandEnvironment: !context.global.noExpandEnv,
                                                   isolateStoreErrors: true)
        if !allowingStoreProblems { try requireValidStores(loaded.config) }
        return loaded
    }

    /// Throws the error of the first store whose section is wrong, with a note naming each other one.
    /// - Throws: that store's `ConfigError` (78).
    static func requireValidStores(_ config: Config) throws {
        guard var first = config.problems.first?.error else { return }
        for other in config.problems.dropFirst() {
            first.details.append("note: store '\(other.store)' has a problem too: " + other.error.firstLine)
        }
        throw first
    }

    /// Whether a dotted key names a secret, whose value is never printed.
    static func isSecret(_ key: String) -> Bool { key.hasSuffix(".secret") }

    /// A value of `key` as it may be printed: a secret as `<redacted>`, any other value with the passwords of the
    /// URLs or connection strings in it redacted.
    static func shown(_ value: String?, key: String) -> String? {
        isSecret(key) ? value.map { _ in Redaction.placeholder } : value.map(Redaction.text)
    }
}
