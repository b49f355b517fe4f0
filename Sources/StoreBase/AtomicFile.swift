import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes files so that a reader sees either the old contents or the new, never a mix.
public enum AtomicFile {
    /// Replaces the file at `path` with `bytes`: a temp file in the same folder, fsync, rename, fsync of the folder.
    ///
    /// The permissions of an existing file are kept. `beforeRename` runs after the temp file is durable and before
    /// it replaces the old file (tests use it for failpoints). With `durable: false` nothing is fsynced: readers still
    /// see the old file or the new one whole, but a crash of the machine may leave either (for files written again
    /// soon, like a metrics file).
    /// - Throws: `StoreError` with exit 73 (cannot create) or 74 (I/O) naming the path.
    public static func write(_ bytes: [UInt8], to path: String, durable: Bool = true,
                             beforeRename: () -> Void = {}) throws
    {
        let dir = Path.parent(path)
        let folder = dir.isEmpty ? "." : dir
        var mode: mode_t = 0o644
        var st = stat()
        if stat(path, &st) == 0 { mode = st.st_mode & 0o7777 }
        var template = Array("\(folder)/.\(Path.lastComponent(path)).tmp-XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { buffer -> Int32 in
            guard let base = buffer.baseAddress else { return -1 }
            return mkstemp(base)
        }
        guard fd >= 0 else {
            throw StoreError(.cantCreate, "cannot create a temporary file in \(folder): \(errnoText())",
                             hint: "check that the folder exists and is writable")
        }
        let tmpPath = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var ok = false
        defer {
            if !ok { unlink(tmpPath) }
        }
        do {
            defer { close(fd) }
            var offset = 0
            while offset < bytes.count {
                let n = bytes.withUnsafeBytes { raw -> Int in
                    guard let base = raw.baseAddress else { return 0 }
                    return Glibc.write(fd, base + offset, raw.count - offset)
                }
                if n < 0 {
                    if errno == EINTR { continue }
                    throw StoreError(.ioError, "cannot write \(tmpPath): \(errnoText())",
                                     hint: "check free disk space; \(path) was not changed")
                }
                offset += n
            }
            guard fchmod(fd, mode) == 0, !durable || fsync(fd) == 0 else {
                throw StoreError(.ioError, "cannot sync \(tmpPath): \(errnoText())",
                                 hint: "check free disk space; \(path) was not changed")
            }
        }
        beforeRename()
        guard rename(tmpPath, path) == 0 else {
            throw StoreError(.cantCreate, "cannot replace \(path): \(errnoText())",
                             hint: "check the permissions of \(folder)")
        }
        ok = true
        if durable { syncFolder(folder) }
    }

    /// Makes the entries of `folder` (a rename, a new or removed file) durable: fsync(2) of the folder itself.
    public static func syncFolder(_ folder: String) {
        let dfd = open(folder.isEmpty ? "." : folder, O_RDONLY)
        if dfd >= 0 {
            _ = fsync(dfd)
            close(dfd)
        }
    }

    /// The text of the current `errno`.
    public static func errnoText() -> String { String(cString: strerror(errno)) }
}
