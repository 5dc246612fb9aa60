#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// The write end of the self-pipe, read by the async-signal-safe handler.
// nonisolated(unsafe): set once in installEarly before any handler is installed (a handler may not lock).
nonisolated(unsafe) private var signalPipeWriteFD: Int32 = -1

/// Reliable signal handling for daemons, with the self-pipe pattern: a real `sigaction`
/// handler, installed first thing in `main`, writes the signal number to a pipe; one thread
/// reads the pipe and runs the Swift handler. Any thread may take the signal (the handler
/// runs wherever it lands), nothing is lost between start-up steps (a signal that arrives
/// before ``start(_:)`` waits in the pipe), and children started later are unaffected
/// (handled signals reset to their default across `exec`, unlike a blocked mask).
public enum SignalWaiter {
    /// The signals the daemons handle.
    public static let handled: [Int32] = [SIGTERM, SIGINT, SIGHUP]
    // nonisolated(unsafe): set once in installEarly, before the reader thread starts.
    nonisolated(unsafe) private static var readFD: Int32 = -1

    /// Installs the handlers. Call first thing in `main`. SIGPIPE is ignored (broken sockets
    /// are errors, not deaths).
    public static func installEarly() {
        guard readFD < 0 else { return }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        readFD = fds[0]
        signalPipeWriteFD = fds[1]
        for sig in handled {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { sig in
                var byte = UInt8(truncatingIfNeeded: sig)
                _ = write(signalPipeWriteFD, &byte, 1)
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(sig, &action, nil)
        }
        signal(SIGPIPE, SIG_IGN)
    }

    /// Starts the thread that runs `handler` for every handled signal.
    public static func start(_ handler: @escaping @Sendable (Int32) -> Void) {
        installEarly()
        let fd = readFD
        let thread = Thread {
            var byte: UInt8 = 0
            while true {
                let n = read(fd, &byte, 1)
                if n == 1 { handler(Int32(byte)) } else if n < 0 && errno == EINTR { continue } else if n <= 0 { return }
            }
        }
        thread.name = "signals"
        thread.start()
    }
}
