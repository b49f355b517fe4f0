import StoreBase
import StoreConfig
import StoreControl

extension CommandContext {
    /// Loads the config (from --config, $STORECTL_CONFIG, ./config.yaml or $XDG_CONFIG_HOME/storectl/config.yaml).
    /// - Throws: the loader's `DiagnosedError` (66 missing, 78 invalid).
    public func loadConfig() throws -> Config {
        if let loadedConfig { return loadedConfig }
        // An error inside one store's section fails only the commands on that store.
        let config = try ConfigLoader.load(path: configPath, displayPath: configDisplayPath, environment: environment,
                                           expandEnvironment: !global.noExpandEnv, isolateStoreErrors: true)
        loadedConfig = config
        log.debug("config", ["path": configPath, "stores": String(config.storeNames.count)])
        if !warnedAboutConfig {
            warnedAboutConfig = true
            for warning in config.warnings { console.err(console.paint("warning:", "33;1") + " " + warning) }
        }
        return config
    }

    /// The names of the stores a command about every store acts on: the one --store names, else all of them,
    /// those whose config section is wrong included (opening one of them throws its error).
    /// - Throws: `StoreError` (64) when --store names no store of the config; the store's `ConfigError` (78) when
    ///   --store names a store whose section is wrong.
    public func selectedStoreNames() throws -> [String] {
        let config = try loadConfig()
        if let name = global.storeName { return [try config.store(named: name).name] }
        return config.storeNames
    }

    /// Opens the store named `name` (nil: the one --store names, or the only one) and remembers it as the store the
    /// command acts on, so that errors name it.
    /// - Throws: `DiagnosedError`; with several stores and no --store, a usage error whose hint is this very
    ///   command with `--store` added.
    public func openStore(_ name: String? = nil) throws -> StoreHandle {
        let config = try loadConfig()
        let chosen = name ?? global.storeName
        if chosen == nil, config.storeNames.count > 1 {
            let names = config.storeNames
            let first = names[0]
            let words = ["storectl"] + invocation.prefix(store: nil) + ["--store", Shell.quoted(first)]
                + Invocation.withoutConfigOption(argv).map(Shell.quoted)
            throw UsageError("\(configDisplayPath) has \(names.count) stores (\(names.joined(separator: ", "))); "
                             + "choose one with --store",
                             hint: "run '\(words.joined(separator: " "))'")
        }
        let store = try StoreHandle(config: config, storeName: chosen, environment: environment)
        let console = console
        store.log = { console.note($0) }
        activeStore = store.settings.name
        log.debug("store", ["name": store.settings.name, "path": store.settings.path])
        return store
    }
}
