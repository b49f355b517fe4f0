import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase

/// Turns an expanded node tree into a `Config`: typed decoding, defaults, path resolution and validation, with
/// every error pointing at its key path and its place in the file.
struct ConfigDecoder {
    let source: SourceText
    let displayPath: String
    /// The config file's absolute path.
    let configPath: String
    /// Whether `${VAR}` references were expanded (false with --no-expand-env).
    let expanded: Bool
    /// The user's home folder (`$HOME`), which a leading `~` in a path stands for.
    var home: String?

    private var directory: String {
        guard let slash = configPath.lastIndex(of: "/") else { return "." }
        let dir = String(configPath[..<slash])
        return dir.isEmpty ? "/" : dir
    }

    // MARK: Errors

    private func fail(_ node: YAMLNode, _ path: String, _ message: String, hint: String? = nil) -> ConfigError {
        fail(node.start, path, message, hint: hint)
    }

    private func fail(_ mark: YAMLMark, _ path: String, _ message: String, hint: String? = nil) -> ConfigError {
        ConfigError(displayPath, source, line: mark.line, column: mark.column, keyPath: path, message, hint: hint)
    }

    private func missing(_ key: String, in path: String, at mark: YAMLMark, example: String) -> ConfigError {
        let place = path.isEmpty ? "at the top level" : "under \(path)"
        return fail(mark, KeyPath.child(path, key), "required key is missing", hint: "add '\(example)' \(place)")
    }

    // MARK: Shapes

    /// The entries of a section, keyed by name, after checking that every key is allowed. Null is an empty section.
    private func section(_ node: YAMLNode, _ path: String, keys: [(String, KeyShape)]) throws -> [String: YAMLPair] {
        if node.isNull { return [:] }
        guard let pairs = node.pairs else {
            var hint: String?
            if let text = node.scalar, let colon = text.firstIndex(of: ":"),
               SourceText.printable(text) != Redaction.placeholder
            {
                hint = "YAML needs a space after ':'; write '\(text[..<colon]): \(text[text.index(after: colon)...])'"
            }
            throw fail(node, path, "expected a mapping, got \(node.described)", hint: hint)
        }
        var result: [String: YAMLPair] = [:]
        let allowed = keys.map(\.0)
        for pair in pairs {
            let name = pair.key.scalar ?? ""
            guard allowed.contains(name) else {
                throw fail(pair.key, KeyPath.child(path, name), "unknown key",
                           hint: ConfigSchema.hint(forUnknown: name, allowed: allowed, parent: path))
            }
            result[name] = pair
        }
        return result
    }

    /// A mapping of user-chosen names (stores, tables), in file order. Null is empty.
    private func named(_ node: YAMLNode, _ path: String, what: String) throws -> [YAMLPair] {
        if node.isNull { return [] }
        guard let pairs = node.pairs else {
            throw fail(node, path, "expected a mapping of \(what) names, got \(node.described)")
        }
        return pairs
    }

    /// A scalar's text. Null, mappings and lists are refused.
    /// A size in bytes: a whole number, or one followed by KB, MB (powers of 1000), KiB or MiB (powers of 1024).
    /// Nil when it is none of those or does not fit.
    static func byteSize(_ text: String) -> Int? {
        let units: [(String, Int)] = [("KiB", 1024), ("MiB", 1024 * 1024), ("KB", 1000), ("MB", 1_000_000), ("B", 1)]
        var digits = text.trimmingSpaces()
        var factor = 1
        for (suffix, value) in units where digits.hasSuffix(suffix) {
            digits = String(digits.dropLast(suffix.count)).trimmingSpaces()
            factor = value
            break
        }
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), let number = Int(digits), number >= 0 else { return nil }
        let (product, overflow) = number.multipliedReportingOverflow(by: factor)
        return overflow ? nil : product
    }

    private func text(_ node: YAMLNode, _ path: String, _ what: String = "text") throws -> String {
        guard !node.isNull, let value = node.scalar else {
            throw fail(node, path, "expected \(what), got \(node.described)")
        }
        return value
    }

    /// A scalar's text, which must not be empty nor hold a control character (a NUL, a line break, an escape):
    /// such a value names a file, a table or an account, where those characters only ever do harm.
    private func nonEmpty(_ node: YAMLNode, _ path: String, _ what: String = "text") throws -> String {
        let value = try text(node, path, what)
        guard !value.trimmingSpaces().isEmpty else { throw fail(node, path, "must not be empty") }
        try refuseControlCharacters(value, node, path)
        return value
    }

    /// Refuses `value` when it holds a control character, naming the character and where it came from.
    private func refuseControlCharacters(_ value: String, _ node: YAMLNode, _ path: String) throws {
        guard let (index, scalar) = value.unicodeScalars.enumerated().first(where: { Self.isControl($0.element) })
        else { return }
        let code = "U+" + String(repeating: "0", count: max(0, 4 - String(scalar.value, radix: 16).count))
            + String(scalar.value, radix: 16, uppercase: true)
        let name = Self.controlNames[scalar.value].map { " (\($0))" } ?? ""
        let origin = node.fromReference ? "the value from the environment variable" : "the value"
        throw fail(node, path, "\(origin) holds the control character \(code)\(name) at character \(index + 1)",
                   hint: node.fromReference ? "check the variable's value: it must be one line of printable text"
                       : "remove the character; names and paths must be printable text")
    }

    private static let controlNames: [UInt32: String] = [0: "NUL", 9: "tab", 10: "line break", 13: "carriage return",
                                                          27: "escape", 127: "delete"]

    /// C0 and C1 controls and DEL (Unicode general category Cc).
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// A file path: not empty, no control character, a leading `~` or `~/` expanded to the home folder as a shell
    /// does, then made absolute against the config file's folder.
    private func filePath(_ node: YAMLNode, _ path: String) throws -> String {
        resolve(try expandingTilde(try nonEmpty(node, path, "a file path"), node, path))
    }

    /// `value` with a leading `~` (alone or before `/`) replaced by the home folder. `~user` is refused: storectl
    /// does not look up other users' home folders.
    private func expandingTilde(_ value: String, _ node: YAMLNode, _ path: String) throws -> String {
        guard value.hasPrefix("~") else { return value }
        guard value == "~" || value.hasPrefix("~/") else {
            throw fail(node, path, "'~user' paths are not supported",
                       hint: "write the folder out in full, or use ~/ for your own home folder")
        }
        guard let home, home.hasPrefix("/") else {
            throw fail(node, path, "cannot expand '~': HOME is not set",
                       hint: "set HOME, or write the path out in full")
        }
        return home + value.dropFirst()
    }

    private func bool(_ node: YAMLNode, _ path: String) throws -> Bool {
        let value = try text(node, path, "true or false")
        switch value {
        case "true", "True", "TRUE": return true
        case "false", "False", "FALSE": return false
        default: throw fail(node, path, "expected true or false, got '\(value)'")
        }
    }

    private func choice(_ node: YAMLNode, _ path: String, _ options: [String]) throws -> String {
        let list = options.joined(separator: ", ")
        let value = try text(node, path, "one of \(list)")
        guard options.contains(value) else {
            throw fail(node, path, "expected one of \(list), got '\(value)'",
                       hint: Suggest.closest(value, in: options).map { "did you mean '\($0)'?" })
        }
        return value
    }

    private func columns(_ node: YAMLNode, _ path: String) throws -> [String] {
        guard let items = node.items else { throw fail(node, path, "expected a list of columns, got \(node.described)",
                                                       hint: "write a list, like [uuid]") }
        guard !items.isEmpty else { throw fail(node, path, "the list of columns is empty") }
        return try items.enumerated().map { index, item in
            try nonEmpty(item, KeyPath.item(path, index), "a column name")
        }
    }

    // MARK: Paths

    /// `path` made absolute against the config file's folder, with `.` and `..` resolved.
    func resolve(_ path: String) -> String {
        ConfigPaths.normalize(path.hasPrefix("/") ? path : directory + "/" + path)
    }

    // MARK: Decoding

    /// Decodes the whole config. A problem inside one store's section is that store's alone: the store is left
    /// out of `stores` and its error kept in `problems`.
    /// - Parameter storeProblems: the errors met while expanding `${VAR}` in each store's section, by store name.
    /// - Throws: `ConfigError` for the first problem in the file's shared part (top-level keys, the stores mapping).
    func decode(_ root: YAMLNode?, storeProblems: [String: ConfigError] = [:]) throws -> Config {
        guard let root else {
            throw ConfigError(displayPath, source, line: 1, column: 1, keyPath: "", "the config is empty",
                              hint: "start with 'version: 1' and a 'stores:' mapping (see docs/config-reference.md)")
        }
        let top = try section(root, "", keys: ConfigSchema.top)
        guard let versionPair = top["version"] else {
            throw missing("version", in: "", at: root.start, example: "version: 1")
        }
        let versionText = try text(versionPair.value, "version", "an integer")
        guard let version = Int(versionText) else {
            throw fail(versionPair.value, "version", "expected an integer, got '\(versionText)'",
                       hint: "write 'version: 1'")
        }
        guard version == 1 else {
            throw fail(versionPair.value, "version", "unsupported version \(version); this storectl reads version 1",
                       hint: "write 'version: 1', or use the storectl release that reads version \(version)")
        }
        guard let storesPair = top["stores"] else {
            throw missing("stores", in: "", at: root.start, example: "stores:")
        }
        let storePairs = try named(storesPair.value, "stores", what: "store")
        guard !storePairs.isEmpty else {
            throw fail(storesPair.value.isImplicitNull ? storesPair.key : storesPair.value, "stores",
                       "no stores are defined", hint: "add a store, like 'notes:' with a 'path:' under it")
        }
        var stores: [StoreSettings] = []
        var problems: [StoreConfigProblem] = []
        var pathOwners: [String: String] = [:]
        for pair in storePairs {
            let name = pair.key.scalar ?? ""
            let path = KeyPath.child("stores", name)
            guard Self.isName(name) else {
                throw fail(pair.key, path, "store names use letters, digits, '-' and '_'",
                           hint: "rename the store; --store uses this name")
            }
            if let problem = storeProblems[name] {
                problems.append(StoreConfigProblem(store: name, error: problem))
                continue
            }
            let store: StoreSettings
            do {
                store = try decodeStore(name: name, key: pair.key, node: pair.value, path: path)
            } catch let error as ConfigError {
                problems.append(StoreConfigProblem(store: name, error: error))
                continue
            }
            // Two stores on one file concern both: it fails the whole file.
            if let owner = pathOwners[store.path] {
                let node = (try? section(pair.value, path, keys: ConfigSchema.store))?["path"]?.value ?? pair.key
                throw fail(node, KeyPath.child(path, "path"), "store '\(owner)' already uses this file (\(store.path))",
                           hint: "each store needs its own SQLite file")
            }
            pathOwners[store.path] = name
            stores.append(store)
        }
        return Config(version: version, stores: stores, path: configPath, problems: problems,
                      storeNames: storePairs.map { $0.key.scalar ?? "" })
    }

    private func decodeStore(name: String, key: YAMLNode, node: YAMLNode, path: String) throws -> StoreSettings {
        guard !node.isNull else {
            throw fail(node, path, "expected a mapping, got nothing", hint: "add 'path: data/\(name).sqlite' under it")
        }
        let keys = try section(node, path, keys: ConfigSchema.store)
        guard let pathPair = keys["path"] else {
            throw missing("path", in: path, at: key.start, example: "path: data/\(name).sqlite")
        }
        var store = StoreSettings(name: name, path: try filePath(pathPair.value, KeyPath.child(path, "path")))
        if let pair = keys["schema"], !pair.value.isNull {
            store.schema = try filePath(pair.value, KeyPath.child(path, "schema"))
        }
        if let pair = keys["mode"] {
            let mode = try choice(pair.value, KeyPath.child(path, "mode"), StoreMode.allCases.map(\.rawValue))
            store.mode = StoreMode(rawValue: mode) ?? .local
        }
        if let pair = keys["history"] {
            store.history = try decodeHistory(pair.value, KeyPath.child(path, "history"))
        }
        if let pair = keys["cloud"], !pair.value.isNull {
            store.cloud = try decodeCloud(pair.value, key: pair.key, KeyPath.child(path, "cloud"))
        }
        if let pair = keys["entities"] {
            let entitiesPath = KeyPath.child(path, "entities")
            for entity in try named(pair.value, entitiesPath, what: "table") {
                let table = entity.key.scalar ?? ""
                store.entities.append(try decodeEntity(table, entity.value, KeyPath.child(entitiesPath, table)))
            }
        }
        if let pair = keys["seed"], !pair.value.isNull {
            store.seed = try decodeSeed(pair.value, key: pair.key, KeyPath.child(path, "seed"))
        }
        if let pair = keys["entities"] {
            try checkEncrypted(store, entities: pair.value, path)
        }
        if store.mode == .cloud, store.cloud == nil, let modePair = keys["mode"] {
            throw fail(modePair.value, KeyPath.child(path, "mode"), "mode cloud needs a cloud: section",
                       hint: "add \(path).cloud with a container and a url, or set mode: local")
        }
        return store
    }

    /// A secret's value (`secret`, `encryption_key`), whether the config holds it literally, and the reference it
    /// was written as.
    private func secret(_ node: YAMLNode, _ path: String) throws -> Secret {
        guard let value = node.scalar else { throw fail(node, path, "expected text, got \(node.described)") }
        let literal = !node.fromReference && !(!expanded && EnvironmentExpansion.hasReference(value))
        let range = node.sourceRange
        let written = range.lowerBound >= 0 && range.upperBound <= source.bytes.count
            ? String(decoding: source.bytes[range], as: UTF8.self) : value
        return Secret(value: value, isLiteral: literal, reference: literal ? nil : Secret.reference(writtenAs: written))
    }

    /// Encrypted columns are never a `unique:` key (its values are compared across devices and name records, which
    /// the server would then read). A missing passphrase is refused where the zone's key is opened (exit 77), so that
    /// commands that never open it (`status`, `history`) work without it.
    private func checkEncrypted(_ store: StoreSettings, entities node: YAMLNode, _ path: String) throws {
        for entity in store.entities {
            guard let encrypted = entity.encrypted, !encrypted.isEmpty else { continue }
            let entityPath = KeyPath.child(KeyPath.child(path, "entities"), entity.name)
            let encryptedPath = KeyPath.child(entityPath, "encrypted")
            if let clash = encrypted.first(where: { entity.unique?.contains($0) ?? false }) {
                throw fail(node, encryptedPath, "column '\(clash)' is both encrypted and part of the unique: key",
                           hint: "a unique: key is compared across devices and names records, so the server would "
                               + "read it; remove '\(clash)' from \(encryptedPath) or from \(KeyPath.child(entityPath, "unique"))")
            }
        }
    }

    private func decodeHistory(_ node: YAMLNode, _ path: String) throws -> HistorySettings {
        let keys = try section(node, path, keys: ConfigSchema.history)
        var history = HistorySettings()
        if let pair = keys["tracking"] {
            let trackingPath = KeyPath.child(path, "tracking")
            history.tracking = try bool(pair.value, trackingPath)
            if !history.tracking {
                throw fail(pair.value, trackingPath, "history tracking cannot be turned off",
                           hint: "history tracking is what lets data survive a switch between local and cloud mode; "
                               + "remove the line or write 'tracking: true'")
            }
        }
        if let pair = keys["author"] {
            let authorPath = KeyPath.child(path, "author")
            history.author = try nonEmpty(pair.value, authorPath, "an author name")
            if history.author == "cloud-import" {
                throw fail(pair.value, authorPath, "'cloud-import' is reserved for changes that came from the cloud",
                           hint: "pick another name, like 'app'")
            }
            if ["dedupe", "import-cascade", "rescan"].contains(history.author) {
                throw fail(pair.value, authorPath, "'\(history.author)' is reserved for storectl's own changes",
                           hint: "pick another name, like 'app'")
            }
        }
        if let pair = keys["retention"], !pair.value.isNull {
            let retentionPath = KeyPath.child(path, "retention")
            let value = try text(pair.value, retentionPath, "a duration")
            guard let spec = DurationSpec(value), spec.seconds > 0 else {
                throw fail(pair.value, retentionPath, "expected a duration like 30d, 12h or 15m, got '\(value)'",
                           hint: "units: ms, s, m, h, d, w; at most \(DurationSpec.maximumText) (100 years)")
            }
            history.retention = spec
        }
        return history
    }

    private func decodeCloud(_ node: YAMLNode, key: YAMLNode, _ path: String) throws -> CloudSettings {
        let keys = try section(node, path, keys: ConfigSchema.cloud)
        guard let containerPair = keys["container"] else {
            throw missing("container", in: path, at: key.start, example: "container: iCloud.com.example.notes")
        }
        guard let urlPair = keys["url"] else {
            throw missing("url", in: path, at: key.start, example: "url: file:cloud/notes.container")
        }
        let containerPath = KeyPath.child(path, "container")
        let container = try nonEmpty(containerPair.value, containerPath, "a container id")
        if !skipsFormatCheck(container), !Self.isContainerID(container) {
            throw fail(containerPair.value, containerPath, "'\(container)' is not a container id",
                       hint: "use reverse-DNS style, like iCloud.com.example.notes "
                           + "(letters, digits and '-', separated by dots)")
        }
        let url = try decodeURL(urlPair.value, KeyPath.child(path, "url"))
        var cloud = CloudSettings(container: container, url: url)
        if let pair = keys["replica_url"], !pair.value.isNull {
            cloud.replicaURL = try decodeReplicaURL(pair.value, KeyPath.child(path, "replica_url"), url: url)
        }
        if let pair = keys["create_if_missing"] {
            cloud.createIfMissing = try bool(pair.value, KeyPath.child(path, "create_if_missing"))
        }
        if let pair = keys["zone"] {
            cloud.zone = try nonEmpty(pair.value, KeyPath.child(path, "zone"), "a zone name")
        }
        if let pair = keys["account"], !pair.value.isNull {
            let accountPath = KeyPath.child(path, "account")
            let account = try nonEmpty(pair.value, accountPath, "an account id")
            if !skipsFormatCheck(account), let problem = AccountID.problem(account) {
                throw fail(pair.value, accountPath, problem, hint: AccountID.rule)
            }
            cloud.account = account
        }
        if let pair = keys["secret"], !pair.value.isNull {
            cloud.secret = try secret(pair.value, KeyPath.child(path, "secret"))
        }
        if let pair = keys["encryption_key"], !pair.value.isNull {
            cloud.encryptionKey = try secret(pair.value, KeyPath.child(path, "encryption_key"))
        }
        if let pair = keys["merge_policy"] {
            let value = try choice(pair.value, KeyPath.child(path, "merge_policy"),
                                   MergePolicySetting.allCases.map(\.rawValue))
            cloud.mergePolicy = MergePolicySetting(rawValue: value) ?? .propertyLocalWins
        }
        if let pair = keys["max_delete_fraction"] {
            let fractionPath = KeyPath.child(path, "max_delete_fraction")
            let value = try text(pair.value, fractionPath, "a number between 0 and 1")
            guard let fraction = Double(value), fraction >= 0, fraction <= 1 else {
                throw fail(pair.value, fractionPath, "expected a number between 0 and 1, got '\(value)'",
                           hint: "0.5 stops an export that would delete more than half of the zone")
            }
            cloud.maxDeleteFraction = fraction
        }
        if let pair = keys["max_delete_count"] {
            let countPath = KeyPath.child(path, "max_delete_count")
            let value = try text(pair.value, countPath, "a whole number of records")
            guard let count = Int(value), count >= 0, count <= 1_000_000_000 else {
                throw fail(pair.value, countPath, "expected a whole number of records from 0 to 1000000000, got '\(value)'",
                           hint: "100 lets an export delete up to 100 records whatever the fraction")
            }
            cloud.maxDeleteCount = count
        }
        if let pair = keys["max_record_size"] {
            let sizePath = KeyPath.child(path, "max_record_size")
            let value = try text(pair.value, sizePath, "a size in bytes")
            guard let size = Self.byteSize(value), size >= 1024, size <= 1 << 30 else {
                throw fail(pair.value, sizePath, "expected a size from 1KiB to 1GiB (bytes, or with KB, MB, KiB or MiB), "
                               + "got '\(value)'",
                           hint: "1MB is CloudKit's own limit; e.g. max_record_size: 4MB")
            }
            cloud.maxRecordSize = size
        }
        if let pair = keys["remote_change_notifications"] {
            cloud.remoteChangeNotifications = try bool(pair.value, KeyPath.child(path, "remote_change_notifications"))
        }
        if let pair = keys["on_remote_change"], !pair.value.isNull {
            let hookPath = KeyPath.child(path, "on_remote_change")
            let command = try nonEmpty(pair.value, hookPath, "a shell command")
            guard !command.utf8.contains(0) else {
                throw fail(pair.value, hookPath, "the command holds a NUL character",
                           hint: "write the command as plain text, like 'notify-send synced'")
            }
            cloud.onRemoteChange = command
        }
        if let pair = keys["on_remote_change_timeout"] {
            let timeoutPath = KeyPath.child(path, "on_remote_change_timeout")
            let value = try text(pair.value, timeoutPath, "a duration")
            guard let spec = DurationSpec(value), spec.seconds > 0, spec.seconds <= 86400 else {
                throw fail(pair.value, timeoutPath, "expected a duration from 1ms to 1d, like 30s or 2m, got '\(value)'",
                           hint: "units: ms, s, m, h, d")
            }
            cloud.onRemoteChangeTimeout = spec
        }
        return cloud
    }

    /// `cloud.url`: a `file:` URL (its path resolved), a `postgres://` URI or libpq `keyword=value` settings, each
    /// checked here so that a malformed one is a config error with a position, never a failed connection later.
    private func decodeURL(_ node: YAMLNode, _ path: String) throws -> String {
        let url = try nonEmpty(node, path, "a URL")
        if skipsFormatCheck(url) { return url }
        let hint = "use file:PATH (a SQLite container file), postgres://USER@HOST/DATABASE, or libpq settings "
            + "like 'host=HOST dbname=DATABASE'"
        if url.hasPrefix("file:") {
            var rest = Substring(url.dropFirst(5))
            if rest.hasPrefix("//") {
                rest = rest.dropFirst(2)
                if rest.hasPrefix("localhost/") { rest = rest.dropFirst("localhost".count) }
                guard rest.hasPrefix("/") else {
                    throw fail(node, path, "a file: URL names a local path, not a host",
                               hint: "write file:/absolute/path or file:relative/path")
                }
            }
            guard !rest.isEmpty else { throw fail(node, path, "the file: URL has no path", hint: hint) }
            guard let decoded = PercentEncoding.decoded(String(rest)) else {
                throw fail(node, path, "the file: URL has a malformed %-escape",
                           hint: "write %25 for a literal '%', or write the path without escapes")
            }
            try refuseControlCharacters(decoded, node, path)
            // The path stays %-encoded as written: the backend decodes it when it opens the file.
            return "file:" + resolve(try expandingTilde(String(rest), node, path))
        }
        if PostgresConnectionString.isURI(url) || PostgresConnectionString.isKeywordValue(url) {
            if let problem = PostgresConnectionString.problem(in: url) {
                throw fail(node, path, Redaction.text(problem.message), hint: problem.hint)
            }
            return url
        }
        if let colon = url.firstIndex(of: ":"), Self.isScheme(url[..<colon]) {
            throw fail(node, path, "unsupported URL scheme '\(url[..<colon])'", hint: hint)
        }
        throw fail(node, path, "expected a URL, got '\(Redaction.text(url))'", hint: hint)
    }

    /// `cloud.replica_url`: a PostgreSQL connection string, next to a PostgreSQL `cloud.url` only (a container
    /// file has no standby).
    private func decodeReplicaURL(_ node: YAMLNode, _ path: String, url: String) throws -> String {
        let replica = try nonEmpty(node, path, "a PostgreSQL URL")
        if !skipsFormatCheck(url), !(PostgresConnectionString.isURI(url) || PostgresConnectionString.isKeywordValue(url)) {
            throw fail(node, path, "replica_url needs a PostgreSQL cloud.url, and cloud.url is "
                           + "'\(Redaction.text(url))'",
                       hint: "remove replica_url: a container file has no standby to read from")
        }
        if skipsFormatCheck(replica) { return replica }
        guard PostgresConnectionString.isURI(replica) || PostgresConnectionString.isKeywordValue(replica) else {
            throw fail(node, path, "expected a PostgreSQL URL, got '\(Redaction.text(replica))'",
                       hint: "write the hot standby's URL, like postgres://USER@STANDBY-HOST/DATABASE")
        }
        if let problem = PostgresConnectionString.problem(in: replica) {
            throw fail(node, path, Redaction.text(problem.message), hint: problem.hint)
        }
        return replica
    }

    private func decodeEntity(_ table: String, _ node: YAMLNode, _ path: String) throws -> EntitySettings {
        guard !table.isEmpty else { throw fail(node, path, "a table name must not be empty") }
        let keys = try section(node, path, keys: ConfigSchema.entity)
        var entity = EntitySettings(name: table)
        if let pair = keys["unique"], !pair.value.isNull {
            entity.unique = try columns(pair.value, KeyPath.child(path, "unique"))
        }
        if let pair = keys["keep"], !pair.value.isNull {
            let keepPath = KeyPath.child(path, "keep")
            let value = try text(pair.value, keepPath, "a keep rule")
            guard let rule = KeepRule(value) else {
                throw fail(pair.value, keepPath, "expected newest(COLUMN), oldest(COLUMN) or first, got '\(value)'",
                           hint: "newest(updated_at) keeps the row with the greatest updated_at")
            }
            guard entity.unique != nil else {
                throw fail(pair.value, keepPath, "keep needs a unique key to choose among duplicates",
                           hint: "add 'unique: [column]' to \(path), or remove keep")
            }
            entity.keep = rule
        }
        if let pair = keys["tombstone"], !pair.value.isNull {
            entity.tombstone = try columns(pair.value, KeyPath.child(path, "tombstone"))
        }
        if let pair = keys["encrypted"], !pair.value.isNull {
            let encryptedPath = KeyPath.child(path, "encrypted")
            let list = try columns(pair.value, encryptedPath)
            if let bad = list.first(where: { $0.contains("\"") }) {
                throw fail(pair.value, encryptedPath, "column '\(bad)' holds a double quote, which an encrypted "
                           + "column's name may not", hint: "rename the column, or leave it unencrypted")
            }
            entity.encrypted = list
        }
        return entity
    }

    private func decodeSeed(_ node: YAMLNode, key: YAMLNode, _ path: String) throws -> SeedSettings {
        let keys = try section(node, path, keys: ConfigSchema.seed)
        guard let namePair = keys["name"] else {
            throw missing("name", in: path, at: key.start, example: "name: default-data-v1")
        }
        var seed = SeedSettings(name: try nonEmpty(namePair.value, KeyPath.child(path, "name"), "a seed name"))
        if let pair = keys["sql"], !pair.value.isNull {
            seed.sql = try filePath(pair.value, KeyPath.child(path, "sql"))
        }
        if let pair = keys["rows"] {
            let rowsPath = KeyPath.child(path, "rows")
            for table in try named(pair.value, rowsPath, what: "table") {
                let tablePath = KeyPath.child(rowsPath, table.key.scalar ?? "")
                var rows: [[(column: String, value: String?)]] = []
                if !table.value.isNull {
                    guard let items = table.value.items else {
                        throw fail(table.value, tablePath, "expected a list of rows, got \(table.value.described)",
                                   hint: "write each row as '- column: value'")
                    }
                    for (index, item) in items.enumerated() {
                        let rowPath = KeyPath.item(tablePath, index)
                        guard let cells = item.pairs else {
                            throw fail(item, rowPath, "expected a row (column: value), got \(item.described)")
                        }
                        rows.append(try cells.map { cell in
                            let column = cell.key.scalar ?? ""
                            let cellPath = KeyPath.child(rowPath, column)
                            if cell.value.isNull { return (column, nil) }
                            guard let value = cell.value.scalar else {
                                throw fail(cell.value, cellPath, "expected a value, got \(cell.value.described)")
                            }
                            return (column, value)
                        })
                    }
                }
                seed.rows.append((table: table.key.scalar ?? "", rows: rows))
            }
        }
        return seed
    }

    // MARK: Formats

    /// Whether a value still holds an unexpanded `${VAR}` (with --no-expand-env), so its format cannot be checked.
    private func skipsFormatCheck(_ value: String) -> Bool {
        !expanded && EnvironmentExpansion.hasReference(value)
    }

    /// Store names: letters, digits, `-` and `_`, not starting with `-`.
    static func isName(_ name: String) -> Bool {
        guard let first = name.first, first != "-" else { return false }
        return name.allSatisfy { ($0.isASCII && ($0.isLetter || $0.isNumber)) || $0 == "-" || $0 == "_" }
    }

    /// Reverse-DNS style: at least two dot-separated labels of letters, digits and `-`; the first starts with a
    /// letter; no label starts or ends with `-`.
    static func isContainerID(_ id: String) -> Bool {
        let labels = id.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2, let first = labels.first?.first, first.isASCII, first.isLetter else { return false }
        return labels.allSatisfy { label in
            !label.isEmpty && !label.hasPrefix("-") && !label.hasSuffix("-")
                && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        }
    }

    private static func isScheme(_ text: Substring) -> Bool {
        guard let first = text.first, first.isASCII, first.isLetter else { return false }
        return text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "+.-".contains($0)) }
    }
}

/// Path helpers shared by the loader and the editor.
enum ConfigPaths {
    /// `path` with `.`, `..` and repeated slashes resolved (it must be absolute).
    static func normalize(_ path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/", omittingEmptySubsequences: true) {
            if part == "." { continue }
            if part == ".." {
                if !parts.isEmpty { parts.removeLast() }
                continue
            }
            parts.append(part)
        }
        return "/" + parts.joined(separator: "/")
    }

    /// `path` made absolute against `directory`.
    static func absolute(_ path: String, in directory: String) -> String {
        normalize(path.hasPrefix("/") ? path : directory + "/" + path)
    }
}
