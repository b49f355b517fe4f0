import StoreBase

/// The shape of a config key: what may be written under it.
indirect enum KeyShape: Sendable {
    /// One scalar value.
    case scalar
    /// A list of scalars (or, for seed rows, of mappings).
    case list
    /// A mapping with these keys, in documentation order.
    case section([(String, KeyShape)])
    /// A mapping whose keys are names the user picks (stores, tables), each holding `KeyShape`.
    case named(String, KeyShape)
}

/// The keys of config schema v1. The decoder, `config get` and `config set` all check names against it.
enum ConfigSchema {
    static let history: [(String, KeyShape)] = [("tracking", .scalar), ("author", .scalar), ("retention", .scalar)]
    static let cloud: [(String, KeyShape)] = [
        ("container", .scalar), ("url", .scalar), ("replica_url", .scalar), ("create_if_missing", .scalar),
        ("zone", .scalar),
        ("account", .scalar), ("secret", .scalar), ("encryption_key", .scalar), ("merge_policy", .scalar), ("max_delete_fraction", .scalar),
        ("max_delete_count", .scalar), ("max_record_size", .scalar),
        ("remote_change_notifications", .scalar), ("on_remote_change", .scalar), ("on_remote_change_timeout", .scalar),
    ]
    static let entity: [(String, KeyShape)] = [("unique", .list), ("keep", .scalar), ("tombstone", .list),
                                                ("encrypted", .list)]
    static let seed: [(String, KeyShape)] = [("name", .scalar), ("sql", .scalar), ("rows", .named("table", .list))]
    static let store: [(String, KeyShape)] = [
        ("path", .scalar), ("schema", .scalar), ("mode", .scalar), ("history", .section(history)),
        ("cloud", .section(cloud)), ("entities", .named("table", .section(entity))), ("seed", .section(seed)),
    ]
    static let top: [(String, KeyShape)] = [("version", .scalar), ("stores", .named("store", .section(store)))]
    static let root = KeyShape.section(top)

    /// What a dotted key names in the schema.
    enum Lookup {
        case found(KeyShape)
        /// `key` is not allowed under `parent` (a dotted path, empty for the top level).
        case unknown(parent: String, key: String, allowed: [String])
    }

    /// Looks up `components` (a dotted key split at its dots).
    static func lookup(_ components: [String]) -> Lookup {
        var shape = root
        var path = ""
        for component in components {
            switch shape {
            case .section(let keys):
                guard let next = keys.first(where: { $0.0 == component })?.1 else {
                    return .unknown(parent: path, key: component, allowed: keys.map(\.0))
                }
                shape = next
            case .named(_, let inner):
                shape = inner
            case .scalar, .list:
                return .unknown(parent: path, key: component, allowed: [])
            }
            path = KeyPath.child(path, component)
        }
        return .found(shape)
    }

    /// The "did you mean" hint for an unknown `key` among `allowed`, or the list of allowed keys.
    static func hint(forUnknown key: String, allowed: [String], parent: String) -> String? {
        if let near = Suggest.closest(key, in: allowed) { return "did you mean '\(near)'?" }
        guard !allowed.isEmpty else { return nil }
        let place = parent.isEmpty ? "at the top level" : "in \(parent)"
        return "the keys allowed \(place) are: \(allowed.joined(separator: ", "))"
    }
}

/// Checks dotted keys against config schema v1, for `config get` and `config set`.
public enum ConfigKeys {
    /// Refuses a key the schema does not know.
    /// - Throws: `StoreError` (exit 64) with a "did you mean" hint.
    public static func check(_ components: [String], key: String) throws {
        if case .unknown(let parent, let name, let allowed) = ConfigSchema.lookup(components) {
            let hint = Suggest.closest(name, in: allowed).map { "did you mean '\(KeyPath.child(parent, $0))'?" }
                ?? ConfigSchema.hint(forUnknown: name, allowed: allowed, parent: parent)
                ?? "\(parent.isEmpty ? "it" : parent) holds no keys"
            throw StoreError(.usage, "unknown key '\(key)'", hint: hint)
        }
    }

    /// What the names under `components` are (`store`, `table`) when it is a mapping of user-chosen names
    /// (`stores`, `stores.notes.entities`, ...), else nil.
    public static func namedSection(_ components: [String]) -> String? {
        if case .found(.named(let what, _)) = ConfigSchema.lookup(components) { return what }
        return nil
    }
}
