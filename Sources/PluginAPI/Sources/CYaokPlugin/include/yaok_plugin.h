/*
 * yaok_plugin.h — the Ya OK Hub transport plugin ABI.
 *
 * This is the only contract between the hub (host) and a transport plugin.
 * It is plain C on purpose: host and plugin may be built by different
 * compilers, different Swift versions, or in other languages, and nothing but
 * these structs crosses the dlopen boundary.
 *
 * Rules that keep the ABI evolvable:
 *  - Every struct starts with `abi_version` and `struct_size`.
 *  - New fields are only ever appended; a reader checks `struct_size` before
 *    touching a field added later.
 *  - Incompatible changes bump YAOK_PLUGIN_ABI_VERSION; the host refuses a
 *    plugin whose descriptor reports another version and logs both numbers.
 *  - Strings are NUL-terminated UTF-8. Byte buffers are (pointer, length) and
 *    are only valid for the duration of the call: copy what you keep.
 *  - The host's callbacks are thread-safe and may be called from any thread.
 *    The plugin's functions are called by the host from one thread at a time
 *    per instance, except `send`, which may overlap with `status_json`.
 */
#ifndef YAOK_PLUGIN_H
#define YAOK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Length of yaok_link_info.proof (a link handshake's proof of the peer). */
#define YAOK_LINK_PROOF_LENGTH 242u

/** Current ABI version. Bump on any incompatible change. */
#define YAOK_PLUGIN_ABI_VERSION 1u

/** Name of the symbol every plugin exports: `const yaok_plugin_descriptor *yaok_plugin_entry(void)`. */
#define YAOK_PLUGIN_ENTRY_SYMBOL "yaok_plugin_entry"

/**
 * What `send` returns. Append-only: new codes are added at the end and never renumbered; a
 * host treats a code it does not know as YAOK_SEND_FAILED, and a plugin written before the
 * codes existed returns 1 for every failure, which means exactly that.
 */
typedef enum yaok_send_result {
    YAOK_SEND_OK = 0,          /**< taken: queued or sent */
    YAOK_SEND_FAILED = 1,      /**< failed for another reason */
    YAOK_SEND_QUEUE_FULL = 2,  /**< the link is up but its queue is full: the host backs off on it */
    YAOK_SEND_NO_LINK = 3,     /**< the link is not (or no longer) up: the host routes elsewhere */
    YAOK_SEND_TOO_LARGE = 4    /**< the frame exceeds what the link carries: never on this link */
} yaok_send_result;

/** Who is on the other end of a link. */
typedef enum yaok_peer_role {
    YAOK_PEER_ENDPOINT = 1, /**< a phone or a `yaok` endpoint: a final recipient */
    YAOK_PEER_HUB = 2,      /**< another Ya OK hub: a store-and-forward next hop */
    YAOK_PEER_RELAY = 3     /**< the internet relay: a store-and-forward next hop */
} yaok_peer_role;

/** Log levels, same order as swift-log's Logger.Level. */
typedef enum yaok_log_level {
    YAOK_LOG_TRACE = 0, YAOK_LOG_DEBUG = 1, YAOK_LOG_INFO = 2, YAOK_LOG_NOTICE = 3,
    YAOK_LOG_WARNING = 4, YAOK_LOG_ERROR = 5, YAOK_LOG_CRITICAL = 6
} yaok_log_level;

/** Metric kinds for `yaok_host_api.metric`. */
typedef enum yaok_metric_kind {
    YAOK_METRIC_COUNTER_ADD = 1, /**< add `value` to a counter */
    YAOK_METRIC_GAUGE_SET = 2    /**< set a gauge to `value` */
} yaok_metric_kind;

/** A link's description, passed to `link_up`. */
typedef struct yaok_link_info {
    uint32_t abi_version;
    uint32_t struct_size;
    /** Plugin-chosen identifier, unique within the plugin instance while the link is up. */
    uint64_t link_id;
    /** The peer's Ed25519 public key, proven by the link handshake. */
    uint8_t peer_signing_key[32];
    /** The peer's X25519 public key, as it presented it. */
    uint8_t peer_kx_key[32];
    /** One of yaok_peer_role. */
    uint32_t peer_role;
    /** Largest frame the link carries in one `send`, in bytes. */
    uint32_t mtu;
    /** Routing cost; lower is preferred. */
    uint32_t cost;
    /** Short human name of the link kind, e.g. "ble", "udp", "tcp". */
    const char *link_kind;
    /** Human description of the remote end (address), for status; may be NULL. */
    const char *remote;
    /** Bytes of `proof` used: YAOK_LINK_PROOF_LENGTH, or 0 for none (the host then refuses the link). */
    uint32_t proof_length;
    /**
     * The link handshake's proof of the peer, so the host need not take the plugin's word:
     * kind(1) = 1 ‖ the hash the responder signed(32) ‖ the reply's encrypted identity(145) ‖
     * the peer's signature(64). The kit's SecureLink makes it (AuthenticatedPeer.proof); see
     * Docs/plugin-protocol.md, "Proving a link-up". Appended in 1.x: the host reads it only
     * when `struct_size` covers it.
     */
    uint8_t proof[YAOK_LINK_PROOF_LENGTH];
} yaok_link_info;

/**
 * What the host hands a plugin instance. Valid from `create` until `destroy`
 * returns. The hub's secret keys are never given out: the plugin asks the
 * host to sign.
 */
typedef struct yaok_host_api {
    uint32_t abi_version;
    uint32_t struct_size;
    /** Opaque host context: pass it back as the first argument of every callback. */
    void *host_ctx;
    /** The transport instance name from the config, e.g. "udp". */
    const char *instance_name;
    /**
     * The plugin's config section as JSON: {"path":"transports.udp","values":{...}}
     * where every value is {"line":N,"value":V} and nested maps are flattened
     * to dotted keys; "trusted_hubs", when present, lists the Ed25519 keys (hex) of
     * the hubs in router.trusted_hubs. See Docs/plugin-guide.md.
     */
    const char *config_json;
    /** The hub's Ed25519 public key (its identity). */
    uint8_t hub_signing_key[32];
    /** The hub's X25519 public key. */
    uint8_t hub_kx_key[32];

    /** Write a log line, labelled with the plugin name by the host. */
    void (*log)(void *host_ctx, int32_t level, const char *message);
    /** Sign `len` bytes with the hub's Ed25519 key. Writes 64 bytes to `signature`. Returns 0 on success. */
    int32_t (*sign)(void *host_ctx, const uint8_t *message, size_t len, uint8_t signature[64]);
    /** Verify an Ed25519 signature. Returns 1 when valid, 0 otherwise. */
    int32_t (*verify)(void *host_ctx, const uint8_t public_key[32], const uint8_t *message, size_t len,
                      const uint8_t signature[64]);
    /** Fill `len` bytes from the host's CSPRNG. */
    void (*random_bytes)(void *host_ctx, uint8_t *out, size_t len);
    /** Wall clock, UTC milliseconds since the Unix epoch. */
    int64_t (*now_ms)(void *host_ctx);
    /** Monotonic clock in nanoseconds, for timeouts. */
    uint64_t (*monotonic_ns)(void *host_ctx);
    /** Record a metric; `name` is relative, the host prefixes `yaok_transport_` and adds the instance label. */
    void (*metric)(void *host_ctx, int32_t kind, const char *name, double value);
    /** Report an authenticated link. */
    void (*link_up)(void *host_ctx, const yaok_link_info *link);
    /** Report that a link went away. `reason` may be NULL. */
    void (*link_down)(void *host_ctx, uint64_t link_id, const char *reason);
    /** Hand a received frame (one TLV record, see Docs/protocol.md) to the host. */
    void (*frame_received)(void *host_ctx, uint64_t link_id, const uint8_t *bytes, size_t len);
    /** Tell the host the status changed (state, counters); it will call status_json when it wants. */
    void (*status_changed)(void *host_ctx);
} yaok_host_api;

/** Opaque plugin instance. */
typedef struct yaok_transport yaok_transport;

/**
 * The plugin descriptor, returned by `yaok_plugin_entry`. Static storage:
 * the host never frees it.
 *
 * Functions that can fail return 0 on success and a non-zero code on failure,
 * writing a NUL-terminated human reason into `error` (at most `error_len` bytes).
 */
typedef struct yaok_plugin_descriptor {
    uint32_t abi_version;   /**< must be first: YAOK_PLUGIN_ABI_VERSION the plugin was built with */
    uint32_t struct_size;   /**< sizeof(yaok_plugin_descriptor) as the plugin saw it */
    const char *kind;       /**< transport kind, e.g. "ble"; unique among loaded plugins */
    const char *version;    /**< the plugin's own version, e.g. "0.1.0" */
    const char *description;/**< one line for `yaok-hub plugins` */

    /** Create an instance for one config section. Must not block or open sockets: `start` does. NULL on error. */
    yaok_transport *(*create)(const yaok_host_api *host, char *error, size_t error_len);
    /** Start moving frames. May be called again after a failure (the host retries with backoff). */
    int32_t (*start)(yaok_transport *transport, char *error, size_t error_len);
    /** Stop: close links (reporting link_down) and release sockets. Must return within 2 seconds. */
    void (*stop)(yaok_transport *transport);
    /**
     * Send one frame to a link. Must not block for long; queue if needed. Returns
     * YAOK_SEND_OK (0) or one of yaok_send_result, with the reason in `error`.
     */
    int32_t (*send)(yaok_transport *transport, uint64_t link_id, const uint8_t *bytes, size_t len,
                    char *error, size_t error_len);
    /**
     * Current status as JSON: {"state":"running","reason":"...","links":N,"peers":N,
     * "frames_in":N,"frames_out":N,"bytes_in":N,"bytes_out":N,"last_error":"...","details":{...}}.
     * The returned string is freed with `free_string`.
     */
    char *(*status_json)(yaok_transport *transport);
    /** Free a string returned by `status_json`. */
    void (*free_string)(char *string);
    /** Destroy the instance after `stop`. */
    void (*destroy)(yaok_transport *transport);
} yaok_plugin_descriptor;

/** The entry point's type. */
typedef const yaok_plugin_descriptor *(*yaok_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* YAOK_PLUGIN_H */
