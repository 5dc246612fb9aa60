import Foundation

/// Where `swift build` put the executables and plugin libraries the tests run.
public enum BuildProducts {
    /// The directory holding `marker`, found from the running test bundle upwards (xctest
    /// bundles may sit a level below the products), or "/" if none does.
    public static func directory(containing marker: String) -> String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = (exe as NSString).deletingLastPathComponent
        while !FileManager.default.fileExists(atPath: dir + "/" + marker) && dir != "/" {
            dir = (dir as NSString).deletingLastPathComponent
        }
        return dir
    }
}
