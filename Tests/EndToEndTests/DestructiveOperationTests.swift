import Foundation
import StoreCloud
import TestSupport
import XCTest

/// Destructive container operations (`cloud purge`, `account add`, `account disable`) are an owner's alone: a
/// member, a disabled account and an unregistered one are refused, and the container keeps every record.
final class DestructiveOperationTests: XCTestCase {
    func testEveryRoleButTheOwnerIsRefused() throws {
        let s = try Fleet.notes(label: "storectl-roles")
        try s.run("a", ["mode", "cloud"])
        try s.sql("a", "INSERT INTO notes(uuid, title) VALUES ('n1', 'one'), ('n2', 'two')")
        try s.run("a", ["sync"])
        let owner = try FileCloudDatabase.open(path: s.dir.file("cloud/shared.container"),
                                               container: "iCloud.com.example.notes", account: "demo",
                                               secret: Fleet.notesSecret)
        try owner.addAccount(id: "bob", secret: "bob-secret", role: .member)
        try owner.addAccount(id: "carol", secret: "carol-secret", role: .member)
        try owner.disableAccount(id: "carol")
        func records() throws -> String {
            try s.sqlFile(s.dir.file("cloud/shared.container"), "SELECT count(*) FROM records WHERE deleted = 0")
        }
        let before = try records()
        XCTAssertEqual(before, "2\n")
        let base = s.configText(["a": "cloud", "b": "local"])
        // (account, secret, expected exit): a member may not (77); a disabled or unregistered account is not
        // available at all (69).
        for (account, secret, code) in [("bob", "bob-secret", Int32(77)), ("carol", "carol-secret", 69),
                                        ("dave", "dave-secret", 69)]
        {
            try s.dir.write("config.yaml", base.replacingOccurrences(of: "account: demo", with: "account: \(account)")
                .replacingOccurrences(of: "secret: demo-secret", with: "secret: \(secret)"))
            chmod(s.dir.file("config.yaml"), 0o600)
            for args in [["cloud", "purge", "--yes"], ["account", "disable", "demo"],
                         ["account", "add", "mallory", "--secret-env", "MALLORY"]]
            {
                let r = try s.run("a", args, env: ["MALLORY": "m-secret"], expect: code)
                XCTAssertTrue(r.stderr.hasPrefix("error: "), "\(account) \(args)\n\(r)")
                if code == 77 {
                    // A purge meets the zone first, which bob has no share of.
                    let noShare = args[1] == "purge" && r.stderr.contains("account 'bob' has no share of zone")
                    XCTAssertTrue(r.stderr.contains("account 'bob' is not an owner of container") || noShare,
                                  r.stderr)
                }
                let json = try s.run("a", ["--json"] + args, env: ["MALLORY": "m-secret"], expect: code)
                XCTAssertTrue(json.stdout.contains("\"code\""), json.stdout)
            }
            XCTAssertEqual(try records(), before, "\(account) changed the container")
            XCTAssertEqual(try owner.listAccounts().map(\.id), ["bob", "carol", "demo"])
        }
        // The owner can.
        try s.dir.write("config.yaml", base)
        chmod(s.dir.file("config.yaml"), 0o600)
        try s.run("a", ["cloud", "purge", "--yes"])
        XCTAssertEqual(try records(), "0\n")
    }
}
