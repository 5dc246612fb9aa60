import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import YaokCrypto
import enum YaokPluginKit.Hex
import struct YaokPluginKit.Backoff

/// The relay's durable state on PostgreSQL, shared by every node of a relay cluster: the
/// queue (with per-row leases), phone → hub attachments, the registration replay cache and
/// the per-sender hourly send counters. Holds ciphertext envelopes and IDs only.
///
/// The engine calls it synchronously from its serial queue: each call waits (bounded by
/// ``statementTimeoutSeconds``) for PostgresNIO on a private event loop. One connection
/// serves the engine; a lost connection is re-opened at the next call outside a
/// transaction (a transaction in flight fails, so its batch is not answered and clients
/// retransmit). A second connection LISTENs for other nodes' "queued" notifications
/// (``startListening(onKeys:onReconnect:)``).
///
/// Cross-node wake-ups: inserting a bundle NOTIFYs channel `yaok_relay_queued` with
/// `<node tag>:<key>`, where the key is ``notifyKey(for:)`` — 8 bytes of a hash of the
/// recipient, never the user ID itself. PostgreSQL delivers it when the transaction commits.
// @unchecked: the engine calls it from its one serial queue; the listener handle is under `listenerLock`.
public final class RelayPostgresStore: RelayStore, @unchecked Sendable {
    /// The schema this code writes (the `relay_schema_version` table holds the applied one).
    public static let schemaVersion = 2
    /// The NOTIFY channel.
    public static let channel = "yaok_relay_queued"
    /// The advisory lock key held while migrating (two nodes starting at once take turns).
    static let migrationLockKey: Int64 = 0x5941_4F4B_5245_4C59   // "YAOKRELY"
    /// Upper bound on any one wait for the server.
    public static let statementTimeoutSeconds: Int64 = 15

    public let configuration: RelayPostgresConfiguration
    /// This process's tag in leases and notifications (random per start: a restarted node
    /// does not inherit the leases of its previous life).
    public let nodeTag: String
    private let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private var connection: PostgresConnection?
    private var inTransaction = false
    private var nextConnectionID = 1
    private let listenerLock = NSLock()
    private var listener: Listener?
    private var closed = false

    /// Connects, takes the migration lock, applies missing schema versions, and releases it.
    public init(configuration: RelayPostgresConfiguration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        self.nodeTag = Hex.encode((0..<4).map { _ in UInt8.random(in: 0...255) })
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            try migrate()
        } catch {
            try? connection?.close().wait()
            try? group.syncShutdownGracefully()
            throw error
        }
    }

    /// The key other nodes are woken with for `recipient`: 16 hex digits of a hash (the user
    /// ID does not appear in notifications, server logs or `pg_stat_activity`).
    public static func notifyKey(for recipient: [UInt8]) -> String {
        Hex.encode(Hash.sha256(Array("yaok-relay-notify".utf8) + recipient).prefix(8))
    }

    // MARK: Schema

    /// Each version's statements (one statement per string: the extended protocol runs one at a time).
    static let migrations: [Int: [String]] = [
        1: [
            """
            CREATE TABLE relay_queue (
                bundle_id bytea PRIMARY KEY,
                recipient bytea NOT NULL,
                sender bytea NOT NULL,
                bundle bytea NOT NULL,
                queued_ms bigint NOT NULL,
                expires_ms bigint NOT NULL,
                lease_until_ms bigint NOT NULL DEFAULT 0,
                lease_node text
            )
            """,
            "CREATE INDEX relay_queue_recipient ON relay_queue (recipient, queued_ms)",
            "CREATE INDEX relay_queue_expiry ON relay_queue (expires_ms)",
            "CREATE INDEX relay_queue_lease ON relay_queue (lease_until_ms)",
            "CREATE TABLE relay_attachments (user_id bytea PRIMARY KEY, owner bytea NOT NULL, expires_ms bigint NOT NULL)",
            "CREATE INDEX relay_attachments_owner ON relay_attachments (owner)",
            "CREATE TABLE relay_nonces (nonce_key bytea PRIMARY KEY, expires_ms bigint NOT NULL)",
            "CREATE TABLE relay_send_counts (sender bytea NOT NULL, hour bigint NOT NULL, n integer NOT NULL, PRIMARY KEY (sender, hour))",
        ],
        // Delivered bundle IDs until their expiry: a copy sent again after its ACK (a node
        // that resumes after a freeze, a hub's retry) is a duplicate, not queued again.
        2: [
            "CREATE TABLE relay_delivered (bundle_id bytea PRIMARY KEY, expires_ms bigint NOT NULL)",
            "CREATE INDEX relay_delivered_expiry ON relay_delivered (expires_ms)",
        ],
    ]

    private func migrate() throws {
        _ = try run("SELECT pg_advisory_lock(\(Self.migrationLockKey))", purpose: "taking the migration lock")
        defer { _ = try? run("SELECT pg_advisory_unlock(\(Self.migrationLockKey))", purpose: "releasing the migration lock") }
        _ = try run("CREATE TABLE IF NOT EXISTS relay_schema_version (version integer NOT NULL)", purpose: "creating relay_schema_version")
        let current = try run("SELECT coalesce(max(version), 0) FROM relay_schema_version", purpose: "reading the schema version")
            .first.map { try $0.decode(Int32.self) }.map(Int.init) ?? 0
        guard current <= Self.schemaVersion else { throw RelayPostgresError.schemaTooNew(found: current, known: Self.schemaVersion) }
        for version in (current + 1)..<(Self.schemaVersion + 1) {
            try transaction {
                for statement in Self.migrations[version] ?? [] {
                    _ = try run(PostgresQuery(unsafeSQL: statement), purpose: "migrating to schema version \(version)")
                }
                _ = try run("INSERT INTO relay_schema_version (version) VALUES (\(Int32(version)))", purpose: "recording schema version \(version)")
            }
            logger.notice("relay store: PostgreSQL schema migrated to version \(version)")
        }
    }

    /// The applied schema version (tests, status).
    public func appliedSchemaVersion() throws -> Int {
        Int(try run("SELECT coalesce(max(version), 0) FROM relay_schema_version", purpose: "reading the schema version")
            .first.map { try $0.decode(Int32.self) } ?? 0)
    }

    // MARK: Connection

    private func pgConfiguration() -> PostgresConnection.Configuration {
        var c: PostgresConnection.Configuration
        switch configuration.endpoint {
        case .unixSocket(let path):
            c = .init(unixSocketPath: path, username: configuration.username, password: configuration.password, database: configuration.database)
        case .tcp(let host, let port):
            var tls = PostgresConnection.Configuration.TLS.disable
            if configuration.tls == .require {
                var t = TLSConfiguration.makeClientConfiguration()
                if let ca = configuration.rootCertificatePath {
                    t.additionalTrustRoots = [.file(ca)]
                }
                if let ctx = try? NIOSSLContext(configuration: t) { tls = .require(ctx) }
            }
            c = .init(host: host, port: port, username: configuration.username, password: configuration.password,
                      database: configuration.database, tls: tls)
        }
        c.options.connectTimeout = .seconds(Self.statementTimeoutSeconds)
        c.options.additionalStartupParameters = [("application_name", "yaok-relay"),
                                                 ("statement_timeout", "\(Self.statementTimeoutSeconds * 1000)")]
        return c
    }

    /// PostgresNIO's own logger stays quiet: its debug lines could carry statement binds.
    private static let quietLogger: Logger = {
        var l = Logger(label: "yaok-relay.postgres")
        l.logLevel = .critical
        return l
    }()

    func openConnection() throws -> PostgresConnection {
        let id = nextConnectionID
        nextConnectionID += 1
        do {
            return try Self.wait(PostgresConnection.connect(on: group.next(), configuration: pgConfiguration(), id: id, logger: Self.quietLogger),
                                 purpose: "connecting")
        } catch let e as RelayPostgresError {
            throw RelayPostgresError.connectionFailed(location: configuration.location, reason: e.description)
        } catch {
            throw RelayPostgresError.connectionFailed(location: configuration.location, reason: Self.describe(error))
        }
    }

    private func liveConnection() throws -> PostgresConnection {
        // After close() the event loop is gone: connecting on it would drop NIO's promise
        // (a crash in debug builds). A call that arrives late (the engine's queue draining)
        // fails like any other store error.
        guard !listenerLock.withLock({ closed }) else { throw RelayPostgresError.closed }
        if let c = connection, !c.isClosed { return c }
        if connection != nil { logger.warning("relay store: PostgreSQL connection lost; reconnecting to \(configuration.location)") }
        connection = nil
        let c = try openConnection()
        connection = c
        return c
    }

    /// Waits for `future`, at most ``statementTimeoutSeconds``.
    static func wait<T: Sendable>(_ future: EventLoopFuture<T>, purpose: String, seconds: Int64 = statementTimeoutSeconds) throws -> T {
        let loop = future.eventLoop
        let promise = loop.makePromise(of: T.self)
        // Touched on `loop` only (the timer and the callback both run there), checked by NIO.
        let done = NIOLoopBoundBox.makeBoxSendingValue(false, as: Bool.self, eventLoop: loop)
        let timer = loop.scheduleTask(in: .seconds(seconds)) {
            if !done.value { done.value = true; promise.fail(RelayPostgresError.timedOut(purpose: purpose, seconds: Int(seconds))) }
        }
        future.whenComplete { result in
            timer.cancel()
            if !done.value { done.value = true; promise.completeWith(result) }
        }
        return try promise.futureResult.wait()
    }

    /// A short description of a PostgresNIO error without statement text or bound values
    /// (which could hold user IDs).
    static func describe(_ error: Error) -> String {
        if let e = error as? RelayPostgresError { return e.description }
        guard let p = error as? PSQLError else { return "\(error)" }
        if let info = p.serverInfo {
            return [info[.sqlState].map { "SQLSTATE \($0)" }, info[.message]].compactMap { $0 }.joined(separator: ": ")
        }
        if let u = p.underlying { return "\(p.code): \(u)" }
        return "\(p.code)"
    }

    /// Runs one statement; retries once on a fresh connection if the old one was found dead
    /// outside a transaction.
    @discardableResult
    func run(_ query: PostgresQuery, purpose: String) throws -> [PostgresRow] {
        try runWithCount(query, purpose: purpose).rows
    }

    func runWithCount(_ query: PostgresQuery, purpose: String) throws -> (rows: [PostgresRow], affected: Int) {
        var attempt = 0
        while true {
            attempt += 1
            let c = try liveConnection()
            do {
                let result = try Self.wait(c.query(query, logger: Self.quietLogger), purpose: purpose)
                return (result.rows, result.metadata.rows ?? result.rows.count)
            } catch {
                let dead = c.isClosed || (error as? PSQLError).map { [.serverClosedConnection, .connectionError, .clientClosedConnection, .uncleanShutdown].contains($0.code) } ?? false
                if case RelayPostgresError.timedOut = error { _ = try? c.close().wait(); connection = nil }
                if dead {
                    connection = nil
                    if !inTransaction && attempt == 1 { continue }
                }
                throw RelayPostgresError.queryFailed(purpose: purpose, reason: Self.describe(error))
            }
        }
    }

    private static func bytes(_ b: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: b) }
    private static func array(_ b: ByteBuffer) -> [UInt8] { Array(b.readableBytesView) }

    // MARK: RelayStore

    /// True: every node of the cluster writes this database.
    public var isShared: Bool { true }

    /// BEGIN … COMMIT on the engine's connection; a nested call joins the outer transaction.
    public func transaction<T>(_ body: () throws -> T) throws -> T {
        if inTransaction { return try body() }
        try run("BEGIN", purpose: "beginning a transaction")
        inTransaction = true
        let value: T
        do {
            value = try body()
        } catch {
            inTransaction = false
            if let c = connection, !c.isClosed { _ = try? Self.wait(c.query("ROLLBACK", logger: Self.quietLogger), purpose: "rolling back") }
            throw error
        }
        inTransaction = false
        do {
            try run("COMMIT", purpose: "committing")
        } catch {
            if let c = connection, !c.isClosed { _ = try? Self.wait(c.query("ROLLBACK", logger: Self.quietLogger), purpose: "rolling back") }
            throw error
        }
        return value
    }

    public func insert(bundleID: [UInt8], recipient: [UInt8], sender: [UInt8], bundle: [UInt8], queuedMs: Int64, expiresMs: Int64) throws -> Bool {
        let payload = nodeTag + ":" + Self.notifyKey(for: recipient)
        let rows = try run("""
            WITH ins AS (
                INSERT INTO relay_queue (bundle_id, recipient, sender, bundle, queued_ms, expires_ms)
                VALUES (\(Self.bytes(bundleID)), \(Self.bytes(recipient)), \(Self.bytes(sender)), \(Self.bytes(bundle)), \(queuedMs), \(expiresMs))
                ON CONFLICT (bundle_id) DO NOTHING RETURNING 1
            )
            SELECT pg_notify(\(Self.channel), \(payload)) FROM ins
            """, purpose: "queueing a bundle")
        return rows.count == 1
    }

    public func recipientAndSender(of bundleID: [UInt8]) throws -> (recipient: [UInt8], sender: [UInt8])? {
        guard let row = try run("SELECT recipient, sender FROM relay_queue WHERE bundle_id = \(Self.bytes(bundleID))",
                                purpose: "looking up a recipient").first else { return nil }
        let (r, s) = try row.decode((ByteBuffer, ByteBuffer).self)
        return (Self.array(r), Self.array(s))
    }

    public func delete(_ bundleID: [UInt8]) throws -> Bool {
        try !delete([bundleID]).isEmpty
    }

    public func isDelivered(_ bundleID: [UInt8]) throws -> Bool {
        try !run("SELECT 1 FROM relay_delivered WHERE bundle_id = \(Self.bytes(bundleID))", purpose: "looking up a delivered bundle").isEmpty
    }

    public func bundleIDs(for recipient: [UInt8], nowMs: Int64, limit: Int) throws -> [[UInt8]] {
        try run("""
            SELECT bundle_id FROM relay_queue
            WHERE recipient = \(Self.bytes(recipient)) AND expires_ms > \(nowMs)
              AND (lease_until_ms <= \(nowMs) OR lease_node = \(nodeTag))
            ORDER BY queued_ms LIMIT \(Int64(limit))
            """, purpose: "listing queued bundles").map { Self.array(try $0.decode(ByteBuffer.self)) }
    }

    public func bundle(_ bundleID: [UInt8]) throws -> [UInt8]? {
        try run("SELECT bundle FROM relay_queue WHERE bundle_id = \(Self.bytes(bundleID))", purpose: "reading a bundle")
            .first.map { Self.array(try $0.decode(ByteBuffer.self)) }
    }

    public func countsBySender() throws -> [[UInt8]: Int] {
        var out: [[UInt8]: Int] = [:]
        for row in try run("SELECT sender, count(*) FROM relay_queue GROUP BY sender", purpose: "counting senders") {
            let (s, n) = try row.decode((ByteBuffer, Int64).self)
            out[Self.array(s)] = Int(n)
        }
        return out
    }

    public func countsByRecipient() throws -> [[UInt8]: Int] {
        var out: [[UInt8]: Int] = [:]
        for row in try run("SELECT recipient, count(*) FROM relay_queue GROUP BY recipient", purpose: "counting queues") {
            let (r, n) = try row.decode((ByteBuffer, Int64).self)
            out[Self.array(r)] = Int(n)
        }
        return out
    }

    public func expire(nowMs: Int64) throws -> Int {
        try transaction {
            let n = try runWithCount("DELETE FROM relay_queue WHERE expires_ms <= \(nowMs)", purpose: "expiring bundles").affected
            try run("DELETE FROM relay_attachments WHERE expires_ms <= \(nowMs)", purpose: "expiring attachments")
            try run("DELETE FROM relay_nonces WHERE expires_ms <= \(nowMs)", purpose: "expiring nonces")
            try run("DELETE FROM relay_send_counts WHERE hour < \(nowMs / 3_600_000)", purpose: "expiring send counters")
            try run("DELETE FROM relay_delivered WHERE expires_ms <= \(nowMs)", purpose: "forgetting expired deliveries")
            return n
        }
    }

    public func saveAttachment(user: [UInt8], owner: [UInt8], expiresMs: Int64) throws {
        try run("""
            INSERT INTO relay_attachments (user_id, owner, expires_ms) VALUES (\(Self.bytes(user)), \(Self.bytes(owner)), \(expiresMs))
            ON CONFLICT (user_id) DO UPDATE SET owner = EXCLUDED.owner, expires_ms = EXCLUDED.expires_ms
            """, purpose: "saving an attachment")
    }

    public func attachments(nowMs: Int64) throws -> [[UInt8]: (owner: [UInt8], expiresMs: Int64)] {
        var out: [[UInt8]: (owner: [UInt8], expiresMs: Int64)] = [:]
        for row in try run("SELECT user_id, owner, expires_ms FROM relay_attachments WHERE expires_ms > \(nowMs)", purpose: "loading attachments") {
            let (u, o, e) = try row.decode((ByteBuffer, ByteBuffer, Int64).self)
            out[Self.array(u)] = (Self.array(o), e)
        }
        return out
    }

    public func attachments(ownedBy owner: [UInt8], nowMs: Int64) throws -> [[UInt8]: Int64] {
        var out: [[UInt8]: Int64] = [:]
        for row in try run("SELECT user_id, expires_ms FROM relay_attachments WHERE owner = \(Self.bytes(owner)) AND expires_ms > \(nowMs)",
                           purpose: "loading a hub's attachments") {
            let (u, e) = try row.decode((ByteBuffer, Int64).self)
            out[Self.array(u)] = e
        }
        return out
    }

    /// Atomic across nodes: two nodes claiming one nonce at once serialise on its primary
    /// key, and the second finds the first's unexpired row.
    public func claimNonce(_ key: [UInt8], expiresMs: Int64, nowMs: Int64) throws -> Bool {
        try runWithCount("""
            INSERT INTO relay_nonces (nonce_key, expires_ms) VALUES (\(Self.bytes(key)), \(expiresMs))
            ON CONFLICT (nonce_key) DO UPDATE SET expires_ms = EXCLUDED.expires_ms WHERE relay_nonces.expires_ms <= \(nowMs)
            """, purpose: "claiming a registration nonce").affected == 1
    }

    public func nonces(nowMs: Int64) throws -> [[UInt8]: Int64] {
        var out: [[UInt8]: Int64] = [:]
        for row in try run("SELECT nonce_key, expires_ms FROM relay_nonces WHERE expires_ms > \(nowMs)", purpose: "loading nonces") {
            let (k, e) = try row.decode((ByteBuffer, Int64).self)
            out[Self.array(k)] = e
        }
        return out
    }

    /// Takes the row's lease unless another node holds an unexpired one. The row lock makes
    /// two nodes' attempts serialise; the loser re-reads the winner's lease and gets false.
    public func lease(_ bundleID: [UInt8], untilMs: Int64, nowMs: Int64) throws -> Bool {
        try runWithCount("""
            UPDATE relay_queue SET lease_until_ms = \(untilMs), lease_node = \(nodeTag)
            WHERE bundle_id = \(Self.bytes(bundleID)) AND (lease_until_ms <= \(nowMs) OR lease_node = \(nodeTag))
            """, purpose: "leasing a bundle").affected == 1
    }

    // The batched forms: one statement for every bundle of a POLL round or an ACK, instead of
    // one or two round trips per bundle (what made a cluster node's drain slow).

    public func leaseBundles(_ bundleIDs: [[UInt8]], untilMs: Int64, nowMs: Int64) throws -> [(id: [UInt8], bundle: [UInt8])] {
        guard !bundleIDs.isEmpty else { return [] }
        let rows = try run("""
            UPDATE relay_queue SET lease_until_ms = \(untilMs), lease_node = \(nodeTag)
            WHERE bundle_id = ANY(\(bundleIDs.map(Self.bytes))) AND (lease_until_ms <= \(nowMs) OR lease_node = \(nodeTag))
            RETURNING bundle_id, bundle
            """, purpose: "leasing bundles")
        var leased: [[UInt8]: [UInt8]] = [:]
        for row in rows {
            let (id, bundle) = try row.decode((ByteBuffer, ByteBuffer).self)
            leased[Self.array(id)] = Self.array(bundle)
        }
        return bundleIDs.compactMap { id in leased[id].map { (id, $0) } }
    }

    public func recipientsAndSenders(of bundleIDs: [[UInt8]]) throws -> [[UInt8]: (recipient: [UInt8], sender: [UInt8])] {
        guard !bundleIDs.isEmpty else { return [:] }
        var out: [[UInt8]: (recipient: [UInt8], sender: [UInt8])] = [:]
        for row in try run("SELECT bundle_id, recipient, sender FROM relay_queue WHERE bundle_id = ANY(\(bundleIDs.map(Self.bytes)))",
                           purpose: "looking up recipients") {
            let (id, r, s) = try row.decode((ByteBuffer, ByteBuffer, ByteBuffer).self)
            out[Self.array(id)] = (Self.array(r), Self.array(s))
        }
        return out
    }

    public func delete(_ bundleIDs: [[UInt8]]) throws -> Set<[UInt8]> {
        guard !bundleIDs.isEmpty else { return [] }
        // One statement: the deleted rows are remembered as delivered (until their expiry).
        return Set(try run("""
            WITH gone AS (DELETE FROM relay_queue WHERE bundle_id = ANY(\(bundleIDs.map(Self.bytes))) RETURNING bundle_id, expires_ms),
                 kept AS (INSERT INTO relay_delivered (bundle_id, expires_ms) SELECT bundle_id, expires_ms FROM gone ON CONFLICT (bundle_id) DO NOTHING)
            SELECT bundle_id FROM gone
            """, purpose: "deleting acknowledged bundles").map { Self.array(try $0.decode(ByteBuffer.self)) })
    }

    public func recipientsWithLeasesExpired(afterMs: Int64, untilMs: Int64) throws -> [[UInt8]] {
        try run("""
            SELECT DISTINCT recipient FROM relay_queue
            WHERE lease_until_ms > \(afterMs) AND lease_until_ms <= \(untilMs) AND expires_ms > \(untilMs)
            """, purpose: "finding expired leases").map { Self.array(try $0.decode(ByteBuffer.self)) }
    }

    /// A fixed hourly window per sender, counted in the database so that sending through
    /// several nodes does not multiply the budget.
    public func chargeSend(sender: [UInt8], nowMs: Int64, limit: Int) throws -> Int64? {
        let hour = nowMs / 3_600_000
        // A send over the limit is refused and not counted: only accepted sends use the budget.
        let counted = try run("""
            INSERT INTO relay_send_counts (sender, hour, n) VALUES (\(Self.bytes(sender)), \(hour), 1)
            ON CONFLICT (sender, hour) DO UPDATE SET n = relay_send_counts.n + 1 WHERE relay_send_counts.n < \(Int32(clamping: limit))
            RETURNING n
            """, purpose: "counting a send")
        return counted.isEmpty ? (hour + 1) * 3_600_000 - nowMs : nil
    }

    /// Closes the connections and the event loop. Later calls throw ``RelayPostgresError/closed``.
    public func close() {
        listenerLock.withLock { closed = true }
        stopListening()
        if let c = connection { _ = try? c.close().wait() }
        connection = nil
        try? group.syncShutdownGracefully()
    }

    // MARK: Listening

    /// LISTENs on a connection of its own; `onKeys` receives the notify keys queued by
    /// other nodes (never this node's own), on the event loop. When the connection is lost it
    /// reconnects with backoff (100 ms doubling to 5 s) and calls `onReconnect`, since
    /// notifications sent meanwhile are lost: the caller re-checks its users' queues.
    public func startListening(onKeys: @escaping @Sendable ([String]) -> Void, onReconnect: @escaping @Sendable () -> Void) {
        let l = Listener(store: self, onKeys: onKeys, onReconnect: onReconnect)
        listenerLock.withLock { listener = l }
        l.connect(first: true)
    }

    /// Stops LISTENing and waits for its connection to close: no `onKeys` or `onReconnect`
    /// call starts after this returns (the server stops it before draining its engine queue).
    public func stopListening() {
        let l: Listener? = listenerLock.withLock {
            defer { listener = nil }
            return listener
        }
        l?.stop()
    }

    /// Whether the LISTEN connection is up (tests, status).
    public var isListening: Bool { listenerLock.withLock { listener?.isUp ?? false } }

    // @unchecked: connection, flags and backoff only under `lock`; the rest is `let` (store: set in init).
    final class Listener: @unchecked Sendable {
        weak var store: RelayPostgresStore?
        let onKeys: @Sendable ([String]) -> Void
        let onReconnect: @Sendable () -> Void
        let loop: EventLoop
        let lock = NSLock()
        var connection: PostgresConnection?
        var stopped = false
        var backoff = Backoff(baseMs: 100, capMs: 5_000, jitter: false)
        var up = false
        var isUp: Bool { lock.withLock { up } }

        init(store: RelayPostgresStore, onKeys: @escaping @Sendable ([String]) -> Void, onReconnect: @escaping @Sendable () -> Void) {
            self.store = store
            self.onKeys = onKeys
            self.onReconnect = onReconnect
            self.loop = store.group.next()
        }

        func connect(first: Bool) {
            guard let store, !lock.withLock({ stopped }) else { return }
            let tag = store.nodeTag + ":"
            let logger = store.logger
            let location = store.configuration.location
            PostgresConnection.connect(on: loop, configuration: store.pgConfiguration(), id: 0, logger: RelayPostgresStore.quietLogger)
                .flatMap { c -> EventLoopFuture<PostgresConnection> in
                    c.addListener(channel: RelayPostgresStore.channel) { [weak self] _, note in
                        guard note.payload.hasPrefix(tag) == false else { return }   // our own insert
                        guard let key = note.payload.split(separator: ":").last, key.count == 16 else { return }
                        self?.onKeys([String(key)])
                    }
                    return c.query("LISTEN \(unescaped: RelayPostgresStore.channel)", logger: RelayPostgresStore.quietLogger).map { _ in c }
                        .flatMapError { error in c.close().flatMapThrowing { throw error } }   // do not leak a half-set-up connection
                }
                .whenComplete { [weak self] result in
                    guard let self else { return }
                    switch result {
                    case .success(let c):
                        let stop: Bool = self.lock.withLock {
                            if self.stopped { return true }
                            self.connection = c
                            self.up = true
                            self.backoff.reset()
                            return false
                        }
                        if stop { c.close().whenComplete { _ in }; return }
                        if !first { logger.notice("relay store: LISTEN connection to \(location) restored") }
                        if !first { self.onReconnect() }
                        c.closeFuture.whenComplete { [weak self] _ in
                            guard let self else { return }
                            let again: Bool = self.lock.withLock { self.up = false; self.connection = nil; return !self.stopped }
                            guard again else { return }
                            logger.warning("relay store: LISTEN connection to \(location) lost; reconnecting")
                            self.retry()
                        }
                    case .failure(let error):
                        if first { logger.warning("relay store: cannot LISTEN at \(location): \(RelayPostgresStore.describe(error)); retrying") }
                        self.retry()
                    }
                }
        }

        private func retry() {
            let delay: Int64 = lock.withLock { backoff.nextDelayMs() }
            loop.scheduleTask(in: .milliseconds(delay)) { [weak self] in self?.connect(first: false) }
        }

        func stop() {
            let c: PostgresConnection? = lock.withLock { stopped = true; defer { connection = nil }; return connection }
            if let c { _ = try? c.close().wait() }
        }
    }
}
