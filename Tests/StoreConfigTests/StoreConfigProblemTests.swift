import Foundation
import StoreBase
@testable import StoreConfig
import XCTest

/// An error inside one store's section is that store's alone when the loader isolates store errors.
final class StoreConfigProblemTests: XCTestCase {
    private let text = """
        version: 1
        stores:
          journal:
            path: journal.sqlite
          notes:
            path: notes.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: file:notes.container
              secret: ${NOTES_PG_PASSWORD}
          diary:
            path: diary.sqlite
            mdoe: local

        """

    private func load(_ text: String, isolate: Bool, environment: [String: String] = [:]) throws -> Config {
        try ConfigLoader.load(bytes: Array(text.utf8), path: "/srv/config.yaml", displayPath: "config.yaml",
                              environment: environment, isolateStoreErrors: isolate).config
    }

    func testEachBrokenStoreKeepsItsOwnErrorAndTheOthersLoad() throws {
        let config = try load(text, isolate: true)
        XCTAssertEqual(config.stores.map(\.name), ["journal"])
        XCTAssertEqual(config.storeNames, ["journal", "notes", "diary"])
        XCTAssertEqual(config.problems.map(\.store), ["notes", "diary"])
        XCTAssertEqual(config.problems[0].error.firstLine,
                       "config.yaml:10:15: error: stores.notes.cloud.secret: environment variable "
                           + "'NOTES_PG_PASSWORD' is not set")
        XCTAssertEqual(config.problems[1].error.firstLine, "config.yaml:13:5: error: stores.diary.mdoe: unknown key")
        XCTAssertEqual(try config.store(named: "journal").path, "/srv/journal.sqlite")
        XCTAssertThrowsError(try config.store(named: "notes")) { error in
            XCTAssertEqual(error as? ConfigError, config.problems[0].error)
        }
        // With several stores, no name is still a usage error that lists every store, broken ones too.
        XCTAssertThrowsError(try config.store(named: nil)) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode, .usage)
            XCTAssertEqual((error as? StoreError)?.hint, "the stores are: journal, notes, diary")
        }
    }

    func testWithoutIsolationTheFirstStoreErrorIsThrown() throws {
        XCTAssertThrowsError(try load(text, isolate: false)) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "stores.notes.cloud.secret")
        }
        let fixed = text.replacingOccurrences(of: "mdoe", with: "mode")
        let config = try load(fixed, isolate: false, environment: ["NOTES_PG_PASSWORD": "s3cret"])
        XCTAssertEqual(config.stores.map(\.name), ["journal", "notes", "diary"])
        XCTAssertEqual(config.problems, [])
    }

    func testTheOnlyStoreThrowsItsErrorWhenNoNameIsGiven() throws {
        let config = try load("version: 1\nstores:\n  notes:\n    path: ${DATA}/n.sqlite\n", isolate: true)
        XCTAssertThrowsError(try config.store(named: nil)) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "stores.notes.path")
        }
    }

    func testErrorsInTheSharedPartFailTheWholeFile() throws {
        for shared in ["version: ${VERSION}\nstores:\n  a:\n    path: a.sqlite\n",
                       "version: 1\ncolour: blue\nstores:\n  a:\n    path: a.sqlite\n",
                       "version: 1\nstores: [a]\n"]
        {
            XCTAssertThrowsError(try load(shared, isolate: true), shared)
        }
    }

    func testTwoStoresOnOneFileFailTheWholeFile() throws {
        // It concerns both stores: neither may be used until one of them moves.
        XCTAssertThrowsError(try load("version: 1\nstores:\n  a:\n    path: x.sqlite\n  b:\n    path: x.sqlite\n",
                                      isolate: true)) { error in
            XCTAssertEqual((error as? ConfigError)?.keyPath, "stores.b.path")
        }
    }
}
