// The HTTP server facade declared in chttpserver.h, over libmicrohttpd (Debian's 0.9.75).
//
// Threads: libmicrohttpd runs its own epoll loop on a pool of `threads` workers. The access handler
// runs on a worker; the Swift handler is called there once per complete request and may answer at once
// (on that thread, before it returns) or later from any thread. In the latter case the connection is
// suspended (MHD_suspend_connection: no thread held, no timeout running) and resumed when the answer
// arrives; the access handler is then called again and queues the stored answer.
//
// One request = one `sk_exchange`, allocated by the URI log callback (which sees the raw request target,
// query included, before libmicrohttpd splits and mangles it) and owned by up to two parties:
//   - the connection, from the URI log callback until MHD_OPTION_NOTIFY_COMPLETED;
//   - the handler, from the moment it is called until `sk_exchange_respond` (or `sk_server_stop`).
// The exchange is freed when both have let go, so an answer that arrives after the client went away (or
// after the connection was closed while suspended) is simply dropped.
//
// Locks: `server->lock` guards the list of exchanges handed to the handler and not yet answered (needed
// by sk_server_stop to answer them with 503); `exchange->lock` guards the hand-over state of one
// exchange. Order: server->lock before exchange->lock. libmicrohttpd calls our callbacks without holding
// its own locks, so calling MHD_resume_connection under ours cannot deadlock.
//
// Client errors (framing, limits, version) are detected at the first access-handler call, i.e. after the
// headers and before any body byte is read or "100 Continue" is sent, and answered with a JSON body.
//
// Slow clients: every connection has an `sk_conn` record (MHD_OPTION_NOTIFY_CONNECTION's socket context)
// with its phase and when the phase began. A reaper thread closes (shutdown(2), so libmicrohttpd sees the
// end and cleans up on its own thread) connections whose head or body is late. libmicrohttpd's own idle
// timeout restarts with every byte, so on its own it cannot stop a client trickling a byte a second. The
// record is freed at NOTIFY_CONNECTION CLOSED, which libmicrohttpd calls before it closes the socket, and
// the reaper shuts a socket down only under `conn_lock`, so it never touches a reused descriptor.
// Per-address counts live in the same records (a small hash table) and are checked at accept.

#define _GNU_SOURCE  // POSIX/GNU declarations (getaddrinfo, strcasecmp, F_DUPFD_CLOEXEC...) under -std=c11
#include "chttpserver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// How long sk_server_stop waits for the 503 answers of pending exchanges to be written.
#define STOP_DRAIN_MILLISECONDS 1000
// How often the reaper looks for late heads and slow bodies.
#define REAP_MILLISECONDS 250
// Buckets of the per-address table (a power of two).
#define ADDRESS_BUCKETS 4096

// Where a connection is in its request, for the reaper.
enum conn_phase { PHASE_HEAD = 0, PHASE_BODY = 1, PHASE_BUSY = 2, PHASE_KEEPALIVE = 3 };

typedef struct sk_address {
    struct sk_address *next;  // in its bucket
    uint8_t bytes[16];        // IPv4 (also when mapped into IPv6) in the first 4
    uint8_t length;
    unsigned int count;       // connections open from it
} sk_address;

typedef struct sk_conn {
    struct sk_conn *previous, *next;  // in server->conns, under conn_lock
    int fd;
    sk_address *address;              // under conn_lock
    atomic_int phase;
    atomic_llong phase_started;       // monotonic milliseconds
    atomic_ullong body_received;
    bool shut;                        // the reaper closed it (under conn_lock)
} sk_conn;

struct sk_server {
    struct MHD_Daemon *daemon;
    char *tls_certificate;  // copies of the PEM texts, kept while the daemon runs; the key is wiped on free
    char *tls_key;
    int listen_fd;  // ours: created here and closed after MHD_stop_daemon; libmicrohttpd gets a dup
                    // of it (which it closes in MHD_stop_daemon unless quiesced)
    sk_handler handler;
    void *context;
    sk_server_options limits;
    uint16_t port;
    atomic_uint connections;  // maintained by MHD_OPTION_NOTIFY_CONNECTION
    // Connections we suspended whose resumption libmicrohttpd has not processed yet (it re-enters the
    // access handler): MHD_stop_daemon must not run before this is zero (it panics otherwise).
    atomic_int suspended_now;

    // Connections and addresses, for the slow-client deadlines and the per-address cap.
    pthread_mutex_t conn_lock;
    sk_conn *conns;
    sk_address *addresses[ADDRESS_BUCKETS];
    pthread_t reaper;
    bool reaper_started;
    pthread_cond_t reaper_wake;
    bool reaper_stop;  // under conn_lock
    atomic_ulong slow_closed, refused;
    atomic_size_t buffered;  // request body bytes reserved over all requests in flight

    pthread_mutex_t lock;   // guards `pending`, `stopping` and `refs`
    sk_exchange *pending;   // handed to the handler and not answered yet (doubly linked)
    bool stopping;
    // Owners of this struct: sk_server_start's caller until sk_server_stop, and one per exchange the
    // handler still holds (it may answer after stop: the struct outlives the daemon until then).
    unsigned int refs;
};

struct sk_exchange {
    pthread_mutex_t lock;  // guards everything from `refs` down to `response_failed`
    sk_server *server;
    struct MHD_Connection *connection;

    // Owners: the connection (until NOTIFY_COMPLETED) and the handler (until respond or abandon).
    unsigned int refs;
    bool linked;           // in server->pending (guarded by server->lock)
    bool handler_done;     // answered or abandoned while sk_server_stop still lists it: stop releases it
    bool connection_gone;  // NOTIFY_COMPLETED ran: `connection` must not be touched any more
    bool in_handler;       // the handler is running on the worker thread
    bool suspended;        // the connection is suspended waiting for `response`
    bool counted;          // counted in server->suspended_now until libmicrohttpd re-enters after resume
    bool answered;         // respond (or stop's 503) happened
    bool response_failed;  // the answer could not be built (out of memory): close the connection
    struct MHD_Response *response;  // an answer not yet queued
    unsigned int status;

    // Worker-thread-only state (the access handler is never called concurrently for one connection).
    bool checked;          // the first access-handler call (headers complete) has run
    bool handed;           // the handler has been called
    size_t body_limit;     // this request's limit (the route's, capped at max_body)
    size_t reserved;       // bytes counted in server->buffered for this body
    sk_conn *conn;         // the connection's record; valid until NOTIFY_COMPLETED (worker thread only)
    uint8_t *body;
    size_t body_length, body_capacity;

    sk_request request;    // filled when handed over; its strings live in `arena`
    char *arena;
    sk_exchange *previous, *next;  // in server->pending

    size_t uri_length;
    char uri[];  // the raw request target ("/path?query"), as received
};

// MARK: - Answers

// Answers built here for errors a client causes. Bodies are static, so libmicrohttpd need not copy them.
typedef struct client_error {
    unsigned int status;
    const char *body;
} client_error;

#define JSON_ERROR(code, message) "{\"error\":{\"code\":\"" code "\",\"message\":\"" message "\"}}"
static const client_error error_too_large = {413, JSON_ERROR("payload_too_large", "The request body is too large.")};
static const client_error error_ambiguous = {
    400, JSON_ERROR("ambiguous_framing",
                    "The request has several Content-Length headers, or both Content-Length and Transfer-Encoding.")};
static const client_error error_encoding = {
    501, JSON_ERROR("unsupported_transfer_encoding", "Only Transfer-Encoding: chunked is supported.")};
static const client_error error_headers = {
    431, JSON_ERROR("header_fields_too_large", "The request line and headers are too large.")};
static const client_error error_url = {414, JSON_ERROR("uri_too_long", "The request URL is too long.")};
static const client_error error_parameters = {
    400, JSON_ERROR("too_many_parameters", "The request URL has too many query parameters.")};
static const client_error error_version = {
    505, JSON_ERROR("http_version_not_supported", "Only HTTP/1.0 and HTTP/1.1 are supported.")};
static const client_error error_stopping = {
    503, JSON_ERROR("server_stopping", "The server is shutting down.")};
static const client_error error_busy = {
    503, JSON_ERROR("server_busy", "Too many request bodies are being received; try again shortly.")};

static long long monotonic_milliseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void conn_enter(sk_conn *conn, enum conn_phase phase) {
    if (!conn) return;
    atomic_store(&conn->phase_started, monotonic_milliseconds());
    atomic_store(&conn->phase, phase);
}

static struct MHD_Response *error_response(const client_error *error, bool close) {
    struct MHD_Response *response =
        MHD_create_response_from_buffer(strlen(error->body), (void *)error->body, MHD_RESPMEM_PERSISTENT);
    if (!response) return NULL;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (close) MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    return response;
}

static enum MHD_Result queue_error(struct MHD_Connection *connection, const client_error *error, bool close) {
    struct MHD_Response *response = error_response(error, close);
    if (!response) return MHD_NO;
    enum MHD_Result result = MHD_queue_response(connection, error->status, response);
    MHD_destroy_response(response);
    return result;
}

// MARK: - Exchange lifetime

static void exchange_free(sk_exchange *exchange) {
    if (exchange->reserved) atomic_fetch_sub(&exchange->server->buffered, exchange->reserved);
    if (exchange->response) MHD_destroy_response(exchange->response);
    pthread_mutex_destroy(&exchange->lock);
    free(exchange->body);
    free(exchange->arena);
    free(exchange);
}

// Drops one owner; called with exchange->lock held, which it releases. Frees the exchange if last.
static void exchange_release_locked(sk_exchange *exchange) {
    bool last = --exchange->refs == 0;
    pthread_mutex_unlock(&exchange->lock);
    if (last) exchange_free(exchange);
}

// Drops one owner of the server; called with server->lock held, which it releases. Frees it if last.
static void free_tls(sk_server *server) {
    if (server->tls_key) {
        explicit_bzero(server->tls_key, strlen(server->tls_key));
        free(server->tls_key);
        server->tls_key = NULL;
    }
    free(server->tls_certificate);
    server->tls_certificate = NULL;
}

static void server_free(sk_server *server) {
    for (size_t bucket = 0; bucket < ADDRESS_BUCKETS; bucket++) {
        for (sk_address *entry = server->addresses[bucket], *next; entry; entry = next) {
            next = entry->next;
            free(entry);
        }
    }
    pthread_cond_destroy(&server->reaper_wake);
    pthread_mutex_destroy(&server->conn_lock);
    pthread_mutex_destroy(&server->lock);
    free_tls(server);
    free(server);
}

static void server_release_locked(sk_server *server) {
    bool last = --server->refs == 0;
    pthread_mutex_unlock(&server->lock);
    if (last) server_free(server);
}

static void pending_unlink(sk_server *server, sk_exchange *exchange);

// The handler is done with the exchange (answered or abandoned); called with both locks held, which it
// releases. While sk_server_stop still lists the exchange (it waits for the 503 to be written), stop
// drops the handler's ownership of it; otherwise it is dropped now. Then the handler's hold on the server.
static void handler_done_locked(sk_server *server, sk_exchange *exchange) {
    if (exchange->linked && server->stopping) {
        exchange->handler_done = true;
        pthread_mutex_unlock(&exchange->lock);
    } else {
        pending_unlink(server, exchange);
        exchange_release_locked(exchange);
    }
    server_release_locked(server);
}

// Called with server->lock held; does nothing for an exchange not in the list.
static void pending_unlink(sk_server *server, sk_exchange *exchange) {
    if (!exchange->linked) return;
    exchange->linked = false;
    if (exchange->previous) exchange->previous->next = exchange->next;
    else server->pending = exchange->next;
    if (exchange->next) exchange->next->previous = exchange->previous;
    exchange->previous = exchange->next = NULL;
}

// MARK: - libmicrohttpd callbacks

// Sees the raw request target before libmicrohttpd parses it; its result becomes `*con_cls`.
static void *uri_logged(void *cls, const char *uri, struct MHD_Connection *connection) {
    size_t length = strlen(uri);
    sk_exchange *exchange = calloc(1, sizeof(sk_exchange) + length + 1);
    if (!exchange) return NULL;  // the access handler then closes the connection
    pthread_mutex_init(&exchange->lock, NULL);
    exchange->server = cls;
    exchange->connection = connection;
    exchange->refs = 1;  // the connection's
    exchange->uri_length = length;
    memcpy(exchange->uri, uri, length + 1);
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    exchange->conn = info ? info->socket_context : NULL;

    // The query is parsed here, from the copy. libmicrohttpd would also split it into one pool entry
    // per parameter (about 48 bytes each, from the connection's memory pool): a 4 KiB URL of "a&a&..."
    // exhausts the pool and the request then hangs until the idle timeout. It looks for the '?' before
    // calling us and parses what follows after we return ("log callback before we modify URI *or*
    // args" in 0.9.75's connection.c), so ending the string right after the '?' leaves it nothing to
    // parse. `uri` points into the connection's own read buffer, which is writable.
    char *mark = strchr(uri, '?');
    if (mark && mark[1] != '\0') mark[1] = '\0';
    return exchange;
}

// Leaves escapes alone: path and query reach the handler percent-encoded (it decodes once).
static size_t unescape_nothing(void *cls, struct MHD_Connection *connection, char *string) {
    (void)cls;
    (void)connection;
    return strlen(string);
}

static void request_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                              enum MHD_RequestTerminationCode code) {
    (void)cls;
    (void)connection;
    (void)code;
    sk_exchange *exchange = *con_cls;
    *con_cls = NULL;
    if (!exchange) return;
    conn_enter(exchange->conn, PHASE_KEEPALIVE);  // the next head is due within the idle timeout
    exchange->conn = NULL;
    pthread_mutex_lock(&exchange->lock);
    exchange->connection_gone = true;
    exchange->suspended = false;
    if (exchange->counted) {
        exchange->counted = false;
        atomic_fetch_sub(&exchange->server->suspended_now, 1);
    }
    exchange_release_locked(exchange);
}

// An address as table bytes: IPv4 (plain or mapped into IPv6) as 4 bytes, IPv6 as 16.
static bool address_key(const struct sockaddr *address, uint8_t bytes[16], uint8_t *length) {
    if (!address) return false;
    if (address->sa_family == AF_INET) {
        memcpy(bytes, &((const struct sockaddr_in *)(const void *)address)->sin_addr, 4);
        *length = 4;
        return true;
    }
    if (address->sa_family == AF_INET6) {
        const struct in6_addr *v6 = &((const struct sockaddr_in6 *)(const void *)address)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(v6)) {
            memcpy(bytes, &v6->s6_addr[12], 4);
            *length = 4;
        } else {
            memcpy(bytes, v6->s6_addr, 16);
            *length = 16;
        }
        return true;
    }
    return false;
}

static size_t address_bucket(const uint8_t *bytes, uint8_t length) {
    uint32_t hash = 2166136261u;  // FNV-1a
    for (uint8_t index = 0; index < length; index++) hash = (hash ^ bytes[index]) * 16777619u;
    return hash & (ADDRESS_BUCKETS - 1);
}

// Called with conn_lock held; creates the entry when `create`.
static sk_address *address_find(sk_server *server, const uint8_t *bytes, uint8_t length, bool create) {
    size_t bucket = address_bucket(bytes, length);
    for (sk_address *entry = server->addresses[bucket]; entry; entry = entry->next) {
        if (entry->length == length && memcmp(entry->bytes, bytes, length) == 0) return entry;
    }
    if (!create) return NULL;
    sk_address *entry = calloc(1, sizeof(sk_address));
    if (!entry) return NULL;
    memcpy(entry->bytes, bytes, length);
    entry->length = length;
    entry->next = server->addresses[bucket];
    server->addresses[bucket] = entry;
    return entry;
}

// Called with conn_lock held: drops one connection of the address, and the entry with the last.
static void address_release(sk_server *server, sk_address *entry) {
    if (!entry || --entry->count > 0) return;
    sk_address **link = &server->addresses[address_bucket(entry->bytes, entry->length)];
    while (*link && *link != entry) link = &(*link)->next;
    if (*link) *link = entry->next;
    free(entry);
}

// At accept, before libmicrohttpd sets the connection up: the per-address cap, then the reserve.
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *address, socklen_t length) {
    (void)length;
    sk_server *server = cls;
    const sk_server_options *limits = &server->limits;
    if (!limits->per_address_limit && !limits->reserved_connections) return MHD_YES;
    uint8_t bytes[16], size = 0;
    if (!address_key(address, bytes, &size)) return MHD_YES;
    pthread_mutex_lock(&server->conn_lock);
    sk_address *entry = address_find(server, bytes, size, false);
    unsigned int held = entry ? entry->count : 0;
    pthread_mutex_unlock(&server->conn_lock);
    bool refuse = limits->per_address_limit && held >= limits->per_address_limit;
    if (!refuse && limits->reserved_connections && held > 0 && limits->connection_limit) {
        unsigned int open = atomic_load(&server->connections);
        // The reserve is at most a quarter of the limit, so a small limit is not all reserve.
        unsigned int reserve = limits->reserved_connections < limits->connection_limit / 4
                                   ? limits->reserved_connections
                                   : limits->connection_limit / 4;
        unsigned int shared = limits->connection_limit - reserve;
        refuse = open >= shared;
    }
    if (refuse) atomic_fetch_add(&server->refused, 1);
    return refuse ? MHD_NO : MHD_YES;
}

static void connection_changed(void *cls, struct MHD_Connection *connection, void **socket_context,
                               enum MHD_ConnectionNotificationCode code) {
    sk_server *server = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&server->connections, 1);
        sk_conn *conn = calloc(1, sizeof(sk_conn));
        *socket_context = conn;
        if (!conn) return;  // untracked: no deadline, no count (out of memory)
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *peer =
            MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        conn->fd = fd ? fd->connect_fd : -1;
        conn_enter(conn, PHASE_HEAD);
        uint8_t bytes[16], size = 0;
        pthread_mutex_lock(&server->conn_lock);
        if (peer && address_key(peer->client_addr, bytes, &size)) {
            conn->address = address_find(server, bytes, size, true);
            if (conn->address) conn->address->count += 1;
        }
        conn->next = server->conns;
        if (server->conns) server->conns->previous = conn;
        server->conns = conn;
        pthread_mutex_unlock(&server->conn_lock);
        return;
    }
    atomic_fetch_sub(&server->connections, 1);
    sk_conn *conn = *socket_context;
    *socket_context = NULL;
    if (!conn) return;
    pthread_mutex_lock(&server->conn_lock);
    if (conn->previous) conn->previous->next = conn->next;
    else server->conns = conn->next;
    if (conn->next) conn->next->previous = conn->previous;
    address_release(server, conn->address);
    pthread_mutex_unlock(&server->conn_lock);
    free(conn);
}

// Whether a connection has run out of time in its phase.
static bool conn_late(const sk_server_options *limits, sk_conn *conn, long long now) {
    long long elapsed = now - atomic_load(&conn->phase_started);
    switch (atomic_load(&conn->phase)) {
    case PHASE_HEAD:
        return limits->head_timeout_seconds && elapsed > (long long)limits->head_timeout_seconds * 1000;
    case PHASE_KEEPALIVE:
        return limits->idle_timeout_seconds && elapsed > (long long)limits->idle_timeout_seconds * 1000;
    case PHASE_BODY: {
        if (!limits->min_body_rate) return false;
        long long grace = (long long)limits->head_timeout_seconds * 1000;
        if (elapsed <= grace) return false;
        unsigned long long owed = (unsigned long long)(elapsed - grace) * limits->min_body_rate / 1000;
        return atomic_load(&conn->body_received) < owed;
    }
    default:
        return false;  // waiting for its answer, or being answered (libmicrohttpd's idle timeout)
    }
}

static void *reaper_main(void *argument) {
    sk_server *server = argument;
    pthread_mutex_lock(&server->conn_lock);
    while (!server->reaper_stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += REAP_MILLISECONDS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&server->reaper_wake, &server->conn_lock, &until);
        if (server->reaper_stop) break;
        long long now = monotonic_milliseconds();
        for (sk_conn *conn = server->conns; conn; conn = conn->next) {
            if (conn->shut || conn->fd < 0 || !conn_late(&server->limits, conn, now)) continue;
            conn->shut = true;
            shutdown(conn->fd, SHUT_RDWR);  // libmicrohttpd sees the end and closes it on its own thread
            atomic_fetch_add(&server->slow_closed, 1);
        }
    }
    pthread_mutex_unlock(&server->conn_lock);
    return NULL;
}

// MARK: - Checks at the first access-handler call (headers complete, body not read)

typedef struct header_scan {
    size_t bytes;          // "name: value\r\n" summed
    size_t count;
    unsigned int content_lengths;
    unsigned int transfer_encodings;
    const char *content_length;
    size_t content_length_size;
    const char *transfer_encoding;
} header_scan;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
    (void)kind;
    header_scan *scan = cls;
    scan->bytes += key_size + value_size + 4;
    scan->count += 1;
    if (key_size == 14 && strncasecmp(key, "Content-Length", 14) == 0) {
        if (scan->content_lengths++ == 0) {
            scan->content_length = value;
            scan->content_length_size = value_size;
        }
    } else if (key_size == 17 && strncasecmp(key, "Transfer-Encoding", 17) == 0) {
        if (scan->transfer_encodings++ == 0) scan->transfer_encoding = value ? value : "";
    }
    return MHD_YES;
}

// The query part of the raw target (after the first '?'), or NULL.
static const char *raw_query(const sk_exchange *exchange) {
    const char *mark = memchr(exchange->uri, '?', exchange->uri_length);
    return mark ? mark + 1 : NULL;
}

// Parameters are '&'-separated; empty segments ("a&&b", a trailing '&') are not parameters.
static size_t count_parameters(const char *query) {
    size_t count = 0;
    for (const char *cursor = query; cursor && *cursor;) {
        const char *end = strchr(cursor, '&');
        size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
        if (length > 0) count += 1;
        cursor = end ? end + 1 : NULL;
    }
    return count;
}

// Counts `bytes` more of this request's body against max_buffered_bytes; false when that would pass it.
static bool reserve_body(sk_server *server, sk_exchange *exchange, size_t bytes) {
    size_t cap = server->limits.max_buffered_bytes;
    size_t now = atomic_fetch_add(&server->buffered, bytes) + bytes;
    if (cap && now > cap) {
        atomic_fetch_sub(&server->buffered, bytes);
        return false;
    }
    exchange->reserved += bytes;
    return true;
}

// Returns the error to answer with, or NULL when the request may proceed; on success `*declared` is the
// Content-Length (0 when absent or chunked). An answer queued now, before the body, always closes the
// connection (libmicrohttpd does so even for a request without a body), so every error says so.
static const client_error *check_request(sk_server *server, sk_exchange *exchange,
                                         struct MHD_Connection *connection, const char *method,
                                         const char *version, uint64_t *declared) {
    const sk_server_options *limits = &server->limits;
    header_scan scan = {0};
    MHD_get_connection_values_n(connection, MHD_HEADER_KIND, scan_header, &scan);
    *declared = 0;

    // libmicrohttpd answers HTTP/0.x and 2+ itself (HTML 505); 1.2 to 1.9 reach us as "1.1-compatible".
    if (strcmp(version, MHD_HTTP_VERSION_1_1) != 0 && strcmp(version, MHD_HTTP_VERSION_1_0) != 0) {
        return &error_version;
    }
    if (exchange->uri_length > limits->max_url_bytes) return &error_url;
    size_t request_line = strlen(method) + 1 + exchange->uri_length + 1 + strlen(version) + 2;
    if (request_line + scan.bytes + 2 > limits->max_header_bytes) return &error_headers;

    // Framing: exactly one way to know where the body ends, or none.
    if (scan.content_lengths > 1 || (scan.content_lengths > 0 && scan.transfer_encodings > 0)) {
        return &error_ambiguous;
    }
    // Anything but a single "chunked": libmicrohttpd would read such a body until the client closes.
    if (scan.transfer_encodings > 0 &&
        (scan.transfer_encodings > 1 || strcasecmp(scan.transfer_encoding, "chunked") != 0)) {
        return &error_encoding;
    }
    if (scan.content_lengths == 1) {
        // libmicrohttpd has already rejected anything but digits (with its own 400 or 413), so this
        // parse cannot fail; it saturates rather than overflows all the same.
        uint64_t length = 0;
        for (size_t index = 0; index < scan.content_length_size; index++) {
            char digit = scan.content_length[index];
            if (digit < '0' || digit > '9') return &error_ambiguous;
            length = length > (UINT64_MAX - 9) / 10 ? UINT64_MAX : length * 10 + (uint64_t)(digit - '0');
        }
        *declared = length;
    }
    if (count_parameters(raw_query(exchange)) > limits->max_query_parameters) return &error_parameters;

    // The request's own limit, from its route (and who sends it), before any body byte is read.
    exchange->body_limit = limits->max_body;
    bool has_body = scan.content_lengths == 1 ? *declared > 0 : scan.transfer_encodings > 0;
    if (has_body && limits->body_limit) {
        const char *query = raw_query(exchange);
        size_t path_length = query ? (size_t)(query - 1 - exchange->uri) : exchange->uri_length;
        char *path = strndup(exchange->uri, path_length);
        if (!path) return &error_busy;
        const char *authorization = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Authorization");
        size_t route_limit = limits->body_limit(server->context, method, path, authorization);
        free(path);
        if (route_limit < exchange->body_limit) exchange->body_limit = route_limit;
    }
    if (*declared > exchange->body_limit) return &error_too_large;  // before reading it or sending 100
    if (*declared > 0 && !reserve_body(server, exchange, (size_t)*declared)) return &error_busy;
    return NULL;
}

// MARK: - Building the request handed to the handler

typedef struct header_copy {
    sk_header *items;
    char *strings;  // cursor into the arena
} header_copy;

static char *copy_string(char **cursor, const char *source, size_t length) {
    char *start = *cursor;
    if (length) memcpy(start, source, length);
    start[length] = '\0';
    *cursor += length + 1;
    return start;
}

static enum MHD_Result measure_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                      const char *value, size_t value_size) {
    (void)kind;
    (void)key;
    (void)value;
    size_t *size = cls;
    *size += key_size + value_size + 2;
    return MHD_YES;
}

static enum MHD_Result copy_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
    (void)kind;
    header_copy *copy = cls;
    copy->items->name = copy_string(&copy->strings, key, key_size);
    copy->items->value = copy_string(&copy->strings, value ? value : "", value ? value_size : 0);
    copy->items += 1;
    return MHD_YES;
}

static void format_remote(struct MHD_Connection *connection, char *text, size_t size) {
    snprintf(text, size, "unknown");
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr) return;
    const struct sockaddr *address = info->client_addr;
    if (address->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)address)->sin_addr, text, (socklen_t)size);
    } else if (address->sa_family == AF_INET6) {
        const struct in6_addr *v6 = &((const struct sockaddr_in6 *)(const void *)address)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(v6)) inet_ntop(AF_INET, &v6->s6_addr[12], text, (socklen_t)size);  // dual stack
        else inet_ntop(AF_INET6, v6, text, (socklen_t)size);
    }
}

// Copies everything the request needs into one allocation, so it outlives libmicrohttpd's buffers.
static bool build_request(sk_exchange *exchange, struct MHD_Connection *connection, const char *method) {
    const char *query = raw_query(exchange);
    size_t path_length = query ? (size_t)(query - 1 - exchange->uri) : exchange->uri_length;
    size_t query_count = count_parameters(query);
    size_t header_count = (size_t)MHD_get_connection_values_n(connection, MHD_HEADER_KIND, NULL, NULL);
    size_t header_bytes = 0;
    MHD_get_connection_values_n(connection, MHD_HEADER_KIND, measure_header, &header_bytes);
    char remote[INET6_ADDRSTRLEN];
    format_remote(connection, remote, sizeof(remote));
    size_t method_length = strlen(method), remote_length = strlen(remote);

    // Query strings: each segment once, plus a terminator for name and value.
    size_t size = (query_count + header_count) * sizeof(sk_header) + method_length + 1 + path_length + 1 +
                  (exchange->uri_length - path_length) + 2 * query_count + header_bytes + remote_length + 1;
    char *arena = malloc(size);
    if (!arena) return false;
    exchange->arena = arena;
    sk_header *parameters = (sk_header *)(void *)arena;
    sk_header *headers = parameters + query_count;
    char *strings = (char *)(headers + header_count);

    sk_request *request = &exchange->request;
    request->method = copy_string(&strings, method, method_length);
    request->path = copy_string(&strings, exchange->uri, path_length);
    size_t index = 0;
    for (const char *cursor = query; cursor && *cursor;) {
        const char *end = strchr(cursor, '&');
        size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
        if (length > 0) {
            const char *equals = memchr(cursor, '=', length);
            size_t name_length = equals ? (size_t)(equals - cursor) : length;
            parameters[index].name = copy_string(&strings, cursor, name_length);
            parameters[index].value =
                equals ? copy_string(&strings, equals + 1, length - name_length - 1) : copy_string(&strings, "", 0);
            index += 1;
        }
        cursor = end ? end + 1 : NULL;
    }
    request->query = parameters;
    request->query_count = query_count;
    header_copy copy = {headers, strings};
    MHD_get_connection_values_n(connection, MHD_HEADER_KIND, copy_header, &copy);
    strings = copy.strings;
    request->headers = headers;
    request->header_count = header_count;
    request->remote = copy_string(&strings, remote, remote_length);
    request->body = exchange->body ? exchange->body : (const uint8_t *)"";
    request->body_length = exchange->body_length;
    return true;
}

// MARK: - Access handler

// A chunked body has passed its limit: libmicrohttpd queues answers only before or after a body, so over
// plain HTTP the 413 is written to the socket now (a fixed answer, on the connection's own thread, while
// libmicrohttpd writes nothing) and the connection is closed; over HTTPS it is closed.
static void answer_too_large_now(const sk_server *server, struct MHD_Connection *connection) {
    if (server->tls_certificate) return;
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!fd) return;
    char head[160];
    int length = snprintf(head, sizeof head,
                          "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                          strlen(error_too_large.body));
    if (length <= 0 || (size_t)length >= sizeof head) return;
    (void)!send(fd->connect_fd, head, (size_t)length, MSG_NOSIGNAL | MSG_MORE);
    (void)!send(fd->connect_fd, error_too_large.body, strlen(error_too_large.body), MSG_NOSIGNAL);
}

// Appends upload data; false closes the connection (a body over its limit, or out of memory).
static bool receive_body(sk_server *server, sk_exchange *exchange, struct MHD_Connection *connection,
                         const char *data, size_t size) {
    if (exchange->conn) atomic_fetch_add(&exchange->conn->body_received, size);
    if (size > exchange->body_limit - exchange->body_length) {
        answer_too_large_now(server, connection);
        return false;
    }
    if (exchange->body_length + size > exchange->body_capacity) {
        size_t capacity = exchange->body_capacity ? exchange->body_capacity * 2 : 4096;
        while (capacity < exchange->body_length + size) capacity *= 2;
        if (capacity > exchange->body_limit) capacity = exchange->body_limit;
        // A declared body was reserved whole; a chunked one is reserved as it grows.
        if (capacity > exchange->reserved && !reserve_body(server, exchange, capacity - exchange->reserved)) {
            return false;
        }
        uint8_t *grown = realloc(exchange->body, capacity);
        if (!grown) return false;
        exchange->body = grown;
        exchange->body_capacity = capacity;
    }
    memcpy(exchange->body + exchange->body_length, data, size);
    exchange->body_length += size;
    return true;
}

// Queues the answer stored by respond, or suspends (again) until there is one. Worker thread only.
static enum MHD_Result deliver_or_suspend(sk_exchange *exchange, struct MHD_Connection *connection) {
    pthread_mutex_lock(&exchange->lock);
    exchange->in_handler = false;
    if (exchange->counted) {  // re-entered after a resume: libmicrohttpd has processed it
        exchange->counted = false;
        atomic_fetch_sub(&exchange->server->suspended_now, 1);
    }
    struct MHD_Response *response = exchange->response;
    unsigned int status = exchange->status;
    bool failed = exchange->response_failed;
    exchange->response = NULL;
    if (!response && !failed) {
        MHD_suspend_connection(connection);
        exchange->suspended = true;
        exchange->counted = true;
        atomic_fetch_add(&exchange->server->suspended_now, 1);
    }
    pthread_mutex_unlock(&exchange->lock);
    if (failed) return MHD_NO;
    if (!response) return MHD_YES;
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

static enum MHD_Result hand_over(sk_server *server, sk_exchange *exchange, struct MHD_Connection *connection,
                                 const char *method) {
    if (!build_request(exchange, connection, method)) return MHD_NO;
    pthread_mutex_lock(&server->lock);
    if (server->stopping) {
        pthread_mutex_unlock(&server->lock);
        return queue_error(connection, &error_stopping, true);
    }
    exchange->next = server->pending;
    if (server->pending) server->pending->previous = exchange;
    server->pending = exchange;
    exchange->linked = true;
    server->refs += 1;  // the handler's, with its exchange
    pthread_mutex_lock(&exchange->lock);
    exchange->refs += 1;  // the handler's
    exchange->in_handler = true;
    exchange->handed = true;
    pthread_mutex_unlock(&exchange->lock);
    pthread_mutex_unlock(&server->lock);

    conn_enter(exchange->conn, PHASE_BUSY);
    server->handler(server->context, exchange, &exchange->request);
    return deliver_or_suspend(exchange, connection);
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                      const char *method, const char *version, const char *upload_data,
                                      size_t *upload_data_size, void **con_cls) {
    (void)url;  // the raw target from the URI log callback is used instead
    sk_server *server = cls;
    sk_exchange *exchange = *con_cls;
    if (!exchange) return MHD_NO;  // out of memory in uri_logged

    if (!exchange->checked) {  // headers complete, nothing of the body read yet
        exchange->checked = true;
        uint64_t declared = 0;
        conn_enter(exchange->conn, PHASE_BODY);
        const client_error *error = check_request(server, exchange, connection, method, version, &declared);
        if (error) return queue_error(connection, error, true);
        if (declared > 0) {
            exchange->body = malloc((size_t)declared);
            if (!exchange->body) return MHD_NO;
            exchange->body_capacity = (size_t)declared;
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        bool keep = receive_body(server, exchange, connection, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return keep ? MHD_YES : MHD_NO;
    }
    // The request is complete (or the connection was resumed with an answer).
    if (exchange->handed) return deliver_or_suspend(exchange, connection);
    return hand_over(server, exchange, connection, method);
}

// MARK: - Answering

void sk_exchange_respond(sk_exchange *exchange, unsigned int status, const uint8_t *body, size_t body_length,
                         const sk_header *headers, size_t header_count) {
    // Built before taking any lock: libmicrohttpd copies the body, and the headers when added.
    struct MHD_Response *response =
        MHD_create_response_from_buffer(body_length, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    for (size_t index = 0; response && index < header_count; index++) {
        // Fails (ignored) for headers libmicrohttpd manages itself, e.g. Content-Length.
        MHD_add_response_header(response, headers[index].name, headers[index].value);
    }

    sk_server *server = exchange->server;  // alive: the handler owns a reference to it
    pthread_mutex_lock(&server->lock);
    pthread_mutex_lock(&exchange->lock);
    if (exchange->answered) {  // sk_server_stop answered first: this answer is dropped
        if (response) MHD_destroy_response(response);
        handler_done_locked(server, exchange);
        return;
    }
    exchange->answered = true;
    if (exchange->connection_gone) {
        if (response) MHD_destroy_response(response);
    } else {
        exchange->response = response;
        exchange->status = status;
        exchange->response_failed = response == NULL;
        if (exchange->suspended) {  // otherwise the worker picks it up when the handler returns
            exchange->suspended = false;
            MHD_resume_connection(exchange->connection);
        }
    }
    handler_done_locked(server, exchange);  // the handler's ownership ends here
}

// Answers 503 "server_stopping" unless answered already; called with exchange->lock held.
static void answer_stopping_locked(sk_exchange *exchange) {
    if (exchange->answered) return;
    exchange->answered = true;
    if (exchange->connection_gone) return;
    exchange->response = error_response(&error_stopping, true);
    exchange->status = error_stopping.status;
    exchange->response_failed = exchange->response == NULL;
    if (exchange->suspended) {
        exchange->suspended = false;
        MHD_resume_connection(exchange->connection);
    }
}

void sk_exchange_abandon(sk_exchange *exchange) {
    sk_server *server = exchange->server;
    pthread_mutex_lock(&server->lock);
    pthread_mutex_lock(&exchange->lock);
    answer_stopping_locked(exchange);
    handler_done_locked(server, exchange);
}

// MARK: - Start and stop

static void raise_file_limit(void) {
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
}

static void set_error(char *error, size_t error_size, const char *format, const char *host, const char *detail) {
    if (error && error_size) snprintf(error, error_size, format, host, detail);
}

// Creates, binds and listens. "localhost" binds 127.0.0.1 only (one socket per daemon); "::" is dual stack.
static int open_listener(const char *host, uint16_t port, uint16_t *bound, bool *ipv6, char *error,
                         size_t error_size) {
    const char *name = host ? host : "127.0.0.1";
    if (strcasecmp(name, "localhost") == 0) name = "127.0.0.1";
    char service[8];
    snprintf(service, sizeof(service), "%u", (unsigned int)port);
    struct addrinfo hints = {0}, *results = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
    int status = getaddrinfo(name, service, &hints, &results);
    if (status != 0 || !results) {
        set_error(error, error_size, "cannot resolve host %s: %s", name, gai_strerror(status));
        return -1;
    }
    int fd = -1, saved = 0;
    char where[96];
    for (struct addrinfo *candidate = results; candidate && fd < 0; candidate = candidate->ai_next) {
        fd = socket(candidate->ai_family, candidate->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    candidate->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (candidate->ai_family == AF_INET6) {
            int v6only = 0;  // "::" accepts IPv4 too (dual stack); irrelevant for a specific address
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
        }
        if (bind(fd, candidate->ai_addr, candidate->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
            saved = errno;
            close(fd);
            fd = -1;
            continue;
        }
        *ipv6 = candidate->ai_family == AF_INET6;
    }
    freeaddrinfo(results);
    if (fd < 0) {
        snprintf(where, sizeof(where), "%s port %u", name, (unsigned int)port);
        if (saved == EADDRINUSE) set_error(error, error_size, "address in use%s%s", "", "");
        else set_error(error, error_size, "cannot bind %s: %s", where, strerror(saved));
        return -1;
    }
    struct sockaddr_storage address;
    socklen_t length = sizeof(address);
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&address, &length) == 0) {
        if (address.ss_family == AF_INET) *bound = ntohs(((struct sockaddr_in *)&address)->sin_port);
        else if (address.ss_family == AF_INET6) *bound = ntohs(((struct sockaddr_in6 *)&address)->sin6_port);
    }
    return fd;
}

sk_server *sk_server_start(const sk_server_options *options, sk_handler handler, void *context, char *error,
                           size_t error_size) {
    if (error && error_size) error[0] = '\0';
    if (!options || !handler) {
        set_error(error, error_size, "%s%s", "invalid arguments", "");
        return NULL;
    }
    raise_file_limit();  // process-wide: lets the server hold 10,000+ connections
    sk_server *server = calloc(1, sizeof(sk_server));
    if (!server) {
        set_error(error, error_size, "%s%s", "out of memory", "");
        return NULL;
    }
    server->refs = 1;  // the caller's, until sk_server_stop
    pthread_mutex_init(&server->lock, NULL);
    pthread_mutex_init(&server->conn_lock, NULL);
    pthread_condattr_t condition;
    pthread_condattr_init(&condition);
    pthread_condattr_setclock(&condition, CLOCK_MONOTONIC);
    pthread_cond_init(&server->reaper_wake, &condition);
    pthread_condattr_destroy(&condition);
    server->handler = handler;
    server->context = context;
    server->limits = *options;
    server->limits.host = NULL;  // not kept: the caller owns the string
    server->limits.tls_certificate_pem = NULL;
    server->limits.tls_key_pem = NULL;
    bool tls = options->tls_certificate_pem && options->tls_key_pem;
    if (tls) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            set_error(error, error_size, "%s%s", "this libmicrohttpd has no TLS support", "");
            server_free(server);
            return NULL;
        }
        server->tls_certificate = strdup(options->tls_certificate_pem);
        server->tls_key = strdup(options->tls_key_pem);
        if (!server->tls_certificate || !server->tls_key) {
            server_free(server);
            set_error(error, error_size, "%s%s", "out of memory", "");
            return NULL;
        }
    }
    bool ipv6 = false;
    server->listen_fd = open_listener(options->host, options->port, &server->port, &ipv6, error, error_size);
    if (server->listen_fd < 0) {
        server_free(server);
        return NULL;
    }

    unsigned int threads = options->threads;
    if (threads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (unsigned int)cores : 1;
    }
    // Large enough that our own limits (checked in the access handler, answered in JSON) trip before
    // libmicrohttpd runs out of connection memory and answers with its own HTML page.
    // Each connection's pool is zeroed after every keep-alive request, so its pages stay resident: keep it
    // no larger than the limits need (with the defaults, 56 KiB a connection that has made a request).
    size_t memory = sk_server_connection_memory(options->max_header_bytes, options->max_url_bytes);
    unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME;  // no MHD_USE_ERROR_LOG
    if (ipv6) flags |= MHD_USE_DUAL_STACK;
    if (tls) flags |= MHD_USE_TLS;
    // TLS 1.2 and 1.3 only, AEAD ciphers only, forward-secret key exchange only (GnuTLS priority syntax).
    static const char tls_priorities[] =
        "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:+CHACHA20-POLY1305:"
        "-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:%SERVER_PRECEDENCE";
    struct MHD_OptionItem tls_items[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, server->tls_certificate},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, server->tls_key},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)tls_priorities},
        {MHD_OPTION_END, 0, NULL},
    };
    struct MHD_OptionItem no_items[] = {{MHD_OPTION_END, 0, NULL}};
    // libmicrohttpd gets its own descriptor for the socket: whether it closes it on a failed start is
    // not documented, and a double close could hit a descriptor another thread just opened.
    int daemon_fd = fcntl(server->listen_fd, F_DUPFD_CLOEXEC, 0);
    server->daemon = daemon_fd < 0 ? NULL : MHD_start_daemon(
        flags, server->port, accept_policy, server, access_handler, server,
        MHD_OPTION_LISTEN_SOCKET, daemon_fd,
        MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_TIMEOUT, options->idle_timeout_seconds,  // 0: no idle timeout
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory,
        MHD_OPTION_URI_LOG_CALLBACK, uri_logged, server,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_nothing, NULL,
        MHD_OPTION_NOTIFY_COMPLETED, request_completed, server,
        MHD_OPTION_NOTIFY_CONNECTION, connection_changed, server,
        MHD_OPTION_ARRAY, tls ? tls_items : no_items,
        // Last, so that 0 can leave libmicrohttpd's default (the descriptor limit) instead of refusing all.
        options->connection_limit ? MHD_OPTION_CONNECTION_LIMIT : MHD_OPTION_END, options->connection_limit,
        MHD_OPTION_END);
    if (!server->daemon) {
        int saved = errno;
        char detail[192];
        snprintf(detail, sizeof detail, "%s%s", tls ? "the TLS certificate or key was refused, or " : "",
                 strerror(saved));
        set_error(error, error_size, "cannot start the HTTP daemon on %s: %s",
                  options->host ? options->host : "127.0.0.1", detail);
        close(server->listen_fd);
        server_free(server);
        return NULL;
    }
    bool deadlines = options->head_timeout_seconds || options->min_body_rate || options->idle_timeout_seconds;
    server->reaper_started = deadlines && pthread_create(&server->reaper, NULL, reaper_main, server) == 0;
    return server;
}

size_t sk_server_connection_memory(size_t max_header_bytes, size_t max_url_bytes) {
    return max_header_bytes + max_url_bytes + 32 * 1024;
}

uint16_t sk_server_port(const sk_server *server) { return server->port; }

unsigned long sk_server_slow_closed(const sk_server *server) {
    return atomic_load(&((sk_server *)server)->slow_closed);
}

unsigned long sk_server_refused(const sk_server *server) { return atomic_load(&((sk_server *)server)->refused); }

size_t sk_server_buffered_bytes(const sk_server *server) { return atomic_load(&((sk_server *)server)->buffered); }

unsigned int sk_server_connections(const sk_server *server) {
    return atomic_load(&((sk_server *)server)->connections);
}

// True when every exchange answered by stop has finished on its connection (or the time is up).
static bool stop_drained(sk_server *server) {
    bool drained = true;
    pthread_mutex_lock(&server->lock);
    for (sk_exchange *exchange = server->pending; exchange && drained; exchange = exchange->next) {
        pthread_mutex_lock(&exchange->lock);
        drained = exchange->connection_gone;
        pthread_mutex_unlock(&exchange->lock);
    }
    pthread_mutex_unlock(&server->lock);
    return drained;
}

// Contract: exchanges still pending are answered here with 503. The handler still answers (or abandons)
// every exchange it was handed, before or after stop: its later answer is dropped, and the server struct
// lives until the last of them.
void sk_server_stop(sk_server *server) {
    if (!server) return;
    // No MHD_quiesce_daemon: in libmicrohttpd 0.9.75 with a thread pool and epoll it races with the
    // workers removing the listen socket from their epoll sets and can abort ("Failed to remove listen FD
    // from epoll set"). Connections accepted while stopping are answered 503 below, and the listen
    // socket closes with the daemon.
    pthread_mutex_lock(&server->lock);
    server->stopping = true;  // requests completing from now on get 503 without reaching the handler
    for (sk_exchange *exchange = server->pending; exchange; exchange = exchange->next) {
        pthread_mutex_lock(&exchange->lock);
        answer_stopping_locked(exchange);
        pthread_mutex_unlock(&exchange->lock);
    }
    pthread_mutex_unlock(&server->lock);

    // Give the workers a moment to write those 503s (bounded), then close everything.
    for (int waited = 0; waited < STOP_DRAIN_MILLISECONDS && !stop_drained(server); waited += 2) {
        nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL);
    }
    // Every resumption must be processed before MHD_stop_daemon (answers that came just before stop
    // included): it runs on the daemon's thread within an event-loop turn.
    for (int waited = 0; waited < STOP_DRAIN_MILLISECONDS && atomic_load(&server->suspended_now) > 0;
         waited += 2) {
        nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL);
    }
    if (server->reaper_started) {
        pthread_mutex_lock(&server->conn_lock);
        server->reaper_stop = true;
        pthread_cond_signal(&server->reaper_wake);
        pthread_mutex_unlock(&server->conn_lock);
        pthread_join(server->reaper, NULL);
        server->reaper_started = false;
    }
    MHD_stop_daemon(server->daemon);  // NOTIFY_COMPLETED runs for every remaining request
    close(server->listen_fd);

    // What is left in `pending` was answered above; the handler still owns those exchanges and releases
    // them with its (dropped) answer. The caller's ownership of the server ends here.
    pthread_mutex_lock(&server->lock);
    while (server->pending) {
        sk_exchange *exchange = server->pending;
        pending_unlink(server, exchange);
        pthread_mutex_lock(&exchange->lock);
        if (exchange->handler_done) exchange_release_locked(exchange);
        else pthread_mutex_unlock(&exchange->lock);
    }
    server_release_locked(server);
}
