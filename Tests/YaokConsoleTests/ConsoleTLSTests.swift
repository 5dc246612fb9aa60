import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif
import Logging
import XCTest
@testable import YaokConsole
@testable import YaokHubCore
import YaokTesting

/// The console's TLS (`console.tls`) and its restart on a changed `console:` section, against
/// independent TLS clients: OpenSSL's command line and Python's `ssl` module.
final class ConsoleTLSTests: XCTestCase {
    var dir = ""
    let password = "a long test password"
    var logger: Logger = {
        var l = Logger(label: "test")
        l.logLevel = .critical
        return l
    }()

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "console-tls-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try PasswordFile.write(hash: PasswordFile.hash(password), path: dir + "/console.pass")
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Runs a program to its end (at most 20 s); its standard output, or a failure with its error.
    @discardableResult
    func run(_ argv: [String], stdin: String? = nil) throws -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = argv
        let out = Pipe(), err = Pipe(), input = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = input
        try p.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(20)
        while p.isRunning && Date() < deadline { usleep(20_000) }
        if p.isRunning { p.terminate(); XCTFail("\(argv[0]) did not finish within 20 s") }
        p.waitUntilExit()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard p.terminationStatus == 0 else {
            throw NSError(domain: "run", code: Int(p.terminationStatus), userInfo: [NSLocalizedDescriptionKey:
                "\(argv.joined(separator: " ")): \(String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))"])
        }
        return text
    }

    /// A TLS client that trusts nothing: it reports the certificate the server presented
    /// (SHA-256 of its DER, as browsers show it) and the reply to GET /login.
    func fetchOverTLS(port: Int) throws -> (fingerprint: String, status: Int, setCookies: [String]) {
        let script = """
        import hashlib, http.client, json, ssl, sys
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
        c = http.client.HTTPSConnection("127.0.0.1", int(sys.argv[1]), context=ctx, timeout=10)
        c.request("GET", "/login"); r = c.getresponse(); r.read()
        der = c.sock.getpeercert(binary_form=True)
        fp = ":".join("%02X" % b for b in hashlib.sha256(der).digest())
        print(json.dumps({"fp": fp, "status": r.status, "cookies": r.headers.get_all("Set-Cookie") or []}))
        """
        let out = try run(["python3", "-c", script, String(port)])
        let obj = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
        return (obj["fp"] as? String ?? "", obj["status"] as? Int ?? 0, obj["cookies"] as? [String] ?? [])
    }

    func testASelfSignedPairIsMadeOnceWithAPrivateKeyThenKept() throws {
        let crt = dir + "/console-tls.crt", key = dir + "/console-tls.key"
        let first = try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key,
                                                        hosts: ConsoleCertificate.hosts(listenHost: "192.168.4.1"))
        XCTAssertTrue(first.created)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: key)[.posixPermissions] as? Int, 0o600)
        XCTAssertEqual(first.fingerprint.count, 32 * 2 + 31)
        let again = try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key, hosts: [])
        XCTAssertFalse(again.created)
        XCTAssertEqual(again.fingerprint, first.fingerprint)
        // OpenSSL reads what we wrote: the same fingerprint, a server certificate naming the LAN
        // address and loopback, not a CA, and a P-256 key.
        let fp = try run(["openssl", "x509", "-in", crt, "-noout", "-fingerprint", "-sha256"])
        XCTAssertEqual(fp.split(separator: "=").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }, first.fingerprint)
        let text = try run(["openssl", "x509", "-in", crt, "-noout", "-text"])
        for want in ["IP Address:192.168.4.1", "IP Address:127.0.0.1", "DNS:localhost", "CA:FALSE", "TLS Web Server Authentication", "prime256v1"] {
            XCTAssertTrue(text.contains(want), "certificate lacks \(want):\n\(text)")
        }
        XCTAssertTrue(try run(["openssl", "pkey", "-in", key, "-noout", "-text"]).contains("prime256v1"))
    }

    func testOneFileWithoutTheOtherIsRefusedNamingTheKey() throws {
        let crt = dir + "/c.crt", key = dir + "/c.key"
        _ = try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key, hosts: ["localhost"])
        try FileManager.default.removeItem(atPath: key)
        XCTAssertThrowsError(try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key, hosts: [])) { error in
            XCTAssertTrue("\(error)".contains("console.tls_key"), "\(error)")
            XCTAssertTrue("\(error)".contains(key), "\(error)")
        }
        // Nothing was made in its place.
        XCTAssertFalse(FileManager.default.fileExists(atPath: key))
    }

    func testAKeyOtherUsersMayReadIsRefused() throws {
        let crt = dir + "/c.crt", key = dir + "/c.key"
        _ = try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key, hosts: ["localhost"])
        XCTAssertEqual(chmod(key, 0o644), 0)
        XCTAssertThrowsError(try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key, hosts: [])) { error in
            XCTAssertTrue("\(error)".contains("chmod 600"), "\(error)")
        }
    }

    func testAGarbageCertificateFileIsRefusedNamingTheKey() throws {
        let crt = dir + "/c.crt", key = dir + "/c.key"
        _ = try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key, hosts: ["localhost"])
        try Data("not a certificate\n".utf8).write(to: URL(fileURLWithPath: crt))
        XCTAssertThrowsError(try ConsoleCertificate.loadOrCreate(certificatePath: crt, keyPath: key, hosts: [])) { error in
            XCTAssertTrue("\(error)".contains("console.tls_certificate"), "\(error)")
        }
    }

    func testServesHTTPSWithSecureCookiesAndNoPlainHTTP() throws {
        let server = ConsoleServer(settings: .init(enabled: true, listen: "127.0.0.1:0", tls: true), passwordPath: dir + "/console.pass",
                                   backend: FakeBackend(), logger: logger, sampleInterval: 1, eventInterval: 0.2,
                                   tlsPaths: (dir + "/c.crt", dir + "/c.key"))
        let port = try server.start()
        defer { server.stop() }
        let reply = try fetchOverTLS(port: port)
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.fingerprint, server.certificateFingerprint, "the client saw another certificate than the one the hub reports")
        XCTAssertFalse(reply.setCookies.isEmpty)
        for c in reply.setCookies { XCTAssertTrue(c.contains("; Secure"), c) }
        // Plain HTTP on the TLS port gets no page.
        XCTAssertNotEqual((try? RawHTTP(port: port).send("GET", "/login"))?.status, 200)
    }

    func testRunnerRestartsOnAChangedSectionAndFreesTheOldPort() throws {
        let runner = ConsoleRunner(backend: FakeBackend(), dataDirectory: dir, logger: logger)
        defer { runner.stop() }
        let plainPort = Int(Loopback.freePort())
        let plain = HubConfig.ConsoleSettings(enabled: true, listen: "127.0.0.1:\(plainPort)")
        runner.apply(plain)
        let first = try XCTUnwrap(runner.current)
        XCTAssertEqual(try RawHTTP(port: plainPort).send("GET", "/login").status, 200)
        // An open live-update stream does not hold the restart up.
        let session = try ConsoleAuthSession(port: plainPort, password: password)
        let stream = try session.openEventStream()
        defer { close(stream) }

        runner.apply(plain)
        XCTAssertTrue(runner.current === first, "an unchanged section must leave the running console alone")

        let tlsPort = Int(Loopback.freePort())
        let started = Date()
        runner.apply(HubConfig.ConsoleSettings(enabled: true, listen: "127.0.0.1:\(tlsPort)", tls: true))
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "the restart waited on the open event stream")
        XCTAssertFalse(runner.current === first)
        XCTAssertThrowsError(try RawHTTP(port: plainPort).send("GET", "/login"), "the old port still answers")
        let reply = try fetchOverTLS(port: tlsPort)
        XCTAssertEqual(reply.status, 200)
        XCTAssertEqual(reply.fingerprint, runner.current?.certificateFingerprint)
        XCTAssertTrue(FileManager.default.fileExists(atPath: dir + "/console-tls.key"), "the default key path is inside the data directory")

        runner.apply(HubConfig.ConsoleSettings(enabled: false, listen: "127.0.0.1:\(tlsPort)", tls: true))
        XCTAssertNil(runner.current)
        XCTAssertThrowsError(try RawHTTP(port: tlsPort).send("GET", "/login"), "a console switched off still answers")
    }

    func testChartsStreamCarriesEachChartAsStandaloneSVG() throws {
        let server = ConsoleServer(settings: .init(enabled: true, listen: "127.0.0.1:0"), passwordPath: dir + "/console.pass",
                                   backend: FakeBackend(), logger: logger, sampleInterval: 1, eventInterval: 0.2)
        let port = try server.start()
        defer { server.stop() }
        let session = try ConsoleAuthSession(port: port, password: password)
        let page = try RawHTTP(port: port).send("GET", "/charts", headers: ["Cookie": session.cookie])
        XCTAssertTrue(page.body.contains("data-live=\"charts\""))
        let events = try RawHTTP(port: port).send("GET", "/events?view=charts", headers: ["Cookie": session.cookie])
        let line = try XCTUnwrap(events.body.components(separatedBy: "\n").first { $0.hasPrefix("data: ") })
        let obj = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(line.dropFirst(6).utf8)) as? [String: Any])
        let charts = try XCTUnwrap(obj["charts"] as? [[String: String]])
        XCTAssertEqual(charts.map { $0["id"] ?? "" }, ["chart-frames", "chart-queue", "chart-deliveries"])
        for c in charts {
            let svg = try XCTUnwrap(c["svg"])
            XCTAssertTrue(svg.hasPrefix("<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"\(c["id"]!)\""), svg)
            // Well-formed XML, as the page's script parses it.
            XCTAssertNoThrow(try XMLDocument(xmlString: svg, options: []), c["id"]!)
            XCTAssertNotNil(c["latest"])
        }
    }
}

/// A logged-in console session over plain HTTP, as a browser would make it.
struct ConsoleAuthSession {
    let port: Int
    let cookie: String

    init(port: Int, password: String) throws {
        self.port = port
        let r = try Self.login(port: port, password: password)
        let set = try XCTUnwrap(r.all("Set-Cookie").first { $0.hasPrefix(ConsoleServer.sessionCookie + "=") })
        cookie = "\(ConsoleServer.sessionCookie)=\(ConsoleAuthTests.cookieValue(set))"
    }

    /// GET /login, then POST the form with its CSRF token (or `override`); returns the reply.
    static func login(port: Int, password: String, csrf override: String? = nil) throws -> RawHTTP.Reply {
        let http = RawHTTP(port: port)
        let page = try http.send("GET", "/login")
        let loginCookie = try XCTUnwrap(page.all("Set-Cookie").first { $0.hasPrefix(ConsoleServer.loginCookie + "=") })
        let token = ConsoleAuthTests.cookieValue(loginCookie)
        let form = "csrf=\(override ?? token)&password=\(password.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
        return try http.send("POST", "/login", headers: ["Cookie": "\(ConsoleServer.loginCookie)=\(token)",
                                                         "Content-Type": "application/x-www-form-urlencoded"], body: form)
    }

    /// Opens /events and leaves it open; returns the socket.
    func openEventStream() throws -> Int32 {
        let fd = try Loopback.connectTCP(port: port)
        Loopback.sendAll(fd, Array("GET /events HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nCookie: \(cookie)\r\n\r\n".utf8))
        guard !Loopback.receive(fd, done: { !$0.isEmpty }).bytes.isEmpty else { close(fd); throw POSIXError(.EPROTO) }
        return fd
    }
}
