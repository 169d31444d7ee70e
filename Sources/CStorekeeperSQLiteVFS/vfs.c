// A VFS over SQLite's default one that gathers a WAL file's writes. SQLite writes a WAL frame as two calls (its
// 24-byte header, then its page), so a commit of 70 pages was 140 `pwrite`s; here the contiguous writes of a
// transaction go into a buffer of up to 126 KiB, written with one call when full and before anything that
// needs them in the file: a sync, a read, a truncation, a size, a file control, a close. Every other file, and
// every other method, is the default VFS's own.
//
// The buffer holds only frames no other connection has been told of: SQLite writes a transaction's frames,
// syncs the WAL (synchronous=FULL, which the connection sets), and only then appends them to the WAL index
// that readers consult, after a shared-memory barrier on the database file, which writes the buffer out too.
// Non-commit frames (a transaction spilling its cache) are read back only by the writing connection, through
// this file, which writes the buffer out first; if the transaction rolls back, they go out before the WAL's
// write lock is released, so that they never land over another connection's frames.
#include "storekeeper_sqlite_vfs.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

// SQLite's unix VFS writes at most 128 KiB - 1 in one call (it masks the count to 17 bits), so a buffer is
// written out at 126 KiB: 31 frames of 4 KiB pages.
enum { capacity = 126 * 1024 };

typedef struct BufferedFile BufferedFile;
struct BufferedFile {
    sqlite3_file base;
    sqlite3_file *real;  // The default VFS's file, in the same allocation, just after this struct.
    unsigned char *buffer;  // WAL files only; allocated at the first write.
    sqlite3_int64 start;  // The file offset of buffer[0].
    int used;
    int wal;
    // A database file's open WAL file, and a WAL file's database file (the same connection's): the database
    // file's shared-memory calls write the WAL's buffer out first.
    BufferedFile *partner;
};
_Static_assert(sizeof(BufferedFile) % 8 == 0, "the default VFS's file follows, aligned");

static sqlite3_vfs *root;
static sqlite3_vfs vfs;
// Per thread, so that a test counts only its own connection's writes.
static _Thread_local long long gatheredCount;
static _Thread_local long long writtenCount;
static _Thread_local int failingFlushes;

// Writes the buffer out. On failure the bytes stay, so that nothing SQLite wrote is lost: the next flush
// writes them again, and whatever needed them in the file fails until one succeeds.
static int flush(BufferedFile *file) {
    if (file->used == 0) return SQLITE_OK;
    writtenCount += 1;
    if (failingFlushes > 0) {
        failingFlushes -= 1;
        return SQLITE_FULL;
    }
    int rc = file->real->pMethods->xWrite(file->real, file->buffer, file->used, file->start);
    if (rc == SQLITE_OK) file->used = 0;
    return rc;
}

static int bufferedClose(sqlite3_file *base) {
    BufferedFile *file = (BufferedFile *)base;
    int flushed = flush(file);
    if (file->partner != NULL) file->partner->partner = NULL;
    int closed = file->real->pMethods->xClose(file->real);
    free(file->buffer);
    file->buffer = NULL;
    return flushed != SQLITE_OK ? flushed : closed;
}

static int bufferedRead(sqlite3_file *base, void *data, int amount, sqlite3_int64 offset) {
    BufferedFile *file = (BufferedFile *)base;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xRead(file->real, data, amount, offset);
}

static int bufferedWrite(sqlite3_file *base, const void *data, int amount, sqlite3_int64 offset) {
    BufferedFile *file = (BufferedFile *)base;
    // Only a WAL file's writes are gathered (any other file's buffer is always empty).
    if (!file->wal) return file->real->pMethods->xWrite(file->real, data, amount, offset);
    if (amount <= 0 || amount > capacity) {
        int rc = flush(file);
        if (rc != SQLITE_OK) return rc;
        writtenCount += 1;
        return file->real->pMethods->xWrite(file->real, data, amount, offset);
    }
    // A write that does not follow the buffer's last (a frame written again, the header at a restart) goes
    // after what the buffer holds, in order.
    if (file->used > 0 && (offset != file->start + file->used || file->used + amount > capacity)) {
        int rc = flush(file);
        if (rc != SQLITE_OK) return rc;
    }
    if (file->buffer == NULL) {
        file->buffer = malloc(capacity);
        if (file->buffer == NULL) return SQLITE_IOERR_NOMEM;
    }
    if (file->used == 0) file->start = offset;
    memcpy(file->buffer + file->used, data, (size_t)amount);
    file->used += amount;
    gatheredCount += 1;
    return SQLITE_OK;
}

static int bufferedTruncate(sqlite3_file *base, sqlite3_int64 size) {
    BufferedFile *file = (BufferedFile *)base;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xTruncate(file->real, size);
}

static int bufferedSync(sqlite3_file *base, int flags) {
    BufferedFile *file = (BufferedFile *)base;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xSync(file->real, flags);
}

static int bufferedFileSize(sqlite3_file *base, sqlite3_int64 *size) {
    BufferedFile *file = (BufferedFile *)base;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xFileSize(file->real, size);
}

static int bufferedLock(sqlite3_file *base, int lock) {
    BufferedFile *file = (BufferedFile *)base;
    return file->real->pMethods->xLock(file->real, lock);
}

static int bufferedUnlock(sqlite3_file *base, int lock) {
    BufferedFile *file = (BufferedFile *)base;
    return file->real->pMethods->xUnlock(file->real, lock);
}

static int bufferedCheckReservedLock(sqlite3_file *base, int *out) {
    BufferedFile *file = (BufferedFile *)base;
    return file->real->pMethods->xCheckReservedLock(file->real, out);
}

static int bufferedFileControl(sqlite3_file *base, int op, void *argument) {
    BufferedFile *file = (BufferedFile *)base;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xFileControl(file->real, op, argument);
}

static int bufferedSectorSize(sqlite3_file *base) {
    BufferedFile *file = (BufferedFile *)base;
    return file->real->pMethods->xSectorSize(file->real);
}

static int bufferedDeviceCharacteristics(sqlite3_file *base) {
    BufferedFile *file = (BufferedFile *)base;
    return file->real->pMethods->xDeviceCharacteristics(file->real);
}

static int bufferedShmMap(sqlite3_file *base, int region, int size, int extend, void volatile **memory) {
    BufferedFile *file = (BufferedFile *)base;
    if (file->real->pMethods->iVersion < 2) return SQLITE_IOERR;
    return file->real->pMethods->xShmMap(file->real, region, size, extend, memory);
}

// Called on the database file. Before a lock is released (the WAL's write lock among them), the WAL's buffer is
// written out: a transaction rolled back after spilling frames leaves them in it, and another connection may
// write the WAL once the lock is free. A failed write keeps them (the next flush retries), and the lock is
// released all the same.
static int bufferedShmLock(sqlite3_file *base, int offset, int count, int flags) {
    BufferedFile *file = (BufferedFile *)base;
    if (file->real->pMethods->iVersion < 2) return SQLITE_IOERR;
    if ((flags & SQLITE_SHM_UNLOCK) != 0 && file->partner != NULL) (void)flush(file->partner);
    return file->real->pMethods->xShmLock(file->real, offset, count, flags);
}

// Called on the database file before SQLite publishes a WAL index header (and at other orderings): the WAL's
// buffer goes out first, so that no connection is told of frames not in the file whatever the connection's
// `synchronous` (with FULL the commit's sync has already written them).
static void bufferedShmBarrier(sqlite3_file *base) {
    BufferedFile *file = (BufferedFile *)base;
    if (file->partner != NULL) (void)flush(file->partner);
    if (file->real->pMethods->iVersion >= 2) file->real->pMethods->xShmBarrier(file->real);
}

static int bufferedShmUnmap(sqlite3_file *base, int delete) {
    BufferedFile *file = (BufferedFile *)base;
    if (file->real->pMethods->iVersion < 2) return SQLITE_OK;
    return file->real->pMethods->xShmUnmap(file->real, delete);
}

static int bufferedFetch(sqlite3_file *base, sqlite3_int64 offset, int amount, void **pointer) {
    BufferedFile *file = (BufferedFile *)base;
    if (file->real->pMethods->iVersion < 3) {
        *pointer = NULL;
        return SQLITE_OK;
    }
    return file->real->pMethods->xFetch(file->real, offset, amount, pointer);
}

static int bufferedUnfetch(sqlite3_file *base, sqlite3_int64 offset, void *pointer) {
    BufferedFile *file = (BufferedFile *)base;
    if (file->real->pMethods->iVersion < 3) return SQLITE_OK;
    return file->real->pMethods->xUnfetch(file->real, offset, pointer);
}

static const sqlite3_io_methods methods = {
    3,
    bufferedClose,
    bufferedRead,
    bufferedWrite,
    bufferedTruncate,
    bufferedSync,
    bufferedFileSize,
    bufferedLock,
    bufferedUnlock,
    bufferedCheckReservedLock,
    bufferedFileControl,
    bufferedSectorSize,
    bufferedDeviceCharacteristics,
    bufferedShmMap,
    bufferedShmLock,
    bufferedShmBarrier,
    bufferedShmUnmap,
    bufferedFetch,
    bufferedUnfetch,
};

static int bufferedOpen(sqlite3_vfs *self, sqlite3_filename name, sqlite3_file *base, int flags, int *outFlags) {
    (void)self;
    BufferedFile *file = (BufferedFile *)base;
    memset(file, 0, sizeof(BufferedFile));
    file->real = (sqlite3_file *)&file[1];
    int rc = root->xOpen(root, name, file->real, flags, outFlags);
    // SQLite calls xClose whenever pMethods is set, so it is set exactly when the real file's is.
    if (file->real->pMethods == NULL) {
        base->pMethods = NULL;
        return rc;
    }
    file->wal = (flags & SQLITE_OPEN_WAL) != 0;
    base->pMethods = &methods;
    if (file->wal && rc == SQLITE_OK) {
        // The same connection's database file, opened through this VFS before its WAL.
        BufferedFile *database = (BufferedFile *)sqlite3_database_file_object(name);
        if (database != NULL && database->base.pMethods == &methods) {
            database->partner = file;
            file->partner = database;
        }
    }
    return rc;
}

static int passDelete(sqlite3_vfs *self, const char *name, int syncDirectory) {
    (void)self;
    return root->xDelete(root, name, syncDirectory);
}

static int passAccess(sqlite3_vfs *self, const char *name, int flags, int *out) {
    (void)self;
    return root->xAccess(root, name, flags, out);
}

static int passFullPathname(sqlite3_vfs *self, const char *name, int size, char *out) {
    (void)self;
    return root->xFullPathname(root, name, size, out);
}

static void *passDlOpen(sqlite3_vfs *self, const char *name) {
    (void)self;
    return root->xDlOpen(root, name);
}

static void passDlError(sqlite3_vfs *self, int size, char *out) {
    (void)self;
    root->xDlError(root, size, out);
}

static void (*passDlSym(sqlite3_vfs *self, void *handle, const char *symbol))(void) {
    (void)self;
    return root->xDlSym(root, handle, symbol);
}

static void passDlClose(sqlite3_vfs *self, void *handle) {
    (void)self;
    root->xDlClose(root, handle);
}

static int passRandomness(sqlite3_vfs *self, int size, char *out) {
    (void)self;
    return root->xRandomness(root, size, out);
}

static int passSleep(sqlite3_vfs *self, int microseconds) {
    (void)self;
    return root->xSleep(root, microseconds);
}

static int passCurrentTime(sqlite3_vfs *self, double *out) {
    (void)self;
    return root->xCurrentTime(root, out);
}

static int passGetLastError(sqlite3_vfs *self, int size, char *out) {
    (void)self;
    return root->xGetLastError ? root->xGetLastError(root, size, out) : 0;
}

static int passCurrentTimeInt64(sqlite3_vfs *self, sqlite3_int64 *out) {
    (void)self;
    if (root->iVersion >= 2 && root->xCurrentTimeInt64) return root->xCurrentTimeInt64(root, out);
    double days = 0;
    int rc = root->xCurrentTime(root, &days);
    *out = (sqlite3_int64)(days * 86400000.0);
    return rc;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int registered = SQLITE_ERROR;

static void registerOnce(void) {
    root = sqlite3_vfs_find(NULL);
    if (root == NULL) return;
    vfs.iVersion = 2;
    vfs.szOsFile = (int)sizeof(BufferedFile) + root->szOsFile;
    vfs.mxPathname = root->mxPathname;
    vfs.zName = STOREKEEPER_SQLITE_VFS_NAME;
    vfs.xOpen = bufferedOpen;
    vfs.xDelete = passDelete;
    vfs.xAccess = passAccess;
    vfs.xFullPathname = passFullPathname;
    vfs.xDlOpen = passDlOpen;
    vfs.xDlError = passDlError;
    vfs.xDlSym = passDlSym;
    vfs.xDlClose = passDlClose;
    vfs.xRandomness = passRandomness;
    vfs.xSleep = passSleep;
    vfs.xCurrentTime = passCurrentTime;
    vfs.xGetLastError = passGetLastError;
    vfs.xCurrentTimeInt64 = passCurrentTimeInt64;
    registered = sqlite3_vfs_register(&vfs, 0);
}

int storekeeper_sqlite_vfs_register(void) {
    pthread_once(&once, registerOnce);
    return registered;
}

void storekeeper_sqlite_vfs_fail_flushes(int count) { failingFlushes = count; }

void storekeeper_sqlite_vfs_counts(long long *gathered, long long *written) {
    *gathered = gatheredCount;
    *written = writtenCount;
}
