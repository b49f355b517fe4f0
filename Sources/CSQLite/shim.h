#ifndef STORECTL_CSQLITE_SHIM_H
#define STORECTL_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a destructor pointer, which Swift cannot import.
/// "If the fifth argument has the value SQLITE_TRANSIENT, then SQLite makes its own private copy of the data
/// immediately, before the sqlite3_bind_*() routine returns." (sqlite3_bind_blob documentation)
static inline sqlite3_destructor_type storectl_sqlite_transient(void) { return SQLITE_TRANSIENT; }

/// sqlite3_db_config is variadic; Swift cannot call variadic C functions.
static inline int storectl_sqlite_db_config_int(sqlite3 *db, int op, int value, int *out) {
    return sqlite3_db_config(db, op, value, out);
}

/// sqlite3_config is variadic too. "SQLITE_CONFIG_MEMSTATUS ... When memory allocation statistics are disabled,
/// the following SQLite interfaces become non-operational: sqlite3_hard_heap_limit64(), sqlite3_memory_used(),
/// sqlite3_memory_highwater(), sqlite3_soft_heap_limit64(), sqlite3_status64()". With it on, every allocation
/// takes one process-wide mutex, which two threads working on two databases then contend for.
static inline int storectl_sqlite_disable_memstatus(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
#endif
