import Foundation
import StoreBase
import StoreSQLite
@testable import StoreControl
import TestSupport
import XCTest

/// The watch lock of a store's identity: one holder per store id, whatever path the store file is reached by.
final class WatchIdentityLockTests: XCTestCase {
    /// A store file with a store id in its meta, as `storectl init` leaves it.
    func storeFile(_ dir: TempDirectory, _ name: String, id: String) throws -> String {
        let path = dir.file(name)
        let db = try Connection(path: path, mode: .readWriteCreate, wal: false)
        try db.execute("CREATE TABLE _storectl_meta(key TEXT PRIMARY KEY, value TEXT)")
        try db.run("INSERT INTO _storectl_meta VALUES ('store_id', ?)", [id])
        return path
    }

    func testTheSameStoreByAnotherPathIsRefusedAndAMoveKeepsTheIdentity() throws {
        let dir = try TempDirectory()
        let env = ["XDG_RUNTIME_DIR": dir.path]
        let id = UUID().uuidString.lowercased()
        let store = try storeFile(dir, "a.sqlite", id: id)
        XCTAssertEqual(link(store, dir.file("hard.sqlite")), 0)
        var first: WatchLock? = try WatchLock.acquire(store: "a", storePath: store, environment: env)
        XCTAssertEqual(first?.storeID, id)
        let idLock = WatchLock.path(forStoreID: id, environment: env)
        XCTAssertEqual(idLock, dir.file("storectl/\(id).lock"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: idLock))
        XCTAssertThrowsError(try WatchLock.acquire(store: "a", storePath: dir.file("hard.sqlite"), environment: env)) {
            let error = $0 as? WatchLockError
            XCTAssertEqual(error?.exitCode, .tempFail)
            XCTAssertEqual(error?.summary.hasPrefix("store 'a' is already served by storectl watch (pid \(getpid())"),
                           true, "\($0)")
            XCTAssertEqual(error?.details.first?.contains("(id \(id))"), true, "\($0)")
        }
        // The refused watcher left no lock next to the hard link.
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("hard.sqlite.watch.lock")))
        // status through the hard link names the watcher, by its identity.
        XCTAssertEqual(WatchLock.holder(storePath: dir.file("hard.sqlite"), environment: env)?.pid, getpid())

        // The store moves: the watcher takes the new path, keeping its identity lock.
        let moved = try storeFile(dir, "moved.sqlite", id: id)
        let following = try WatchLock.acquire(store: "a", storePath: moved, environment: env, keeping: first)
        first = nil
        XCTAssertFalse(FileManager.default.fileExists(atPath: store + ".watch.lock"))
        XCTAssertTrue(FileManager.default.fileExists(atPath: idLock))
        XCTAssertThrowsError(try WatchLock.acquire(store: "a", storePath: store, environment: env))
        XCTAssertEqual(WatchLock.holder(storePath: moved, environment: env)?.pid, getpid())
        _ = following
    }

    func testAStoreWithoutAnIdHasOnlyThePathLock() throws {
        let dir = try TempDirectory()
        let env = ["XDG_RUNTIME_DIR": dir.path]
        let lock = try WatchLock.acquire(store: "s", storePath: dir.file("s.sqlite"), environment: env)
        XCTAssertNil(lock.storeID)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("storectl")))
    }

    func testARuntimeFolderOthersCanWriteIsRefused() throws {
        let dir = try TempDirectory()
        let store = try storeFile(dir, "a.sqlite", id: UUID().uuidString.lowercased())
        XCTAssertEqual(mkdir(dir.file("storectl"), 0o777), 0)
        XCTAssertEqual(chmod(dir.file("storectl"), 0o777), 0)
        XCTAssertThrowsError(try WatchLock.acquire(store: "a", storePath: store,
                                                   environment: ["XDG_RUNTIME_DIR": dir.path])) {
            XCTAssertEqual(($0 as? WatchLockError)?.exitCode, .cantCreate, "\($0)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: store + ".watch.lock"))
    }
}
