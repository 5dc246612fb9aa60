import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension Process {
    /// Stops a child with a bound: SIGTERM, then SIGKILL if it is still running after
    /// `seconds`. Whether it stopped on the SIGTERM (a test can assert that it did).
    @discardableResult
    public func terminateWithin(seconds: TimeInterval = 10) -> Bool {
        guard isRunning else { return true }
        terminate()
        if Wait.poll(timeout: seconds, { !self.isRunning }) { return true }
        kill(processIdentifier, SIGKILL)
        _ = Wait.poll(timeout: 5) { !self.isRunning }
        return false
    }
}
