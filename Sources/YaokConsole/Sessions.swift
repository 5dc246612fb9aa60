import CSodium
import Foundation

/// Logged-in browsers: an unguessable session token (the cookie) and its CSRF token, which
/// every state-changing request must repeat in its form. Kept in memory only: a hub restart
/// logs everyone out, which is what an operator expects of a box they power-cycle.
// @unchecked: the sessions only under `lock`.
public final class SessionStore: @unchecked Sendable {
    public struct Session: Sendable {
        public let csrf: String
        public var expires: Double
    }
    /// Sessions at once; a new login beyond it drops the one closest to expiring.
    public static let maxSessions = 64

    private var sessions: [String: Session] = [:]
    private let lock = NSLock()
    private let lifetime: Double
    private let now: @Sendable () -> Double

    public init(lifetimeSeconds: Double, now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.lifetime = lifetimeSeconds
        self.now = now
    }

    /// 32 random bytes as 64 hex digits.
    public static func randomToken() -> String {
        _ = sodium_init()
        var bytes = [UInt8](repeating: 0, count: 32)
        randombytes_buf(&bytes, bytes.count)
        return bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// A new session: its token (for the cookie) and CSRF token.
    public func create() -> (token: String, session: Session) {
        let token = Self.randomToken()
        let session = Session(csrf: Self.randomToken(), expires: now() + lifetime)
        lock.withLock {
            let t = now()
            sessions = sessions.filter { $0.value.expires > t }
            if sessions.count >= Self.maxSessions, let first = sessions.min(by: { $0.value.expires < $1.value.expires })?.key {
                sessions[first] = nil
            }
            sessions[token] = session
        }
        return (token, session)
    }

    /// The live session for a cookie token, its lifetime renewed (sliding expiry).
    public func session(token: String?) -> Session? {
        guard let token, token.count == 64 else { return nil }
        return lock.withLock {
            guard var s = sessions[token] else { return nil }
            let t = now()
            guard s.expires > t else { sessions[token] = nil; return nil }
            s.expires = t + lifetime
            sessions[token] = s
            return s
        }
    }

    public func remove(token: String?) {
        guard let token else { return }
        lock.withLock { sessions[token] = nil }
    }

    /// Constant-time comparison of a submitted CSRF token with the session's.
    public static func csrfMatches(_ submitted: String?, _ expected: String) -> Bool {
        guard let submitted else { return false }
        let a = Array(submitted.utf8), b = Array(expected.utf8)
        guard a.count == b.count, !a.isEmpty else { return false }
        return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in sodium_memcmp(pa.baseAddress, pb.baseAddress, a.count) == 0 } }
    }
}
