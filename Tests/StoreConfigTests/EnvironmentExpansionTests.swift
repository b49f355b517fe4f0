import Foundation
import StoreBase
@testable import StoreConfig
import XCTest

final class EnvironmentExpansionTests: XCTestCase {
    func expand(_ text: String, _ env: [String: String] = [:]) throws -> String {
        try EnvironmentExpansion.expand(text, environment: env).value
    }

    func testReferencesAndDefaults() throws {
        XCTAssertEqual(try expand("${A}", ["A": "x"]), "x")
        XCTAssertEqual(try expand("pre-${A}-${B}-post", ["A": "1", "B": "2"]), "pre-1-2-post")
        XCTAssertEqual(try expand("${A:-fallback}"), "fallback")
        XCTAssertEqual(try expand("${A:-fallback}", ["A": ""]), "fallback")
        XCTAssertEqual(try expand("${A:-fallback}", ["A": "set"]), "set")
        XCTAssertEqual(try expand("${A:-}", [:]), "")
        XCTAssertEqual(try expand("${A}", ["A": ""]), "")
        XCTAssertEqual(try expand("${A:-a:-b}"), "a:-b")
        XCTAssertEqual(try expand("cost: $5, $HOME, $${A}"), "cost: $5, $HOME, ${A}")
        XCTAssertEqual(try expand("é ${A} 🎉", ["A": "日本"]), "é 日本 🎉")
        XCTAssertFalse(try EnvironmentExpansion.expand("plain", environment: [:]).usedReference)
        XCTAssertTrue(try EnvironmentExpansion.expand("${A:-d}", environment: [:]).usedReference)
    }

    func testUnsetAndMalformedReferences() {
        XCTAssertThrowsError(try expand("x${MISSING}")) { error in
            XCTAssertEqual(error as? EnvironmentExpansion.Failure, .unset(name: "MISSING", offset: 1))
        }
        XCTAssertThrowsError(try expand("${A")) { error in
            XCTAssertEqual(error as? EnvironmentExpansion.Failure, .malformed(reference: "${A", offset: 0))
        }
        XCTAssertThrowsError(try expand("${}")) { error in
            XCTAssertEqual(error as? EnvironmentExpansion.Failure, .malformed(reference: "${}", offset: 0))
        }
        XCTAssertThrowsError(try expand("${A B}")) { error in
            XCTAssertEqual(error as? EnvironmentExpansion.Failure, .malformed(reference: "${A B}", offset: 0))
        }
    }

    let config = """
        # ${NOT_EXPANDED_IN_COMMENTS}
        version: 1
        stores:
          notes:
            path: ${DATA_DIR:-data}/notes.sqlite
            history:
              author: ${AUTHOR}
            cloud:
              container: iCloud.com.example.notes
              url: ${CLOUD_URL:-file:cloud/notes.container}
              secret: ${SECRET:-demo}
        """

    func load(_ text: String, _ env: [String: String], expand: Bool = true) throws -> Config {
        try ConfigLoader.load(bytes: Array(text.utf8), path: "/srv/app/config.yaml", displayPath: "config.yaml",
                              environment: env, expandEnvironment: expand).config
    }

    func testValuesExpandButNeverChangeTheStructure() throws {
        // A value full of YAML syntax stays one value: expansion happens inside the scalar, not in the text.
        let config = try load(self.config, ["AUTHOR": "x: y # not a comment", "DATA_DIR": "/var/lib/app"])
        let store = config.stores[0]
        XCTAssertEqual(store.history.author, "x: y # not a comment")
        XCTAssertEqual(store.path, "/var/lib/app/notes.sqlite")
        XCTAssertEqual(store.cloud?.url, "file:/srv/app/cloud/notes.container")
        XCTAssertEqual(store.cloud?.secret, Secret(value: "demo", isLiteral: false))
    }

    func testAnUnsetVariableNamesItselfAndItsPlace() {
        XCTAssertThrowsError(try load(config, [:])) { error in
            let e = error as? ConfigError
            XCTAssertEqual(e?.firstLine,
                           "config.yaml:7:15: error: stores.notes.history.author: environment variable 'AUTHOR' is not set")
            XCTAssertEqual(e?.details, ["    7 |       author: ${AUTHOR}", "      |               ^"])
            XCTAssertEqual(e?.hint, "set AUTHOR, or give a default: ${AUTHOR:-value}")
        }
    }

    func testKeysAreNeverExpanded() {
        let text = "version: 1\nstores:\n  ${NAME}:\n    path: a.sqlite\n"
        XCTAssertThrowsError(try load(text, ["NAME": "notes"])) { error in
            XCTAssertEqual((error as? ConfigError)?.firstLine,
                           "config.yaml:3:3: error: stores.${NAME}: store names use letters, digits, '-' and '_'")
        }
    }

    func testNoExpandEnvLeavesReferencesAsWritten() throws {
        let config = try load(self.config, [:], expand: false)
        let store = config.stores[0]
        XCTAssertEqual(store.history.author, "${AUTHOR}")
        XCTAssertEqual(store.path, "/srv/app/${DATA_DIR:-data}/notes.sqlite")
        XCTAssertEqual(store.cloud?.url, "${CLOUD_URL:-file:cloud/notes.container}")
        XCTAssertEqual(store.cloud?.secret, Secret(value: "${SECRET:-demo}", isLiteral: false))
    }
}
