import Dispatch
import StoreBase
import StoreCloud

/// One call running on a serial queue, whose result the caller collects later (`value()`), so that the caller's
/// own work overlaps it. The caller waits for it before it uses what the call uses (the cloud connection) again.
final class BackgroundCall<T>: @unchecked Sendable {
    // Written once on the queue before `done` is signalled, read only after waiting for `done`.
    private var result: Result<T, any Error>?
    private let done = DispatchSemaphore(value: 0)
    private var waited = false

    /// Starts `body` on `queue`; with `queue` nil, runs it at once on this thread.
    init(on queue: DispatchQueue?, _ body: @escaping @Sendable () throws -> T) {
        guard let queue else {
            result = Result { try body() }
            waited = true
            return
        }
        queue.async {
            self.result = Result { try body() }
            self.done.signal()
        }
    }

    /// Waits for the call to end (once; later calls return at once).
    func wait() {
        if waited { return }
        done.wait()
        waited = true
    }

    /// The call's result, after waiting for it.
    /// - Throws: the call's error.
    func value() throws -> T {
        wait()
        return try (result ?? .failure(StoreError(.software, "a background call ended without a result"))).get()
    }
}

/// The cloud, handed to a background call: the caller uses it from one thread at a time, waiting for the call
/// before it uses the cloud itself.
struct CloudBox: @unchecked Sendable {
    let cloud: any CloudDatabase
}

/// Every page of a zone's changes after a token, each handed to the caller in order while the next one is fetched
/// on a thread of its own (through the cloud's own connection, when it has one: `fetchesConcurrently`).
public enum ChangePages {
    /// Calls `body` with each page of `zone`'s changes after `token`, the last one included. `trace` names the
    /// fetches in `STORECTL_TRACE` output.
    /// - Throws: `CloudError`, or `body`'s error (no fetch is left running).
    public static func forEach(cloud: any CloudDatabase, zone: String, after token: ServerChangeToken?, limit: Int,
                               excludingDevice device: String?, trace: String,
                               _ body: (ChangeBatch) throws -> Void) throws
    {
        let queue = cloud.fetchesConcurrently ? DispatchQueue(label: "storectl.fetch") : nil
        let box = CloudBox(cloud: cloud)
        func fetch(after token: ServerChangeToken?) -> BackgroundCall<ChangeBatch> {
            BackgroundCall(on: queue) {
                let tFetch = Trace.start()
                defer { Trace.add(trace, tFetch) }
                return try box.cloud.fetchChanges(zone: zone, since: token, limit: limit, excludingDevice: device)
            }
        }
        var inFlight: BackgroundCall<ChangeBatch>? = fetch(after: token)
        defer { inFlight?.wait() }
        while let flight = inFlight {
            let tWait = Trace.start()
            let batch = try flight.value()
            Trace.add(trace + "-wait", tWait)
            inFlight = batch.moreComing ? fetch(after: batch.token) : nil
            try body(batch)
        }
    }
}
