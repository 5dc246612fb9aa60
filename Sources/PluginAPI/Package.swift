// swift-tools-version: 6.0
// The Ya OK Hub transport plugin API: a C ABI header and a Swift kit over it.
// It is its own package so a plugin written out of tree depends on this small
// package alone (see Docs/plugin-guide.md). The C header depends on nothing; the
// Swift kit links libsodium, because the secure link session (SecureLink) lives
// here, once, for every transport.
import PackageDescription

let package = Package(
    name: "YaokPluginAPI",
    products: [
        .library(name: "YaokPluginKit", targets: ["YaokPluginKit"]),
        .library(name: "CYaokPlugin", targets: ["CYaokPlugin"]),
        // libsodium, shared with the hub's own modules so there is one module map for it.
        .library(name: "CSodium", targets: ["CSodium"]),
    ],
    targets: [
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .target(name: "CYaokPlugin"),
        .target(name: "YaokPluginKit", dependencies: ["CYaokPlugin", "CSodium"]),
    ],
    swiftLanguageModes: [.v6]
)
