import CYaokPlugin
import Foundation
import YaokSupervision

/// Counters and gauges reported by plugins and the host, rendered in the Prometheus
/// text format for `/metrics`.
// @unchecked: the samples only under `lock`.
public final class MetricsRegistry: PluginMetricSink, @unchecked Sendable {
    private struct Key: Hashable { var name: String; var instance: String }
    private let lock = NSLock()
    private var counters: [Key: Double] = [:]
    private var gauges: [Key: Double] = [:]

    public init() {}

    public func record(instance: String, kind: yaok_metric_kind, name: String, value: Double) {
        let clean = String(name.map { $0.isLetter || $0.isNumber || $0 == "_" ? $0 : "_" })
        let key = Key(name: "yaok_transport_" + clean, instance: instance)
        lock.withLock {
            if kind == YAOK_METRIC_GAUGE_SET { gauges[key] = value } else { counters[key, default: 0] += value }
        }
    }

    /// The Prometheus exposition text of every recorded metric.
    public func prometheusText() -> String {
        lock.withLock {
            var lines: [String] = []
            for (type, table) in [("counter", counters), ("gauge", gauges)] {
                for name in Set(table.keys.map(\.name)).sorted() {
                    lines.append("# TYPE \(name) \(type)")
                    for (key, value) in table.filter({ $0.key.name == name }).sorted(by: { $0.key.instance < $1.key.instance }) {
                        lines.append("\(name){transport=\"\(key.instance)\"} \(value)")
                    }
                }
            }
            return lines.joined(separator: "\n") + "\n"
        }
    }
}
