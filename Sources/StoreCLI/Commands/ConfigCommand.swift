import StoreBase

/// `storectl config`: validate, show, get and set configuration.
struct ConfigCommand: Command {
    static let name = "config"
    static let abstract = "Validate, show, read and edit config.yaml."
}
