// swift-tools-version: 6.0
// The Ya OK Hub transport plugin API: a C ABI header and a Swift kit over it.
// It is its own package so a plugin written out of tree depends on this small
// package alone (see Docs/plugin-guide.md). Three Swift modules, each with one job:
//   YaokBase         — hex, IP endpoints, backoff, clocks, a token bucket, threads (no C)
//   YaokLinkSecurity — the secure link session (Noise over libsodium), once for every
//                      transport; TLV records and the link frame types
//   YaokPluginKit    — the ABI kit proper: Transport, TransportContext, the entry points,
//                      config sections, and link engines (UDP, streams); it re-exports the
//                      other two, so a plugin imports YaokPluginKit alone
import PackageDescription

let package = Package(
    name: "YaokPluginAPI",
    products: [
        .library(name: "YaokPluginKit", targets: ["YaokPluginKit"]),
        .library(name: "YaokBase", targets: ["YaokBase"]),
        .library(name: "YaokLinkSecurity", targets: ["YaokLinkSecurity"]),
        .library(name: "CYaokPlugin", targets: ["CYaokPlugin"]),
        // libsodium, shared with the hub's own modules so there is one module map for it.
        .library(name: "CSodium", targets: ["CSodium"]),
    ],
    targets: [
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .target(name: "CYaokPlugin"),
        .target(name: "YaokBase"),
        .target(name: "YaokLinkSecurity", dependencies: ["YaokBase", "CSodium"]),
        .target(name: "YaokPluginKit", dependencies: ["CYaokPlugin", "CSodium", "YaokBase", "YaokLinkSecurity"]),
    ],
    swiftLanguageModes: [.v6]
)
