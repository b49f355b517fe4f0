import Foundation
import StoreBase
@testable import StoreConfig
import TestSupport
import XCTest

final class ConfigEditorTests: XCTestCase {
    let commented = """
        # storectl config for the notes app — café 🎉
        version: 1

        stores:
          notes:                              # store name, used by --store
            path: data/notes.sqlite           # relative paths resolve here
            mode: local                       # local | cloud (default local)

            history:
              tracking: true
              author: "app"                   # double-quoted on purpose
            cloud:
              container: iCloud.com.example.notes
              url: 'file:cloud/notes.container'
              secret: ${STORECTL_SECRET:-demo-secret}
            entities:
              notes: {unique: [uuid], keep: newest(updated_at)}
        # trailing comment

        """

    func render(_ text: String, _ key: String, _ value: String) throws -> (String, ConfigEditor.Change) {
        let (out, change) = try ConfigEditor.render(text, key: key, value: value)
        return (out, change)
    }

    func testReplacingAPlainScalarChangesOnlyItsBytes() throws {
        let (out, change) = try render(commented, "stores.notes.mode", "cloud")
        XCTAssertEqual(out, commented.replacingOccurrences(of: "    mode: local   ", with: "    mode: cloud   "))
        XCTAssertEqual(change, ConfigEditor.Change(key: "stores.notes.mode", oldValue: "local", newValue: "cloud",
                                                   line: 7, inserted: false, unchanged: false))
    }

    func testQuotingStyleIsKept() throws {
        var (out, _) = try render(commented, "stores.notes.history.author", "bob")
        XCTAssertEqual(out, commented.replacingOccurrences(of: "author: \"app\"  ", with: "author: \"bob\"  "))
        (out, _) = try render(commented, "stores.notes.cloud.url", "file:it's.container")
        XCTAssertEqual(out, commented.replacingOccurrences(of: "url: 'file:cloud/notes.container'",
                                                           with: "url: 'file:it''s.container'"))
    }

    func testValuesWithYAMLSyntaxAreQuoted() throws {
        let cases: [(String, String)] = [
            ("a: b # c", "\"a: b # c\""),
            ("", "\"\""),
            ("null", "\"null\""),
            ("~", "\"~\""),
            ("-leading dash", "\"-leading dash\""),
            ("[x]", "\"[x]\""),
            ("two\nlines", "\"two\\nlines\""),
            ("quote\" and \\ back", "quote\" and \\ back"),
            ("\"starts with a quote", "\"\\\"starts with a quote\""),
            (" padded ", "\" padded \""),
            ("#hash", "\"#hash\""),
            ("ends with colon:", "\"ends with colon:\""),
            ("bell\u{7}", "\"bell\\x07\""),
            ("${NOTES_ZONE}", "${NOTES_ZONE}"),
            ("plain é 日本 🎉", "plain é 日本 🎉"),
        ]
        for (value, written) in cases {
            let (out, _) = try render(commented, "stores.notes.mode", value)
            XCTAssertEqual(out, commented.replacingOccurrences(of: "    mode: local ", with: "    mode: \(written) "),
                           value)
            XCTAssertEqual(try YAMLParser.parse(out).node(at: ["stores", "notes", "mode"])?.scalar, value, value)
        }
    }

    func testMultibyteTextBeforeTheEditedKey() throws {
        let config = "# é 🎉 日本語\nversion: 1\nstores:\n  s:\n    path: \"Zoë\" # ü\n    cloud:\n"
            + "      zone: 東京\n      url: x\n"
        var (out, _) = try render(config, "stores.s.cloud.zone", "大阪")
        XCTAssertEqual(out, config.replacingOccurrences(of: "zone: 東京", with: "zone: 大阪"))
        (out, _) = try render(config, "stores.s.path", "Ærø.sqlite")
        XCTAssertEqual(out, config.replacingOccurrences(of: "path: \"Zoë\"", with: "path: \"Ærø.sqlite\""))
    }

    func testInsertingAMissingKeyUsesTheMappingsIndentation() throws {
        let (out, change) = try render(commented, "stores.notes.cloud.zone", "shared")
        XCTAssertEqual(out, commented.replacingOccurrences(
            of: "      secret: ${STORECTL_SECRET:-demo-secret}\n",
            with: "      secret: ${STORECTL_SECRET:-demo-secret}\n      zone: shared\n"))
        XCTAssertTrue(change.inserted)
        XCTAssertNil(change.oldValue)
        XCTAssertEqual(change.line, 16)
    }

    func testInsertingCreatesIntermediateMappingsWithTheFilesStep() throws {
        let text = """
            version: 1
            stores:
                notes:
                    path: a.sqlite   # four-space indentation
            # end

            """
        let (out, _) = try render(text, "stores.notes.history.retention", "30d")
        XCTAssertEqual(out, """
            version: 1
            stores:
                notes:
                    path: a.sqlite   # four-space indentation
                    history:
                        retention: 30d
            # end

            """)
    }

    func testInsertingUnderAnEmptyKeyAndIntoFlowMappings() throws {
        let text = "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    history:   # empty for now\n"
            + "    entities:\n      notes: {unique: [uuid]}\n"
        var (out, _) = try render(text, "stores.notes.history.author", "app")
        XCTAssertEqual(out, text.replacingOccurrences(of: "# empty for now\n", with: "# empty for now\n      author: app\n"))
        (out, _) = try render(text, "stores.notes.entities.notes.keep", "newest(updated_at)")
        XCTAssertEqual(out, text.replacingOccurrences(of: "{unique: [uuid]}",
                                                      with: "{unique: [uuid], keep: newest(updated_at)}"))
        (out, _) = try render(commented, "stores.notes.entities.notes.keep", "first")
        XCTAssertEqual(out, commented.replacingOccurrences(of: "keep: newest(updated_at)", with: "keep: first"))
    }

    func testAValueAfterAnEmptyKeyGoesAfterTheColon() throws {
        let text = "version: 1\nstores:\n  notes:\n    path: a.sqlite\n    schema:\n    mode: local\n"
        let (out, change) = try render(text, "stores.notes.schema", "schema.sql")
        XCTAssertEqual(out, text.replacingOccurrences(of: "schema:\n", with: "schema: schema.sql\n"))
        XCTAssertFalse(change.inserted)
    }

    func testCRLFAndAMissingFinalLineBreak() throws {
        let crlf = "version: 1\r\nstores:\r\n  notes:\r\n    path: a.sqlite\r\n"
        var (out, _) = try render(crlf, "stores.notes.mode", "cloud")
        XCTAssertEqual(out, crlf + "    mode: cloud\r\n")
        let open = "version: 1\nstores:\n  notes:\n    path: a.sqlite"
        (out, _) = try render(open, "stores.notes.mode", "cloud")
        XCTAssertEqual(out, open + "\n    mode: cloud")
    }

    func testBlockScalarsAreReplacedWholly() throws {
        let text = "version: 1\nstores:\n  notes:\n    path: |\n      a.sqlite\n    mode: local\n"
        let (out, _) = try render(text, "stores.notes.path", "b.sqlite")
        XCTAssertEqual(out, "version: 1\nstores:\n  notes:\n    path: b.sqlite\n    mode: local\n")
    }

    func testSettingTheSameValueChangesNothing() throws {
        let (out, change) = try render(commented, "stores.notes.mode", "local")
        XCTAssertEqual(out, commented)
        XCTAssertTrue(change.unchanged)
    }

    func testKeysOutsideTheSchemaAreRefused() {
        let cases: [(String, String, String?)] = [
            ("stores.notes.mdoe", "unknown key 'stores.notes.mdoe'", "did you mean 'stores.notes.mode'?"),
            ("stores.notes.cloud.zoen", "unknown key 'stores.notes.cloud.zoen'", "did you mean 'stores.notes.cloud.zone'?"),
            ("stores.notes.cloud", "stores.notes.cloud is a section; config set changes one scalar value",
             "set one of its keys, like stores.notes.cloud.container"),
            ("stores.notes.entities.notes.unique", "stores.notes.entities.notes.unique is a list; "
                + "config set changes one scalar value", "edit the list in the config file"),
            ("stores..mode", "'stores..mode' is not a key", "write a dotted key, like stores.notes.mode"),
        ]
        for (key, summary, hint) in cases {
            XCTAssertThrowsError(try render(commented, key, "x")) { error in
                let e = error as? StoreError
                XCTAssertEqual(e?.exitCode, .usage, key)
                XCTAssertEqual(e?.summary, summary, key)
                XCTAssertEqual(e?.hint, hint, key)
            }
        }
    }

    // MARK: Files

    func testSetWritesTheFileAndKeepsItsPermissions() throws {
        let dir = try TempDirectory()
        let path = try dir.write("config.yaml", commented)
        chmod(path, 0o640)
        let change = try ConfigEditor.set(path: path, displayPath: "config.yaml", key: "stores.notes.mode",
                                          value: "cloud", environment: [:])
        XCTAssertEqual(change.oldValue, "local")
        XCTAssertEqual(try dir.read("config.yaml"),
                       commented.replacingOccurrences(of: "    mode: local   ", with: "    mode: cloud   "))
        var st = stat()
        XCTAssertEqual(stat(path, &st), 0)
        XCTAssertEqual(st.st_mode & 0o7777, 0o640)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["config.yaml"])
    }

    func testAnInvalidResultIsRefusedAndTheFileStaysByteIdentical() throws {
        let dir = try TempDirectory()
        let path = try dir.write("config.yaml", commented)
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let cases: [(String, String, String)] = [
            ("stores.notes.history.tracking", "false",
             "config.yaml:10:17: error: stores.notes.history.tracking: history tracking cannot be turned off"),
            ("stores.notes.mode", "clod",
             "config.yaml:7:11: error: stores.notes.mode: expected one of local, cloud, got 'clod'"),
            ("stores.notes.cloud.container", "notes",
             "config.yaml:13:18: error: stores.notes.cloud.container: 'notes' is not a container id"),
        ]
        for (key, value, first) in cases {
            XCTAssertThrowsError(try ConfigEditor.set(path: path, displayPath: "config.yaml", key: key, value: value,
                                                      environment: [:])) { error in
                let e = error as? ConfigError
                XCTAssertEqual(e?.firstLine, first)
                XCTAssertEqual(e?.exitCode, .config)
                XCTAssertEqual(e?.details.last, "note: that is config.yaml as this edit would write it; config.yaml was not changed")
            }
            XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: path)), before, key)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["config.yaml"])
    }

    func testSetFixesAnInvalidConfig() throws {
        let dir = try TempDirectory()
        let broken = commented.replacingOccurrences(of: "mode: local", with: "mode: clod ")
        let path = try dir.write("config.yaml", broken)
        XCTAssertThrowsError(try ConfigLoader.load(path: path, environment: [:]))
        try ConfigEditor.set(path: path, displayPath: nil, key: "stores.notes.mode", value: "local", environment: [:])
        XCTAssertEqual(try dir.read("config.yaml"), broken.replacingOccurrences(of: "mode: clod", with: "mode: local"))
        XCTAssertNoThrow(try ConfigLoader.load(path: path, environment: [:]))
    }

    func testSetThroughASymlinkEditsTheTarget() throws {
        let dir = try TempDirectory()
        let target = try dir.write("real.yaml", commented)
        try FileManager.default.createSymbolicLink(atPath: dir.file("config.yaml"), withDestinationPath: target)
        try ConfigEditor.set(path: dir.file("config.yaml"), displayPath: "config.yaml", key: "stores.notes.mode",
                             value: "cloud", environment: [:])
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: dir.file("config.yaml")), target)
        XCTAssertTrue(try dir.read("real.yaml").contains("mode: cloud"))
    }
}
