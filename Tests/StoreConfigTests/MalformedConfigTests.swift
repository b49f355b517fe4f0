import Foundation
import StoreBase
@testable import StoreConfig
import TestSupport
import XCTest

/// A malformed config and the exact first line of the error it must produce.
struct MalformedCase {
    var name: String
    var text: String
    var expected: String
    var environment: [String: String] = [:]
    /// Raw bytes, for text a Swift string cannot hold (invalid UTF-8).
    var bytes: [UInt8]?
}

/// The corpus: every way a config can be wrong that storectl knows to explain. Each entry asserts the exact first
/// line of the error and exit code 78.
let malformedCorpus: [MalformedCase] = [
    MalformedCase(name: "01-mapping-value-in-plain-scalar", text: """
        version: 1
        stores: a: b
        """, expected: "config.yaml:2:10: error: invalid YAML: mapping values are not allowed in this context"),
    MalformedCase(name: "02-tab-indentation", text: "version: 1\nstores:\n  notes:\n\tpath: a.sqlite\n",
                  expected: "config.yaml:4:1: error: invalid YAML: found character that cannot start any token"),
    MalformedCase(name: "03-unclosed-double-quote", text: """
        version: 1
        stores:
          notes:
            path: "data/notes.sqlite
        """, expected: "config.yaml:4:29: error: invalid YAML: found unexpected end of stream"),
    MalformedCase(name: "04-unclosed-flow-sequence", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            entities:
              notes:
                unique: [uuid
        """, expected: "config.yaml:7:22: error: invalid YAML: did not find expected ',' or ']'"),
    MalformedCase(name: "05-bad-indentation", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
           mode: local
        """, expected: "config.yaml:5:4: error: invalid YAML: did not find expected key"),
    MalformedCase(name: "06-duplicate-store-key", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            mode: local
            path: b.sqlite
        """, expected: "config.yaml:6:5: error: stores.notes.path: duplicate key, first set at line 4"),
    MalformedCase(name: "07-duplicate-top-level-key", text: """
        version: 1
        stores:
          a:
            path: a.sqlite
        version: 1
        """, expected: "config.yaml:5:1: error: version: duplicate key, first set at line 1"),
    MalformedCase(name: "08-anchor", text: """
        version: 1
        stores:
          notes: &base
            path: a.sqlite
        """, expected: "config.yaml:3:10: error: stores.notes: anchors (&base) are not supported"),
    MalformedCase(name: "09-alias", text: """
        version: 1
        stores:
          notes:
            path: *v
        """, expected: "config.yaml:4:11: error: stores.notes.path: aliases (*v) are not supported"),
    MalformedCase(name: "10-tag", text: """
        version: !!int 1
        stores:
          notes:
            path: a.sqlite
        """, expected: "config.yaml:1:10: error: version: tags (tag:yaml.org,2002:int) are not supported"),
    MalformedCase(name: "11-two-documents", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
        ---
        version: 1
        """, expected: "config.yaml:5:1: error: a config holds one YAML document; found a second one"),
    MalformedCase(name: "12-empty-file", text: "", expected: "config.yaml:1:1: error: the config is empty"),
    MalformedCase(name: "13-only-comments", text: "# nothing here yet\n\n",
        expected: "config.yaml:1:1: error: the config is empty"),
    MalformedCase(name: "14-top-level-list", text: "- version: 1\n",
        expected: "config.yaml:1:1: error: expected a mapping, got a list"),
    MalformedCase(name: "15-missing-version", text: """
        stores:
          notes:
            path: a.sqlite
        """, expected: "config.yaml:1:1: error: version: required key is missing"),
    MalformedCase(name: "16-wrong-version", text: """
        version: 2
        stores:
          notes:
            path: a.sqlite
        """, expected: "config.yaml:1:10: error: version: unsupported version 2; this storectl reads version 1"),
    MalformedCase(name: "17-version-not-a-number", text: """
        version: one
        stores:
          notes:
            path: a.sqlite
        """, expected: "config.yaml:1:10: error: version: expected an integer, got 'one'"),
    MalformedCase(name: "18-missing-stores", text: "version: 1\n",
        expected: "config.yaml:1:1: error: stores: required key is missing"),
    MalformedCase(name: "19-no-stores", text: "version: 1\nstores: {}\n",
        expected: "config.yaml:2:9: error: stores: no stores are defined"),
    MalformedCase(name: "20-stores-is-a-scalar", text: "version: 1\nstores: notes\n",
        expected: "config.yaml:2:9: error: stores: expected a mapping of store names, got 'notes'"),
    MalformedCase(name: "21-bad-store-name", text: """
        version: 1
        stores:
          my notes:
            path: a.sqlite
        """, expected: "config.yaml:3:3: error: stores.my notes: store names use letters, digits, '-' and '_'"),
    MalformedCase(name: "22-unknown-top-level-key", text: """
        version: 1
        storse:
          notes:
            path: a.sqlite
        """, expected: "config.yaml:2:1: error: storse: unknown key"),
    MalformedCase(name: "23-unknown-store-key", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            mdoe: cloud
        """, expected: "config.yaml:5:5: error: stores.notes.mdoe: unknown key"),
    MalformedCase(name: "24-unknown-cloud-key", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              contianer: iCloud.com.example.notes
              url: file:c.container
        """, expected: "config.yaml:6:7: error: stores.notes.cloud.contianer: unknown key"),
    MalformedCase(name: "25-unknown-key-no-suggestion", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            color_scheme: dark
        """, expected: "config.yaml:5:5: error: stores.notes.color_scheme: unknown key"),
    MalformedCase(name: "26-bad-mode", text: """
        version: 1
        stores:
          notes:
            path: data/notes.sqlite
            mode: clod
        """, expected: "config.yaml:5:11: error: stores.notes.mode: expected one of local, cloud, got 'clod'"),
    MalformedCase(name: "27-missing-path", text: """
        version: 1
        stores:
          notes:
            mode: local
        """, expected: "config.yaml:3:3: error: stores.notes.path: required key is missing"),
    MalformedCase(name: "28-path-is-a-mapping", text: """
        version: 1
        stores:
          notes:
            path:
              file: a.sqlite
        """, expected: "config.yaml:5:7: error: stores.notes.path: expected a file path, got a mapping"),
    MalformedCase(name: "29-empty-path", text: """
        version: 1
        stores:
          notes:
            path: ""
        """, expected: "config.yaml:4:11: error: stores.notes.path: must not be empty"),
    MalformedCase(name: "30-tracking-false", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            history:
              tracking: false
        """, expected: "config.yaml:6:17: error: stores.notes.history.tracking: history tracking cannot be turned off"),
    MalformedCase(name: "31-tracking-maybe", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            history:
              tracking: maybe
        """, expected: "config.yaml:6:17: error: stores.notes.history.tracking: expected true or false, got 'maybe'"),
    MalformedCase(name: "32-reserved-author", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            history: {author: cloud-import}
        """,
        expected: "config.yaml:5:23: error: stores.notes.history.author: 'cloud-import' is reserved for changes that came from the cloud"),
    MalformedCase(name: "32b-reserved-author-dedupe", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            history: {author: dedupe}
        """,
        expected: "config.yaml:5:23: error: stores.notes.history.author: 'dedupe' is reserved for storectl's own changes"),
    MalformedCase(name: "33-bad-retention", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            history:
              retention: forever
        """,
        expected: "config.yaml:6:18: error: stores.notes.history.retention: expected a duration like 30d, 12h or 15m, got 'forever'"),
    MalformedCase(name: "34-cloud-without-container", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              url: file:c.container
        """, expected: "config.yaml:5:5: error: stores.notes.cloud.container: required key is missing"),
    MalformedCase(name: "35-cloud-without-url", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
        """, expected: "config.yaml:5:5: error: stores.notes.cloud.url: required key is missing"),
    MalformedCase(name: "36-container-not-reverse-dns", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: notes
              url: file:c.container
        """, expected: "config.yaml:6:18: error: stores.notes.cloud.container: 'notes' is not a container id"),
    MalformedCase(name: "37-container-empty-label", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud..notes
              url: file:c.container
        """, expected: "config.yaml:6:18: error: stores.notes.cloud.container: 'iCloud..notes' is not a container id"),
    MalformedCase(name: "38-url-unsupported-scheme", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: https://cloud.example.com/notes
        """, expected: "config.yaml:7:12: error: stores.notes.cloud.url: unsupported URL scheme 'https'"),
    MalformedCase(name: "39-url-without-scheme", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: cloud/notes.container
        """, expected: "config.yaml:7:12: error: stores.notes.cloud.url: expected a URL, got 'cloud/notes.container'"),
    MalformedCase(name: "40-file-url-with-host", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: file://server/notes.container
        """, expected: "config.yaml:7:12: error: stores.notes.cloud.url: a file: URL names a local path, not a host"),
    MalformedCase(name: "41-bad-merge-policy", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: file:c.container
              merge_policy: server_wins
        """,
        expected: "config.yaml:8:21: error: stores.notes.cloud.merge_policy: expected one of error, server-wins, local-wins, property-server-wins, property-local-wins, got 'server_wins'"),
    MalformedCase(name: "42-delete-fraction-out-of-range", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: file:c.container
              max_delete_fraction: 1.5
        """,
        expected: "config.yaml:8:28: error: stores.notes.cloud.max_delete_fraction: expected a number between 0 and 1, got '1.5'"),
    MalformedCase(name: "43-create-if-missing-not-bool", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: file:c.container
              create_if_missing: sometimes
        """,
        expected: "config.yaml:8:26: error: stores.notes.cloud.create_if_missing: expected true or false, got 'sometimes'"),
    MalformedCase(name: "44-cloud-mode-without-cloud", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            mode: cloud
        """, expected: "config.yaml:5:11: error: stores.notes.mode: mode cloud needs a cloud: section"),
    MalformedCase(name: "45-bad-keep", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            entities:
              notes:
                unique: [uuid]
                keep: latest(updated_at)
        """,
        expected: "config.yaml:8:15: error: stores.notes.entities.notes.keep: expected newest(COLUMN), oldest(COLUMN) or first, got 'latest(updated_at)'"),
    MalformedCase(name: "46-keep-without-unique", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            entities:
              notes:
                keep: newest(updated_at)
        """,
        expected: "config.yaml:7:15: error: stores.notes.entities.notes.keep: keep needs a unique key to choose among duplicates"),
    MalformedCase(name: "47-unique-not-a-list", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            entities:
              notes:
                unique: uuid
        """,
        expected: "config.yaml:7:17: error: stores.notes.entities.notes.unique: expected a list of columns, got 'uuid'"),
    MalformedCase(name: "48-unique-empty", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            entities:
              notes:
                unique: []
        """, expected: "config.yaml:7:17: error: stores.notes.entities.notes.unique: the list of columns is empty"),
    MalformedCase(name: "49-duplicate-store-paths", text: """
        version: 1
        stores:
          notes:
            path: data/notes.sqlite
          copy:
            path: ./data/../data/notes.sqlite
        """,
        expected: "config.yaml:6:11: error: stores.copy.path: store 'notes' already uses this file (/srv/app/data/notes.sqlite)"),
    MalformedCase(name: "50-unset-variable", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            cloud:
              container: iCloud.com.example.notes
              url: file:c.container
              secret: ${STORECTL_SECRET}
        """,
        expected: "config.yaml:8:15: error: stores.notes.cloud.secret: environment variable 'STORECTL_SECRET' is not set"),
    MalformedCase(name: "51-malformed-variable", text: """
        version: 1
        stores:
          notes:
            path: data/${1DIR}/notes.sqlite
        """, expected: "config.yaml:4:16: error: stores.notes.path: malformed variable reference '${1DIR}'"),
    MalformedCase(name: "52-unterminated-variable", text: """
        version: 1
        stores:
          notes:
            path: ${DATA_DIR/notes.sqlite
        """,
        expected: "config.yaml:4:11: error: stores.notes.path: malformed variable reference '${DATA_DIR/notes.sqlite'"),
    MalformedCase(name: "53-seed-without-name", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            seed:
              sql: seed.sql
        """, expected: "config.yaml:5:5: error: stores.notes.seed.name: required key is missing"),
    MalformedCase(name: "54-seed-rows-not-a-list", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            seed:
              name: v1
              rows:
                tags: red
        """, expected: "config.yaml:8:15: error: stores.notes.seed.rows.tags: expected a list of rows, got 'red'"),
    MalformedCase(name: "55-entities-is-a-list", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            entities:
              - notes
        """, expected: "config.yaml:6:7: error: stores.notes.entities: expected a mapping of table names, got a list"),
    MalformedCase(name: "56-control-character", text: "version: 1\nstores:\n  notes:\n    path: a\u{FFFF}.sqlite\n",
                  expected: "config.yaml:4:12: error: invalid text: control characters are not allowed"),
    MalformedCase(name: "57-history-is-a-scalar", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            history: yes
        """, expected: "config.yaml:5:14: error: stores.notes.history: expected a mapping, got 'yes'"),
    MalformedCase(name: "58-variable-expands-to-bad-mode", text: """
        version: 1
        stores:
          notes:
            path: a.sqlite
            mode: ${MODE:-local}
        """,
        expected: "config.yaml:5:11: error: stores.notes.mode: expected one of local, cloud, got 'remote'", environment: ["MODE": "remote"]),
    MalformedCase(name: "59-invalid-utf8", text: "",
        expected: "config.yaml:4:13: error: invalid text: invalid trailing UTF-8 octet",
                  bytes: Array("version: 1\nstores:\n  notes:\n    path: a".utf8) + [0xC3, 0x28]
                      + Array(".sqlite\n".utf8)),
    MalformedCase(name: "60-key-without-space-after-colon", text: """
        version: 1
        stores:
          notes:
            path:a.sqlite
        """, expected: "config.yaml:4:5: error: stores.notes: expected a mapping, got 'path:a.sqlite'"),
]

final class MalformedConfigTests: XCTestCase {
    /// Loads `text` and returns the error it throws.
    func error(for item: MalformedCase) -> ConfigError? {
        do {
            _ = try ConfigLoader.load(bytes: item.bytes ?? Array(item.text.utf8), path: "/srv/app/config.yaml",
                                      displayPath: "config.yaml", environment: item.environment)
            return nil
        } catch let error as ConfigError {
            return error
        } catch {
            XCTFail("\(item.name): not a ConfigError: \(error)")
            return nil
        }
    }

    func testCorpus() {
        let corpus = malformedCorpus + hostileCorpus
        XCTAssertGreaterThan(corpus.count, 100)
        XCTAssertEqual(Set(corpus.map(\.name)).count, corpus.count)
        for item in corpus {
            guard let error = error(for: item) else {
                XCTFail("\(item.name): loaded without an error")
                continue
            }
            if ProcessInfo.processInfo.environment["PRINT_CORPUS"] != nil {
                print("CORPUS \(item.name)\n\(error.description)\n")
            }
            XCTAssertEqual(error.firstLine, item.expected, item.name)
            XCTAssertEqual(error.exitCode, .config, item.name)
            if let line = error.line {
                // Every error inside the text shows the source line and a caret under the column.
                XCTAssertEqual(error.details.first?.hasPrefix(String(repeating: " ", count: 5 - "\(line)".count)
                                                                  + "\(line) | "), true, item.name)
                XCTAssertEqual(error.details.dropFirst().first?.hasSuffix("^"), true, item.name)
            }
            XCTAssertEqual(String(describing: error).split(separator: "\n").first.map(String.init), item.expected,
                           item.name)
            // No secret in any line of the error: message, excerpt, notes, hint.
            XCTAssertFalse(String(describing: error).contains(corpusSecret), "\(item.name):\n\(error)")
        }
    }
}
