// swift-tools-version: 6.0
// The Ya OK Hub transport plugin API: a C ABI header and a Swift kit over it.
// It is its own package, with no dependencies, so a plugin written out of tree
// depends on this small package alone (see Docs/plugin-guide.md).
import PackageDescription

let package = Package(
    name: "YaokPluginAPI",
    products: [
        .library(name: "YaokPluginKit", targets: ["YaokPluginKit"]),
        .library(name: "CYaokPlugin", targets: ["CYaokPlugin"]),
    ],
    targets: [
        .target(name: "CYaokPlugin"),
        .target(name: "YaokPluginKit", dependencies: ["CYaokPlugin"]),
    ],
    swiftLanguageModes: [.v5]
)
