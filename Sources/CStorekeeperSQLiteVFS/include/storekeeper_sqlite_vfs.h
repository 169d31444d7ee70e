#ifndef STOREKEEPER_SQLITE_VFS_H
#define STOREKEEPER_SQLITE_VFS_H

/// The name of the VFS that `storekeeper_sqlite_vfs_register` adds: SQLite's default VFS with a WAL file's
/// contiguous writes gathered into a buffer, written with one `pwrite` each 126 KiB and before SQLite syncs,
/// reads, truncates, sizes or closes the file (SQLite writes each WAL frame as two calls, its 24-byte header
/// and its page).
///
/// Meant for a connection whose every commit syncs the WAL (`PRAGMA synchronous=FULL`): the buffer is written
/// out before each sync and also before the connection publishes frames or releases a shared-memory lock.
#define STOREKEEPER_SQLITE_VFS_NAME "storekeeper-wal-buffer"

/// Registers the VFS once (later calls return what the first did); not the default. SQLite's result code.
int storekeeper_sqlite_vfs_register(void);

/// Tests: the next `count` times this thread's connections write a buffer out, the write fails as on a full
/// disk (SQLITE_FULL) and the bytes stay in the buffer.
void storekeeper_sqlite_vfs_fail_flushes(int count);

/// What the VFS has done on the calling thread, for tests: writes it took into a buffer, and writes it made to
/// WAL files (each a buffer written out, or a write it did not gather).
void storekeeper_sqlite_vfs_counts(long long *gathered, long long *written);

#endif
