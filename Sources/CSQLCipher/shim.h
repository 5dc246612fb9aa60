// SQLCipher only: the hub must never load the system libsqlite3, or PRAGMA key
// is silently ignored and the store is written in plaintext.
#define SQLITE_HAS_CODEC 1
#include <sqlcipher/sqlite3.h>

// sqlite3_config is variadic, which Swift cannot call: one fixed-argument wrapper per use.

/// Turns off SQLite's allocation statistics. With them on, every sqlite3_malloc and
/// sqlite3_free takes a process-wide mutex (about 500 per message in the hub's store).
/// Returns SQLITE_MISUSE once the library is initialized, so call it before the first open.
static inline int yaok_sqlite3_config_memstatus_off(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
