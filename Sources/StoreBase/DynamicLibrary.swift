#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A C library opened with `dlopen` on first use rather than linked (libpq, libcrypto): a command that never needs
/// it does not pay for mapping it, and a machine without it still runs every other command.
///
///     let lib = try DynamicLibrary.open("libpq.so.5")
///     let finish: @convention(c) (OpaquePointer?) -> Void = try lib.function("PQfinish")
public struct DynamicLibrary: @unchecked Sendable {
    // @unchecked Sendable: the handle is never closed nor changed after `open`, and `dlsym` may be called from any
    // thread.

    /// Why a library or one of its functions could not be had: the loader's message, or the missing name.
    public struct Failure: Error, Equatable {
        public var reason: String
    }

    /// The file that was opened (a path, or a name the loader searched for).
    public let path: String
    private let handle: UnsafeMutableRawPointer

    private init(path: String, handle: UnsafeMutableRawPointer) {
        self.path = path
        self.handle = handle
    }

    /// Opens `path`. "RTLD_NOW: all undefined symbols in the shared object are resolved before dlopen() returns";
    /// "RTLD_LOCAL: symbols defined in this shared object are not made available to resolve references in
    /// subsequently loaded shared objects." The handle is never closed: the function pointers stay valid for the
    /// life of the process.
    /// - Throws: `Failure` with the loader's message.
    public static func open(_ path: String) throws(Failure) -> DynamicLibrary {
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            throw Failure(reason: dlerror().map { String(cString: $0) } ?? "dlopen failed")
        }
        return DynamicLibrary(path: path, handle: handle)
    }

    /// The C function `name`, as the function type `F` the caller declares from the library's header.
    /// "dlsym() returns the address of the code or data location specified by the null-terminated character string
    /// symbol"; NULL when it is not found.
    /// - Throws: `Failure` naming the function when the library lacks it.
    public func function<F>(_ name: String) throws(Failure) -> F {
        guard let address = dlsym(handle, name) else {
            throw Failure(reason: "it has no function \(name)")
        }
        return unsafeBitCast(address, to: F.self)
    }
}
