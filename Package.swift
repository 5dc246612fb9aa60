// swift-tools-version: 6.0
// Ya OK Hub: the field node of the Ya OK delay-tolerant messenger.
// Module map (one job each):
//   Sources/PluginAPI — the transport plugin ABI (C header) and its Swift kit: YaokBase (hex, IP
//                  endpoints, backoff, clocks), YaokLinkSecurity (the Noise link session, TLV,
//                  link frame types), YaokPluginKit (the ABI kit; re-exports both)
//   YaokCrypto   — libsodium wrappers: identities, sealing, signatures
//   YaokWire     — wire formats: envelope, bundle, receipts, contact code, routing frame types
//   YaokStore    — SQLCipher database and the bundle store (YaokStoreBenchmark: its benchmark)
//   YaokATT      — the ATT/GATT server engine (BLE plugin and `yaok-hub att-serve`)
//   YaokReconcile — set reconciliation between hubs (IBLT + strata estimator; Docs/protocol.md, reconcile 0x0A)
//   YaokSupervision — plugin loader, plugin processes (both sides), carrier links, transport host
//   YaokRouting  — the router: custody, hub sync, trust, admission, pacing, status (in memory)
//   YaokHubCore  — the daemon that wires them: config, control socket, metrics, systemd, lifecycle
//   YaokEndpoint — a Ya OK user on Linux (`yaok`), with the phone side of its transports
//   YaokWPA      — the wpa_supplicant control client and P2P service discovery (plugin and endpoint)
//   YaokBluetooth — Bluetooth LE on Linux for the BLE plugin and the endpoint: kernel sockets, adapters, the Ya OK GATT service, link sessions
//   YaokConsole  — the operator console: login, pages, live status over HTTP (Hummingbird)
//   YaokQR       — QR codes of contact codes (libqrencode): SVG in the console, text in `yaok qr`
//   YaokRelayProtocol, YaokRelayWebSocket, YaokRelayServer — the internet relay (YaokRelayBenchmark: its benchmark)
// Plugins/<Name> — one folder per transport plugin, built as libyaok-plugin-<name>.so
import PackageDescription

/// Plugins bind their own symbols first, so each keeps its own copy of the kit's state
/// even when the host process exports the same symbols.
let pluginLinkerSettings: [LinkerSetting] = [.unsafeFlags(["-Xlinker", "-Bsymbolic"])]

let package = Package(
    name: "YaokHub",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "yaok-hub", targets: ["yaok-hub"]),
        .executable(name: "yaok", targets: ["yaok"]),
        .executable(name: "yaok-relay", targets: ["yaok-relay"]),
        .executable(name: "yaok-bench", targets: ["yaok-bench"]),
        .library(name: "yaok-plugin-udp", type: .dynamic, targets: ["YaokUDPPluginEntry"]),
        .library(name: "yaok-plugin-ble", type: .dynamic, targets: ["YaokBLEPluginEntry"]),
        .library(name: "yaok-plugin-mesh", type: .dynamic, targets: ["YaokMeshPluginEntry"]),
        .library(name: "yaok-plugin-relay", type: .dynamic, targets: ["YaokRelayPluginEntry"]),
        .library(name: "yaok-plugin-wifidirect", type: .dynamic, targets: ["YaokWiFiDirectPluginEntry"]),
        .library(name: "yaok-plugin-lora", type: .dynamic, targets: ["YaokLoRaPluginEntry"]),
        // For plugin authors' tests: the plugin test host, bounded waits, loopback helpers
        // (Docs/plugin-guide.md, "Testing it").
        .library(name: "YaokTesting", targets: ["YaokTesting"]),
    ],
    dependencies: [
        .package(path: "Sources/PluginAPI"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "5.0.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        // The console's self-signed TLS certificate (X.509 and P-256 from Apple's kept libraries).
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.0.0"),
    ],
    targets: [
        .systemLibrary(name: "CBluetooth", pkgConfig: "bluez", providers: [.apt(["libbluetooth-dev"])]),
        .systemLibrary(name: "CNetlink", pkgConfig: "libnl-genl-3.0", providers: [.apt(["libnl-genl-3-dev"])]),
        .systemLibrary(name: "CLinuxProcess"),
        .systemLibrary(name: "CSQLCipher", pkgConfig: "sqlcipher", providers: [.apt(["libsqlcipher-dev"])]),
        .systemLibrary(name: "CQRencode", pkgConfig: "libqrencode", providers: [.apt(["libqrencode-dev"])]),
        .target(name: "YaokQR", dependencies: ["CQRencode"]),
        .target(name: "YaokCrypto", dependencies: [.product(name: "CSodium", package: "PluginAPI"), .product(name: "YaokPluginKit", package: "PluginAPI")]),
        .target(name: "YaokWire", dependencies: [
            "YaokCrypto",
            .product(name: "YaokPluginKit", package: "PluginAPI"),
        ]),
        .target(name: "YaokStore", dependencies: ["CSQLCipher", "YaokCrypto", "YaokWire"]),
        // Benchmarks live beside, not in, the modules they measure: they print figures, assert none.
        .target(name: "YaokStoreBenchmark", dependencies: ["YaokStore", "YaokCrypto", "YaokWire"]),
        .target(name: "YaokATT", dependencies: [.product(name: "YaokPluginKit", package: "PluginAPI")]),
        // Set reconciliation between hubs (IBLT + strata estimator), pure: no I/O, no router.
        .target(name: "YaokReconcile", dependencies: ["YaokCrypto", .product(name: "CSodium", package: "PluginAPI"), .product(name: "YaokPluginKit", package: "PluginAPI")]),
        .target(name: "YaokProcess"),
        // The wpa_supplicant control interface and P2P service discovery, shared by the
        // Wi-Fi Direct plugin (the hub's group) and the endpoint (a phone joining it).
        .target(name: "YaokWPA", dependencies: [.product(name: "YaokPluginKit", package: "PluginAPI")]),
        // Bluetooth LE on Linux for both sides: kernel sockets, adapter checks, the GATT service, the link session over ATT.
        .target(name: "YaokBluetooth", dependencies: ["YaokATT", "CBluetooth", .product(name: "YaokPluginKit", package: "PluginAPI")]),
        // Plugin supervision: the loader, the plugin process on both sides of its socket, carrier
        // links and the transport host. It knows nothing of routing.
        .target(name: "YaokSupervision", dependencies: [
            "YaokWire", "YaokCrypto", "CLinuxProcess", "YaokRelayProtocol",
            .product(name: "CYaokPlugin", package: "PluginAPI"),
            .product(name: "YaokPluginKit", package: "PluginAPI"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The routing engine: custody, hub sync, trust, admission, pacing, status. No processes,
        // config files or sockets: it reaches transports through `RouterTransport`.
        .target(name: "YaokRouting", dependencies: [
            "YaokWire", "YaokCrypto", "YaokStore", "YaokReconcile", "YaokRelayProtocol", "CLinuxProcess",
            .product(name: "YaokPluginKit", package: "PluginAPI"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // The daemon: wires supervision to routing; config files, control socket, metrics, systemd.
        .target(name: "YaokHubCore", dependencies: [
            "YaokSupervision", "YaokRouting",
            "YaokWire", "YaokCrypto", "YaokStore", "YaokProcess", "CLinuxProcess", "YaokReconcile", "YaokRelayProtocol",
            .product(name: "CYaokPlugin", package: "PluginAPI"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Yams", package: "Yams"),
        ]),
        // The operator console: a web page served by the hub (Hummingbird 2), assets embedded.
        .target(name: "YaokConsole", dependencies: [
            "YaokHubCore", "YaokRouting", "YaokSupervision", "YaokCrypto", "YaokWire", "YaokQR",
            .product(name: "CSodium", package: "PluginAPI"),
            .product(name: "YaokPluginKit", package: "PluginAPI"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdCore", package: "hummingbird"),
            .product(name: "HummingbirdTLS", package: "hummingbird"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            .product(name: "X509", package: "swift-certificates"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "SwiftASN1", package: "swift-asn1"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "yaok-hub", dependencies: [
            "YaokHubCore", "YaokSupervision", "YaokATT", "YaokConsole",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .target(name: "YaokRelayProtocol", dependencies: [
            "YaokCrypto", "YaokWire", .product(name: "CSodium", package: "PluginAPI"), .product(name: "YaokPluginKit", package: "PluginAPI"),
        ]),
        // The relay's messages over WebSocket + TLS 1.3 (server listener and pinned client).
        .target(name: "YaokRelayWebSocket", dependencies: [
            "YaokRelayProtocol", "YaokCrypto", .product(name: "YaokPluginKit", package: "PluginAPI"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "NIOWebSocket", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ]),
        .target(name: "YaokRelayServer", dependencies: [
            "YaokRelayProtocol", "YaokRelayWebSocket", "YaokStore", "YaokProcess", .product(name: "YaokPluginKit", package: "PluginAPI"),
            .product(name: "Prometheus", package: "swift-prometheus"),
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "YaokRelayBenchmark", dependencies: [
            "YaokRelayServer", "YaokRelayProtocol", "YaokRelayWebSocket", "YaokCrypto", "YaokWire",
            .product(name: "YaokPluginKit", package: "PluginAPI"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(name: "yaok-relay", dependencies: [
            "YaokRelayServer", "YaokRelayBenchmark", "YaokProcess", .product(name: "YaokPluginKit", package: "PluginAPI"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .target(name: "YaokEndpoint", dependencies: [
            "YaokWire", "YaokCrypto", "YaokStore", "YaokWPA", "YaokBluetooth", "YaokATT", "CBluetooth", "YaokProcess",
            "YaokRelayProtocol", "YaokRelayWebSocket",
            .product(name: "YaokPluginKit", package: "PluginAPI"),
        ]),
        // Swift 5 mode: it line-buffers C's `stdout` (setvbuf) so figures appear as they are
        // measured, and Swift 6 refuses to name that C global.
        .executableTarget(name: "yaok-bench", dependencies: ["YaokEndpoint", "YaokWire", "YaokCrypto", "YaokStore", "YaokStoreBenchmark", "YaokReconcile",
                                                     "YaokLoRaPlugin", "YaokRNodeEmulator",
                                                     .product(name: "YaokPluginKit", package: "PluginAPI")],
                          swiftSettings: [.swiftLanguageMode(.v5)]),
        .executableTarget(name: "yaok", dependencies: [
            "YaokEndpoint", "YaokQR",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),

        // The test phone of Tests/vmlab/ble-test.sh: the endpoint's BLE client against a hub in the VM.
        .executableTarget(name: "ble-phone", dependencies: [
            "YaokEndpoint", "YaokBluetooth", .product(name: "CSodium", package: "PluginAPI"), .product(name: "YaokPluginKit", package: "PluginAPI"),
        ], path: "Tests/vmlab/BLEPhone", swiftSettings: [.swiftLanguageMode(.v5)]),  // it line-buffers C's `stdout`, as yaok-bench does

        // Transport plugins: Plugins/<Name>/{README.md,Sources,Tests}
        .target(name: "YaokUDPPlugin", dependencies: [
            .product(name: "YaokPluginKit", package: "PluginAPI"),
        ], path: "Plugins/UDP/Sources", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokBLEPlugin", dependencies: [
            "YaokATT", "YaokBluetooth", "CBluetooth",
            .product(name: "YaokPluginKit", package: "PluginAPI"),
        ], path: "Plugins/BLE/Sources", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokMeshPlugin", dependencies: [
            .product(name: "YaokPluginKit", package: "PluginAPI"),
        ], path: "Plugins/Mesh/Sources", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokRelayPlugin", dependencies: [
            "YaokRelayProtocol", "YaokRelayWebSocket",
            .product(name: "YaokPluginKit", package: "PluginAPI"),
        ], path: "Plugins/Relay/Sources", linkerSettings: pluginLinkerSettings),

        .target(name: "YaokLoRaPlugin", dependencies: [
            .product(name: "YaokPluginKit", package: "PluginAPI"), .product(name: "CSodium", package: "PluginAPI"),
        ], path: "Plugins/LoRa/Sources", linkerSettings: pluginLinkerSettings),
        // Emulated RNodes on pseudo-terminals over a simulated channel, for tests (Plugins/LoRa/README.md).
        .target(name: "YaokRNodeEmulator", dependencies: ["YaokLoRaPlugin", "YaokTesting"], path: "Plugins/LoRa/Emulator"),
        .executableTarget(name: "yaok-rnode-sim", dependencies: ["YaokRNodeEmulator", "YaokLoRaPlugin"], path: "Plugins/LoRa/EmulatorTool",
                          swiftSettings: [.swiftLanguageMode(.v5)]),  // it line-buffers C's `stdout`, as yaok-bench does

        .target(name: "YaokWiFiDirectPlugin", dependencies: [
            "CNetlink", "YaokWPA", "YaokProcess",
            .product(name: "YaokPluginKit", package: "PluginAPI"),
        ], path: "Plugins/WiFiDirect/Sources", linkerSettings: pluginLinkerSettings),

        // Each plugin's entry point, linked only into its .so (see Plugins/<Name>/Entry).
        .target(name: "YaokUDPPluginEntry", dependencies: ["YaokUDPPlugin", .product(name: "YaokPluginKit", package: "PluginAPI")],
                path: "Plugins/UDP/Entry", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokMeshPluginEntry", dependencies: ["YaokMeshPlugin", .product(name: "YaokPluginKit", package: "PluginAPI")],
                path: "Plugins/Mesh/Entry", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokLoRaPluginEntry", dependencies: ["YaokLoRaPlugin", .product(name: "YaokPluginKit", package: "PluginAPI")],
                path: "Plugins/LoRa/Entry", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokRelayPluginEntry", dependencies: ["YaokRelayPlugin", .product(name: "YaokPluginKit", package: "PluginAPI")],
                path: "Plugins/Relay/Entry", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokWiFiDirectPluginEntry", dependencies: ["YaokWiFiDirectPlugin", .product(name: "YaokPluginKit", package: "PluginAPI")],
                path: "Plugins/WiFiDirect/Entry", linkerSettings: pluginLinkerSettings),
        .target(name: "YaokBLEPluginEntry", dependencies: ["YaokBLEPlugin", .product(name: "YaokPluginKit", package: "PluginAPI")],
                path: "Plugins/BLE/Entry", linkerSettings: pluginLinkerSettings),

        // Test helpers shared by the test targets (real sockets on loopback, bounded waits).
        .target(name: "YaokTesting", dependencies: ["YaokCrypto", .product(name: "CYaokPlugin", package: "PluginAPI"),
                                                  .product(name: "YaokPluginKit", package: "PluginAPI")]),
        // The one harness that runs a real `yaok-hub` (HubProcess), for every suite that needs one.
        .target(name: "HubTestSupport", dependencies: ["YaokHubCore", "YaokSupervision", "YaokTesting"], path: "Tests/HubTestSupport"),
        // What the relay's and the relay plugin's tests share: real yaok-relay, yaok-hub and yaok
        // processes, a hub with the relay plugin, a TLS fixture, users. Not in YaokTesting: it needs YaokRelayServer.
        .target(name: "RelayTestSupport", dependencies: ["HubTestSupport", "YaokRelayServer", "YaokCrypto", "YaokWire", "YaokTesting",
                                                       .product(name: "YaokPluginKit", package: "PluginAPI")],
                path: "Tests/RelayTestSupport"),
        .testTarget(name: "YaokQRTests", dependencies: ["YaokQR", "YaokTesting"]),
        .testTarget(name: "YaokConsoleTests", dependencies: ["YaokConsole", "YaokHubCore", "YaokRouting", "YaokSupervision", "YaokTesting"]),
        .testTarget(name: "YaokWireTests", dependencies: ["YaokWire", "YaokCrypto", .product(name: "YaokPluginKit", package: "PluginAPI"), .product(name: "YaokLinkSecurity", package: "PluginAPI")]),
        .testTarget(name: "YaokStoreTests", dependencies: ["YaokStore", "YaokStoreBenchmark", "YaokTesting"]),
        .testTarget(name: "YaokATTTests", dependencies: ["YaokATT", "YaokTesting"]),
        .testTarget(name: "YaokReconcileTests", dependencies: ["YaokReconcile", "YaokCrypto", "YaokTesting", .product(name: "YaokPluginKit", package: "PluginAPI")]),
        .testTarget(name: "YaokHubTests", dependencies: ["HubTestSupport", "YaokHubCore", "YaokRouting", "YaokSupervision", "YaokWire", "YaokCrypto", "YaokEndpoint", "YaokWPA", "YaokStore", "YaokReconcile", "YaokProcess", "YaokTesting", "YaokRNodeEmulator",
                                                        .product(name: "Logging", package: "swift-log")]),
        .testTarget(name: "YaokUDPPluginTests", dependencies: ["YaokUDPPlugin", "YaokHubCore", "YaokSupervision", "YaokTesting", "YaokCrypto", "YaokWire"], path: "Plugins/UDP/Tests"),
        .testTarget(name: "YaokMeshPluginTests", dependencies: ["YaokMeshPlugin", "YaokWire", "YaokTesting"], path: "Plugins/Mesh/Tests", exclude: ["netns"]),
        // The relay plugin's unit tests, and its end-to-end tests: the built .so through the C
        // ABI and inside a real yaok-hub, against real yaok-relay processes.
        .testTarget(name: "YaokRelayPluginTests", dependencies: ["HubTestSupport", "YaokRelayPlugin", "YaokRelayProtocol", "RelayTestSupport", "YaokCrypto", "YaokWire",
                                                              "YaokTesting", .product(name: "YaokPluginKit", package: "PluginAPI")],
                    path: "Plugins/Relay/Tests"),
        // The relay server, its protocol, client and WebSocket transport.
        .testTarget(name: "RelayTests", dependencies: ["HubTestSupport", "YaokRelayServer", "YaokRelayBenchmark", "YaokRelayProtocol", "YaokRelayWebSocket", "YaokCrypto", "YaokWire", "YaokTesting",
                                                     "RelayTestSupport", .product(name: "YaokPluginKit", package: "PluginAPI")]),
        .testTarget(name: "YaokWiFiDirectPluginTests", dependencies: ["YaokWiFiDirectPlugin", "YaokWPA", "YaokProcess", "YaokEndpoint", "YaokTesting"], path: "Plugins/WiFiDirect/Tests"),
        .testTarget(name: "YaokLoRaPluginTests", dependencies: ["YaokLoRaPlugin", "YaokRNodeEmulator", "YaokTesting"], path: "Plugins/LoRa/Tests"),
        .testTarget(name: "YaokBLEPluginTests", dependencies: ["YaokBLEPlugin", "YaokBluetooth", "YaokEndpoint", "YaokATT", "YaokTesting"], path: "Plugins/BLE/Tests"),
    ],
    swiftLanguageModes: [.v6]
)

/// `YAOK_PORTABLE_TESTS=1` narrows the package to the unit tests that need no radio, root or
/// hub process — crypto and wire vectors, the store (SQLCipher), reconciliation, ATT, the UDP
/// and mesh link engines, the hub core's in-memory parts — and what they build on. The arm64
/// suite cross-builds this and runs it under qemu-user (Tests/arm64/run.sh): the whole package
/// in debug would be a second full cross build beside the packages' release one.
if Context.environment["YAOK_PORTABLE_TESTS"] == "1" {
    let hubUnitTests = ["ConfigEditorTests.swift", "HopLatencyTests.swift", "PluginMessageTests.swift",
                        "ReceiptCommitmentsTests.swift", "RoutingPolicyTests.swift", "ClockEstimateTests.swift",
                        "MetricsHTTPServerTests.swift", "RouterHarness.swift", "RouterCustodyTests.swift", "RouterRefusalTests.swift", "RouterSendRefusalTests.swift", "RouterTrustTests.swift", "RouterReconcileTests.swift", "CustodyAckListTests.swift", "RouterHeldTests.swift", "RouterGroupCommitTests.swift"]
    let tests: Set<String> = ["YaokWireTests", "YaokStoreTests", "YaokReconcileTests", "YaokATTTests",
                              "YaokHubTests", "YaokUDPPluginTests", "YaokMeshPluginTests", "YaokLoRaPluginTests",
                              "YaokUDPPluginEntry"]  // UDPPluginTests load the built .so through the C ABI
    // The emulator's process test needs yaok-rnode-sim, which the portable build does not make.
    for target in package.targets where target.name == "YaokLoRaPluginTests" { target.exclude = ["EmulatorProcessTests.swift", "RNodeDeviceTests.swift", "LoRaPluginTests.swift"] }
    for target in package.targets where target.name == "YaokHubTests" {
        target.sources = hubUnitTests
        target.dependencies = ["YaokHubCore", "YaokRouting", "YaokSupervision", "YaokWire", "YaokCrypto", "YaokStore", "YaokReconcile", "YaokTesting",
                               .product(name: "Logging", package: "swift-log"),
                               .product(name: "YaokPluginKit", package: "PluginAPI")]
    }
    // Only the targets the kept tests reach, so nothing else (Hummingbird, PostgresNIO, TLS) is built.
    var keep = tests
    var todo = Array(tests)
    let byName = Dictionary(uniqueKeysWithValues: package.targets.map { ($0.name, $0) })
    while let name = todo.popLast() {
        for dependency in byName[name]?.dependencies ?? [] {
            if case .byNameItem(let dep, _) = dependency, byName[dep] != nil, keep.insert(dep).inserted { todo.append(dep) }
            if case .targetItem(let dep, _) = dependency, byName[dep] != nil, keep.insert(dep).inserted { todo.append(dep) }
        }
    }
    package.targets = package.targets.filter { keep.contains($0.name) }
    package.products = package.products.filter { $0.name == "yaok-plugin-udp" }
}
