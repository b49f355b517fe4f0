import Foundation

/// A process that runs while the test goes on (`storectl watch`), whose output the test reads as it comes.
public final class BackgroundProcess: @unchecked Sendable {
    // @unchecked: `lock` guards the buffers, which the reader threads fill while the test reads them.
    private let process = Process()
    private let lock = NSLock()
    private var outData = Data()
    private var errData = Data()
    private let readers = DispatchGroup()
    public let arguments: [String]

    /// Starts `program args...` in `directory`; the environment is PATH, HOME, TMPDIR, NO_COLOR=1 plus
    /// `environment`, as `Binary.run` gives.
    public init(_ program: String, _ args: [String], in directory: String, environment: [String: String] = [:]) throws {
        arguments = args
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = args
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.environment = Binary.childEnvironment(adding: environment)
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        for (pipe, isOut) in [(out, true), (err, false)] {
            readers.enter()
            DispatchQueue.global().async { [self] in
                let handle = pipe.fileHandleForReading
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }
                    lock.lock()
                    if isOut { outData.append(chunk) } else { errData.append(chunk) }
                    lock.unlock()
                }
                readers.leave()
            }
        }
    }

    /// Runs the built storectl.
    public static func storectl(_ args: [String], in directory: String, environment: [String: String] = [:]) throws
        -> BackgroundProcess
    {
        try BackgroundProcess(Binary.storectl, args, in: directory, environment: environment)
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    public var pid: Int32 { process.processIdentifier }
    public var isRunning: Bool { process.isRunning }

    /// Everything written to stdout so far.
    public var stdout: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: outData, as: UTF8.self)
    }

    /// Everything written to stderr so far.
    public var stderr: String {
        lock.lock()
        defer { lock.unlock() }
        return String(decoding: errData, as: UTF8.self)
    }

    /// The complete lines of stdout so far.
    public var lines: [String] {
        let text = stdout
        var lines = text.components(separatedBy: "\n")
        lines.removeLast()  // the part after the last newline (empty when the output ends with one)
        return lines
    }

    /// stdout's lines parsed as JSON objects (lines that are not JSON objects are left out).
    public var jsonLines: [[String: Any]] {
        lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// Waits until `condition` holds (checked every 50 ms) or `timeout` seconds pass; returns whether it held.
    @discardableResult
    public func wait(upTo timeout: Double, until condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return condition()
    }

    /// Waits for a JSON line matching `predicate`; returns it, or nil after `timeout` seconds.
    public func waitForEvent(upTo timeout: Double, _ predicate: ([String: Any]) -> Bool) -> [String: Any]? {
        var found: [String: Any]?
        wait(upTo: timeout) {
            found = jsonLines.first(where: predicate)
            return found != nil
        }
        return found
    }

    /// Sends `signal` to the process.
    public func send(_ signal: Int32) {
        kill(process.processIdentifier, signal)
    }

    /// Waits for the process to exit, up to `timeout` seconds; returns its status (128 + N when killed by signal
    /// N), or nil when it is still running.
    public func waitForExit(upTo timeout: Double) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { return nil }
        readers.wait()
        return process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus
            : process.terminationStatus
    }

    /// stdout, stderr and the arguments, for failure messages.
    public var transcript: String {
        "storectl \(arguments.joined(separator: " "))\n--- stdout\n\(stdout)--- stderr\n\(stderr)"
    }
}
