import Foundation
import StoreBase
import StoreConfig
import StoreSQLite

/// One configured store, opened: the entry point of the storectl library.
///
///     let config = try ConfigLoader.load(path: "config.yaml", environment: ProcessInfo.processInfo.environment)
///     let store = try StoreHandle(config: config, storeName: "notes")
public final class StoreHandle {
    /// The whole config the store came from.
    public let config: Config
    /// This store's settings.
    public let settings: StoreSettings
    private var connection: Connection?

    /// Picks the store `storeName` (or the only one) from `config`. The file is opened on first use.
    /// - Throws: `StoreError` (exit 64) when the store name is unknown.
    public init(config: Config, storeName: String?) throws {
        self.config = config
        self.settings = try config.store(named: storeName)
    }

    /// Whether the store file exists.
    public var exists: Bool { FileManager.default.fileExists(atPath: settings.path) }

    /// The open connection to the store file, opened on first use.
    ///
    /// - Parameter create: create the file (and its folder) when missing; otherwise a missing file is exit 66.
    /// - Throws: `StoreError` or `SQLiteError`.
    public func database(create: Bool = false) throws -> Connection {
        if let connection { return connection }
        let path = settings.path
        if !FileManager.default.fileExists(atPath: path) {
            guard create else {
                throw StoreError(.noInput, "store '\(settings.name)': \(path) does not exist",
                                 hint: "run 'storectl init --store \(settings.name)' to create it")
            }
            let dir = (path as NSString).deletingLastPathComponent
            do {
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            } catch {
                throw StoreError(.cantCreate, "cannot create the folder \(dir) for store '\(settings.name)'",
                                 hint: "check the permissions of its parent folder")
            }
        }
        do {
            let db = try Connection(path: path, mode: create ? .readWriteCreate : .readWrite)
            connection = db
            return db
        } catch let error as SQLiteError {
            if error.isNotADatabase {
                throw StoreError(.dataError, "store '\(settings.name)': \(path) is not a SQLite database (\(error.message))",
                                 hint: "check stores.\(settings.name).path in \(config.path); the file was not changed")
            }
            if error.isReadOnly || error.isCantOpen {
                throw StoreError(error.isReadOnly ? .noPermission : .cantCreate,
                                 "store '\(settings.name)': cannot open \(path) for writing (\(error.message))",
                                 hint: "check the permissions of the file and its folder")
            }
            throw error
        }
    }

    /// Closes the connection; the next `database()` opens it again.
    public func close() { connection = nil }
}
