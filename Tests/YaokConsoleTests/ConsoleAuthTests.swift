import Foundation
import Synchronization
import Logging
import XCTest
import YaokPluginKit
@testable import YaokConsole
@testable import YaokHubCore
@testable import YaokRouting
@testable import YaokSupervision
import YaokTesting

/// A backend with fixed status; records toggles.
final class FakeBackend: ConsoleBackend, Sendable {
    static let hubID = String(repeating: "ab", count: 32)
    struct State {
        var toggles: [(String, Bool)] = []
        var refuse: String?
        var reason = "listening on 127.0.0.1:7811"
    }
    /// Set by the test while the console's threads read it.
    let state = Mutex(State())

    func status() -> Hub.StatusReport {
        let t = TransportRuntimeStatus(name: "udp", kind: "udp", enabled: true, pluginPath: "/p/libyaok-plugin-udp.so", pluginVersion: "0.1.0",
                                       status: TransportStatus(state: .running, reason: state.withLock { $0.reason }, links: 1, peers: 2,
                                                               framesIn: 10, framesOut: 11, bytesIn: 1000, bytesOut: 2000),
                                       startFailures: 0, nextRetryInSeconds: nil)
        let router = RouterStatus(policy: "epidemic",
                                  queue: .init(queued: 3, inFlight: 1, handedOver: 0, delivered: 5, expired: 0, bytes: 4096),
                                  store: .init(duplicatesDropped: 0, evicted: 0, expired: 0, evictedHeaviestSender: 0, evictedHeaviestOrigin: 0, conflicts: 0),
                                  counters: Router.Counters(), links: [], lastDelivery: [])
        return Hub.StatusReport(hub: .init(id: Self.hubID, fingerprint: "abab abab", name: "test-hub", config: "/tmp/x.yaml",
                                           dataDirectory: "/tmp", uptimeSeconds: 5, pid: 1),
                                transports: [t], router: router)
    }
    func plugins() -> (directories: [String], plugins: [DiscoveredPlugin]) { (["/p"], []) }
    func identity() -> (fingerprint: String, contact: String?) { ("abab abab", "yaok://contact?v=1&d=AAAA") }
    func setTransport(_ name: String, enabled: Bool) throws {
        if let refuse = state.withLock({ $0.refuse }) { throw ConfigEditor.EditError.cannotEdit(refuse) }
        state.withLock { $0.toggles.append((name, enabled)) }
    }
}

/// One HTTP/1.1 exchange over a plain TCP socket: what a browser would send, read to the end.
struct RawHTTP {
    struct Reply {
        var status: Int
        var headers: [(String, String)]
        var body: String
        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
        func all(_ name: String) -> [String] { headers.filter { $0.0.lowercased() == name.lowercased() }.map(\.1) }
    }

    let port: Int

    func send(_ method: String, _ path: String, headers: [String: String] = [:], body: String = "") throws -> Reply {
        let fd = try Loopback.connectTCP(port: port)
        defer { close(fd) }
        var req = "\(method) \(path) HTTP/1.1\r\nHost: \(headers["Host"] ?? "127.0.0.1:\(port)")\r\nConnection: close\r\n"
        for (k, v) in headers where k != "Host" { req += "\(k): \(v)\r\n" }
        if method == "POST" { req += "Content-Length: \(body.utf8.count)\r\n" }
        req += "\r\n" + body
        Loopback.sendAll(fd, Array(req.utf8))
        // An event stream never ends: stop after its first whole event.
        let data = Loopback.receive(fd) { data in
            let text = String(decoding: data, as: UTF8.self)
            guard let ev = text.range(of: "\nevent: ") else { return false }
            return text[ev.upperBound...].contains("\n\n")
        }.bytes
        let text = String(decoding: data, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw POSIXError(.EPROTO) }
        let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
        let status = Int(lines[0].split(separator: " ")[1]) ?? 0
        let hs = lines.dropFirst().compactMap { l -> (String, String)? in
            guard let c = l.firstIndex(of: ":") else { return nil }
            return (String(l[..<c]), l[l.index(after: c)...].trimmingCharacters(in: .whitespaces))
        }
        return Reply(status: status, headers: hs, body: String(text[split.upperBound...]))
    }
}

final class ConsoleAuthTests: XCTestCase {
    var dir = ""
    var server: ConsoleServer!
    var backend: FakeBackend!
    var http: RawHTTP!
    let password = "a long test password"

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "console-test-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try PasswordFile.write(hash: PasswordFile.hash(password), path: dir + "/console.pass")
        backend = FakeBackend()
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        server = ConsoleServer(settings: .init(enabled: true, listen: "127.0.0.1:0"), passwordPath: dir + "/console.pass",
                               backend: backend, logger: logger, sampleInterval: 1, eventInterval: 0.2)
        http = RawHTTP(port: try server.start())
    }

    override func tearDown() {
        server?.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    static func cookieValue(_ setCookie: String) -> String {
        String(setCookie.split(separator: ";")[0].split(separator: "=", maxSplits: 1).last ?? "")
    }

    /// GET /login, then POST the form with its CSRF token; returns the reply.
    func login(_ pw: String, csrf override: String? = nil) throws -> RawHTTP.Reply {
        try ConsoleAuthSession.login(port: http.port, password: pw, csrf: override)
    }

    /// A logged-in session: (cookie header, CSRF token from the overview page).
    func session() throws -> (cookie: String, csrf: String) {
        let r = try login(password)
        XCTAssertEqual(r.status, 303)
        let set = try XCTUnwrap(r.all("Set-Cookie").first { $0.hasPrefix(ConsoleServer.sessionCookie + "=") })
        let cookie = "\(ConsoleServer.sessionCookie)=\(Self.cookieValue(set))"
        let page = try http.send("GET", "/", headers: ["Cookie": cookie])
        XCTAssertEqual(page.status, 200)
        let csrf = try XCTUnwrap(page.body.range(of: #"name="csrf" value="[0-9a-f]{64}""#, options: .regularExpression).map {
            String(page.body[$0].dropLast().suffix(64))
        })
        return (cookie, csrf)
    }

    // MARK: Password hash

    func testPasswordIsStoredAsArgon2idIn0600File() throws {
        let hash = try XCTUnwrap(PasswordFile.read(path: dir + "/console.pass"))
        XCTAssertTrue(hash.hasPrefix("$argon2id$v=19$"), hash)
        XCTAssertFalse(hash.contains(password))
        XCTAssertTrue(PasswordFile.verify(password, hash: hash))
        XCTAssertFalse(PasswordFile.verify(password + "x", hash: hash))
        XCTAssertFalse(PasswordFile.verify(String(repeating: "x", count: 300), hash: hash), "over-long input is refused before hashing")
        let mode = try FileManager.default.attributesOfItem(atPath: dir + "/console.pass")[.posixPermissions] as? Int
        XCTAssertEqual(mode, 0o600)
        XCTAssertThrowsError(try PasswordFile.hash("short"))
    }

    // MARK: Delay schedule

    func testDelayScheduleIsFreeTwiceThen30sDoubling() {
        XCTAssertEqual((0...7).map { LoginThrottle.delay(afterFailures: $0) }, [0, 0, 0, 30, 60, 120, 240, 480])
        XCTAssertEqual(LoginThrottle.delay(afterFailures: 1000), LoginThrottle.maxDelay)
    }

    final class FakeClock: Sendable { let t = Mutex(1000.0) }

    /// Admits a check for `address` and finishes it with a wrong password; the earned wait.
    func wrong(_ th: LoginThrottle, _ address: String) -> Double? {
        guard th.admit(address) == .check else { return nil }
        return th.finished(address, passwordRight: false)
    }

    func testThrottleIsPerAddressAndClearedBySuccess() {
        let clock = FakeClock()
        let th = LoginThrottle(now: { clock.t.withLock { $0 } })
        XCTAssertEqual(wrong(th, "10.0.0.1"), 0)
        XCTAssertEqual(wrong(th, "10.0.0.1"), 0)
        XCTAssertEqual(wrong(th, "10.0.0.1"), 30)
        XCTAssertEqual(th.admit("10.0.0.1"), .wait(seconds: 30))
        XCTAssertEqual(wrong(th, "10.0.0.2"), 0, "another address is not slowed")
        clock.t.withLock { $0 += 31 }
        XCTAssertEqual(wrong(th, "10.0.0.1"), 60, "the fourth failure doubles")
        clock.t.withLock { $0 += 61 }
        XCTAssertEqual(th.admit("10.0.0.1"), .check)
        XCTAssertEqual(th.finished("10.0.0.1", passwordRight: true), 0)
        XCTAssertEqual(wrong(th, "10.0.0.1"), 0, "a right password cleared the record")
    }

    /// Attack 11 of the third security review: 40 parallel guesses from one address had 39
    /// checked before the throttle saw the first failure. Now an attempt is counted before
    /// its check and one check per address runs at a time.
    func testAnAttemptIsCountedBeforeItsCheckAndOneCheckPerAddressRuns() {
        let th = LoginThrottle()
        XCTAssertEqual(th.admit("10.0.0.1"), .check)
        XCTAssertEqual(th.admit("10.0.0.1"), .busy, "a second guess while the first is checked is not checked")
        XCTAssertEqual(th.admit("10.0.0.1"), .busy)
        XCTAssertEqual(th.admit("10.0.0.2"), .check, "another address is not held up")
        XCTAssertEqual(th.finished("10.0.0.1", passwordRight: false), 0)
        XCTAssertEqual(th.admit("10.0.0.1"), .check)
    }

    func testParallelGuessesOverSocketsGetAtMostThreeChecks() throws {
        let replies = Mutex([RawHTTP.Reply]())
        let port = http.port
        DispatchQueue.concurrentPerform(iterations: 40) { i in
            if let r = try? ConsoleAuthSession.login(port: port, password: "wrong guess \(i)", csrf: nil) { replies.withLock { $0.append(r) } }
        }
        let all = replies.withLock { $0 }
        XCTAssertEqual(all.count, 40)
        let checked = all.filter { $0.body.contains("Wrong password") }.count
        XCTAssertGreaterThanOrEqual(checked, 1)
        XCTAssertLessThanOrEqual(checked, 3, "two free failures and the one that earns the lock: \(checked) of 40 guesses were checked")
        XCTAssertEqual(all.filter { $0.status == 429 }.count, 40 - all.filter { $0.status == 401 }.count)
        // Checks that came one after another got the two free failures; the third locks.
        let right = try login(password)
        XCTAssertEqual(right.status, checked >= 3 ? 429 : 303, "the right password after \(checked) checked guesses")
    }

    func testIPv6IsThrottledBySlash64AndLoopbackLocksAtMostAMinute() {
        XCTAssertEqual(LoginThrottle.client(of: "2001:db8:1:2:aaaa::1").key, LoginThrottle.client(of: "2001:db8:1:2:ffff:1:2:3").key)
        XCTAssertNotEqual(LoginThrottle.client(of: "2001:db8:1:2::1").key, LoginThrottle.client(of: "2001:db8:1:3::1").key)
        XCTAssertEqual(LoginThrottle.client(of: "2001:db8:1:2::1").key, "2001:db8:1:2::/64")
        XCTAssertEqual(LoginThrottle.client(of: "::ffff:192.0.2.7").key, "192.0.2.7", "a mapped IPv4 address is that address")
        XCTAssertTrue(LoginThrottle.client(of: "127.0.0.1").loopback)
        XCTAssertTrue(LoginThrottle.client(of: "::1").loopback)
        XCTAssertFalse(LoginThrottle.client(of: "192.0.2.7").loopback)
        XCTAssertEqual((3...7).map { LoginThrottle.delay(afterFailures: $0, loopback: true) }, [30, 60, 60, 60, 60],
                       "operators who come in by ssh -L share 127.0.0.1: one person's typos cost the others a minute, not a day")

        let clock = FakeClock()
        let th = LoginThrottle(now: { clock.t.withLock { $0 } })
        for _ in 0..<3 { _ = wrong(th, "2001:db8:1:2::" + String(Int.random(in: 1...0xffff), radix: 16)) }
        XCTAssertEqual(th.admit("2001:db8:1:2:dead::beef"), .wait(seconds: 30), "a new address in the same /64 is the same client")
    }

    /// Many addresses buy no more guesses: at most ``LoginThrottle/checksPerMinute`` checks a
    /// minute across all clients.
    func testManyAddressesShareOneBoundOfChecks() {
        let clock = FakeClock()
        let th = LoginThrottle(now: { clock.t.withLock { $0 } })
        let burst = Int(LoginThrottle.checksPerMinute)
        for i in 0..<burst { XCTAssertEqual(wrong(th, "10.1.0.\(i)"), 0) }
        guard case .wait(let w) = th.admit("10.2.0.1") else { return XCTFail("the bound let an 11th address in at once") }
        XCTAssertEqual(w, 60 / LoginThrottle.checksPerMinute, accuracy: 0.01)
        clock.t.withLock { $0 += 60 / LoginThrottle.checksPerMinute }
        XCTAssertEqual(th.admit("10.2.0.1"), .check, "one more check after its share of the minute")
    }

    func testThreeWrongPasswordsOverSocketDelayEvenTheRightOne() throws {
        XCTAssertEqual(try login("wrong one").status, 401)
        XCTAssertEqual(try login("wrong two").status, 401)
        let third = try login("wrong three")
        XCTAssertEqual(third.status, 429)
        XCTAssertEqual(third.header("Retry-After"), "30")
        XCTAssertTrue(third.body.contains("wait 30 seconds"), third.body)
        let right = try login(password)
        XCTAssertEqual(right.status, 429, "not even checked while the address waits")
        XCTAssertFalse(right.all("Set-Cookie").contains { $0.hasPrefix(ConsoleServer.sessionCookie + "=") })
    }

    // MARK: Cookies, CSRF, headers

    func testSessionCookieFlagsAndLoginCSRF() throws {
        let r = try login(password)
        XCTAssertEqual(r.status, 303)
        XCTAssertEqual(r.header("Location"), "/")
        let set = try XCTUnwrap(r.all("Set-Cookie").first { $0.hasPrefix(ConsoleServer.sessionCookie + "=") })
        XCTAssertTrue(set.contains("HttpOnly"), set)
        XCTAssertTrue(set.contains("SameSite=Strict"), set)
        XCTAssertTrue(set.contains("Path=/"), set)
        XCTAssertFalse(set.contains("Secure"), "no TLS here, so no Secure flag: \(set)")
        XCTAssertEqual(Self.cookieValue(set).count, 64)
        XCTAssertEqual(try login(password, csrf: String(repeating: "0", count: 64)).status, 403, "a login form without its token is refused")
    }

    func testStateChangesNeedTheSessionsCSRFToken() throws {
        let s = try session()
        let form = ["Cookie": s.cookie, "Content-Type": "application/x-www-form-urlencoded"]
        XCTAssertEqual(try http.send("POST", "/transports/udp", headers: form, body: "enabled=false").status, 403)
        XCTAssertEqual(try http.send("POST", "/transports/udp", headers: form, body: "enabled=false&csrf=\(String(repeating: "0", count: 64))").status, 403)
        XCTAssertEqual(try http.send("POST", "/logout", headers: form, body: "").status, 403)
        XCTAssertTrue(backend.state.withLock { $0.toggles.isEmpty })
        let cross = try http.send("POST", "/transports/udp", headers: form.merging(["Origin": "http://evil.example"]) { a, _ in a },
                                  body: "enabled=false&csrf=\(s.csrf)")
        XCTAssertEqual(cross.status, 403, "another origin is refused even with the token")
        // udp has a link up: the first POST asks to confirm dropping it, the confirmed one switches.
        let ask = try http.send("POST", "/transports/udp", headers: form.merging(["Origin": "http://127.0.0.1:\(http.port)"]) { a, _ in a },
                                body: "enabled=false&csrf=\(s.csrf)")
        XCTAssertEqual(ask.status, 200)
        XCTAssertTrue(ask.body.contains("id=\"toggle-confirm\"") && ask.body.contains("That drops its 1 link now"), ask.body)
        XCTAssertTrue(ask.body.contains("name=\"confirm\" value=\"yes\""), ask.body)
        XCTAssertTrue(backend.state.withLock { $0.toggles.isEmpty }, "nothing switched before the confirmation")
        let ok = try http.send("POST", "/transports/udp", headers: form.merging(["Origin": "http://127.0.0.1:\(http.port)"]) { a, _ in a },
                               body: "enabled=false&confirm=yes&csrf=\(s.csrf)")
        XCTAssertEqual(ok.status, 303)
        XCTAssertEqual(backend.state.withLock { $0.toggles.map { "\($0.0)=\($0.1)" } }, ["udp=false"])
        XCTAssertEqual(try http.send("POST", "/transports/udp", headers: ["Content-Type": "application/x-www-form-urlencoded"],
                                     body: "enabled=false&csrf=\(s.csrf)").status, 401, "no session, no change")
    }

    func testRefusedToggleShowsTheErrorAndStatus422() throws {
        let s = try session()
        backend.state.withLock { $0.refuse = "transports.relay.address (line 18): is required" }
        let r = try http.send("POST", "/transports/relay", headers: ["Cookie": s.cookie, "Content-Type": "application/x-www-form-urlencoded"],
                              body: "enabled=true&csrf=\(s.csrf)")
        XCTAssertEqual(r.status, 422)
        XCTAssertTrue(r.body.contains("transports.relay.address (line 18): is required"), r.body)
    }

    func testEveryResponseHasStrictCSPAndNoSniff() throws {
        let s = try session()
        for (path, cookie) in [("/login", ""), ("/", s.cookie), ("/links", s.cookie), ("/assets/console.js", ""), ("/nope", s.cookie), ("/", "")] {
            let r = try http.send("GET", path, headers: cookie.isEmpty ? [:] : ["Cookie": cookie])
            let csp = try XCTUnwrap(r.header("Content-Security-Policy"), path)
            XCTAssertTrue(csp.contains("default-src 'none'"), csp)
            XCTAssertTrue(csp.contains("script-src 'self'"), csp)
            XCTAssertFalse(csp.contains("unsafe"), csp)
            XCTAssertTrue(csp.contains("frame-ancestors 'none'"), csp)
            XCTAssertEqual(r.header("X-Content-Type-Options"), "nosniff", path)
        }
        let page = try http.send("GET", "/", headers: ["Cookie": s.cookie])
        XCTAssertFalse(page.body.contains("<script>"), "no inline script")
        XCTAssertFalse(page.body.range(of: #"\son[a-z]+="#, options: .regularExpression) != nil, "no inline event handlers")
        XCTAssertFalse(page.body.contains("http://") || page.body.contains("https://"), "nothing loaded from elsewhere")
    }

    func testPagesNeedASessionAndNeverCarryTheFullID() throws {
        XCTAssertEqual(try http.send("GET", "/").status, 303)
        XCTAssertEqual(try http.send("GET", "/events").status, 401)
        let s = try session()
        for path in ["/", "/links", "/plugins", "/identity", "/charts"] {
            let r = try http.send("GET", path, headers: ["Cookie": s.cookie])
            XCTAssertEqual(r.status, 200, path)
            XCTAssertFalse(r.body.contains(FakeBackend.hubID), "\(path) carries the full ID")
        }
        let events = try http.send("GET", "/events", headers: ["Cookie": s.cookie])
        XCTAssertEqual(events.header("Content-Type"), "text/event-stream; charset=utf-8")
        XCTAssertTrue(events.body.contains("\"t.udp.framesIn\":[\"10\",\"10\"]"), events.body)
        XCTAssertFalse(events.body.contains(FakeBackend.hubID))
    }

    func testPluginTextIsEscaped() throws {
        backend.state.withLock { $0.reason = "<script>alert(1)</script>" }
        let s = try session()
        let r = try http.send("GET", "/", headers: ["Cookie": s.cookie])
        XCTAssertFalse(r.body.contains("<script>alert"))
        XCTAssertTrue(r.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
    }

    func testHostMustBeAnAddressAgainstDNSRebinding() throws {
        for good in ["127.0.0.1", "127.0.0.1:8480", "192.168.4.1:80", "[::1]:8480", "localhost:8480"] {
            XCTAssertTrue(SecurityHeaders.hostIsAddress(good), good)
        }
        for bad in [nil, "", "evil.example", "evil.example:8480", "127.0.0.1.evil.example", "[::1", "1.2.3.4:x"] {
            XCTAssertFalse(SecurityHeaders.hostIsAddress(bad), bad ?? "nil")
        }
        let r = try http.send("GET", "/login", headers: ["Host": "rebound.example:\(http.port)"])
        XCTAssertEqual(r.status, 421)
        XCTAssertNotNil(r.header("Content-Security-Policy"))
    }

    func testLogoutEndsTheSession() throws {
        let s = try session()
        let r = try http.send("POST", "/logout", headers: ["Cookie": s.cookie, "Content-Type": "application/x-www-form-urlencoded"], body: "csrf=\(s.csrf)")
        XCTAssertEqual(r.status, 303)
        XCTAssertEqual(try http.send("GET", "/", headers: ["Cookie": s.cookie]).status, 303, "the old cookie no longer works")
    }

    func testOversizedAndWrongTypeBodiesAreRefused() throws {
        let s = try session()
        let big = "csrf=\(s.csrf)&x=" + String(repeating: "a", count: 10_000)
        XCTAssertEqual(try http.send("POST", "/transports/udp", headers: ["Cookie": s.cookie, "Content-Type": "application/x-www-form-urlencoded"], body: big).status, 413)
        XCTAssertEqual(try http.send("POST", "/transports/udp", headers: ["Cookie": s.cookie, "Content-Type": "application/json"], body: "{}").status, 415)
    }
}
