import Foundation
import StoreCloud
import TestSupport
import XCTest

/// A secret, wherever the config holds it (a `secret:` value, a URL's user info or query, a libpq `password=`
/// setting), appears in no stdout, stderr, JSON document or file that storectl writes, whatever command runs and
/// whether it succeeds or fails.
final class SecretExposureTests: XCTestCase {
    /// Distinct enough that no other text contains it by chance.
    static let secret = "hunter2-Zq9x"

    /// Three stores: a container file with a literal secret, a PostgreSQL URL with the secret in its user info and
    /// its query, and libpq settings with a quoted password. Nothing listens on 127.0.0.1:1, so the two PostgreSQL
    /// stores fail to connect, which is the path where messages quote the most.
    func config() -> String {
        let s = Self.secret
        return """
            version: 1
            stores:
              file:
                path: data/file.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.notes
                  url: file:cloud/notes.container
                  create_if_missing: true
                  account: demo
                  secret: \(s)
              uri:
                path: data/uri.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.notes
                  url: postgres://alice:\(s)@127.0.0.1:1/notes?password=\(s)&sslmode=disable&connect_timeout=2
                  account: alice
                  secret: ${PG_SECRET}
              settings:
                path: data/settings.sqlite
                schema: schema.sql
                cloud:
                  container: iCloud.com.example.notes
                  url: "host=127.0.0.1 port=1 password='\(s) with spaces' dbname=notes connect_timeout=2"
                  account: alice

            """
    }

    /// Every file under `dir` that holds `needle`, by relative path (config.yaml, which the user wrote, aside).
    static func filesHolding(_ needle: String, in dir: TempDirectory) -> [String] {
        var found: [String] = []
        let e = FileManager.default.enumerator(atPath: dir.path)
        while let f = e?.nextObject() as? String {
            guard f != "config.yaml", let data = FileManager.default.contents(atPath: dir.file(f)) else { continue }
            if data.range(of: Data(needle.utf8)) != nil { found.append(f) }
        }
        return found
    }

    func testNoCommandPrintsOrWritesASecret() throws {
        let dir = try TempDirectory("storectl-secret")
        try dir.write("schema.sql", "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);")
        try dir.write("config.yaml", config())
        chmod(dir.file("config.yaml"), 0o644)
        let env = ["PG_SECRET": Self.secret, "XDG_CACHE_HOME": dir.file("cache"), "STORECTL_TRACE": "1"]
        var commands: [[String]] = [
            ["config", "validate"], ["config", "show"], ["config", "show", "--resolved"], ["--json", "config", "show"],
            ["--json", "config", "show", "--resolved"],
        ]
        for store in ["file", "uri", "settings"] {
            commands += [
                ["config", "get", "stores.\(store).cloud.url"], ["--json", "config", "get", "stores.\(store).cloud"],
                ["config", "get", "stores.\(store)"],
            ]
            for args in [["status"], ["status", "--check-cloud"], ["account", "status"], ["doctor"],
                         ["cloud", "check"], ["mode", "cloud"], ["sync"], ["cloud", "init", "--print-grants"],
                         ["mode", "cloud", "--dry-run"], ["init"]]
            {
                commands.append(["--store", store] + args)
                commands.append(["--json", "--store", store] + args)
            }
        }
        commands.append(["config", "set", "stores.uri.cloud.url", "postgres://bob:\(Self.secret)@127.0.0.1:1/x"])
        commands.append(["--json", "config", "set", "stores.uri.cloud.zone", "other"])
        commands.append(["--json", "config", "set", "stores.file.cloud.secret", Self.secret + "-new"])
        var failures = 0
        for args in commands {
            let r = try Binary.storectl(args, in: dir.path, environment: env)
            if r.status != 0 { failures += 1 }
            XCTAssertFalse(r.stdout.contains(Self.secret), "stdout of storectl \(args.joined(separator: " ")):\n\(r)")
            XCTAssertFalse(r.stderr.contains(Self.secret), "stderr of storectl \(args.joined(separator: " ")):\n\(r)")
            XCTAssertFalse(r.stdout.contains("hunter2") || r.stderr.contains("hunter2"), "\(args)\n\(r)")
            XCTAssertNotEqual(r.status, 70, "storectl \(args.joined(separator: " ")):\n\(r)")
        }
        // Some commands failed (PostgreSQL is not there), and their errors were checked too.
        XCTAssertGreaterThan(failures, 10)
        XCTAssertEqual(Self.filesHolding("hunter2", in: dir), [])
        // The redacted forms are what the user sees.
        let url = try Binary.storectl(["config", "get", "stores.settings.cloud.url"], in: dir.path, environment: env)
        XCTAssertEqual(url.stdout, "host=127.0.0.1 port=1 password=<redacted> dbname=notes connect_timeout=2\n")
    }

    func testAnErrorNextToASecretNeverShowsIt() throws {
        let dir = try TempDirectory("storectl-secret")
        let s = Self.secret
        let cases = [
            // Flow style, the error after the secret on the same line.
            "version: 1\nstores:\n  a:\n    path: a.sqlite\n    cloud: {container: iCloud.com.example.notes, "
                + "url: file:c.container, secret: \(s), zone: [x]}\n",
            // Flow style over two lines.
            "version: 1\nstores:\n  a:\n    path: a.sqlite\n    cloud: {container: iCloud.com.example.notes,\n"
                + "      secret: '\(s)', url: file:c.container, zonne: x}\n",
            // A syntax error on the secret's own line.
            "version: 1\nstores:\n  a:\n    path: a.sqlite\n    cloud:\n      secret: \(s): x\n",
            // The secret in a URL whose port is wrong, and in libpq settings with an unknown keyword.
            "version: 1\nstores:\n  a:\n    path: a.sqlite\n    cloud:\n      container: iCloud.com.example.notes\n"
                + "      url: postgres://u:\(s)@db:0/x\n",
            "version: 1\nstores:\n  a:\n    path: a.sqlite\n    cloud:\n      container: iCloud.com.example.notes\n"
                + "      url: host=db password=\(s) dbnam=x\n",
            // A secret written without the space after ':'.
            "version: 1\nstores:\n  a:\n    path: a.sqlite\n    cloud: secret:\(s)\n",
        ]
        for text in cases {
            try dir.write("config.yaml", text)
            for args in [["config", "validate"], ["mode", "cloud"], ["--json", "status"], ["config", "show"]] {
                let r = try Binary.storectl(args, in: dir.path)
                XCTAssertEqual(r.status, 78, "\(text)\n\(r)")
                XCTAssertTrue(r.stderr.contains("config.yaml:") || r.stdout.contains("config.yaml:"), "\(r)")
                XCTAssertFalse(r.stdout.contains("hunter2") || r.stderr.contains("hunter2"), "\(text)\n\(r)")
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("a.sqlite")))
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir.file("c.container")))
        }
    }

    /// libpq `keyword=value` settings, as README and docs/postgres.md describe them, work as the cloud URL.
    func testLibpqSettingsAreAcceptedAsTheCloudURL() throws {
        let env = ProcessInfo.processInfo.environment
        let dir = try TempDirectory("storectl-secret")
        try dir.write("schema.sql", "CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, title TEXT);")
        func write(_ url: String, container: String = "iCloud.com.example.notes") throws {
            try dir.write("config.yaml", """
                version: 1
                stores:
                  notes:
                    path: notes.sqlite
                    schema: schema.sql
                    cloud:
                      container: \(container)
                      url: "\(url)"
                      account: postgres

                """)
        }
        try write("host=db.example.com port=5433 dbname=notes sslmode=require user=alice password='x y'")
        let valid = try Binary.storectl(["config", "validate"], in: dir.path)
        XCTAssertEqual(valid.status, 0, "\(valid)")
        guard let socket = env["STORECTL_TEST_PG_SOCKET_DIR"], !socket.isEmpty else {
            if env["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_SOCKET_DIR is not set (see .ci/run)")
            }
            return
        }
        let port = env["PGPORT"].map { " port=\($0)" } ?? ""
        let suffix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        try write("host=\(socket)\(port) dbname=postgres user=postgres", container: "iCloud.com.example.kv\(suffix)")
        for args in [["cloud", "init"], ["mode", "cloud"], ["sync"], ["mode", "local"]] {
            let r = try Binary.storectl(args, in: dir.path)
            XCTAssertEqual(r.status, 0, "storectl \(args.joined(separator: " ")):\n\(r)")
        }
        let status = try Binary.storectl(["--json", "status"], in: dir.path)
        XCTAssertTrue(status.stdout.contains("host=\(socket)"), status.stdout)
        _ = try Binary.storectl(["cloud", "purge", "--yes"], in: dir.path)
    }
}
