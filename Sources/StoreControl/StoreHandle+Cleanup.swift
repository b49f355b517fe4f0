import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreConfig

/// The files and folders an operation may create (a store file, a container file, their folders), noted before it
/// starts so that a refusal can remove exactly what it made: every refusal leaves the directory as it was.
struct CreatedFiles {
    /// Each path that did not exist before, with the SQLite files that go with it.
    private var candidates: [String] = []
    /// Folders that did not exist before, deepest first.
    private var folders: [String] = []

    /// Notes which of `paths` (and of their folders) do not exist yet.
    init(_ paths: [String]) {
        for path in paths where !Self.exists(path) {
            candidates += [path, path + "-wal", path + "-shm", path + "-journal"]
            var folder = Path.parent(path)
            while !folder.isEmpty, folder != "/", !Self.exists(folder) {
                if !folders.contains(folder) { folders.append(folder) }
                folder = Path.parent(folder)
            }
        }
        folders.sort { $0.count > $1.count }
    }

    /// Removes what was created since `init`: the files, then the folders that are empty.
    func removeCreated() {
        for path in candidates where Self.exists(path) { unlink(path) }
        for folder in folders { rmdir(folder) }
    }

    private static func exists(_ path: String) -> Bool {
        var st = stat()
        return lstat(path, &st) == 0
    }
}

extension StoreHandle {
    /// Runs `body`; when it throws, closes the store and removes the store file, the container file (unless
    /// `container` is false) and the folders that did not exist before it ran, then rethrows.
    public func leavingNothingBehind<T>(container: Bool = true, _ body: () throws -> T) throws -> T {
        var paths = [settings.path]
        if container, let url = settings.cloud?.url,
           case .file(let container)? = try? CloudConnector.backend(of: url)
        {
            paths.append(container)
        }
        let created = CreatedFiles(paths)
        do {
            return try body()
        } catch {
            close()
            created.removeCreated()
            throw error
        }
    }
}
