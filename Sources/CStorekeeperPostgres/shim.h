#ifndef STOREKEEPER_CPOSTGRES_SHIM_H
#define STOREKEEPER_CPOSTGRES_SHIM_H

// libpq from Debian's libpq-dev (found through pkg-config: -I/usr/include/postgresql).
#include <libpq-fe.h>

#endif
