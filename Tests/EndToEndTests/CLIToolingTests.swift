import Foundation
import TestSupport
import XCTest

/// help, completions, man, config path and the config search, --verbose.
final class CLIToolingTests: XCTestCase {
    let twoStores = """
        version: 1
        stores:
          alpha:
            path: alpha.sqlite
          beta:
            path: beta.sqlite
        """

    func testHelpCommandPrintsWhatHelpOptionPrints() throws {
        let dir = try TempDirectory()
        for words in [["mode"], ["history", "consumer", "advance"], [], ["cloud", "schema"]] {
            let help = try Binary.storectl(["help"] + words, in: dir.path)
            let option = try Binary.storectl(words + ["--help"], in: dir.path)
            XCTAssertEqual(help.status, 0, "\(help)")
            XCTAssertEqual(help.stdout, option.stdout, "help \(words)")
        }
        let unknown = try Binary.storectl(["help", "mdoe"], in: dir.path)
        XCTAssertEqual(unknown.status, 64)
        XCTAssertEqual(unknown.stderr, """
            error: unknown command 'mdoe'
            hint: did you mean 'storectl help mode'?
            usage: storectl help [<command>...] [options]

            """)
        // One hint per error, and the usage line of the command the error is about.
        let option = try Binary.storectl(["history", "consumer", "add"], in: dir.path)
        XCTAssertEqual(option.status, 64)
        XCTAssertEqual(option.stderr.components(separatedBy: "hint:").count, 2, option.stderr)
        XCTAssertTrue(option.stderr.contains("usage: storectl history consumer add <name> [options]"), option.stderr)
        // history runs without a subcommand: its usage says the subcommand is optional.
        let history = try Binary.storectl(["help", "history"], in: dir.path)
        XCTAssertTrue(history.stdout.contains("USAGE: storectl history [<subcommand>] [options]"), history.stdout)
        // The root help lists the environment variables.
        let root = try Binary.storectl(["help"], in: dir.path)
        for variable in ["STORECTL_CONFIG", "NO_COLOR", "STORECTL_LOG", "XDG_CONFIG_HOME"] {
            XCTAssertTrue(root.stdout.contains("\n  \(variable) "), variable)
        }
        // Placeholders are <name> style everywhere.
        for named in try allCommandPaths(dir) {
            let text = try Binary.storectl(named + ["--help"], in: dir.path).stdout
            let usage = text.split(separator: "\n").first { $0.hasPrefix("USAGE: ") } ?? ""
            XCTAssertNil(String(usage.dropFirst(7)).range(of: #"\b[A-Z]{2,}\b"#, options: .regularExpression),
                         "\(named): \(usage)")
        }
    }

    /// Every command path, from the bash completion table.
    func allCommandPaths(_ dir: TempDirectory) throws -> [[String]] {
        let script = try Binary.storectl(["completions", "bash"], in: dir.path).stdout
        return script.split(separator: "\n").compactMap { line -> [String]? in
            let t = line.trimmingCharacters(in: .whitespaces)
            guard t.hasPrefix("\""), let end = t.dropFirst().firstIndex(of: "\"") else { return nil }
            let path = t[t.index(after: t.startIndex)..<end]
            return path.isEmpty ? nil : path.split(separator: " ").map(String.init)
        }
    }

    func testBashCompletionLoadsAndCompletesCommandsAndStoreNames() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", twoStores)
        let script = try Binary.storectl(["completions", "bash"], in: dir.path)
        XCTAssertEqual(script.status, 0)
        try dir.write("storectl.bash", script.stdout)
        XCTAssertEqual(try Binary.run("/bin/bash", ["-n", dir.file("storectl.bash")], in: dir.path).status, 0)
        let path = Binary.productsDirectory + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "")
        func complete(_ words: [String]) throws -> String {
            let quoted = words.map { "'\($0)'" }.joined(separator: " ")
            let r = try Binary.run("/bin/bash", ["-c", """
                source storectl.bash
                complete -p storectl
                COMP_WORDS=(\(quoted)); COMP_CWORD=\(words.count - 1); _storectl; echo "${COMPREPLY[*]}"
                """], in: dir.path, environment: ["PATH": path])
            XCTAssertEqual(r.status, 0, "\(r)")
            XCTAssertTrue(r.stdout.hasPrefix("complete -F _storectl storectl\n"), r.stdout)
            return String(r.stdout.split(separator: "\n").last ?? "")
        }
        XCTAssertEqual(try complete(["storectl", "--store", ""]), "alpha beta")
        XCTAssertEqual(try complete(["storectl", "hist"]), "history")
        XCTAssertTrue(try complete(["storectl", "history", "consumer", ""]).hasPrefix("add list advance drop"))
        XCTAssertEqual(try complete(["storectl", "sync", "--reu"]), "--reupload")
        XCTAssertEqual(try complete(["storectl", "mode", "cl"]), "cloud")
    }

    func testZshAndFishCompletionsParse() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", twoStores)
        for (shell, program) in [("zsh", "/usr/bin/zsh"), ("fish", "/usr/bin/fish")] {
            // zsh and fish come from Debian packages (scripts/install-deps.sh installs them).
            XCTAssertTrue(FileManager.default.isExecutableFile(atPath: program), "\(program) is not installed")
            let script = try Binary.storectl(["completions", shell], in: dir.path)
            XCTAssertEqual(script.status, 0)
            let file = try dir.write("storectl.\(shell)", script.stdout)
            let check = try Binary.run(program, ["-n", file], in: dir.path)
            XCTAssertEqual(check.status, 0, "\(shell) -n: \(check)")
        }
        let path = Binary.productsDirectory + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "")
        let fish = try Binary.run("/usr/bin/fish", ["-c", "source storectl.fish; complete -C 'storectl --store '"],
                                  in: dir.path, environment: ["PATH": path])
        XCTAssertEqual(fish.stdout.split(separator: "\n").map { String($0.split(separator: "\t")[0]) },
                       ["alpha", "beta"], "\(fish)")
        let zsh = try Binary.run("/usr/bin/zsh", ["-c", "autoload -Uz compinit && compinit -u -D && "
                                                  + "source ./storectl.zsh && whence -w _storectl"],
                                 in: dir.path, environment: ["PATH": path, "HOME": dir.path])
        XCTAssertTrue(zsh.stdout.contains("_storectl: function"), "\(zsh)")
        let bad = try Binary.storectl(["completions", "tcsh"], in: dir.path)
        XCTAssertEqual(bad.status, 64)
    }

    func testManPageRendersWithMan() throws {
        let dir = try TempDirectory()
        let page = try Binary.storectl(["man"], in: dir.path)
        XCTAssertEqual(page.status, 0)
        XCTAssertTrue(page.stdout.hasPrefix(".TH STORECTL 1"), page.stdout)
        let file = try dir.write("storectl.1", page.stdout)
        let man = try Binary.run("/usr/bin/man", ["-l", file], in: dir.path,
                                 environment: ["MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "100"])
        XCTAssertEqual(man.status, 0, "\(man)")
        // From the same help text: every command and the environment are there.
        for text in ["SYNOPSIS", "cloud schema", "history consumer advance", "STORECTL_CONFIG", "EXIT STATUS",
                     "--config <path>"] {
            XCTAssertTrue(man.stdout.contains(text), "man page lacks \(text)")
        }
        let warnings = try Binary.run("/bin/sh", ["-c", "groff -man -Tutf8 -ww -z storectl.1 2>&1"], in: dir.path)
        XCTAssertEqual(warnings.stdout, "", "groff warnings")
    }

    func testConfigSearchAndConfigPath() throws {
        let dir = try TempDirectory()
        try dir.write("home/.config/storectl/config.yaml", "version: 1\nstores:\n  xdg:\n    path: x.sqlite\n")
        try dir.write("work/.keep", "")
        let env = ["HOME": dir.file("home")]
        // Nothing in the folder: $XDG_CONFIG_HOME (default ~/.config)/storectl/config.yaml.
        let xdg = try Binary.storectl(["config", "path"], in: dir.file("work"), environment: env)
        XCTAssertEqual(xdg.status, 0, "\(xdg)")
        XCTAssertEqual(xdg.stdout, dir.file("home/.config/storectl/config.yaml") + "\n")
        XCTAssertEqual(try Binary.storectl(["config", "validate"], in: dir.file("work"), environment: env).stdout
                           .hasSuffix("ok (1 store: xdg)\n"), true)
        // ./config.yaml comes first.
        try dir.write("work/config.yaml", twoStores)
        let json = try Binary.storectl(["--json", "config", "path"], in: dir.file("work"), environment: env)
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["source"] as? String, "working_directory")
        XCTAssertEqual(doc["version"] as? Int, 1)
        // $STORECTL_CONFIG, then --config, come before both.
        let named = try Binary.storectl(["--json", "config", "path"], in: dir.file("work"),
                                        environment: env.merging(["STORECTL_CONFIG": "elsewhere.yaml"]) { $1 })
        XCTAssertEqual(named.status, 66)
        let none = try Binary.storectl(["config", "path"], in: dir.path, environment: ["HOME": dir.file("nohome")])
        XCTAssertEqual(none.status, 66)
        XCTAssertTrue(none.stderr.contains("searched: config.yaml, "), none.stderr)
        // XDG_CONFIG_HOME moves the last place.
        try dir.write("xdg/storectl/config.yaml", "version: 1\nstores:\n  other:\n    path: o.sqlite\n")
        let moved = try Binary.storectl(["config", "path"], in: dir.path,
                                        environment: ["XDG_CONFIG_HOME": dir.file("xdg")])
        XCTAssertEqual(moved.stdout, dir.file("xdg/storectl/config.yaml") + "\n")
    }

    func testVerboseAndStoreLogDebugPrintLogLinesOnStderrOnly() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", "version: 1\nstores:\n  a:\n    path: a.sqlite\n")
        XCTAssertEqual(try Binary.storectl(["init"], in: dir.path).status, 0)
        let quiet = try Binary.storectl(["--json", "status"], in: dir.path)
        XCTAssertFalse(quiet.stderr.contains("level=debug"))
        for (args, env) in [(["--verbose", "--json", "status"], [String: String]()),
                            (["--json", "status"], ["STORECTL_LOG": "debug"])] {
            let r = try Binary.storectl(args, in: dir.path, environment: env)
            XCTAssertEqual(r.status, 0, "\(r)")
            XCTAssertTrue(r.stderr.contains("level=debug event=command config="), r.stderr)
            XCTAssertTrue(r.stderr.contains(" path=\"storectl status\""), r.stderr)
            XCTAssertTrue(r.stderr.contains("event=store name=a"), r.stderr)
            XCTAssertTrue(r.stderr.contains("event=exit code=0"), r.stderr)
            // stdout is still one JSON document.
            XCTAssertNotNil(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        }
    }

    /// Colour only on a terminal, never under NO_COLOR or --no-color, and never in data piped from stdout.
    func testColourOnlyOnATerminalAndNeverUnderNoColor() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", "version: 1\nstores:\n  a:\n    path: a.sqlite\n")
        XCTAssertEqual(try Binary.storectl(["init"], in: dir.path).status, 0)
        let escape = "\u{1B}["
        // script(1) gives the command a terminal for stdout and stderr.
        func onTerminal(_ command: String, _ env: [String: String]) throws -> ProcessResult {
            try Binary.run("/usr/bin/script", ["-qec", command, "/dev/null"], in: dir.path, environment: env)
        }
        let coloured = try onTerminal("\(Binary.storectl) status", ["NO_COLOR": ""])
        XCTAssertTrue(coloured.stdout.contains(escape + "1mstore") || coloured.stdout.contains(escape + "1ma"),
                      coloured.stdout)
        XCTAssertFalse(try onTerminal("\(Binary.storectl) status", ["NO_COLOR": "1"]).stdout.contains(escape))
        XCTAssertFalse(try onTerminal("\(Binary.storectl) --no-color status", ["NO_COLOR": ""]).stdout.contains(escape))
        // stdout piped, stderr on the terminal: the data has no colour.
        let piped = try onTerminal("\(Binary.storectl) status | cat -v", ["NO_COLOR": ""])
        XCTAssertFalse(piped.stdout.contains("^["), piped.stdout)
        let plain = try Binary.storectl(["status"], in: dir.path, environment: ["NO_COLOR": ""])
        XCTAssertFalse(plain.stdout.contains(escape) || plain.stderr.contains(escape))
    }

    /// Human status: one aligned block per store, words instead of enum names, the last sync relative to now.
    func testHumanStatusIsAnAlignedBlockInWords() throws {
        let dir = try TempDirectory()
        try dir.write("config.yaml", """
            version: 1
            stores:
              a:
                path: a.sqlite
                cloud:
                  container: iCloud.com.example.words
                  url: file:c.container
                  create_if_missing: true
                  account: demo
                  secret: ${W:-demo-secret}
              b:
                path: b.sqlite
                cloud:
                  container: iCloud.com.example.words
                  url: file:c.container
                  account: nobody
                  secret: ${W:-demo-secret}
            """)
        XCTAssertEqual(try Binary.storectl(["--store", "a", "mode", "cloud"], in: dir.path).status, 0)
        XCTAssertEqual(try Binary.storectl(["--store", "b", "init"], in: dir.path).status, 0)
        let r = try Binary.storectl(["status", "--check-cloud"], in: dir.path)
        XCTAssertEqual(r.status, 0, "\(r)")
        let blocks = r.stdout.components(separatedBy: "\n\n")
        XCTAssertEqual(blocks.count, 2, r.stdout)
        XCTAssertTrue(blocks[0].hasPrefix("store a  "), r.stdout)
        XCTAssertTrue(blocks[0].contains("\n  last sync       just now (20"), r.stdout)
        XCTAssertTrue(blocks[0].contains("\n  account         demo: available\n"), r.stdout)
        XCTAssertTrue(blocks[0].contains("\n  reachable       yes"), r.stdout)
        XCTAssertTrue(blocks[1].contains("\n  account         nobody: no account\n"), r.stdout)
        XCTAssertTrue(blocks[1].contains("\n  last sync       never\n"), r.stdout)
        // Every labelled line of a block starts its value in the same column, and none runs past 120 characters.
        for block in blocks {
            let lines = block.split(separator: "\n").dropFirst().filter { !$0.hasPrefix("  !") }
            let columns = Set(lines.compactMap { line -> Int? in
                guard let value = line.dropFirst(2).firstRange(of: "  ") else { return nil }
                var i = value.upperBound
                while i < line.endIndex, line[i] == " " { i = line.index(after: i) }
                return line.distance(from: line.startIndex, to: i)
            })
            XCTAssertEqual(columns.count, 1, block)
            for line in block.split(separator: "\n") where !line.hasPrefix("  !") && !line.hasPrefix("store ") {
                XCTAssertLessThanOrEqual(line.count, 120, String(line))
            }
        }
        XCTAssertFalse(r.stdout.contains("noAccount") || r.stdout.contains("couldNotDetermine"), r.stdout)
    }
}
