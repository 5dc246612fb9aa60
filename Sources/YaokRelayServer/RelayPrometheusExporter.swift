import Foundation
import Prometheus

/// Renders the relay's metrics in the Prometheus text format through swift-prometheus's
/// collector registry. The engine keeps its own plain counters (it is single-threaded and its
/// snapshot is what tests read); at each scrape the registry's counters are advanced to the
/// engine's values and its gauges set, so the exposition format (names, HELP/TYPE lines,
/// label escaping) is the library's.
// @unchecked: the registry and its counters and gauges only under `lock`.
public final class RelayPrometheusExporter: @unchecked Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let lock = NSLock()
    /// Registry counters by name and labels, with the value already added to each.
    private var counters: [String: (counter: Counter, exported: Int64)] = [:]
    private var gauges: [String: Gauge] = [:]

    public init() {}

    /// Brings the registry up to `samples` and returns the exposition text.
    public func render(_ samples: [RelayMetricSample]) -> String {
        lock.withLock {
            for sample in samples {
                let descriptor = MetricNameDescriptor(namespace: "yaok", subsystem: "relay", metricName: sample.name, unitName: "", helpText: sample.help)
                let key = sample.name + sample.labels.map { "|\($0.0)=\($0.1)" }.joined()
                switch sample.kind {
                case .counter:
                    var entry = counters[key] ?? (registry.makeCounter(descriptor: descriptor, labels: sample.labels), 0)
                    // Counters only go up; the engine's never go down while the server lives.
                    if sample.value > entry.exported {
                        entry.counter.increment(by: sample.value - entry.exported)
                        entry.exported = sample.value
                    }
                    counters[key] = entry
                case .gauge:
                    let gauge = gauges[key] ?? registry.makeGauge(descriptor: descriptor, labels: sample.labels)
                    gauge.set(sample.value)
                    gauges[key] = gauge
                }
            }
            return registry.emitToString()
        }
    }
}
