import Foundation
import XCTest

/// One end-to-end project in a temporary folder: a config built from a few parameters, the notes schema written
/// once, the built `storectl` run with `run(_:expect:)`, and any store read or written with the real `sqlite3`
/// (`sql`). The end-to-end tests use it instead of each writing its own YAML builder and run wrapper.
///
///     let p = try E2EProject()
///     try p.writeSchema()
///     try p.writeConfig(["a", "b"].map { E2EProject.Store($0, cloud: .file("iCloud.com.example.x")) })
///     try p.run(["--store", "a", "mode", "cloud"])
///     try p.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one')")
public final class E2EProject {
    /// The notes table most tests sync.
    public static let notesSchema = "CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT);\n"

    /// The `cloud:` section of a store.
    public struct Cloud {
        public var container: String
        public var url: String
        public var account: String? = "demo"
        /// The YAML value of `secret:`, written as is (an environment reference, usually).
        public var secret: String? = "${STORECTL_SECRET:-demo-secret}"
        public var createIfMissing = true
        /// More `key: value` lines of the section, in order (`merge_policy: server-wins`).
        public var extra: [String] = []

        public init(container: String, url: String, account: String? = "demo",
                    secret: String? = "${STORECTL_SECRET:-demo-secret}", createIfMissing: Bool = true,
                    extra: [String] = [])
        {
            self.container = container
            self.url = url
            self.account = account
            self.secret = secret
            self.createIfMissing = createIfMissing
            self.extra = extra
        }

        /// A shared container file, `file:cloud/shared.container` unless named.
        public static func file(_ container: String, url: String = "file:cloud/shared.container",
                                secret: String = "${STORECTL_SECRET:-demo-secret}") -> Cloud
        {
            Cloud(container: container, url: url, secret: secret)
        }
    }

    /// One store of the config.
    public struct Store {
        public var name: String
        /// `path:`; `NAME.sqlite` unless given.
        public var path: String
        /// `schema:`, or nil for none.
        public var schema: String?
        /// YAML lines between `schema:` and `cloud:`, indented as the store's keys (`entities:` blocks, `seed:`).
        public var before: [String]
        public var cloud: Cloud?
        /// YAML lines after the `cloud:` section, indented as the store's keys.
        public var after: [String]

        public init(_ name: String, path: String? = nil, schema: String? = "schema.sql", before: [String] = [],
                    cloud: Cloud? = nil, after: [String] = [])
        {
            self.name = name
            self.path = path ?? "\(name).sqlite"
            self.schema = schema
            self.before = before
            self.cloud = cloud
            self.after = after
        }
    }

    public let dir: TempDirectory
    /// The config's path inside the folder; `run` adds `--config` when it is not `config.yaml`.
    public let configFile: String
    /// Variables every `run` adds to the child's environment.
    public var environment: [String: String] = [:]
    /// The stores of the last `writeConfig`.
    public private(set) var stores: [Store] = []

    public init(label: String = "storectl-e2e", configFile: String = "config.yaml") throws {
        dir = try TempDirectory(label)
        self.configFile = configFile
    }

    /// The config text for `stores`: `version: 1`, then each store's block.
    public static func yaml(_ stores: [Store]) -> String {
        var text = "version: 1\nstores:\n"
        for store in stores {
            text += "  \(store.name):\n    path: \(store.path)\n"
            if let schema = store.schema { text += "    schema: \(schema)\n" }
            for line in store.before { text += "    \(line)\n" }
            if let cloud = store.cloud {
                text += "    cloud:\n      container: \(cloud.container)\n      url: \(cloud.url)\n"
                if cloud.createIfMissing { text += "      create_if_missing: true\n" }
                if let account = cloud.account { text += "      account: \(account)\n" }
                if let secret = cloud.secret { text += "      secret: \(secret)\n" }
                for line in cloud.extra { text += "      \(line)\n" }
            }
            for line in store.after { text += "    \(line)\n" }
        }
        return text
    }

    /// Writes the config for `stores` and returns its text.
    @discardableResult
    public func writeConfig(_ stores: [Store]) throws -> String {
        self.stores = stores
        let text = Self.yaml(stores)
        try dir.write(configFile, text)
        return text
    }

    /// Writes the schema file the stores name (`schema.sql` beside the config unless given).
    public func writeSchema(_ sql: String = E2EProject.notesSchema, to name: String = "schema.sql") throws {
        try dir.write(name, sql)
    }

    /// The absolute path of a store file, from the last config (relative paths are taken from the config's folder).
    public func storePath(_ store: String) -> String {
        let path = stores.first { $0.name == store }?.path ?? "\(store).sqlite"
        if path.hasPrefix("/") { return path }
        let folder = (configFile as NSString).deletingLastPathComponent
        return ((dir.file(folder) as NSString).appendingPathComponent(path) as NSString).standardizingPath
    }

    /// Runs the built `storectl` in the folder and checks its exit code (nil: any).
    @discardableResult
    public func run(_ args: [String], expect: Int32? = 0, env: [String: String] = [:], stdin: String? = nil,
                    file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult
    {
        let config = configFile == "config.yaml" ? [] : ["--config", configFile]
        let r = try Binary.storectl(config + args, in: dir.path, environment: environment.merging(env) { $1 },
                                    stdin: stdin)
        if let expect {
            XCTAssertEqual(r.status, expect, "storectl \(args.joined(separator: " "))\n\(r)", file: file, line: line)
        }
        return r
    }

    /// Runs `statement` on a store file with the real `sqlite3` shell (a writer that knows nothing of storectl)
    /// and returns what it printed. It waits up to 10 s for a lock a storectl process holds (a watcher's round).
    @discardableResult
    public func sql(_ store: String, _ statement: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> String
    {
        let r = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 10000", storePath(store), statement],
                               in: dir.path)
        XCTAssertEqual(r.status, 0, "\(statement)\n\(r)", file: file, line: line)
        return r.stdout
    }
}
