#if canImport(Glibc)
import Glibc
#endif
import CNetlink

/// What the nl80211 probe found.
public struct RadioProbeResult: Sendable, Equatable {
    /// Every radio the kernel reported.
    public var wiphys: [Wiphy]
    /// The radios that can be a P2P group owner.
    public var p2pCapable: [Wiphy] { wiphys.filter(\.supportsP2PGO) }
}

/// Why Wi-Fi Direct cannot run on this machine (or the probe failed).
public enum RadioProbeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `genl_ctrl_resolve("nl80211")` found no such family: no cfg80211, no wireless driver.
    case noNL80211Family
    /// nl80211 exists but lists no radio.
    case noWiphy
    /// Radios exist, none supports the P2P-GO interface type.
    case noP2PGroupOwner([Wiphy])
    /// A libnl call failed.
    case netlink(call: String, message: String)
    /// A reply could not be parsed.
    case malformedReply(String)

    public var description: String {
        switch self {
        case .noNL80211Family:
            return "no Wi-Fi: the kernel has no nl80211 family (no wireless driver loaded)"
        case .noWiphy:
            return "no Wi-Fi: nl80211 is present but the kernel lists no wireless radio (wiphy)"
        case .noP2PGroupOwner(let wiphys):
            return "no Wi-Fi Direct: no radio supports the P2P group-owner interface type (" +
                wiphys.map(\.summary).joined(separator: "; ") + ")"
        case .netlink(let call, let message):
            return "nl80211 probe: \(call) failed: \(message)"
        case .malformedReply(let what):
            return "nl80211 probe: unreadable reply: \(what)"
        }
    }
}

/// Asks the kernel over generic netlink (libnl-genl-3) which radios exist and what they can do.
public enum NL80211Probe {
    /// Resolves nl80211, dumps every wiphy (split dump) and returns them.
    /// Throws ``RadioProbeError`` when there is no nl80211, no radio, or no P2P-GO-capable radio.
    public static func probe() throws -> RadioProbeResult {
        let wiphys = try dumpWiphys()
        guard !wiphys.isEmpty else { throw RadioProbeError.noWiphy }
        let result = RadioProbeResult(wiphys: wiphys)
        guard !result.p2pCapable.isEmpty else { throw RadioProbeError.noP2PGroupOwner(wiphys) }
        return result
    }

    static func message(_ code: Int32) -> String {
        String(cString: nl_geterror(code))
    }

    /// The raw dump, without judging it.
    public static func dumpWiphys() throws -> [Wiphy] {
        guard let sock = nl_socket_alloc() else { throw RadioProbeError.netlink(call: "nl_socket_alloc", message: "out of memory") }
        defer { nl_socket_free(sock) }
        var rc = genl_connect(sock)
        guard rc == 0 else { throw RadioProbeError.netlink(call: "genl_connect", message: message(rc)) }
        // A reply that never comes must not hang the plugin's start.
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(nl_socket_get_fd(sock), SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let family = genl_ctrl_resolve(sock, "nl80211")
        if family == -Int32(NLE_OBJ_NOTFOUND) { throw RadioProbeError.noNL80211Family }
        guard family >= 0 else { throw RadioProbeError.netlink(call: "genl_ctrl_resolve(nl80211)", message: message(family)) }

        guard let msg = nlmsg_alloc() else { throw RadioProbeError.netlink(call: "nlmsg_alloc", message: "out of memory") }
        defer { nlmsg_free(msg) }
        let dumpFlag = Int32(NLM_F_REQUEST | NLM_F_DUMP) & ~Int32(NLM_F_REQUEST) // genlmsg_put adds REQUEST
        guard genlmsg_put(msg, UInt32(NL_AUTO_PORT), UInt32(NL_AUTO_SEQ), family, 0, dumpFlag,
                          UInt8(NL80211_CMD_GET_WIPHY.rawValue), 0) != nil else {
            throw RadioProbeError.netlink(call: "genlmsg_put", message: "message too small")
        }
        rc = nla_put_flag(msg, Int32(NL80211_ATTR_SPLIT_WIPHY_DUMP.rawValue))
        guard rc == 0 else { throw RadioProbeError.netlink(call: "nla_put_flag(SPLIT_WIPHY_DUMP)", message: message(rc)) }

        let collector = DumpCollector()
        let ctx = Unmanaged.passRetained(collector)
        defer { ctx.release() }
        rc = nl_socket_modify_cb(sock, NL_CB_VALID, NL_CB_CUSTOM, { msg, arg in
            guard let msg, let arg else { return Int32(NL_SKIP.rawValue) }
            let collector = Unmanaged<DumpCollector>.fromOpaque(arg).takeUnretainedValue()
            guard let header = nlmsg_hdr(msg), let genl = nlmsg_data(header) else { return Int32(NL_SKIP.rawValue) }
            let g = genl.assumingMemoryBound(to: genlmsghdr.self)
            let length = Int(genlmsg_attrlen(g, 0))
            if length > 0, let data = genlmsg_attrdata(g, 0) {
                let bytes = Array(UnsafeRawBufferPointer(start: UnsafeRawPointer(data), count: length))
                collector.add(bytes)
            }
            return Int32(NL_OK.rawValue)
        }, ctx.toOpaque())
        guard rc == 0 else { throw RadioProbeError.netlink(call: "nl_socket_modify_cb", message: message(rc)) }
        rc = nl_send_auto(sock, msg)
        guard rc >= 0 else { throw RadioProbeError.netlink(call: "nl_send_auto(GET_WIPHY)", message: message(rc)) }
        rc = nl_recvmsgs_default(sock)
        guard rc >= 0 else { throw RadioProbeError.netlink(call: "nl_recvmsgs(GET_WIPHY dump)", message: message(rc)) }
        if let error = collector.error { throw RadioProbeError.malformedReply(error) }
        return collector.parser.wiphys
    }

    /// Gathers the dump's messages inside the libnl callback.
    final class DumpCollector {
        var parser = WiphyDumpParser()
        var error: String?
        func add(_ bytes: [UInt8]) {
            do { try parser.add(messageAttributes: bytes) } catch { self.error = "\(error)" }
        }
    }
}
