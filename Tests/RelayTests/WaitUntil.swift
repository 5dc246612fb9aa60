import Foundation

/// Polls a condition that has no event to wait on (another process's metrics or files),
/// every 50 ms, for at most `timeout` seconds; returns whether it came true.
func waitUntil(timeout: TimeInterval = 10, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if condition() { return true }
        Thread.sleep(forTimeInterval: 0.05)
    }
    return condition()
}
