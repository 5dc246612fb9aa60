/*
 * A transport plugin that fails on purpose, for the supervision tests (PluginIsolationTests)
 * and the plugin guide's walk-through. One library, one fault per instance, chosen by the
 * config key `fault`:
 *   segv_start     segfault in start()
 *   abort_start    abort() in start()
 *   segv_thread    start() succeeds; a thread it started segfaults 300 ms later
 *   exit_thread    a thread calls exit(0) 300 ms after start
 *   hang_status    status_json() never returns (the heartbeat must catch it)
 *   memory_hog     a thread allocates and touches memory until malloc fails, then aborts
 *   log_flood      a thread logs 100 000 lines as fast as it can, then idles
 *   segv_datagram  listens on UDP 127.0.0.1:<port> and segfaults on the first datagram:
 *                  a remote peer triggers the bug
 *   hang_send      reports a link to the endpoint whose Ed25519 seed is `peer_seed` (hex), with
 *                  a link proof it makes as that endpoint (it holds the seed: the test is both
 *                  ends), and loops forever in send(): the hub's send bound must catch it
 *   slow_create    the first create() (while the file `marker` does not exist) makes it and
 *                  takes 12 s, past the hub's 10 s wait; later ones behave
 *   none           behaves
 * Build: cc -shared -fPIC -I Sources/PluginAPI/Sources/CYaokPlugin/include \
 *           -o libyaok-plugin-crashy.so Tests/Fixtures/crash_plugin.c -lsodium -lpthread
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sodium.h>
#include "yaok_plugin.h"

struct yaok_transport {
    const yaok_host_api *host;
    char fault[32];
    int port;
    uint8_t peer_seed[32];
    int running;
    pthread_t thread;
};

/* The value of "key" in the host's config JSON ({"values":{"key":{"line":N,"value":V}}}). */
static const char *value_of(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\"", key);
    const char *k = strstr(json, pattern);
    if (!k) return NULL;
    const char *v = strstr(k, "\"value\":");
    return v ? v + 8 : NULL;
}

static yaok_transport *create(const yaok_host_api *host, char *error, size_t error_len) {
    yaok_transport *t = calloc(1, sizeof *t);
    t->host = host;
    strcpy(t->fault, "none");
    const char *f = value_of(host->config_json, "fault");
    if (f && *f == '"') sscanf(f + 1, "%31[^\"]", t->fault);
    const char *p = value_of(host->config_json, "port");
    if (p) t->port = atoi(p);
    const char *k = value_of(host->config_json, "peer_seed");
    if (k && *k == '"')
        for (int i = 0; i < 32; i++) { unsigned b = 0; sscanf(k + 1 + 2 * i, "%2x", &b); t->peer_seed[i] = (uint8_t)b; }
    const char *m = value_of(host->config_json, "marker");
    char marker[256] = "";
    if (m && *m == '"') /* a JSON string whose only escapes are "\/" (the host's encoder writes them) */
        for (size_t i = 0, n = 0; m[1 + i] && m[1 + i] != '"' && n + 1 < sizeof marker; i++)
            if (m[1 + i] != '\\') { marker[n++] = m[1 + i]; marker[n] = 0; }
    if (strcmp(t->fault, "slow_create") == 0 && *marker) {
        int fd = open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600);
        if (fd >= 0) { close(fd); sleep(12); }
    }
    (void)error; (void)error_len;
    return t;
}

/* A real invalid write: to a page mapped with no access (a NULL write is not reliable: a
 * compiler may drop it as undefined behaviour, and some sandboxes map page zero). */
static void crash(void) {
    int *volatile p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *p = 1;
}

static void *fault_thread(void *arg) {
    yaok_transport *t = arg;
    if (strcmp(t->fault, "segv_thread") == 0) { usleep(300000); crash(); }
    if (strcmp(t->fault, "exit_thread") == 0) { usleep(300000); exit(0); }
    if (strcmp(t->fault, "memory_hog") == 0) {
        for (;;) {
            char *block = malloc(8 << 20);
            if (!block) { fprintf(stderr, "crashy: out of memory\n"); abort(); }
            memset(block, 1, 8 << 20);
        }
    }
    if (strcmp(t->fault, "log_flood") == 0) {
        for (int i = 0; i < 100000; i++) t->host->log(t->host->host_ctx, YAOK_LOG_INFO, "crashy: flooding the log");
    }
    if (strcmp(t->fault, "segv_datagram") == 0) {
        int fd = socket(AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)t->port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) { perror("crashy: bind"); return NULL; }
        char buf[2048];
        if (recv(fd, buf, sizeof buf, 0) >= 0) crash();
    }
    return NULL;
}

/* A link proof (Docs/plugin-protocol.md, "Proving a link-up") as a real handshake makes one: the
 * hub signs its responder identity over a hash h, the endpoint signs its initiator identity
 * over SHA-256(h || reply payload). The reply payload is arbitrary here: no endpoint decrypts it. */
static void prove_link(yaok_transport *t, yaok_link_info *link) {
    static const char responder[] = "yaok-link-v2 responder", initiator[] = "yaok-link-v2 initiator";
    uint8_t pk[32], sk[64], h[32], payload[145], hub_statement[sizeof responder - 1 + 32 + 65], hub_signature[64];
    uint8_t chained[32 + sizeof payload], final_hash[32], statement[sizeof initiator - 1 + 32 + 65], signature[64];
    if (sodium_init() < 0) return;
    crypto_sign_seed_keypair(pk, sk, t->peer_seed);
    memcpy(link->peer_signing_key, pk, 32);
    randombytes_buf(h, sizeof h);
    randombytes_buf(payload, sizeof payload);
    size_t n = sizeof responder - 1;
    memcpy(hub_statement, responder, n);
    memcpy(hub_statement + n, h, 32);
    hub_statement[n + 32] = YAOK_PEER_HUB;
    memcpy(hub_statement + n + 33, t->host->hub_signing_key, 32);
    memcpy(hub_statement + n + 65, t->host->hub_kx_key, 32);
    if (t->host->sign(t->host->host_ctx, hub_statement, sizeof hub_statement, hub_signature) != 0) return;
    memcpy(chained, h, 32);
    memcpy(chained + 32, payload, sizeof payload);
    crypto_hash_sha256(final_hash, chained, sizeof chained);
    n = sizeof initiator - 1;
    memcpy(statement, initiator, n);
    memcpy(statement + n, final_hash, 32);
    statement[n + 32] = YAOK_PEER_ENDPOINT;
    memcpy(statement + n + 33, link->peer_signing_key, 32);
    memcpy(statement + n + 65, link->peer_kx_key, 32);
    crypto_sign_detached(signature, NULL, statement, sizeof statement, sk);
    link->proof_length = YAOK_LINK_PROOF_LENGTH;
    link->proof[0] = 1;
    memcpy(link->proof + 1, h, 32);
    memcpy(link->proof + 33, payload, sizeof payload);
    memcpy(link->proof + 33 + sizeof payload, signature, 64);
}

static int32_t start(yaok_transport *t, char *error, size_t error_len) {
    (void)error; (void)error_len;
    if (strcmp(t->fault, "segv_start") == 0) crash();
    if (strcmp(t->fault, "abort_start") == 0) abort();
    t->running = 1;
    if (strcmp(t->fault, "hang_send") == 0) {
        yaok_link_info link = { .abi_version = YAOK_PLUGIN_ABI_VERSION, .struct_size = sizeof link, .link_id = 1,
                                .peer_role = YAOK_PEER_ENDPOINT, .mtu = 65000, .cost = 1, .link_kind = "crashy", .remote = "nowhere" };
        prove_link(t, &link);
        t->host->link_up(t->host->host_ctx, &link);
    }
    pthread_create(&t->thread, NULL, fault_thread, t);
    pthread_detach(t->thread);
    t->host->log(t->host->host_ctx, YAOK_LOG_INFO, "crashy started");
    return 0;
}

static void stop(yaok_transport *t) { t->running = 0; }

static int32_t send_frame(yaok_transport *t, uint64_t link, const uint8_t *bytes, size_t len, char *error, size_t error_len) {
    (void)bytes; (void)len;
    if (strcmp(t->fault, "hang_send") == 0) for (volatile int spin = 1; spin;) {}
    snprintf(error, error_len, "link %llu is not up", (unsigned long long)link);
    return 1;
}

static char *status_json(yaok_transport *t) {
    if (strcmp(t->fault, "hang_status") == 0) for (;;) pause();
    char *s = malloc(256);
    snprintf(s, 256, "{\"state\":\"%s\",\"reason\":\"crashy (%s)\",\"links\":0,\"peers\":0,"
             "\"frames_in\":0,\"frames_out\":0,\"bytes_in\":0,\"bytes_out\":0,\"details\":{}}",
             t->running ? "running" : "starting", t->fault);
    return s;
}

static void free_string(char *s) { free(s); }
static void destroy(yaok_transport *t) { free(t); }

static const yaok_plugin_descriptor descriptor = {
    .abi_version = YAOK_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(yaok_plugin_descriptor),
    .kind = "crashy",
    .version = "1.0.0",
    .description = "fails on purpose (supervision tests)",
    .create = create,
    .start = start,
    .stop = stop,
    .send = send_frame,
    .status_json = status_json,
    .free_string = free_string,
    .destroy = destroy,
};

const yaok_plugin_descriptor *yaok_plugin_entry(void) { return &descriptor; }
