import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle
import YaokHubCore
import YaokRouting
import YaokPluginKit

/// The request context: Hummingbird's core storage plus the peer address, which the login
/// throttle keys on.
struct ConsoleContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: NIOCore.SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// The client's IP address as text ("unknown" if the socket has none).
    var clientAddress: String { remoteAddress?.ipAddress ?? "unknown" }
}

/// The operator console: an HTTP server (Hummingbird 2) in the hub process serving the login,
/// the pages, live updates (Server-Sent Events) and the transport toggle. Every response
/// carries a strict Content-Security-Policy; every state change needs the session's CSRF token.
// @unchecked: task, group, sampler set only by start/stop (the runner's lock serialises them); the rest `let`.
public final class ConsoleServer: @unchecked Sendable {
    /// `Content-Security-Policy` on every response: only this origin's own script and style,
    /// nothing inline, no frames, forms only to itself.
    public static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    public static let sessionCookie = "yaok_console"
    public static let loginCookie = "yaok_console_login"
    /// Largest request body read (a login or toggle form is far smaller).
    static let maxBody = 4096
    /// One password check at a time: each takes 64 MiB and a tenth of a second, so parallel
    /// logins from many addresses must queue rather than exhaust a small box's memory.
    static let verifyQueue = DispatchQueue(label: "yaok.console.verify")

    let settings: HubConfig.ConsoleSettings
    let passwordPath: String
    let backend: any ConsoleBackend
    let logger: Logger
    let throttle: LoginThrottle
    let sessions: SessionStore
    let history: History
    let sampleInterval: Double
    /// Seconds between live updates on the overview.
    let eventInterval: Double

    private var task: Task<Void, Never>?
    private var group: ServiceGroup?
    private var sampler: DispatchSourceTimer?
    /// Signalled when the server task has ended (its port is free again).
    private let finished = DispatchSemaphore(value: 0)
    /// Set by ``stop()``: live-update streams end at their next step, so that stopping
    /// does not wait for browsers to hang up.
    private let stopping = NIOLockedValueBox(false)
    /// The served certificate's fingerprint, when `settings.tls` (after ``start()``).
    public private(set) var certificateFingerprint: String?

    /// - Parameters:
    ///   - passwordPath: the resolved `console.password_file`.
    ///   - sampleInterval: seconds between history samples (10 gives one hour in 360 samples).
    ///   - history: samples to go on from (a console restarted by a reload keeps its charts).
    ///   - tlsPaths: the resolved `console.tls_certificate` and `console.tls_key`, used when `settings.tls`.
    public init(settings: HubConfig.ConsoleSettings, passwordPath: String, backend: any ConsoleBackend, logger: Logger,
                sampleInterval: Double = 10, eventInterval: Double = 2,
                throttle: LoginThrottle = LoginThrottle(), history: History? = nil,
                tlsPaths: (certificate: String, key: String)? = nil) {
        self.settings = settings
        self.passwordPath = passwordPath
        self.backend = backend
        self.logger = logger
        self.throttle = throttle
        self.sessions = SessionStore(lifetimeSeconds: Double(settings.sessionMinutes) * 60)
        self.history = history ?? History(capacity: Self.historyCapacity(sampleInterval: sampleInterval))
        self.sampleInterval = sampleInterval
        self.eventInterval = eventInterval
        self.tlsPaths = tlsPaths ?? (settings.tlsCertificate, settings.tlsKey)
    }

    let tlsPaths: (certificate: String, key: String)

    /// Samples in one hour.
    public static func historyCapacity(sampleInterval: Double) -> Int { max(2, Int((3600 / sampleInterval).rounded())) }

    /// `http` or `https`.
    var scheme: String { settings.tls ? "https" : "http" }

    /// Splits `host:port` / `[v6]:port`.
    public static func hostPort(_ listen: String) throws -> (String, Int) {
        guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]), (0...65535).contains(port) else {
            throw ConfigError(keyPath: "console.listen", line: nil, message: "expected host:port, got \"\(listen)\"")
        }
        var host = String(listen[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    /// Binds and starts serving; returns the bound port once listening, or throws why not
    /// (bad address, port in use) within 10 s.
    @discardableResult
    public func start() throws -> Int {
        let (host, port) = try Self.hostPort(settings.listen)
        var server: HTTPServerBuilder = .http1()
        if settings.tls {
            let certificate = try ConsoleCertificate.loadOrCreate(certificatePath: tlsPaths.certificate, keyPath: tlsPaths.key,
                                                                  hosts: ConsoleCertificate.hosts(listenHost: host))
            if certificate.created { logger.notice("console: made a self-signed TLS certificate (\(tlsPaths.certificate))") }
            certificateFingerprint = certificate.fingerprint
            server = try .tls(.http1(), tlsConfiguration: certificate.tlsConfiguration)
        }
        let bound = BoundPort()
        let app = Application(
            router: makeRouter(),
            server: server,
            configuration: .init(address: .hostname(host, port: port), serverName: nil),
            onServerRunning: { channel in bound.set(.success(channel.localAddress?.port ?? port)) },
            logger: { var l = logger; l.logLevel = max(logger.logLevel, .warning); return l }())
        let finished = self.finished
        let serverLogger = app.logger
        let group = ServiceGroup(services: [app], logger: serverLogger)
        self.group = group
        task = Task.detached {
            do {
                try await group.run()
            } catch {
                bound.set(.failure(error))
            }
            bound.set(.failure(ConsoleStartError.stopped))
            finished.signal()
        }
        let result = bound.wait(seconds: 10)
        switch result {
        case .success(let p):
            startSampling()
            let shown = "\(scheme)://\(host.contains(":") ? "[\(host)]" : host):\(p)/"
            if let fingerprint = certificateFingerprint {
                logger.notice("console on \(shown) (TLS certificate SHA-256 \(fingerprint))")
            } else {
                logger.notice("console on \(shown)")
            }
            if PasswordFile.read(path: passwordPath) == nil {
                logger.warning("console: no password set (\(passwordPath)); run `yaok-hub console-password` to log in")
            }
            return p
        case .failure(let e):
            stop()
            throw e
        }
    }

    /// Stops serving and sampling; returns once the port is free. Graceful: live-update
    /// streams end at their next step and requests in progress finish; after 5 s the server
    /// is cancelled outright, and after 10 s more this gives up waiting.
    public func stop() {
        sampler?.cancel()
        stopping.withLockedValue { $0 = true }
        guard let task, let group else { return }
        self.task = nil
        self.group = nil
        Task { await group.triggerGracefulShutdown() }
        if finished.wait(timeout: .now() + 5) == .timedOut {
            task.cancel()
            if finished.wait(timeout: .now() + 10) == .timedOut {
                logger.warning("console: the server did not stop within 15 s")
            }
        }
    }

    private func startSampling() {
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "yaok.console.history"))
        timer.schedule(deadline: .now(), repeating: sampleInterval)
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            self.history.record(self.backend.status())
        }
        timer.resume()
        sampler = timer
    }

    // MARK: Routes

    func makeRouter() -> Hummingbird.Router<ConsoleContext> {
        let router = Hummingbird.Router(context: ConsoleContext.self)
        router.add(middleware: SecurityHeaders(scheme: scheme))
        router.get("/assets/console.css") { _, _ in Self.asset(Assets.css, type: "text/css; charset=utf-8") }
        router.get("/assets/console.js") { _, _ in Self.asset(Assets.js, type: "text/javascript; charset=utf-8") }
        router.get("/assets/icon.svg") { _, _ in Self.asset(Assets.icon, type: "image/svg+xml") }
        router.get("/login") { [self] request, _ in loginPage(request: request, message: nil, status: .ok) }
        router.post("/login") { [self] request, context in try await login(request: request, context: context) }
        router.post("/logout") { [self] request, context in try await logout(request: request, context: context) }
        router.get("/") { [self] request, _ in
            try page(request) { session in
                let q = request.uri.queryParameters
                let done = q["done"].map(String.init).flatMap { Self.doneNotice($0, status: self.backend.status()) }
                return (OverviewPage.render(self.backend.status(), csrf: session.csrf, notice: done, error: nil), "Overview", "/", "overview")
            }
        }
        router.get("/charts") { [self] request, _ in
            try page(request) { _ in (Pages.charts(self.history, interval: self.sampleInterval), "Charts", "/charts", "charts") }
        }
        router.get("/links") { [self] request, _ in
            try page(request) { _ in (Pages.links(self.backend.status()), "Links", "/links", nil) }
        }
        router.get("/plugins") { [self] request, _ in
            try page(request) { _ in
                let p = self.backend.plugins()
                return (Pages.plugins(directories: p.directories, plugins: p.plugins), "Plugins", "/plugins", nil)
            }
        }
        router.get("/identity") { [self] request, _ in
            try page(request) { _ in
                let id = self.backend.identity()
                return (Pages.identity(fingerprint: id.fingerprint, contact: id.contact,
                                       hubIDPrefix: String(self.backend.status().hub.id.prefix(16))), "Identity", "/identity", nil)
            }
        }
        router.get("/events") { [self] request, _ in try events(request) }
        router.post("/transports/:name") { [self] request, context in try await toggle(request: request, context: context) }
        return router
    }

    static func asset(_ text: String, type: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = type
        headers[.cacheControl] = "no-cache"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func html(_ text: String, status: HTTPResponse.Status = .ok, cookies: [String] = []) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        for c in cookies { headers.append(HTTPField(name: .setCookie, value: c)) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func redirect(_ location: String, cookies: [String] = []) -> Response {
        var headers = HTTPFields()
        headers[.location] = location
        for c in cookies { headers.append(HTTPField(name: .setCookie, value: c)) }
        return Response(status: .seeOther, headers: headers)
    }

    /// A cookie that only this site's own requests carry, never script, and with TLS only
    /// over TLS (`Secure`).
    func cookie(_ name: String, _ value: String, maxAge: Int? = nil) -> String {
        var c = "\(name)=\(value); Path=/; HttpOnly; SameSite=Strict"
        if settings.tls { c += "; Secure" }
        if let maxAge { c += "; Max-Age=\(maxAge)" }
        return c
    }

    func session(_ request: Request) -> SessionStore.Session? {
        sessions.session(token: request.cookies[Self.sessionCookie]?.value)
    }

    /// Renders a logged-in page, or sends the browser to the login page.
    func page(_ request: Request, _ build: (SessionStore.Session) -> (body: String, title: String, path: String, live: String?)) throws -> Response {
        guard let s = session(request) else { return Self.redirect("/login") }
        let p = build(s)
        return Self.html(HTML.page(title: p.title, current: p.path, hubName: backend.status().hub.name, csrf: s.csrf, live: p.live, body: p.body))
    }

    static func doneNotice(_ name: String, status: Hub.StatusReport) -> String? {
        guard let t = status.transports.first(where: { $0.name == name }) else { return nil }
        return "\(t.name) switched \(t.enabled ? "on" : "off") in the config file; the hub reloaded it."
    }

    // MARK: Login

    func loginPage(request: Request, message: String?, status: HTTPResponse.Status) -> Response {
        if session(request) != nil && message == nil { return Self.redirect("/") }
        // Login CSRF: a random token in a cookie and in the form, which must match.
        let token = SessionStore.randomToken()
        let body = Pages.login(hubName: backend.status().hub.name, csrf: token, message: message,
                               passwordSet: PasswordFile.read(path: passwordPath) != nil)
        return Self.html(body, status: status, cookies: [cookie(Self.loginCookie, token, maxAge: 3600)])
    }

    /// A URL-encoded form body of at most ``maxBody`` bytes.
    static func form(_ request: Request) async throws -> [String: String] {
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            throw HTTPError(.unsupportedMediaType, message: "expected a form (application/x-www-form-urlencoded)")
        }
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: maxBody) } catch {
            throw HTTPError(.contentTooLarge, message: "the form is larger than \(maxBody) bytes")
        }
        var out: [String: String] = [:]
        for pair in String(buffer: buffer).split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ s: Substring) -> String? { s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding }
            guard let k = kv.first.flatMap(decode), let v = (kv.count > 1 ? decode(kv[1]) : "") else {
                throw HTTPError(.badRequest, message: "malformed form encoding")
            }
            if out[k] == nil { out[k] = v }
        }
        return out
    }

    func login(request: Request, context: ConsoleContext) async throws -> Response {
        let address = context.clientAddress
        func refused(_ message: String, retryAfter wait: Double) -> Response {
            var r = loginPage(request: request, message: message, status: .tooManyRequests)
            r.headers[.retryAfter] = String(Int(max(1, wait.rounded(.up))))
            return r
        }
        let form = try await Self.form(request)
        guard let cookieToken = request.cookies[Self.loginCookie]?.value, SessionStore.csrfMatches(form["csrf"], cookieToken) else {
            return loginPage(request: request, message: "The login form expired or came from elsewhere. Please try again.", status: .forbidden)
        }
        guard let hash = PasswordFile.read(path: passwordPath) else {
            return loginPage(request: request, message: "No console password is set: run yaok-hub console-password on the hub.", status: .forbidden)
        }
        // The attempt is counted before the check and one check per address runs at a time:
        // parallel guesses get one check, not one each. Not checked is what slows a guesser.
        switch throttle.admit(address) {
        case .wait(let wait):
            return refused("Too many wrong passwords. Wait \(Int(wait.rounded(.up))) seconds, then try again.", retryAfter: wait)
        case .busy:
            return refused("A login from your address is being checked. Wait a moment, then try again.", retryAfter: 1)
        case .check:
            break
        }
        // Argon2 takes a moment and 64 MiB: off the event loop.
        let password = form["password"] ?? ""
        let ok = await withCheckedContinuation { (done: CheckedContinuation<Bool, Never>) in
            Self.verifyQueue.async { done.resume(returning: PasswordFile.verify(password, hash: hash)) }
        }
        let delay = throttle.finished(address, passwordRight: ok)
        guard ok else {
            logger.warning("console: failed login from \(address)\(delay > 0 ? "; next attempt in \(Int(delay)) s" : "")")
            let msg = delay > 0 ? "Wrong password. Too many wrong passwords from your address: wait \(Int(delay)) seconds before the next try."
                : "Wrong password."
            var r = loginPage(request: request, message: msg, status: delay > 0 ? .tooManyRequests : .unauthorized)
            if delay > 0 { r.headers[.retryAfter] = String(Int(delay)) }
            return r
        }
        let (token, _) = sessions.create()
        logger.notice("console: login from \(address)")
        return Self.redirect("/", cookies: [cookie(Self.sessionCookie, token), cookie(Self.loginCookie, "", maxAge: 0)])
    }

    func logout(request: Request, context: ConsoleContext) async throws -> Response {
        let form = try await Self.form(request)
        guard let s = session(request), SessionStore.csrfMatches(form["csrf"], s.csrf) else {
            throw HTTPError(.forbidden, message: "missing or wrong CSRF token")
        }
        sessions.remove(token: request.cookies[Self.sessionCookie]?.value)
        return Self.redirect("/login", cookies: [cookie(Self.sessionCookie, "", maxAge: 0)])
    }

    // MARK: Toggle

    func toggle(request: Request, context: ConsoleContext) async throws -> Response {
        guard let s = session(request) else { throw HTTPError(.unauthorized, message: "log in first") }
        let form = try await Self.form(request)
        guard SessionStore.csrfMatches(form["csrf"], s.csrf) else { throw HTTPError(.forbidden, message: "missing or wrong CSRF token") }
        guard let name = context.parameters.get("name"), name.count <= 64 else { throw HTTPError(.badRequest, message: "no transport named") }
        guard let want = form["enabled"], want == "true" || want == "false" else {
            throw HTTPError(.badRequest, message: "enabled must be true or false")
        }
        let backend = self.backend
        // Switching off a transport with links up drops them: asked once more first.
        if want == "false", form["confirm"] != "yes",
           let links = backend.status().transports.first(where: { $0.name == name })?.status.links, links > 0 {
            let status = backend.status()
            let body = OverviewPage.render(status, csrf: s.csrf, notice: nil, error: nil, confirmOff: (name, links))
            return Self.html(HTML.page(title: "Overview", current: "/", hubName: status.hub.name, csrf: s.csrf, live: "overview", body: body))
        }
        do {
            // Plugin validation may load a plugin probe: off the event loop.
            try await Task.detached { try backend.setTransport(name, enabled: want == "true") }.value
        } catch {
            logger.warning("console: switching \(name) \(want == "true" ? "on" : "off") refused: \(error)")
            let body = OverviewPage.render(backend.status(), csrf: s.csrf, notice: nil, error: "\(error)")
            return Self.html(HTML.page(title: "Overview", current: "/", hubName: backend.status().hub.name, csrf: s.csrf, live: "overview", body: body),
                             status: .unprocessableContent)
        }
        // The reload runs on the hub's reload queue; give it a moment so the page shows the result.
        for _ in 0..<30 {
            if backend.status().transports.first(where: { $0.name == name })?.enabled == (want == "true") { break }
            try await Task.sleep(nanoseconds: 100_000_000)
        }
        let encoded = name.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        return Self.redirect("/?done=\(encoded)")
    }

    // MARK: Live updates

    /// Server-Sent Events while the session lives: the overview's fields every `eventInterval`
    /// seconds, or with `?view=charts` the charts redrawn every sampling interval.
    func events(_ request: Request) throws -> Response {
        let token = request.cookies[Self.sessionCookie]?.value
        guard session(request) != nil else { throw HTTPError(.unauthorized, message: "log in first") }
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream; charset=utf-8"
        headers[.cacheControl] = "no-store"
        let charts = request.uri.queryParameters["view"] == "charts"
        let backend = self.backend, sessions = self.sessions, history = self.history, stopping = self.stopping
        let interval = charts ? sampleInterval : eventInterval
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            try await writer.write(ByteBuffer(string: "retry: 3000\n\n"))
            func live() -> Bool { !Task.isCancelled && !stopping.withLockedValue { $0 } && sessions.session(token: token) != nil }
            while live() {
                let event = charts ? "event: charts\ndata: \(Pages.chartsJSON(history))\n\n"
                    : "event: overview\ndata: \(OverviewPage.json(backend.status()))\n\n"
                try await writer.write(ByteBuffer(string: event))
                // In steps of at most half a second, so a stopping server is not held up.
                var slept = 0.0
                while slept < interval, live() {
                    let step = min(0.5, interval - slept)
                    try await Task.sleep(nanoseconds: UInt64(step * 1_000_000_000))
                    slept += step
                }
            }
            try await writer.finish(nil)
        })
    }
}

enum ConsoleStartError: Error, CustomStringConvertible {
    case timedOut, stopped
    var description: String {
        switch self {
        case .timedOut: return "the console did not start listening within 10 s"
        case .stopped: return "the console server stopped"
        }
    }
}

/// The first outcome of starting the server, handed from the server task to `start`.
// @unchecked: `result` only under `lock`; `ready` is a semaphore.
final class BoundPort: @unchecked Sendable {
    private let lock = NSLock()
    private var result: Result<Int, any Error>?
    private let ready = DispatchSemaphore(value: 0)

    func set(_ r: Result<Int, any Error>) {
        let first: Bool = lock.withLock {
            guard result == nil else { return false }
            result = r
            return true
        }
        if first { ready.signal() }
    }

    func wait(seconds: Double) -> Result<Int, any Error> {
        if ready.wait(timeout: .now() + seconds) == .timedOut { return .failure(ConsoleStartError.timedOut) }
        return lock.withLock { result! }
    }
}

/// Headers on every response, errors included: the CSP, no sniffing, no framing, no referrer to other sites (`no-referrer` would make Chromium send `Origin: null` on our own forms),
/// no caching of pages that show the hub's state.
struct SecurityHeaders: RouterMiddleware {
    typealias Context = ConsoleContext
    /// `http` or `https`: the only origin scheme a POST may come from.
    let scheme: String

    /// True for `127.0.0.1`, `192.168.4.1:8480`, `[::1]:8480`, `localhost:8480`; false for names and garbage.
    static func hostIsAddress(_ host: String?) -> Bool {
        guard var h = host?.lowercased(), !h.isEmpty, h.count <= 64 else { return false }
        if h.hasPrefix("[") {
            guard let close = h.firstIndex(of: "]") else { return false }
            let inner = String(h[h.index(after: h.startIndex)..<close])
            var a6 = in6_addr()
            return inet_pton(AF_INET6, inner, &a6) == 1
        }
        if let colon = h.lastIndex(of: ":") {
            guard Int(h[h.index(after: colon)...]) != nil else { return false }
            h = String(h[..<colon])
        }
        if h == "localhost" { return true }
        var a4 = in_addr()
        return inet_pton(AF_INET, h, &a4) == 1
    }

    func handle(_ request: Request, context: ConsoleContext, next: (Request, ConsoleContext) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            // DNS rebinding: a page on some name that now resolves to this hub would be "same
            // origin" to the browser. Field hubs are reached by address, so only an IP literal or
            // localhost may name this server.
            guard Self.hostIsAddress(request.head.authority) else {
                throw HTTPError(.misdirectedRequest, message: "open the console by the hub's IP address (or localhost), not by a name")
            }
            // A POST from another origin is refused before any handler (belt to SameSite's braces).
            if request.method == .post, let origin = request.headers[.origin], let host = request.head.authority,
               origin != "\(scheme)://\(host)" {
                throw HTTPError(.forbidden, message: "cross-origin request refused")
            }
            response = try await next(request, context)
        } catch let error as HTTPError {
            response = Response(status: error.status, headers: [.contentType: "text/plain; charset=utf-8"],
                                body: .init(byteBuffer: ByteBuffer(string: (error.body ?? error.status.reasonPhrase) + "\n")))
        } catch {
            response = Response(status: .internalServerError, headers: [.contentType: "text/plain; charset=utf-8"],
                                body: .init(byteBuffer: ByteBuffer(string: "internal error\n")))
        }
        response.headers[.contentSecurityPolicy] = ConsoleServer.contentSecurityPolicy
        response.headers[.xContentTypeOptions] = "nosniff"
        response.headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        response.headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
        if response.headers[.cacheControl] == nil { response.headers[.cacheControl] = "no-store" }
        return response
    }
}
