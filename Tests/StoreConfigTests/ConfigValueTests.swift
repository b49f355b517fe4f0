import Foundation
import StoreBase
@testable import StoreConfig
import XCTest

final class ConfigValueTests: XCTestCase {
    func testYAMLOutputQuotesWhatWouldReadBackAsAnotherType() throws {
        let value = ConfigValue.map([
            .init("plain", .string("notes")),
            .init("looks-like-bool", .string("true")),
            .init("looks-like-int", .string("42")),
            .init("looks-like-null", .string("null")),
            .init("empty", .string("")),
            .init("colon", .string("a: b")),
            .init("multibyte", .string("café 🎉")),
            .init("bool", .bool(false)),
            .init("number", .double(0.5)),
            .init("list", .list([.string("uuid"), .string("id")])),
            .init("rows", .list([.map([.init("name", .string("red")), .init("rank", .null)])])),
            .init("nothing", .map([])),
        ])
        XCTAssertEqual(try value.yaml(), """
            plain: notes
            looks-like-bool: 'true'
            looks-like-int: '42'
            looks-like-null: 'null'
            empty: ''
            colon: 'a: b'
            multibyte: "café \\U0001F389"
            bool: false
            number: 0.5
            list: [uuid, id]
            rows:
            - name: red
              rank: null
            nothing: {}

            """)
        // And it reads back.
        let doc = try YAMLParser.parse(try value.yaml())
        XCTAssertEqual(doc.node(at: ["looks-like-bool"])?.scalar, "true")
        XCTAssertEqual(doc.node(at: ["looks-like-bool"])?.style, .singleQuoted)
        XCTAssertEqual(doc.node(at: ["colon"])?.scalar, "a: b")
        // libyaml's emitter escapes characters outside the Basic Multilingual Plane; they read back the same.
        XCTAssertEqual(doc.node(at: ["multibyte"])?.scalar, "café 🎉")
    }

    func testJSONSortsKeys() throws {
        let value = ConfigValue.map([.init("b", .int(1)), .init("a", .list([.bool(true), .null]))])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        XCTAssertEqual(String(decoding: try encoder.encode(value), as: UTF8.self), #"{"a":[true,null],"b":1}"#)
    }

    func testWrittenAndResolvedRedactSecrets() throws {
        let text = """
            version: 1
            stores:
              notes:
                path: a.sqlite
                cloud:
                  container: com.example.notes
                  url: postgres://app:pa55@db/x
                  secret: hunter2
            """
        let loaded = try ConfigLoader.load(bytes: Array(text.utf8), path: "/srv/config.yaml", displayPath: "c.yaml",
                                           environment: [:])
        let written = ConfigValue.written(loaded.document)
        XCTAssertEqual(written.value(at: ["stores", "notes", "cloud", "secret"]), .string("<redacted>"))
        XCTAssertEqual(written.value(at: ["stores", "notes", "cloud", "url"]),
                       .string("postgres://app:<redacted>@db/x"))
        XCTAssertEqual(written.value(at: ["version"]), .int(1))
        let resolved = ConfigValue.resolved(loaded.config)
        XCTAssertEqual(resolved.value(at: ["stores", "notes", "cloud", "secret"]), .string("<redacted>"))
        XCTAssertEqual(resolved.value(at: ["stores", "notes", "path"]), .string("/srv/a.sqlite"))
        XCTAssertEqual(resolved.value(at: ["stores", "notes", "history"]),
                       .map([.init("tracking", .bool(true)), .init("author", .string("storectl"))]))
        XCTAssertFalse(try resolved.yaml().contains("hunter2"))
        XCTAssertFalse(try resolved.yaml().contains("pa55"))
    }
}
