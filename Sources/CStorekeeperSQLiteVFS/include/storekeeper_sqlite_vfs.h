#ifndef STOREKEEPER_SQLITE_VFS_H
#define STOREKEEPER_SQLITE_VFS_H

/// The name of the VFS that `storekeeper_sqlite_vfs_register` adds: SQLite's default VFS with a WAL file's
/// contiguous writes gathered into a buffer, written with one `pwrite` each 126 KiB and before SQLite syncs,
/// reads, truncates, sizes or closes the file (SQLite writes each WAL frame as two calls, its 24-byte header
/// and its page).
///
/// Only for a connection whose every commit syncs the WAL (`PRAGMA synchronous=FULL` or `EXTRA`): with
/// `NORMAL` or `OFF` a commit's frames could still be in the buffer when other connections are told of them.
#define STOREKEEPER_SQLITE_VFS_NAME "storekeeper-wal-buffer"

/// Registers the VFS once (later calls return what the first did); not the default. SQLite's result code.
int storekeeper_sqlite_vfs_register(void);

/// What the VFS has done on the calling thread, for tests: writes it took into a buffer, and writes it made to
/// WAL files (each a buffer written out, or a write it did not gather).
void storekeeper_sqlite_vfs_counts(long long *gathered, long long *written);

#endif
