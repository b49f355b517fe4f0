import Foundation
import StoreBase
@testable import StoreConfig
import TestSupport
import XCTest

/// The example config from the docs, used by several tests.
let exampleConfig = """
    version: 1
    stores:
      notes:                              # store name, used by --store
        path: data/notes.sqlite           # relative paths resolve against the config file's folder
        schema: examples/notes/schema.sql
        mode: local                       # local | cloud (default local)
        history:
          tracking: true
          author: app
          retention: 30d
        cloud:
          container: iCloud.com.example.notes
          url: file:cloud/notes.container
          create_if_missing: true
          zone: default
          account: demo
          secret: ${STORECTL_SECRET:-demo-secret}
          merge_policy: property-local-wins
        entities:
          notes:
            unique: [uuid]
            keep: newest(updated_at)
            tombstone: [uuid]
        seed:
          name: default-data-v1
          sql: examples/notes/seed.sql

    """

final class ConfigLoaderTests: XCTestCase {
    func testLoadsTheExampleConfig() throws {
        let dir = try TempDirectory()
        let path = try dir.write("config.yaml", exampleConfig)
        let config = try ConfigLoader.load(path: path, displayPath: "config.yaml", environment: [:])
        XCTAssertEqual(config.version, 1)
        XCTAssertEqual(config.path, path)
        XCTAssertEqual(config.stores.count, 1)
        let store = config.stores[0]
        XCTAssertEqual(store.name, "notes")
        XCTAssertEqual(store.path, dir.path + "/data/notes.sqlite")
        XCTAssertEqual(store.schema, dir.path + "/examples/notes/schema.sql")
        XCTAssertEqual(store.mode, .local)
        XCTAssertEqual(store.history, HistorySettings(tracking: true, author: "app", retention: DurationSpec("30d")))
        let cloud = try XCTUnwrap(store.cloud)
        XCTAssertEqual(cloud.container, "iCloud.com.example.notes")
        XCTAssertEqual(cloud.url, "file:" + dir.path + "/cloud/notes.container")
        XCTAssertTrue(cloud.createIfMissing)
        XCTAssertEqual(cloud.zone, "default")
        XCTAssertEqual(cloud.account, "demo")
        XCTAssertEqual(cloud.secret, Secret(value: "demo-secret", isLiteral: false))
        XCTAssertEqual(cloud.mergePolicy, .propertyLocalWins)
        XCTAssertEqual(cloud.maxDeleteFraction, 0.5)
        XCTAssertEqual(store.entities, [EntitySettings(name: "notes", unique: ["uuid"], keep: .newest("updated_at"),
                                                       tombstone: ["uuid"])])
        XCTAssertEqual(store.seed, SeedSettings(name: "default-data-v1", sql: dir.path + "/examples/notes/seed.sql"))
        XCTAssertEqual(config.warnings, [])
    }

    func testDefaultsAreFilledIn() throws {
        let loaded = try ConfigLoader.load(bytes: Array("""
            version: 1
            stores:
              a:
                path: a.sqlite
                cloud:
                  container: com.example.a
                  url: postgres://app@db.example.com/cloud
            """.utf8), path: "/srv/config.yaml", displayPath: "config.yaml", environment: [:])
        let store = loaded.config.stores[0]
        XCTAssertEqual(store.path, "/srv/a.sqlite")
        XCTAssertNil(store.schema)
        XCTAssertEqual(store.mode, .local)
        XCTAssertEqual(store.history, HistorySettings())
        XCTAssertEqual(store.cloud, CloudSettings(container: "com.example.a", url: "postgres://app@db.example.com/cloud"))
        XCTAssertEqual(store.entities, [])
        XCTAssertNil(store.seed)
    }

    func testSeveralStoresKeepFileOrderAndSeedRows() throws {
        let loaded = try ConfigLoader.load(bytes: Array("""
            version: 1
            stores:
              zeta:
                path: ../z.sqlite
                seed:
                  name: s1
                  rows:
                    tags:
                      - {name: red, rank: 1}
                      - name: blue
                        rank:
              alpha:
                path: ./sub/./a.sqlite
                mode: cloud
                cloud: {container: iCloud.com.example.a, url: "file:///abs/c.container", zone: z1}
            """.utf8), path: "/srv/app/config.yaml", displayPath: "config.yaml", environment: [:])
        let stores = loaded.config.stores
        XCTAssertEqual(stores.map(\.name), ["zeta", "alpha"])
        XCTAssertEqual(stores[0].path, "/srv/z.sqlite")
        XCTAssertEqual(stores[1].path, "/srv/app/sub/a.sqlite")
        XCTAssertEqual(stores[1].cloud?.url, "file:/abs/c.container")
        XCTAssertEqual(stores[1].cloud?.zone, "z1")
        let rows = try XCTUnwrap(stores[0].seed?.rows)
        XCTAssertEqual(rows.count, 1)
        XCTAssertEqual(rows[0].table, "tags")
        XCTAssertEqual(rows[0].rows.map { $0.map(\.column) }, [["name", "rank"], ["name", "rank"]])
        XCTAssertEqual(rows[0].rows.map { $0.map(\.value) }, [["red", "1"], ["blue", nil]])
    }

    func testMissingFileIs66WithAHint() throws {
        let dir = try TempDirectory()
        XCTAssertThrowsError(try ConfigLoader.load(path: dir.file("nope.yaml"), displayPath: "nope.yaml",
                                                   environment: [:])) { error in
            let e = error as? StoreError
            XCTAssertEqual(e?.exitCode, .noInput)
            XCTAssertEqual(e?.summary, "config file nope.yaml not found")
            XCTAssertNotNil(e?.hint)
        }
        XCTAssertThrowsError(try ConfigLoader.load(path: dir.path, displayPath: "dir", environment: [:])) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode, .noInput)
        }
    }

    func testUnreadableFileIs77() throws {
        guard getuid() != 0 else {
            // root reads every file; the permission check cannot fail, so check the mode bits path instead.
            let dir = try TempDirectory()
            let path = try dir.write("config.yaml", exampleConfig)
            XCTAssertTrue(ConfigLoader.isReadableByOthers(path))
            return
        }
        let dir = try TempDirectory()
        let path = try dir.write("config.yaml", exampleConfig)
        chmod(path, 0o000)
        XCTAssertThrowsError(try ConfigLoader.load(path: path, displayPath: "config.yaml", environment: [:])) { error in
            XCTAssertEqual((error as? StoreError)?.exitCode, .noPermission)
        }
    }

    func testLiteralSecretInAReadableFileWarns() throws {
        let dir = try TempDirectory()
        let text = exampleConfig.replacingOccurrences(of: "${STORECTL_SECRET:-demo-secret}", with: "hunter2")
        let path = try dir.write("config.yaml", text)
        chmod(path, 0o644)
        let config = try ConfigLoader.load(path: path, displayPath: "config.yaml", environment: [:])
        XCTAssertEqual(config.stores[0].cloud?.secret, Secret(value: "hunter2", isLiteral: true))
        XCTAssertEqual(config.warnings, [
            "stores.notes.cloud.secret is written in config.yaml, which other users can read; "
                + "use 'secret: ${VARIABLE}' or run 'chmod 600 config.yaml'",
        ])
        chmod(path, 0o600)
        XCTAssertEqual(try ConfigLoader.load(path: path, displayPath: "config.yaml", environment: [:]).warnings, [])
        // A secret from a variable never warns.
        try dir.write("config.yaml", exampleConfig)
        chmod(path, 0o644)
        XCTAssertEqual(try ConfigLoader.load(path: path, displayPath: "config.yaml", environment: [:]).warnings, [])
    }

    func testSecretNeverPrintsItself() throws {
        let secret = Secret(value: "hunter2", isLiteral: true)
        XCTAssertEqual("\(secret)", "<redacted>")
        XCTAssertEqual(String(reflecting: secret), "<redacted>")
    }
}
