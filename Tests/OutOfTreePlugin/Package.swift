// swift-tools-version: 6.0
// An example of a transport plugin built out of tree: its own package, depending only
// on the hub's plugin API package. The hub's tests build it and load it
// (see Docs/plugin-guide.md). A real plugin would depend on the API package by URL.
import PackageDescription

let package = Package(
    name: "YaokEchoPlugin",
    products: [
        // The product name becomes the file name: libyaok-plugin-echo.so
        .library(name: "yaok-plugin-echo", type: .dynamic, targets: ["YaokEcho"]),
        // Not part of the example: a Swift plugin that traps on a received datagram, for the
        // hub's supervision tests (built here to share this package's build of the kit).
        .library(name: "yaok-plugin-swiftfault", type: .dynamic, targets: ["YaokSwiftFault"]),
    ],
    dependencies: [
        .package(name: "YaokPluginAPI", path: "../../Sources/PluginAPI"),
    ],
    targets: [
        .target(
            name: "YaokEcho",
            dependencies: [.product(name: "YaokPluginKit", package: "YaokPluginAPI")],
            // Bind the plugin's own symbols first, so its copy of the kit stays its own.
            linkerSettings: [.unsafeFlags(["-Xlinker", "-Bsymbolic"])]),
        .target(
            name: "YaokSwiftFault",
            dependencies: [.product(name: "YaokPluginKit", package: "YaokPluginAPI")],
            linkerSettings: [.unsafeFlags(["-Xlinker", "-Bsymbolic"])]),
    ]
)
