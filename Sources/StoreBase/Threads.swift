#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A thread of its own (a POSIX thread, not a pool's), for work that owns a connection from start to end.
///
/// A connection is not `Sendable`: it is opened, used and closed on the one thread that owns it. A dispatch
/// queue or a task may run its pieces on different threads; a `DedicatedThread` runs its body on exactly one.
///
///     let worker = try DedicatedThread(name: "watch notes") { serveStore() }
///     worker.join()
public final class DedicatedThread: Sendable {
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    // Set once in init and only read afterwards (by join, on whichever thread calls it).
    nonisolated(unsafe) private var thread: pthread_t

    /// Starts `body` on a new thread; `name` says what for, in errors.
    /// - Throws: `StoreError` (exit 70) when the system refuses to start a thread.
    public init(name: String, _ body: @escaping @Sendable () -> Void) throws {
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        #if canImport(Glibc)
        var thread = pthread_t()
        #else
        var thread: pthread_t?
        #endif
        let rc = pthread_create(&thread, nil, { raw in
            guard let raw else { return nil }
            let body = Unmanaged<Body>.fromOpaque(raw).takeRetainedValue()
            body.run()
            return nil
        }, box)
        guard rc == 0 else {
            Unmanaged<Body>.fromOpaque(box).release()
            throw StoreError(.software, "cannot start a thread for \(name): \(String(cString: strerror(rc)))",
                             hint: "check the process and thread limits (ulimit -u)")
        }
        #if canImport(Glibc)
        self.thread = thread
        #else
        guard let thread else {
            throw StoreError(.software, "cannot start a thread for \(name)")
        }
        self.thread = thread
        #endif
    }

    /// Waits for the body to return.
    public func join() {
        pthread_join(thread, nil)
    }
}

/// The thread a value belongs to, checked where it is used: a value confined to one thread says so in code.
///
///     let confinement = ThreadConfinement()
///     confinement.check()   // traps when called from another thread
public struct ThreadConfinement: Sendable {
    private let owner: pthread_t

    /// Confines to the calling thread.
    public init() {
        owner = pthread_self()
    }

    /// Whether the calling thread is the owner.
    public var isOwner: Bool { pthread_equal(owner, pthread_self()) != 0 }

    /// Traps unless the calling thread is the owner.
    public func check(_ what: @autoclosure () -> String = "this value",
                      file: StaticString = #fileID, line: UInt = #line)
    {
        precondition(isOwner, "\(what()) is confined to the thread that made it", file: file, line: line)
    }
}

/// Signals, received by a thread of their own rather than by a handler that interrupts whatever runs.
///
/// `block` must come before any other thread starts: threads inherit the signal mask of the thread that starts
/// them, so that afterwards only the listener receives the blocked signals (with `sigwait`), and no handler ever
/// runs in the middle of SQLite or libpq.
public enum ProcessSignals {
    /// Blocks `signals` in the calling thread and in the threads it starts from now on.
    public static func block(_ signals: [Int32]) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Starts a thread that waits for `signals` (which must be blocked) and calls `handler` with each one.
    /// The thread runs until the process exits.
    /// - Throws: `StoreError` when the thread cannot start.
    @discardableResult
    public static func listen(_ signals: [Int32], _ handler: @escaping @Sendable (Int32) -> Void) throws
        -> DedicatedThread
    {
        try DedicatedThread(name: "signals") {
            var set = sigset_t()
            sigemptyset(&set)
            for signal in signals { sigaddset(&set, signal) }
            while true {
                var received: Int32 = 0
                // "The sigwait() function suspends execution of the calling thread until one of the signals
                // specified in the signal set set becomes pending."
                if sigwait(&set, &received) == 0 { handler(received) }
            }
        }
    }
}

/// Process-wide memory settings for long-running commands.
public enum MemoryTuning {
    /// Caps the number of glibc malloc arenas (`mallopt(M_ARENA_MAX, n)`). Call before any thread starts.
    ///
    /// glibc gives threads arenas of their own, up to 8 per core. A process whose threads come and go (the
    /// export's save thread, the hook threads) then spreads its freed memory over many arenas, and its resident
    /// size creeps up for hours although nothing leaks: `storectl watch --all` on three busy stores grew by about
    /// 0.5 MB a minute with the default, and stayed flat with two arenas. Elsewhere this does nothing.
    public static func limitMallocArenas(_ n: Int32) {
        #if canImport(Glibc)
        // mallopt(3) is declared in <malloc.h>, which Swift's Glibc module does not import; it is looked up in the
        // process instead. "M_ARENA_MAX: the value of this parameter specifies the maximum number of arenas";
        // <malloc.h> defines it as -8.
        guard let address = dlsym(nil, "mallopt") else { return }
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        _ = unsafeBitCast(address, to: Mallopt.self)(-8, n)
        #endif
    }

    /// Gives the memory malloc holds free back to the system (`malloc_trim(0)`).
    ///
    /// A long-running process that allocates and frees in many small pieces leaves free holes inside its heaps,
    /// which still count in its resident size: heaptrack shows `storectl watch` on three busy stores with at most
    /// 2 MB in use while its heaps grew by a few MB over ten minutes. "malloc_trim() attempts to release free memory
    /// from the heap ... In glibc 2.8 and later, the function frees memory in all arenas and in all chunks with whole
    /// free pages." Elsewhere this does nothing.
    public static func returnFreeMemory() {
        #if canImport(Glibc)
        guard let address = dlsym(nil, "malloc_trim") else { return }
        typealias MallocTrim = @convention(c) (Int) -> Int32
        _ = unsafeBitCast(address, to: MallocTrim.self)(0)
        #endif
    }
}
