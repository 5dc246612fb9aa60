import ArgumentParser
import Foundation
import Logging
import NIOCore
import YaokCrypto
import YaokRelayProtocol
import YaokProcess
import YaokRelayBenchmark
import YaokRelayServer
import YaokRelayWebSocket
import enum YaokPluginKit.Hex
import struct YaokPluginKit.IPEndpoint

/// `yaok-relay`: the Ya OK internet relay (UDP, and WebSocket over TLS 1.3).
struct YaokRelay: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "yaok-relay",
        abstract: "The Ya OK internet relay: queues end-to-end encrypted bundles for users who are offline.",
        subcommands: [Run.self, Key.self, TLSPin.self, Bench.self])
}

/// Splits `host:port` (IPv4, `[v6]:port`, or a name).
func parseHostPort(_ text: String, option: String) throws -> (String, Int) {
    guard let a = (try? IPEndpoint.parse(text, allowingNames: true)) else {
        throw ValidationError("\(option): expected host:port, got \"\(text)\"")
    }
    return (a.host, Int(a.port))
}

extension YaokRelay {
    struct Run: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Run the relay.")

        @Option(help: "UDP address to listen on (host:port).")
        var listen = "127.0.0.1:7900"

        @Option(name: .customLong("data-dir"), help: "Directory for the relay key, the database and its key (created 0700).")
        var dataDir: String

        @Option(help: ArgumentHelp("Where queues and registrations live: sqlcipher (default: relay.db in --data-dir) or a postgres:// URL shared by the nodes of a relay cluster, e.g. postgres://yaok_relay@db.example:5432/yaok_relay?sslmode=require or postgres://yaok_relay@/yaok_relay?host=/run/postgresql. No password in the URL.", valueName: "sqlcipher|postgres-url"))
        var store = "sqlcipher"

        @Option(name: .customLong("store-password-file"), help: "File (mode 0600) holding the PostgreSQL password; the systemd credential yaok-relay-pg-password takes precedence.")
        var storePasswordFile: String?

        @Option(name: .customLong("lease-seconds"), help: "How long a delivered, unacknowledged message is held for its session before it is offered again (in a cluster: before another node may deliver it), 1 to 300.")
        var leaseSeconds = 30

        @Option(help: "Serve Prometheus /metrics on this address (host:port, keep it on localhost).")
        var metrics: String?

        @Option(name: .customLong("messages-per-hour"), help: "Messages one sender may send per hour.")
        var messagesPerHour = 100

        @Option(name: .customLong("packets-per-second-per-ip"), help: "Datagrams per second accepted from one IP address (burst: twice this). Raise it for carrier-grade NAT.")
        var packetsPerSecondPerIP = 500

        @Option(name: .customLong("hellos-per-second-per-ip"), help: "HELLOs (new sessions; each costs the relay a signature) accepted per second from one IP address (burst: twice this). Raise it for carrier-grade NAT.")
        var hellosPerSecondPerIP = RelayLimits().hellosPerSecondPerIP

        @Option(name: .customLong("registrations-per-minute-per-ip"), help: "Registrations accepted per minute from one IP address (burst: five times this). Raise it for carrier-grade NAT or a hub with many phones.")
        var registrationsPerMinutePerIP = RelayLimits().registrationsPerMinutePerIP

        @Option(name: .customLong("max-registrations"), help: "Users registered at once (directly or attached to a hub); in a cluster, per node.")
        var maxRegistrations = RelayLimits().maxRegistrations

        @Option(name: .customLong("sends-per-hour-per-ip"), help: "New messages accepted per hour from one IP address, whoever signed them (a hub sends for all its phones). Raise it for carrier-grade NAT.")
        var sendsPerHourPerIP = 2_000

        @Option(name: .customLong("max-ttl-hours"), help: "Longest envelope lifetime (expires − created) accepted, in hours: 1 to 168 (7 days, the protocol's maximum). Lower refuses envelopes that live longer.")
        var maxTTLHours = 168

        @Option(name: .customLong("clock-skew-seconds"), help: "How far a sender's clock may lead the relay's: an envelope created further ahead is refused, in seconds (0 to 604800; default 7 days, so a phone days off still gets through).")
        var clockSkewSeconds = 604_800

        @Option(name: .customLong("wss-listen"), help: "Also listen for WebSocket over TLS 1.3 on this TCP address (host:port); needs --tls-cert and --tls-key.")
        var wssListen: String?

        @Option(name: .customLong("wss-path"), help: "The HTTP path upgraded to WebSocket.")
        var wssPath = RelayWebSocketURL.defaultPath

        @Option(name: .customLong("tls-cert"), help: "PEM certificate (chain) for the WebSocket listener.")
        var tlsCert: String?

        @Option(name: .customLong("tls-key"), help: "PEM private key for the WebSocket listener (mode 0600).")
        var tlsKey: String?

        @Option(name: .customLong("max-wss-connections"), help: "WebSocket/TLS connections at once.")
        var maxWSSConnections = 10_000

        @Option(name: .customLong("wss-connections-per-minute-per-ip"), help: "New WebSocket/TLS connections accepted per minute from one IP address (each costs a TLS handshake).")
        var wssConnectionsPerMinutePerIP = 120

        @Option(name: .customLong("ipv6-prefix"), help: "Per-address limits apply to each IPv4 address and to each IPv6 prefix of this length (32 to 128).")
        var ipv6Prefix = AddressPrefix.defaultIPv6PrefixLength

        @Option(name: .customLong("cookie-hellos-per-second"), help: "Above this many HELLOs per second in all, a HELLO must first return a stateless cookie (0 = always).")
        var cookieHellosPerSecond = RelayLimits().cookieHellosPerSecond

        @Option(name: .customLong("max-sessions"), help: "Sessions at once; at half of them HELLOs need a cookie.")
        var maxSessions = RelayLimits().maxSessions

        @Option(name: .customLong("sessions-per-prefix"), help: "Sessions one address prefix may hold.")
        var sessionsPerPrefix = RelayLimits().maxSessionsPerPrefix

        @Option(name: .customLong("queue-share-per-sender"), help: "Queued messages one sender may hold.")
        var queueSharePerSender = RelayLimits().maxQueuedPerSender

        @Option(name: .customLong("queue-share-per-prefix"), help: "Queued messages sent from one address prefix (since the relay started).")
        var queueSharePerPrefix = RelayLimits().maxQueuedPerPrefix

        @Option(name: .customLong("reassembly-share-per-prefix"), help: "Bytes of fragment reassembly one address prefix may hold.")
        var reassemblySharePerPrefix = RelayLimits().maxReassemblyBytesPerPrefix

        @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error.")
        var logLevel = "info"

        func run() throws {
            let store_ = store
            var logger = Logger(label: "yaok-relay")
            logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
            let (host, port) = try parseHostPort(listen, option: "--listen")
            var cfg = RelayServer.Configuration(host: host, port: port)
            if let metrics {
                let (mh, mp) = try parseHostPort(metrics, option: "--metrics")
                cfg.metricsHost = mh
                cfg.metricsPort = mp
            }
            var pin: [UInt8]?
            if let wssListen {
                guard let tlsCert, let tlsKey else { throw ValidationError("--wss-listen needs --tls-cert and --tls-key") }
                guard wssPath.hasPrefix("/") else { throw ValidationError("--wss-path must start with /") }
                let (wh, wp) = try parseHostPort(wssListen, option: "--wss-listen")
                var ws = RelayWebSocketListener.Configuration(host: wh, port: wp, certificatePath: tlsCert, privateKeyPath: tlsKey)
                ws.path = wssPath
                ws.maxConnections = maxWSSConnections
                ws.connectionsPerMinutePerIP = wssConnectionsPerMinutePerIP
                ws.ipv6PrefixLength = ipv6Prefix
                cfg.webSocket = ws
                pin = try SPKIPin.sha256(certificateFile: tlsCert)
            } else if tlsCert != nil || tlsKey != nil {
                throw ValidationError("--tls-cert and --tls-key need --wss-listen")
            }
            guard (1...168).contains(maxTTLHours) else {
                throw ValidationError("--max-ttl-hours must be 1 to 168 (7 days, the protocol's maximum), got \(maxTTLHours)")
            }
            guard AddressPrefix.ipv6PrefixRange.contains(ipv6Prefix) else {
                throw ValidationError("--ipv6-prefix must be 32 to 128, got \(ipv6Prefix)")
            }
            guard cookieHellosPerSecond >= 0 else { throw ValidationError("--cookie-hellos-per-second must be 0 or more") }
            guard (0...604_800).contains(clockSkewSeconds) else {
                throw ValidationError("--clock-skew-seconds must be 0 to 604800, got \(clockSkewSeconds)")
            }
            // Limits refuse nonsense instead of clamping it: 0 would silently lock every
            // client out, and a clamped value is not what the operator asked for.
            for (option, value, least) in [("--hellos-per-second-per-ip", hellosPerSecondPerIP, 1),
                                           ("--registrations-per-minute-per-ip", registrationsPerMinutePerIP, 1),
                                           ("--max-registrations", maxRegistrations, 1),
                                           ("--messages-per-hour", messagesPerHour, 1),
                                           ("--packets-per-second-per-ip", packetsPerSecondPerIP, 1),
                                           ("--sends-per-hour-per-ip", sendsPerHourPerIP, 1),
                                           ("--max-wss-connections", maxWSSConnections, 1),
                                           ("--wss-connections-per-minute-per-ip", wssConnectionsPerMinutePerIP, 1),
                                           ("--max-sessions", maxSessions, 2),
                                           ("--sessions-per-prefix", sessionsPerPrefix, 1),
                                           ("--queue-share-per-sender", queueSharePerSender, 1),
                                           ("--queue-share-per-prefix", queueSharePerPrefix, 1),
                                           ("--reassembly-share-per-prefix", reassemblySharePerPrefix, 12_288)] where value < least {
                throw ValidationError("\(option) must be \(least) or more, got \(value)")
            }
            var limits = RelayLimits()
            limits.hellosPerSecondPerIP = hellosPerSecondPerIP
            limits.registrationsPerMinutePerIP = registrationsPerMinutePerIP
            limits.maxRegistrations = maxRegistrations
            limits.maxTTLMs = Int64(maxTTLHours) * 3_600_000
            limits.clockSkewMs = Int64(clockSkewSeconds) * 1000
            limits.messagesPerHour = messagesPerHour
            limits.packetsPerSecondPerIP = packetsPerSecondPerIP
            limits.sendsPerHourPerIP = sendsPerHourPerIP
            limits.ipv6PrefixLength = ipv6Prefix
            limits.cookieHellosPerSecond = cookieHellosPerSecond
            limits.maxSessions = maxSessions
            limits.maxSessionsPerPrefix = sessionsPerPrefix
            limits.maxQueuedPerSender = queueSharePerSender
            limits.maxQueuedPerPrefix = queueSharePerPrefix
            limits.maxReassemblyBytesPerPrefix = reassemblySharePerPrefix
            guard (1...300).contains(leaseSeconds) else { throw ValidationError("--lease-seconds must be 1 to 300, got \(leaseSeconds)") }
            limits.leaseMs = Int64(leaseSeconds) * 1000
            let identity: Identity
            let store: any RelayStore
            if store_ == "sqlcipher" {
                let opened = try RelayServer.openDataDirectory(dataDir, logger: logger)
                (identity, store) = (opened.identity, opened.store)
            } else if store_.hasPrefix("postgres://") || store_.hasPrefix("postgresql://") {
                identity = try RelayServer.loadClusterIdentity(dataDir: dataDir)
                let pg = try RelayPostgresConfiguration(url: store_, passwordFile: storePasswordFile)
                store = try RelayPostgresStore(configuration: pg, logger: logger)
            } else {
                throw ValidationError("--store must be sqlcipher or a postgres:// URL")
            }
            let engine = try RelayEngine(identity: identity, store: store, limits: limits, logger: logger,
                                         now: { Int64(Date().timeIntervalSince1970 * 1000) })
            // Signal handling first: a supervisor (or test) may send SIGTERM as soon as it
            // reads the lines below, and a signal that arrives before the source is live is lost.
            let done = DispatchSemaphore(value: 0)
            SignalWaiter.start { sig in if sig != SIGHUP { done.signal() } }
            let server = RelayServer(engine: engine, configuration: cfg, logger: logger)
            try server.start()
            // Machine-readable lines for supervisors and tests.
            print("listening \(RelayServer.hostPort(server.localAddress))")
            if let w = server.webSocketAddress { print("wss \(RelayServer.hostPort(w))") }
            if let pin { print("tls-pin \(Hex.encode(pin))") }
            if let m = server.metricsAddress { print("metrics \(RelayServer.hostPort(m))") }
            print("key \(Hex.encode(identity.signingKey))")
            fflush(nil)  // every output stream (stdout is a C global Swift 6 will not touch)

            done.wait()
            logger.notice("stopping")
            server.stop()
            store.close()
        }
    }

    struct Key: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the relay's public key (64 hex digits) to pin in clients, creating it if needed.")

        @Option(name: .customLong("data-dir"), help: "The relay's data directory.")
        var dataDir: String

        func run() throws {
            try FileManager.default.createDirectory(atPath: dataDir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let identity = try IdentityFile.loadOrCreate(path: dataDir + "/relay.identity")
            print(Hex.encode(identity.signingKey))
        }
    }
}

extension YaokRelay {
    struct TLSPin: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tls-pin",
            abstract: "Print the SHA-256 of a certificate's SubjectPublicKeyInfo (64 hex digits) to pin in clients as tls_spki_sha256.",
            discussion: """
            A self-signed certificate for the WebSocket listener (the pin, not a CA, is what clients trust):
              openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \\
                -subj /CN=yaok-relay -keyout relay-tls.key -out relay-tls.crt && chmod 600 relay-tls.key
            The pin stays the same when the certificate is renewed with the same key.
            """)

        @Option(help: "PEM certificate file (the first certificate is used).")
        var cert: String

        @Flag(help: "Also print the base64 form curl's --pinnedpubkey sha256//… takes.")
        var base64 = false

        func run() throws {
            let pin = try SPKIPin.sha256(certificateFile: cert)
            print(Hex.encode(pin))
            if base64 { print("sha256//" + Data(pin).base64EncodedString()) }
        }
    }
}

extension YaokRelay {
    struct Bench: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Measure forwarding, queueing, poll and push rates and each node's memory on loopback: the nodes are `yaok-relay run` processes (temporary data directories), the clients are in this process.")

        @Option(help: "Registered clients (users).")
        var clients = 200

        @Option(help: "Sessions (sockets) carrying them, at most 512 users each; default min(clients, 50).")
        var sessions: Int?

        @Option(help: "Messages each client sends to random online clients.")
        var messages = 10

        @Option(name: .customLong("offline-messages"), help: "Messages queued for 20 offline users, then drained.")
        var offlineMessages = 2_000

        @Option(name: .customLong("wss-cert"), help: "Run the clients over WebSocket + TLS 1.3 with this PEM certificate (and --wss-key) instead of UDP.")
        var wssCert: String?

        @Option(name: .customLong("wss-key"), help: "The certificate's PEM key (mode 0600).")
        var wssKey: String?

        @Option(help: ArgumentHelp("Also measure a two-node cluster on this PostgreSQL database (a scratch database: it must hold no queued messages), after the single-node SQLCipher run.", valueName: "postgres-url"))
        var cluster: String?

        @Option(name: .customLong("store-password-file"), help: "File (mode 0600) with the PostgreSQL password for --cluster; the nodes get its path, never the password.")
        var storePasswordFile: String?

        @Flag(name: .customLong("cluster-only"), help: "With --cluster: skip the single-node run.")
        var clusterOnly = false

        @Option(name: .customLong("latency-samples"), help: "Sequential messages timed for the push latency (across nodes with --cluster).")
        var latencySamples = 200

        func run() throws {
            guard (wssCert == nil) == (wssKey == nil) else { throw ValidationError("--wss-cert and --wss-key go together") }
            let tls = wssCert.flatMap { cert in wssKey.map { (certificate: cert, key: $0) } }
            if cluster != nil, tls != nil { throw ValidationError("--cluster measures UDP clients; leave out --wss-cert") }
            // The nodes are this same program, run as `yaok-relay run` processes.
            let relay = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
            if !(clusterOnly && cluster != nil) {
                print(try RelayBenchmark.run(relay: relay, clients: max(2, clients), sessions: sessions, messagesPerClient: max(1, messages),
                                             offlineMessages: max(20, offlineMessages), latencySamples: max(1, latencySamples), webSocket: tls))
                fflush(nil)  // every output stream (stdout is a C global Swift 6 will not touch)
            }
            if let cluster {
                print(try RelayClusterBenchmark.run(relay: relay, store: cluster, passwordFile: storePasswordFile, clients: max(2, clients),
                                                    sessions: sessions, messagesPerClient: max(1, messages),
                                                    offlineMessages: max(20, offlineMessages), latencySamples: max(1, latencySamples)))
            }
        }
    }
}

// Only `run` reads signals through SignalWaiter: it installs the handlers before any thread
// exists; the other commands keep the default dispositions, so Ctrl-C stops them.
do {
    signal(SIGPIPE, SIG_IGN)   // for every command: a closed socket is an error, not a death
    var command = try YaokRelay.parseAsRoot()
    if command is YaokRelay.Run { SignalWaiter.installEarly() }
    try command.run()
} catch {
    YaokRelay.exit(withError: error)
}
