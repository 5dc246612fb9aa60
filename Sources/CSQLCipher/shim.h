// SQLCipher only: the hub must never load the system libsqlite3, or PRAGMA key
// is silently ignored and the store is written in plaintext.
#define SQLITE_HAS_CODEC 1
#include <sqlcipher/sqlite3.h>
