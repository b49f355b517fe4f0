import StoreBase

/// Comment-preserving edits of config.yaml.
public enum ConfigEditor {
    /// Sets one scalar, changing only its bytes.
    /// - Throws: `StoreError`.
    public static func set(path: String, displayPath: String?, key: String, value: String,
                           environment: [String: String]) throws
    {
        throw StoreError(.software, "editing \(path) is not available in this build",
                         hint: "set \(key): \(value) by hand")
    }
}
