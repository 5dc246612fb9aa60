/*
 * A transport plugin written in plain C, used by the host's tests and as proof
 * that the ABI needs no Swift. Behaviour is chosen at compile time:
 *   -DPLUGIN_KIND='"name"'   the kind it reports
 *   -DABI_VERSION=N          the ABI version it claims (default: the header's)
 *   -DFAIL_STARTS=N          start fails N times, then succeeds (-1: always fails)
 *   -DNO_ENTRY               export no entry symbol at all
 *   -DHANG_ON_LOAD           never finish loading (a constructor that waits for ever)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "yaok_plugin.h"

#ifndef PLUGIN_KIND
#define PLUGIN_KIND "ctest"
#endif
#ifndef ABI_VERSION
#define ABI_VERSION YAOK_PLUGIN_ABI_VERSION
#endif
#ifndef FAIL_STARTS
#define FAIL_STARTS 0
#endif

#ifdef HANG_ON_LOAD
#include <unistd.h>
__attribute__((constructor)) static void hang_on_load(void) { for (;;) pause(); }
#endif

struct yaok_transport {
    const yaok_host_api *host;
    int starts;
    int running;
};

static yaok_transport *create(const yaok_host_api *host, char *error, size_t error_len) {
    if (host->abi_version != YAOK_PLUGIN_ABI_VERSION) {
        snprintf(error, error_len, "host ABI %u", host->abi_version);
        return NULL;
    }
    /* A config section containing "reject_me" is refused, as a plugin rejects a bad key. */
    if (strstr(host->config_json, "reject_me") != NULL) {
        snprintf(error, error_len, "%s.reject_me: this key is not allowed", "transports.ctest");
        return NULL;
    }
    yaok_transport *t = calloc(1, sizeof *t);
    t->host = host;
    return t;
}

static int32_t start(yaok_transport *t, char *error, size_t error_len) {
    t->starts++;
    if (FAIL_STARTS < 0 || t->starts <= FAIL_STARTS) {
        snprintf(error, error_len, "simulated start failure");
        return 1;
    }
    t->running = 1;
    t->host->log(t->host->host_ctx, YAOK_LOG_INFO, "c plugin started");
    return 0;
}

static void stop(yaok_transport *t) { t->running = 0; }

static int32_t send_frame(yaok_transport *t, uint64_t link, const uint8_t *bytes, size_t len, char *error, size_t error_len) {
    (void)t; (void)bytes; (void)len;
    snprintf(error, error_len, "link %llu is not up", (unsigned long long)link);
    return YAOK_SEND_NO_LINK;
}

static char *status_json(yaok_transport *t) {
    char *s = malloc(256);
    snprintf(s, 256, "{\"state\":\"%s\",\"reason\":\"c plugin, %d starts\",\"links\":0,\"peers\":0,"
             "\"frames_in\":0,\"frames_out\":0,\"bytes_in\":0,\"bytes_out\":0,\"details\":{}}",
             t->running ? "running" : "starting", t->starts);
    return s;
}

static void free_string(char *s) { free(s); }
static void destroy(yaok_transport *t) { free(t); }

static const yaok_plugin_descriptor descriptor = {
    .abi_version = ABI_VERSION,
    .struct_size = sizeof(yaok_plugin_descriptor),
    .kind = PLUGIN_KIND,
    .version = "1.0.0",
    .description = "test plugin in C",
    .create = create,
    .start = start,
    .stop = stop,
    .send = send_frame,
    .status_json = status_json,
    .free_string = free_string,
    .destroy = destroy,
};

#ifndef NO_ENTRY
const yaok_plugin_descriptor *yaok_plugin_entry(void) { return &descriptor; }
#else
const yaok_plugin_descriptor *some_other_symbol(void) { return &descriptor; }
#endif
