#if canImport(Glibc)
import Glibc
#endif
import XCTest
import YaokPluginKit

/// The kit's one host:port type: IPv4, IPv6, scoped link-local, DNS names, and errors that
/// say what is wrong.
final class IPEndpointTests: XCTestCase {
    func testIPv4() throws {
        let a = try IPEndpoint.parse("10.0.0.2:7813")
        XCTAssertEqual(a, IPEndpoint(host: "10.0.0.2", port: 7813))
        XCTAssertFalse(a.isIPv6)
        XCTAssertFalse(a.isName)
        XCTAssertEqual(a.family, AF_INET)
        XCTAssertEqual(a.description, "10.0.0.2:7813")
        XCTAssertEqual(try IPEndpoint.parse("localhost:1").host, "127.0.0.1", "without names, localhost needs no resolver")
        XCTAssertEqual(try IPEndpoint.parse("10.0.0.2:0").port, 0)
        XCTAssertEqual(try IPEndpoint.parse("10.0.0.2:65535").port, 65535)
        let back: IPEndpoint? = a.withSockaddr { sa, len in
            XCTAssertEqual(Int(len), MemoryLayout<sockaddr_in>.size)
            return sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { IPEndpoint($0.pointee) }
        }
        XCTAssertEqual(back, a)
    }

    func testIPv6IsCanonicalAndBracketed() throws {
        let a = try IPEndpoint.parse("[2001:DB8:0::2]:7813")
        XCTAssertEqual(a, IPEndpoint(host: "2001:db8::2", port: 7813))
        XCTAssertTrue(a.isIPv6)
        XCTAssertFalse(a.isName)
        XCTAssertEqual(a.family, AF_INET6)
        XCTAssertEqual(a.description, "[2001:db8::2]:7813")
        XCTAssertEqual(IPEndpoint(parsing: a.description), a, "description parses back")
        XCTAssertEqual(try a.resolved(), [a], "an address resolves to itself")
    }

    func testScopedLinkLocal() throws {
        let lo = if_nametoindex("lo")
        XCTAssertNotEqual(lo, 0)
        let a = try IPEndpoint.parse("[fe80::1%lo]:7813")
        XCTAssertEqual(a, IPEndpoint(host: "fe80::1", port: 7813, scopeID: lo))
        XCTAssertTrue(a.isLinkLocal6)
        XCTAssertEqual(a.description, "[fe80::1%lo]:7813")
        XCTAssertEqual(try IPEndpoint.parse("[fe80::1%\(lo)]:7813"), a, "the scope by index")
        let scope: UInt32 = a.withSockaddr { sa, len in
            XCTAssertEqual(Int(len), MemoryLayout<sockaddr_in6>.size)
            return sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_scope_id }
        }
        XCTAssertEqual(scope, lo)
    }

    func testNamesOnlyWhereAllowed() throws {
        let a = try IPEndpoint.parse("relay.example.org:7900", allowingNames: true)
        XCTAssertEqual(a, IPEndpoint(host: "relay.example.org", port: 7900))
        XCTAssertTrue(a.isName)
        XCTAssertFalse(a.isIPv6)
        XCTAssertEqual(a.description, "relay.example.org:7900")
        XCTAssertEqual(try IPEndpoint.parse("localhost:7900", allowingNames: true).host, "localhost", "with names, localhost is resolved like any")
        XCTAssertEqual(try IPEndpoint.parse("10.0.0.2:1", allowingNames: true), IPEndpoint(host: "10.0.0.2", port: 1))
        XCTAssertEqual(try IPEndpoint.parse("[::1]:1", allowingNames: true), IPEndpoint(host: "::1", port: 1))
        XCTAssertThrowsError(try IPEndpoint.parse("relay.example.org:7900")) {
            XCTAssertEqual($0 as? IPEndpoint.ParseError, .nameNotAllowed("relay.example.org:7900"))
        }
        XCTAssertNil(IPEndpoint(parsing: "relay.example.org:7900"))

        let local = try IPEndpoint.parse("localhost:7900", allowingNames: true).resolved()
        XCTAssertFalse(local.isEmpty)
        XCTAssertTrue(local.allSatisfy { !$0.isName && $0.port == 7900 && ["127.0.0.1", "::1"].contains($0.host) }, "\(local)")
        XCTAssertEqual(IPEndpoint.ResolveError(host: "nosuchhost.invalid", reason: "Name or service not known").description,
                       "cannot resolve nosuchhost.invalid: Name or service not known")
    }

    func testBadInputSaysWhatIsWrong() {
        let cases: [(String, IPEndpoint.ParseError)] = [
            ("10.0.0.2", .missingPort("10.0.0.2")),
            ("10.0.0.2:", .missingPort("10.0.0.2:")),
            ("[::1]", .missingPort("[::1]")),
            ("[::1]:", .missingPort("[::1]:")),
            ("10.0.0.2:65536", .badPort("10.0.0.2:65536")),
            ("[::1]:70000", .badPort("[::1]:70000")),
            ("10.0.0.2:http", .badPort("10.0.0.2:http")),
            ("[::1:7813", .unclosedBracket("[::1:7813")),
            ("[fe80::1%lo:7813", .unclosedBracket("[fe80::1%lo:7813")),
            ("::1:7813", .badHost("::1:7813")),
            ("[]:7813", .badHost("[]:7813")),
            ("[10.0.0.1]:7813", .badHost("[10.0.0.1]:7813")),
            ("[zz::1]:1", .badHost("[zz::1]:1")),
            ("[::1]x:1", .badHost("[::1]x:1")),
            (":7813", .badHost(":7813")),
            ("bad host:1", .badHost("bad host:1")),
            ("[fe80::1%nosuch0]:7813", .badScope("[fe80::1%nosuch0]:7813")),
            ("[fe80::1%]:7813", .badScope("[fe80::1%]:7813")),
            ("[fe80::1%aaaaaaaaaaaaaaaaaaaa]:1", .badScope("[fe80::1%aaaaaaaaaaaaaaaaaaaa]:1")),
        ]
        for (text, expected) in cases {
            for names in [false, true] {
                XCTAssertThrowsError(try IPEndpoint.parse(text, allowingNames: names), text) {
                    XCTAssertEqual($0 as? IPEndpoint.ParseError, expected, text)
                }
            }
            XCTAssertNil(IPEndpoint(parsing: text), text)
        }
        XCTAssertEqual(IPEndpoint.ParseError.missingPort("10.0.0.2").description,
                       "\"10.0.0.2\" has no port: expected host:port or [IPv6]:port")
        XCTAssertEqual(IPEndpoint.ParseError.badPort("h:70000").description, "\"h:70000\": the port must be a number from 0 to 65535")
        XCTAssertTrue(IPEndpoint.ParseError.unclosedBracket("[::1:1").description.contains("'[' without ']'"))
    }
}
