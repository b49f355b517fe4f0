import StoreBase
import StoreConfig
import Storectl

extension CommandContext {
    /// Loads config.yaml (from --config, $STORECTL_CONFIG or ./config.yaml).
    /// - Throws: the loader's `DiagnosedError` (66 missing, 78 invalid).
    public func loadConfig() throws -> Config {
        let config = try ConfigLoader.load(path: configPath, displayPath: configDisplayPath, environment: environment,
                                           expandEnvironment: !global.noExpandEnv)
        if !warnedAboutConfig {
            warnedAboutConfig = true
            for warning in config.warnings { console.err("warning: " + warning) }
        }
        return config
    }

    /// Loads the config and picks the store named by --store (or the only one).
    /// - Throws: `DiagnosedError`.
    public func openStore() throws -> StoreHandle {
        try handle(try loadConfig(), global.storeName)
    }

    /// A handle on store `name` of `config` whose notes (a format upgrade) go to stderr.
    public func handle(_ config: Config, _ name: String?) throws -> StoreHandle {
        let store = try StoreHandle(config: config, storeName: name)
        let console = console
        store.log = { console.note($0) }
        return store
    }
}
