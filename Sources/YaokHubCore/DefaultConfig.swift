/// The embedded default configuration: identical to config/hub.yaml (a test checks).
public enum DefaultConfig {
    /// The source name used when running on the embedded default.
    public static let source = "(embedded default)"

    /// The YAML text.
    public static let yaml = #"""
# Ya OK Hub configuration.
#
# One file, YAML. Every key is optional unless marked required; the value shown
# is the default. After editing, check it with
#     yaok-hub check-config /etc/yaok-hub/hub.yaml
# and apply it without a restart with
#     systemctl reload yaok-hub      (sends SIGHUP)
# A reload starts, stops or reconfigures only the transports whose section
# changed; a bad edit is logged and the running config is kept.

hub:
  # Name shown to phones that attach (BLE advertises at most 8 bytes of it).
  name: yaok-hub
  # Where the identity, store and key files live. Empty: $STATE_DIRECTORY under
  # systemd, /var/lib/yaok-hub for root, ~/.local/share/yaok-hub otherwise.
  data_dir: ""
  # The hub's identity (Ed25519 + X25519 secret keys), mode 0600, created on
  # first run. Relative paths are inside data_dir. Back it up.
  identity_file: identity.key
  # Directories scanned for transport plugins (libyaok-plugin-*.so). Empty: next
  # to the yaok-hub binary for development builds, /usr/lib/yaok-hub/plugins
  # when installed. Plugins and their directories must not be writable by group
  # or others, and must be owned by root or the service user.
  plugin_dirs: []
  # Local control socket used by `yaok-hub status` (mode 0660). Empty:
  # $RUNTIME_DIRECTORY/control.sock under systemd, /run/yaok-hub/control.sock
  # for root, data_dir/control.sock otherwise.
  control_socket: ""
  # trace, debug, info, notice, warning, error or critical. Message contents and
  # secrets are never logged at any level.
  log_level: info

store:
  # SQLCipher database key: 32 random bytes in a 0600 file, created on first run,
  # unless systemd passes the credential "yaok-db-key" (LoadCredential=).
  key_file: store.key
  # Largest store size in megabytes. When full, space is taken from whoever uses
  # the most: the sender key or the origin (transport and remote address) holding
  # the largest share loses its soonest-expiring bundle; a newcomer whose own
  # sender or origin holds the largest share is refused instead (all counted).
  size_cap_mb: 500
  # How often (hours) to consider a VACUUM of the store.
  vacuum_interval_h: 24

router:
  # epidemic: every neighbour hub that lacks a message gets a copy.
  # spray-and-wait: the first hub hands out at most spray_copies copies.
  # Either way, a recipient attached to this hub gets its messages directly.
  policy: epidemic
  spray_copies: 4
  # Hops a message may travel from its first hub.
  hop_limit: 10
  # Frames per second accepted from one link; more are dropped and counted.
  link_frames_per_second: 2000
  # Messages per minute accepted from one sender key; more are refused.
  sender_envelopes_per_minute: 600
  # Longest wait for a next hop's custody acknowledgement before resending on the
  # same link (each link measures its round trip and waits about that, at least 2 s).
  # After 3 × this on a live link the bundle counts as a failed attempt and waits:
  # 1 min, 5 min, 15 min, 1 h, 6 h.
  custody_timeout_s: 30
  # Longest envelope lifetime (expires - created) accepted, in hours: 1 to 168
  # (7 days, the protocol's ceiling). Longer ones are refused, never stored.
  max_ttl_h: 168
  # How many seconds a sender's clock may lead true time: an envelope created
  # further ahead is refused, where the hub knows true time (see clock: below).
  # 0 to 604800 (7 days, the default: a phone days off still gets through).
  clock_skew_s: 604800
  # Which neighbouring hubs are trusted. A trusted hub exchanges bundles, and
  # its custody acknowledgement ends ours. Untrusted hubs:
  #   open     may exchange bundles, but handing one over never ends our custody
  #            (we keep it, and keep offering it, until a verified delivery receipt);
  #   list     get nothing (no bundles, offers or hearing) unless in trusted_hubs;
  #   network  get nothing unless they present a certificate signed by
  #            network_key (or are in trusted_hubs).
  # Without this key a hub runs open, as earlier versions did. This file says
  # list so that a new install hands nothing to a hub nobody vouched for: add
  # your hubs' keys, or set up a network key, to link hubs.
  hub_trust: list
  # Ed25519 public keys of trusted hubs, 64 hex digits each (on that hub:
  # `yaok-hub identity --json`, field signingKey).
  trusted_hubs: []
  # The network's public key, from `yaok-hub network-key init FILE` (run where
  # the operator keeps the key, not on a hub). Needed by hub_trust: network.
  # network_key: <64 hex digits>
  # This hub's certificate from `yaok-hub cert issue`, sent to every hub peer
  # right after the link comes up. Relative paths are inside data_dir.
  # hub_certificate: hub.cert

# The hub's time. A Raspberry Pi has no real-time clock and may boot offline days
# behind: message lifetimes are judged by each message's age, never by this
# clock alone (Docs/protocol.md 2.2). The hub estimates true time from the
# system's own synchronisation (NTP, GPS), the pinned relay, trusted hubs and a
# vote of phones, and shows it in `yaok-hub status`.
clock:
  # Believe the system clock: auto (when the kernel says it is synchronised),
  # always (an RTC or GPS you trust that the kernel does not call synchronised),
  # never.
  trust_system_clock: auto
  # Step the system clock to true time learnt from the relay or trusted hubs
  # (never from phones) when the kernel says it is unsynchronised. Needs
  # CAP_SYS_TIME, which the packaged unit does not grant.
  set_system_clock: false

metrics:
  # Prometheus /metrics over HTTP. Off by default; keep it on localhost.
  enabled: false
  listen: 127.0.0.1:9478

console:
  # The operator console: a web page showing every transport, the queue, links,
  # plugins and the hub's identity, live; transports can be switched on and off
  # there (Docs/console.md). Off in the embedded default; the packaged config
  # switches it on. Set its password first: yaok-hub console-password
  enabled: false
  # Address and port. Keep 127.0.0.1 (reach it over `ssh -L 8480:127.0.0.1:8480`)
  # unless you switch TLS on: on a LAN address without it, the password crosses
  # in clear.
  listen: 127.0.0.1:8480
  # Serve HTTPS. Without tls_certificate/tls_key files the hub makes a
  # self-signed certificate on first start; compare the fingerprint your
  # browser shows with `yaok-hub console-certificate` before you log in.
  tls: false
  # The certificate chain (PEM) and its private key (PEM, mode 0600): both or
  # neither. Relative paths are inside data_dir.
  tls_certificate: console-tls.crt
  tls_key: console-tls.key
  # Argon2id hash of the console password (mode 0600), written by
  # `yaok-hub console-password`. Relative paths are inside data_dir.
  password_file: console.pass
  # Minutes a login lasts without use (1 to 1440).
  session_minutes: 30
  # Seconds between the samples behind the charts (1 to 60); they span one hour.
  sample_interval_s: 10

# One section per transport instance. `enabled` is required. `plugin` names the
# plugin kind and defaults to the section name. Each plugin's README documents
# its own keys: Plugins/<Name>/README.md.
transports:
  # The example transport: TLV frames as UDP datagrams (Plugins/UDP).
  udp:
    enabled: true
    listen: 0.0.0.0:7811
    # Other hubs to link with, as host:port.
    peers: []
    # Roles a peer may claim here (a host key, not the plugin's): endpoint
    # (phones) and hub. Default [endpoint]: a stranger on the field Wi-Fi may
    # not pose as a hub. To link hubs over UDP, say [endpoint, hub].
    peer_roles: [endpoint]

  # Phones attach over Bluetooth LE: GATT server on the adapter (Plugins/BLE).
  ble:
    enabled: true
    adapter: hci0
    peer_roles: [endpoint]

  # Phones attach over Wi-Fi Direct as group owner (Plugins/WiFiDirect).
  wifi-direct:
    enabled: true
    plugin: wifidirect

  # Hub-to-hub store-and-forward mesh over IP (Plugins/Mesh).
  mesh:
    enabled: true
    # The mesh links hubs only (default [hub]).
    peer_roles: [hub]

  # Hub to hub over LoRa through an RNode on USB serial (Plugins/LoRa). Check
  # the frequency, power and duty cycle your region allows before enabling.
  lora:
    enabled: false
    device: /dev/ttyACM0
    frequency_hz: 869525000
    spreading_factor: 9
    duty_cycle_percent: 10

  # The internet relay, when an uplink exists (Plugins/Relay). Needs the
  # relay's address and pinned public key before it can be enabled.
  relay:
    enabled: false
    # address: relay.example.org:7900            # UDP
    # relay_key: <64 hex digits, from `yaok-relay key`>
    # Where the uplink blocks UDP, WebSocket over TLS 1.3 instead:
    # address: wss://relay.example.org:7443
    # tls_spki_sha256: <64 hex digits, from `yaok-relay tls-pin --cert FILE`>
    # Several nodes of one relay (same relay_key), for failover, instead of address:
    # addresses: [relay1.example.org:7900, relay2.example.org:7900]
"""#

    /// The parsed default.
    public static func load() throws -> HubConfig {
        try HubConfig.parse(yaml: yaml, source: source)
    }
}
