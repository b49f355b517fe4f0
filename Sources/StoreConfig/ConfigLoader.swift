import FoundationEssentials
import StoreBase
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A loaded config together with the document it came from (values expanded), for `config show`.
public struct LoadedConfig: Sendable {
    /// The decoded, defaulted and validated config.
    public var config: Config
    /// The parsed document, with `${VAR}` references expanded in scalar values (unless expansion is off).
    public var document: YAMLDocument
}

/// Reads a config file: libyaml events -> nodes with marks -> `${VAR}` expansion in scalars -> typed decode ->
/// defaults -> validation.
public enum ConfigLoader {
    /// Loads and validates the config at `path`.
    ///
    ///     let config = try ConfigLoader.load(path: "/srv/app/config.yaml", displayPath: "config.yaml",
    ///                                        environment: ProcessInfo.processInfo.environment)
    ///
    /// - Parameters:
    ///   - path: the path of the file (a relative path resolves against the current directory).
    ///   - displayPath: the path as the user wrote it, used in messages (`config.yaml:12:11: error: ...`).
    ///   - environment: the variables `${VAR}` references expand from.
    ///   - expandEnvironment: false leaves `${VAR}` text as it is (`--no-expand-env`).
    ///   - isolateStoreErrors: true makes an error inside one store's section (an unset variable, a bad URL, an
    ///     unknown key) that store's alone: the store goes to `Config.problems`, and `Config.store(named:)` throws
    ///     its error when asked for it. False throws it here, like any other error.
    /// - Throws: a `DiagnosedError`: exit 66 when the file is missing, 77 when it cannot be read, 78 for anything
    ///   wrong inside it, with `file:line:col`, the key path, the source line and a caret.
    public static func load(path: String, displayPath: String? = nil, environment: [String: String],
                            expandEnvironment: Bool = true, isolateStoreErrors: Bool = false) throws -> Config
    {
        try loadDetailed(path: path, displayPath: displayPath, environment: environment,
                         expandEnvironment: expandEnvironment, isolateStoreErrors: isolateStoreErrors).config
    }

    /// Loads the config at `path`, also returning its parsed document.
    /// - Throws: as `load(path:displayPath:environment:expandEnvironment:isolateStoreErrors:)`.
    public static func loadDetailed(path: String, displayPath: String? = nil, environment: [String: String],
                                    expandEnvironment: Bool = true, isolateStoreErrors: Bool = false) throws
        -> LoadedConfig
    {
        let display = displayPath ?? path
        let absolute = ConfigPaths.absolute(path, in: FileManager.default.currentDirectoryPath)
        let bytes = try readFile(absolute, displayPath: display)
        var loaded = try load(bytes: bytes, path: absolute, displayPath: display, environment: environment,
                              expandEnvironment: expandEnvironment, isolateStoreErrors: isolateStoreErrors)
        let literal = loaded.config.stores.filter { $0.cloud?.secret?.isLiteral == true }
            .map { "stores.\($0.name).cloud.secret" }
            + loaded.config.stores.filter { $0.cloud?.encryptionKey?.isLiteral == true }
            .map { "stores.\($0.name).cloud.encryption_key" }
        if !literal.isEmpty, isReadableByOthers(absolute) {
            // One warning for the file, however many stores hold a literal secret.
            let keys = literal.count == 1 ? literal[0] + " is"
                : literal.dropLast().joined(separator: ", ") + " and " + (literal.last ?? "") + " are"
            loaded.config.warnings.append(
                "\(keys) written in \(display), which other users can read; "
                    + "use 'secret: ${VARIABLE}' or run 'chmod 600 \(display)'")
        }
        return loaded
    }

    /// Loads a config from `bytes` without touching the file system (`path` is where it would live).
    /// - Throws: `ConfigError` (exit 78) for anything wrong in the text (outside the stores' own sections only,
    ///   with `isolateStoreErrors`).
    public static func load(bytes: [UInt8], path: String, displayPath: String, environment: [String: String],
                            expandEnvironment: Bool = true, isolateStoreErrors: Bool = false) throws -> LoadedConfig
    {
        var document = try YAMLParser.parse(bytes, displayPath: displayPath)
        var storeProblems: [String: ConfigError] = [:]
        if expandEnvironment, let root = document.root {
            (document.root, storeProblems) = try expandValues(in: root, environment: environment,
                                                              source: document.source, displayPath: displayPath)
        }
        let decoder = ConfigDecoder(source: document.source, displayPath: displayPath, configPath: path,
                                    expanded: expandEnvironment, home: environment["HOME"])
        let config = try decoder.decode(document.root, storeProblems: storeProblems)
        if !isolateStoreErrors, let first = config.problems.first { throw first.error }
        return LoadedConfig(config: config, document: document)
    }

    /// `root` with `${VAR}` expanded in every scalar value. A reference that fails inside one store's section is
    /// that store's problem (its section stays as written); anywhere else it fails the whole file.
    /// - Throws: `ConfigError` for a failed reference outside the stores' sections.
    private static func expandValues(in root: YAMLNode, environment: [String: String], source: SourceText,
                                     displayPath: String) throws -> (YAMLNode, [String: ConfigError])
    {
        func expand(_ node: YAMLNode, _ path: String) throws -> YAMLNode {
            try EnvironmentExpansion.expandValues(in: node, path: path, environment: environment, source: source,
                                                  displayPath: displayPath)
        }
        guard let pairs = root.pairs else { return (try expand(root, ""), [:]) }
        var problems: [String: ConfigError] = [:]
        var expandedRoot = root
        expandedRoot.kind = .mapping(try pairs.map { pair in
            let key = pair.key.scalar ?? ""
            guard key == "stores", let stores = pair.value.pairs else {
                return YAMLPair(key: pair.key, value: try expand(pair.value, key))
            }
            var value = pair.value
            value.kind = .mapping(stores.map { store in
                let name = store.key.scalar ?? ""
                do {
                    return YAMLPair(key: store.key, value: try expand(store.value, KeyPath.child("stores", name)))
                } catch {
                    if let error = error as? ConfigError { problems[name] = error }
                    return store
                }
            })
            return YAMLPair(key: pair.key, value: value)
        })
        return (expandedRoot, problems)
    }

    /// The largest config file storectl reads: far above any real config (a store takes a few hundred bytes), and
    /// small enough that a wrong path (a disk image, a log) is refused at once rather than read into memory.
    public static let maximumSize = 1 << 20

    /// The bytes of the config file.
    /// - Throws: `StoreError` 66 (missing, a folder), 77 (permission denied), 74 (read error), or 78 when it is
    ///   not a regular file (a FIFO, a device such as /dev/zero) or is larger than `maximumSize`.
    static func readFile(_ path: String, displayPath: String) throws -> [UInt8] {
        // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            if code == EACCES || code == EPERM {
                throw StoreError(.noPermission, "cannot read config file \(displayPath): permission denied",
                                 hint: "check the file's permissions (ls -l \(displayPath))")
            }
            if code == ENOENT || code == ENOTDIR {
                throw StoreError(.noInput, "config file \(displayPath) not found",
                                 hint: "create it (see docs/config-reference.md), or point --config or "
                                     + "STORECTL_CONFIG at it")
            }
            throw StoreError(.noInput, "cannot open config file \(displayPath): \(AtomicFile.errnoText())")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw StoreError(.ioError, "cannot read config file \(displayPath): \(AtomicFile.errnoText())")
        }
        let type = st.st_mode & S_IFMT
        if type == S_IFDIR {
            throw StoreError(.noInput, "\(displayPath) is a folder, not a config file",
                             hint: "pass the YAML file itself with --config")
        }
        guard type == S_IFREG else {
            let what = type == S_IFIFO ? "a pipe" : type == S_IFCHR ? "a character device"
                : type == S_IFBLK ? "a block device" : type == S_IFSOCK ? "a socket" : "not a regular file"
            throw StoreError(.config, "\(displayPath) is \(what), not a config file",
                             hint: "pass a regular YAML file with --config (storectl does not read a config from "
                                 + "a pipe or a device)")
        }
        let tooLarge = StoreError(.config, "\(displayPath) is larger than \(maximumSize / 1024) KiB, the most a "
                                      + "config file may hold",
                                  hint: "check that --config names the YAML config, not another file")
        guard Int(st.st_size) <= maximumSize else { throw tooLarge }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return read(fd, base, raw.count)
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError(.ioError, "cannot read config file \(displayPath): \(AtomicFile.errnoText())")
            }
            if n == 0 { break }
            bytes += chunk[0..<n]
            // The file may grow while it is read.
            if bytes.count > maximumSize { throw tooLarge }
        }
        return bytes
    }

    /// Whether the group or other users may read the file.
    static func isReadableByOthers(_ path: String) -> Bool {
        var st = stat()
        guard stat(path, &st) == 0 else { return false }
        return st.st_mode & 0o044 != 0
    }
}
