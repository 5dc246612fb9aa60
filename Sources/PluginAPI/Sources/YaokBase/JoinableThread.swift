import Foundation

/// A named thread its owner can wait for. A transport's `stop()` waits for its threads, so no
/// host callback comes after `stop()` returns (the ABI rule: `destroy` follows, and the host's
/// table goes with it). Waiting is skipped on the thread itself, i.e. when `stop()` is called
/// from one of its callbacks, where it would deadlock.
// @unchecked: `id` only under `lock`; the rest is immutable or thread-safe.
public final class JoinableThread: @unchecked Sendable {
    private let name: String
    private let body: @Sendable () -> Void
    private let exited = DispatchSemaphore(value: 0)
    private let lock = NSLock()
    private var id: pthread_t?

    /// A thread named `name` that runs `body` once ``start()`` is called, so the owner can
    /// keep it first and a concurrent `stop()` always finds it.
    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        self.name = name
        self.body = body
    }

    public func start() {
        let t = Thread { [self] in
            lock.withLock { id = pthread_self() }
            body()
            exited.signal()
        }
        t.name = name
        t.start()
    }

    /// Waits up to `timeout` seconds for the body to return; at once when called on the
    /// thread itself. Whether it has returned (true on the thread itself).
    @discardableResult
    public func join(timeout: Double) -> Bool {
        if let id = lock.withLock({ id }), pthread_equal(id, pthread_self()) != 0 { return true }
        guard exited.wait(timeout: .now() + timeout) == .success else { return false }
        exited.signal()   // a later join returns at once too
        return true
    }
}
