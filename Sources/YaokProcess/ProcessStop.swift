import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

extension Process {
    /// Stops a child with a bound: SIGTERM, then SIGKILL if it is still running after
    /// `seconds` (and at most 5 s more for that). Whether it stopped on the SIGTERM, so a
    /// caller can report a child that ignores it.
    @discardableResult
    public func terminateWithin(seconds: TimeInterval = 10) -> Bool {
        func exited(within s: TimeInterval) -> Bool {
            let deadline = Date().addingTimeInterval(s)
            while isRunning && Date() < deadline { usleep(20_000) }
            return !isRunning
        }
        guard isRunning else { return true }
        terminate()
        if exited(within: seconds) { return true }
        kill(processIdentifier, SIGKILL)
        _ = exited(within: 5)
        return false
    }
}
