import Foundation
import StoreBase
@testable import StoreConfig
import XCTest

final class YAMLParserTests: XCTestCase {
    /// The source text of `node`, cut out of `text` by its byte range.
    func source(_ text: String, _ node: YAMLNode?) -> String? {
        guard let node else { return nil }
        return String(decoding: Array(text.utf8)[node.sourceRange], as: UTF8.self)
    }

    func testMarksAreOneBasedLineAndColumn() throws {
        let text = "version: 1\nstores:\n  notes:\n    mode: clod\n"
        let doc = try YAMLParser.parse(text)
        let mode = try XCTUnwrap(doc.node(at: ["stores", "notes", "mode"]))
        XCTAssertEqual(mode.scalar, "clod")
        XCTAssertEqual(mode.start, YAMLMark(line: 4, column: 11, offset: 38))
        XCTAssertEqual(mode.end, YAMLMark(line: 4, column: 15, offset: 42))
        let key = try XCTUnwrap(doc.root?.pairs?.last?.value.pairs?.first?.key)
        XCTAssertEqual(key.scalar, "notes")
        XCTAssertEqual(key.start.description, "3:3")
    }

    func testMultibyteTextBeforeAScalarGivesByteOffsets() throws {
        let text = """
            # café, 🎉, 日本語 — comments with multibyte text
            author: "Zoë 🎉"
            zone: 東京 # é
            after: x

            """
        let doc = try YAMLParser.parse(text)
        let author = try XCTUnwrap(doc.node(at: ["author"]))
        XCTAssertEqual(author.scalar, "Zoë 🎉")
        XCTAssertEqual(source(text, author), "\"Zoë 🎉\"")
        XCTAssertEqual(author.start.line, 2)
        XCTAssertEqual(author.start.column, 9)
        let zone = try XCTUnwrap(doc.node(at: ["zone"]))
        XCTAssertEqual(source(text, zone), "東京")
        XCTAssertEqual(zone.start.column, 7)
        XCTAssertEqual(zone.end.column, 9)  // columns count characters, not bytes
        XCTAssertEqual(source(text, doc.node(at: ["after"])), "x")
    }

    func testEachScalarStyleAndItsSourceRange() throws {
        let text = """
            plain: a b
            single: 'it''s'
            double: "tab\\there"
            literal: |
              line one
              line two

            folded: >-
              folded
              text
            last: z

            """
        let doc = try YAMLParser.parse(text)
        let expected: [(String, String, YAMLScalarStyle, String)] = [
            ("plain", "a b", .plain, "a b"),
            ("single", "it's", .singleQuoted, "'it''s'"),
            ("double", "tab\there", .doubleQuoted, "\"tab\\there\""),
            ("literal", "line one\nline two\n", .literal, "|\n  line one\n  line two"),
            ("folded", "folded text", .folded, ">-\n  folded\n  text"),
            ("last", "z", .plain, "z"),
        ]
        for (key, value, style, text2) in expected {
            let node = try XCTUnwrap(doc.node(at: [key]), key)
            XCTAssertEqual(node.scalar, value, key)
            XCTAssertEqual(node.style, style, key)
            XCTAssertEqual(source(text, node), text2, key)
        }
    }

    func testFlowCollectionsAndImplicitNull() throws {
        let text = "a: {x: 1, y: [p, q]}\nb:\nc: ~\n"
        let doc = try YAMLParser.parse(text)
        let a = try XCTUnwrap(doc.node(at: ["a"]))
        XCTAssertTrue(a.isFlow)
        XCTAssertEqual(a.end.offset, 20)
        XCTAssertEqual(doc.node(at: ["a", "y"])?.items?.compactMap(\.scalar), ["p", "q"])
        let b = try XCTUnwrap(doc.node(at: ["b"]))
        XCTAssertTrue(b.isImplicitNull)
        XCTAssertTrue(b.isNull)
        XCTAssertEqual(b.start.line, 2)  // anchored at its key, not at the next token
        let c = try XCTUnwrap(doc.node(at: ["c"]))
        XCTAssertTrue(c.isNull)
        XCTAssertFalse(c.isImplicitNull)
    }

    func testByteOrderMarkAndCRLF() throws {
        let text = "\u{FEFF}a: 1\r\nb: café\r\nc: 3\r\n"
        let doc = try YAMLParser.parse(text)
        let b = try XCTUnwrap(doc.node(at: ["b"]))
        XCTAssertEqual(source(text, b), "café")
        XCTAssertEqual(b.start.line, 2)
        XCTAssertEqual(b.start.column, 4)
        XCTAssertEqual(source(text, doc.node(at: ["c"])), "3")
        XCTAssertEqual(doc.source.lineText(2), "b: café")
    }

    func testDuplicateKeysAreErrors() {
        XCTAssertThrowsError(try YAMLParser.parse("a:\n  b: 1\n  b: 2\n", displayPath: "f.yaml")) { error in
            XCTAssertEqual((error as? ConfigError)?.firstLine, "f.yaml:3:3: error: a.b: duplicate key, first set at line 2")
        }
    }

    func testTabIndentationReportsLibyamlErrorWithPosition() {
        XCTAssertThrowsError(try YAMLParser.parse("a:\n\tb: 1\n", displayPath: "f.yaml")) { error in
            let e = error as? ConfigError
            XCTAssertEqual(e?.firstLine, "f.yaml:2:1: error: invalid YAML: found character that cannot start any token")
            XCTAssertEqual(e?.details.prefix(2), ["    2 | \tb: 1", "      | ^"])
            XCTAssertEqual(e?.hint, "indent with spaces: YAML does not allow tabs for indentation")
            XCTAssertEqual(e?.exitCode, .config)
        }
    }

    func testAnchorsAliasesAndTagsAreRefused() {
        for (text, message) in [
            ("a: &x 1\n", "f.yaml:1:4: error: a: anchors (&x) are not supported"),
            ("a: *x\n", "f.yaml:1:4: error: a: aliases (*x) are not supported"),
            ("a: !custom 1\n", "f.yaml:1:4: error: a: tags (!custom) are not supported"),
        ] {
            XCTAssertThrowsError(try YAMLParser.parse(text, displayPath: "f.yaml")) { error in
                XCTAssertEqual((error as? ConfigError)?.firstLine, message)
            }
        }
    }

    func testErrorExcerptFormat() {
        let source = SourceText(Array("one\n  two: é\n".utf8))
        XCTAssertEqual(source.excerpt(line: 2, column: 8), ["    2 |   two: é", "      |        ^"])
        XCTAssertEqual(source.position(ofByte: 11).line, 2)
        XCTAssertEqual(source.position(ofByte: 11).column, 8)
        XCTAssertEqual(source.position(ofByte: 13).column, 9)  // after the two bytes of é
    }

    func testSecretsAreRedactedInExcerpts() {
        let source = SourceText(Array("  secret: hunter2\n  url: postgres://app:pw@db/x\n".utf8))
        XCTAssertEqual(source.excerpt(line: 1, column: 3).first, "    1 |   secret: <redacted>")
        XCTAssertEqual(source.excerpt(line: 2, column: 3).first, "    2 |   url: postgres://app:<redacted>@db/x")
    }
}
