/* Linux process controls the Glibc module does not import (prctl), as plain functions. */
#include <sys/prctl.h>
#include <signal.h>
#include <fcntl.h>
#include <unistd.h>
#include <errno.h>

/* The plugin process: die with the hub (SIGKILL when the parent goes), gain no privileges on exec. */
static inline int yaok_child_hardening(void) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return 0;
}

/* A close-on-exec pipe. */
static inline int yaok_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

#include <linux/capability.h>
#include <sys/syscall.h>

/*
 * Limits this process to the capabilities in `keep` (a bit per CAP_* number): drops every
 * other from the bounding set (so nothing it executes regains them, root or not), from the
 * effective, permitted and inheritable sets, and makes the kept ones ambient so a helper it
 * runs (wpa_supplicant, dnsmasq, ip) keeps exactly those. Returns 0, or -1 if the sets could
 * not be read or written (errno set). Bounding-set drops that need CAP_SETPCAP are best effort.
 */
static inline int yaok_limit_capabilities(unsigned long long keep) {
    for (int c = 0; c < 64; c++)
        if (!(keep & (1ULL << c))) (void)prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
    struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0) return -1;
    struct __user_cap_data_struct want[2];
    for (int i = 0; i < 2; i++) {
        unsigned int k = (unsigned int)(keep >> (32 * i));
        want[i].effective = d[i].effective & k;
        want[i].permitted = d[i].permitted & k;
        want[i].inheritable = d[i].permitted & k;
    }
    if (syscall(SYS_capset, &h, want) != 0) {
        /* Without CAP_SETPCAP the inheritable set cannot grow: keep what it had. Under a
         * seccomp filter that refuses capset (systemd's ~@privileged) the hub already lowered
         * the ambient set it passed on, which is then all this process has: checked below. */
        for (int i = 0; i < 2; i++) want[i].inheritable = d[i].inheritable & (unsigned int)(keep >> (32 * i));
        (void)syscall(SYS_capset, &h, want);
    }
    (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    for (int c = 0; c < 64; c++)
        if (keep & (1ULL << c)) (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0);
    if (syscall(SYS_capget, &h, d) != 0) return -1;
    unsigned long long effective = (unsigned long long)d[0].effective | ((unsigned long long)d[1].effective << 32);
    unsigned long long permitted = (unsigned long long)d[0].permitted | ((unsigned long long)d[1].permitted << 32);
    if ((effective | permitted) & ~keep) { errno = EPERM; return -1; }
    return 0;
}

/*
 * In the calling thread only (credentials are per thread, and posix_spawn runs the child with
 * the caller's): lowers every ambient capability not in `keep`, so a process spawned next
 * starts with at most `keep`. Returns the ambient set it had, for yaok_ambient_raise.
 */
static inline unsigned long long yaok_ambient_keep_only(unsigned long long keep) {
    unsigned long long was = 0;
    for (int c = 0; c < 64; c++) {
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) == 1) {
            was |= 1ULL << c;
            if (!(keep & (1ULL << c))) (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, c, 0, 0);
        }
    }
    return was;
}

static inline void yaok_ambient_raise(unsigned long long mask) {
    for (int c = 0; c < 64; c++)
        if (mask & (1ULL << c)) (void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0);
}

#include <sys/timex.h>
#include <time.h>

/*
 * The kernel's clock discipline: 1 if it says the system clock is synchronised (NTP, chrony,
 * PTP set it and clear STA_UNSYNC), 0 if not, -1 if it cannot be asked. `maxerror_us` gets
 * the kernel's maximum error estimate.
 */
static inline int yaok_system_clock_synchronised(long *maxerror_us) {
    struct timex t = { 0 };
    int rc = adjtimex(&t);
    if (rc < 0) return -1;
    if (maxerror_us) *maxerror_us = t.maxerror;
    return (rc != TIME_ERROR && !(t.status & STA_UNSYNC)) ? 1 : 0;
}

/* Steps the system clock to `ms` UTC milliseconds (needs CAP_SYS_TIME). 0, or -1 with errno. */
static inline int yaok_set_system_clock_ms(long long ms) {
    struct timespec ts = { (time_t)(ms / 1000), (long)((ms % 1000) * 1000000) };
    return clock_settime(CLOCK_REALTIME, &ts);
}
