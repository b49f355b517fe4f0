import Foundation

/// The outcome of running a process.
public struct ProcessResult: CustomStringConvertible {
    public var status: Int32
    public var stdout: String
    public var stderr: String

    public var description: String { "exit \(status)\n--- stdout\n\(stdout)--- stderr\n\(stderr)" }
}

/// Runs the built `storectl` binary, and other programs, for end-to-end tests.
public enum Binary {
    /// The folder holding the built products (`.build/<triple>/debug`).
    public static var productsDirectory: String {
        // The test bundle runs from the products folder, next to the storectl executable.
        let exe = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        var dir = exe.deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.isExecutableFile(atPath: dir.appendingPathComponent("storectl").path) {
                return dir.path
            }
            dir = dir.deletingLastPathComponent()
        }
        return exe.deletingLastPathComponent().path
    }

    /// The path of the built `storectl` executable.
    public static var storectl: String { productsDirectory + "/storectl" }

    /// Runs `storectl args...` in `directory` with `environment` added to a minimal environment.
    public static func storectl(_ args: [String], in directory: String, environment: [String: String] = [:],
                                stdin: String? = nil) throws -> ProcessResult
    {
        try run(storectl, args, in: directory, environment: environment, stdin: stdin)
    }

    /// The environment a test's child process gets: PATH, HOME, TMPDIR, LANG, the PostgreSQL test server's
    /// variables and NO_COLOR=1, plus `environment`.
    public static func childEnvironment(adding environment: [String: String]) -> [String: String] {
        var env: [String: String] = [:]
        let inherited = ProcessInfo.processInfo.environment
        for key in ["PATH", "HOME", "TMPDIR", "LANG", "STORECTL_TEST_PG_URL", "PGHOST", "PGPORT", "PGUSER"] {
            if let v = inherited[key] { env[key] = v }
        }
        env["NO_COLOR"] = "1"
        for (k, v) in environment { env[k] = v }
        return env
    }

    /// Runs `program args...`. The environment is PATH, HOME, TMPDIR plus `environment`.
    public static func run(_ program: String, _ args: [String], in directory: String,
                           environment: [String: String] = [:], stdin: String? = nil) throws -> ProcessResult
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = args
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.environment = childEnvironment(adding: environment)
        let out = Pipe()
        let err = Pipe()
        let inPipe = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = inPipe
        try process.run()
        if let stdin { inPipe.fileHandleForWriting.write(Data(stdin.utf8)) }
        try? inPipe.fileHandleForWriting.close()
        // Read both pipes concurrently so that a chatty child never blocks on a full pipe.
        let errBox = DataBox()
        let group = DispatchGroup()
        group.enter()
        DispatchQueue.global().async {
            errBox.data = err.fileHandleForReading.readDataToEndOfFile()
            group.leave()
        }
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        process.waitUntilExit()
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus
            : process.terminationStatus
        return ProcessResult(status: status, stdout: String(decoding: outData, as: UTF8.self),
                             stderr: String(decoding: errBox.data, as: UTF8.self))
    }
}

final class DataBox: @unchecked Sendable {
    var data = Data()
}

extension Binary {
    /// Runs one SQL text on a PostgreSQL server with `psql` (`program`: its path) at `url`, stopping at the first
    /// error. Tests run side by side on one server: a statement that met another test's update of the same catalog
    /// row (two `GRANT ... ON DATABASE` at once: "tuple concurrently updated") failed whole, and is tried again.
    public static func psql(_ program: String = "/usr/bin/psql", url: String, _ sql: String) throws -> ProcessResult {
        let args = [url, "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-c", sql]
        let directory = FileManager.default.temporaryDirectory.path
        var r = try run(program, args, in: directory)
        for _ in 0..<5 where r.status != 0 && r.stderr.contains("tuple concurrently updated") {
            Thread.sleep(forTimeInterval: 0.2)
            r = try run(program, args, in: directory)
        }
        return r
    }
}
