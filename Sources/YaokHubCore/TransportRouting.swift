import YaokPluginKit
import YaokRouting
import YaokSupervision

// The daemon is where supervision meets routing: a transport host is one of the router's
// transports, and the router hears what transport hosts report.

extension TransportHost: RouterTransport {}

extension Router: TransportEventHandler {
    public func linkUp(_ link: LinkInfo, on transport: TransportHost) {
        linkUp(link, on: transport as any RouterTransport)
    }
    public func linkDown(_ link: LinkID, reason: String?, on transport: TransportHost) {
        linkDown(link, reason: reason, on: transport as any RouterTransport)
    }
    public func frameReceived(_ frame: [UInt8], link: LinkID, on transport: TransportHost) {
        frameReceived(frame, link: link, on: transport as any RouterTransport)
    }
    public func statusChanged(on transport: TransportHost) {
        statusChanged(on: transport as any RouterTransport)
    }
    public func sendFailed(_ frame: [UInt8], link: LinkID, result: SendResult, reason: String, on transport: TransportHost) {
        sendFailed(frame, link: link, result: result, reason: reason, on: transport as any RouterTransport)
    }
}
