import Foundation
import XCTest

/// The layering of docs/ARCHITECTURE.md, checked on the sources: what each module may import, that no library
/// reads the process environment itself (debug switches aside), and that every executable declares what it imports.
final class ArchitectureTests: XCTestCase {
    private static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The storectl modules each module may import (system modules and C targets aside). The same table as
    /// docs/ARCHITECTURE.md.
    static let mayImport: [String: Set<String>] = [
        "StoreBase": [],
        "StoreCrypto": ["StoreBase"],
        "StoreSQLite": ["StoreCrypto", "StoreBase"],
        "StoreConfig": ["StoreBase"],
        "StoreHistory": ["StoreSQLite", "StoreBase"],
        "StoreCloud": ["StoreSQLite", "StoreCrypto", "StoreBase"],
        "StoreCloudPostgres": ["StoreCloud", "StoreBase"],
        "StoreMirror": ["StoreHistory", "StoreCloud", "StoreCrypto", "StoreSQLite", "StoreBase"],
        "StoreControl": ["StoreConfig", "StoreMirror", "StoreHistory", "StoreCloud", "StoreCloudPostgres", "StoreCrypto",
                         "StoreSQLite", "StoreBase"],
        "StoreCLI": ["StoreControl", "StoreConfig", "StoreCloud", "StoreHistory", "StoreMirror", "StoreSQLite",
                     "StoreBase"],
        "storectl": ["StoreCLI", "StoreBase"],
    ]

    /// The C targets each module may import: C types stay inside the module that wraps the library.
    static let mayImportC: [String: Set<String>] = [
        "StoreSQLite": ["CSQLite"], "StoreConfig": ["CYAML"], "StoreCloudPostgres": ["CLibPQ"], "StoreCrypto": ["CCrypto"],
    ]

    /// Where library code may read the process environment: the debug switches, each read once where it acts
    /// (docs/ARCHITECTURE.md lists them). Everything else gets the environment from the CLI.
    static let debugSwitches: [String: String] = [
        "StoreBase/Failpoint.swift": "STORECTL_FAILPOINT",
        "StoreBase/Trace.swift": "STORECTL_TRACE",
        "StoreSQLite/Connection.swift": "STORECTL_TRACE_SQL",
        "StoreCloudPostgres/LibPQ.swift": "STORECTL_LIBPQ",
        "StoreCrypto/LibCrypto.swift": "STORECTL_LIBCRYPTO",
        "storectl/main.swift": "STORECTL_TRACE",
    ]

    private func sources(of module: String) throws -> [(path: String, text: String)] {
        let folder = Self.root.appendingPathComponent("Sources/\(module)")
        guard let walker = FileManager.default.enumerator(atPath: folder.path) else { return [] }
        var files: [(String, String)] = []
        while let name = walker.nextObject() as? String {
            guard name.hasSuffix(".swift") else { continue }
            let url = folder.appendingPathComponent(name)
            files.append(("\(module)/\(name)", try String(contentsOf: url, encoding: .utf8)))
        }
        return files.sorted { $0.0 < $1.0 }
    }

    private func imports(_ text: String) -> Set<String> {
        var found = Set<String>()
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ").map(String.init)
            guard let at = words.firstIndex(of: "import"), at + 1 < words.count,
                  words[..<at].allSatisfy({ ["public", "internal", "private", "@testable", "@_exported"].contains($0) })
            else { continue }
            found.insert(words[at + 1])
        }
        return found
    }

    func testEachModuleImportsOnlyTheLayersBelowIt() throws {
        let ours = Set(Self.mayImport.keys).union(["CSQLite", "CYAML", "CLibPQ", "CCrypto", "storectl-bench"])
        for (module, allowed) in Self.mayImport {
            let files = try sources(of: module)
            XCTAssertFalse(files.isEmpty, "no sources for \(module)")
            for (path, text) in files {
                for name in imports(text) where ours.contains(name) {
                    XCTAssertTrue(allowed.contains(name) || Self.mayImportC[module]?.contains(name) == true,
                                  "\(path) imports \(name), which \(module) may not import (docs/ARCHITECTURE.md)")
                }
            }
        }
    }

    func testNoLibraryReadsTheProcessEnvironmentOutsideItsDebugSwitches() throws {
        // getenv(3), Foundation's copy of the environment, and the C global `environ` itself.
        let readers = [#"\bgetenv\("#, #"ProcessInfo\.processInfo\.environment"#, #"(?<![\w.])environ(?!\w)"#]
        for module in Self.mayImport.keys where module != "StoreCLI" {
            for (path, text) in try sources(of: module) {
                let code = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
                    .joined(separator: "\n")
                for reader in readers where code.range(of: reader, options: .regularExpression) != nil {
                    guard let variable = Self.debugSwitches[path] else {
                        XCTFail("\(path) reads the process environment (\(reader)); take it from the caller instead")
                        continue
                    }
                    XCTAssertTrue(code.contains("\"\(variable)\""), "\(path) may read \(variable) only")
                }
            }
        }
        // The CLI reads it once, where it starts, and passes it down.
        for (path, text) in try sources(of: "StoreCLI") where path != "StoreCLI/CommandLineTool.swift" {
            XCTAssertFalse(text.contains("getenv(") || text.contains("ProcessInfo.processInfo.environment"),
                           "\(path) reads the process environment; use context.environment")
        }
    }

    func testEveryExecutableDeclaresTheModulesItImports() throws {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        for target in ["storectl", "storectl-bench"] {
            guard let start = manifest.range(of: ".executableTarget(name: \"\(target)\", dependencies: [") else {
                return XCTFail("no executable target \(target) in Package.swift")
            }
            let rest = manifest[start.upperBound...]
            let list = rest[..<(rest.firstIndex(of: "]") ?? rest.endIndex)]
            let declared = Set(list.split(separator: ",").map {
                $0.trimmingCharacters(in: CharacterSet(charactersIn: " \n\""))
            })
            let ours = Set(Self.mayImport.keys)
            for (path, text) in try sources(of: target) {
                for name in imports(text) where ours.contains(name) {
                    XCTAssertTrue(declared.contains(name), "\(path) imports \(name); declare it for \(target) in Package.swift")
                }
            }
        }
    }
}
