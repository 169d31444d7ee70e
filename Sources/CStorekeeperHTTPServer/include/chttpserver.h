#ifndef STOREKEEPER_CHTTPSERVER_H
#define STOREKEEPER_CHTTPSERVER_H

// A small facade over libmicrohttpd: its own epoll loop and a thread pool; each complete request (body
// accumulated up to a limit) is handed to one callback as an `sk_exchange`. The callback may answer at
// once (`sk_exchange_respond` before it returns, on the pool thread) or later from any thread: the
// connection is then suspended, holding no thread, and resumed when the answer arrives. libmicrohttpd's
// own types stay inside server.c. Errors a client causes before the callback (framing, limits) are
// answered here with a JSON body of the shape {"error":{"code","message"}}.

#include <stddef.h>
#include <stdint.h>

typedef struct sk_header {
    const char *name;
    const char *value;
} sk_header;

/// One request and its pending answer. Valid until answered with `sk_exchange_respond` (exactly once).
typedef struct sk_exchange sk_exchange;

typedef struct sk_request {
    const char *method;
    const char *path;          // raw path as received, NOT percent-decoded
    const sk_header *query;    // query parameters in order, names and values NOT percent-decoded
    size_t query_count;        // (a parameter without '=' has value ""; the query is split on '&', then
                               // on the first '='; empty segments as in "a&&b" are skipped; '+' is kept)
    const sk_header *headers;  // request headers in order
    size_t header_count;
    const uint8_t *body;       // never NULL (points at "" when empty)
    size_t body_length;
    const char *remote;        // client address, "127.0.0.1" or "::1" style
} sk_request;

/// Called on a pool thread for each complete request. `request` and its strings are valid until the
/// exchange is answered. Every exchange must be answered or abandoned exactly once, even when the client
/// has gone away or the server stopped meanwhile (the answer is then dropped and the exchange freed).
typedef void (*sk_handler)(void *context, sk_exchange *exchange, const sk_request *request);

typedef struct sk_server_options {
    const char *host;                   // "127.0.0.1", "0.0.0.0", "::1", "::", "localhost" (both loopbacks
                                        // where possible); NULL means 127.0.0.1. Implementation: one socket,
                                        // so "localhost" binds 127.0.0.1 only; "::" is dual stack (IPv4
                                        // clients appear as "127.0.0.1"-style remotes); other names are
                                        // resolved with getaddrinfo
    uint16_t port;                      // 0 picks a free port
    size_t max_body;                    // declared or received body larger than this: 413
    size_t max_header_bytes;            // request line + headers larger than this: 431
    size_t max_url_bytes;               // path + query longer than this: 414
    unsigned int max_query_parameters;  // more parameters than this: 400
    unsigned int connection_limit;      // concurrent connections (0: libmicrohttpd's default)
    unsigned int idle_timeout_seconds;  // a connection with no traffic this long is closed (0: never;
                                        // a connection waiting for an answer is never timed out)
    unsigned int threads;               // pool size (0: number of cores)
    const char *tls_certificate_pem;    // with tls_key_pem: HTTPS (GnuTLS) with this chain, PEM; NULL: HTTP
    const char *tls_key_pem;            // the certificate's private key, PEM (copied; not kept by the caller)
                                        // HTTPS offers TLS 1.2 and 1.3 with AEAD suites and ECDHE only.

    // Slow clients. A connection must complete each request head (request line and headers) within
    // head_timeout_seconds of connecting, or within idle_timeout_seconds of its previous answer; then send
    // its body at min_body_rate bytes a second on average (after a grace of head_timeout_seconds). A
    // connection that does not is closed, however often it trickles a byte.
    unsigned int head_timeout_seconds;  // 0: no deadline for the head
    unsigned int min_body_rate;         // bytes a second; 0: none
    unsigned int per_address_limit;     // connections from one client address (0: no cap)
    unsigned int reserved_connections;  // the last this many under connection_limit go only to addresses
                                        // that hold no connection yet
    size_t max_buffered_bytes;          // request bodies buffered for all requests in flight together
                                        // (0: no cap); over it: 503 server_busy before reading the body
    // The largest body this request may send, asked once its headers are complete and before any body byte
    // is read (NULL: max_body for every request). `authorization` is the Authorization header or NULL.
    // Called on a pool thread; the strings are valid for the call only. The answer is capped at max_body.
    size_t (*body_limit)(void *context, const char *method, const char *path, const char *authorization);
} sk_server_options;
// Client errors answered before the handler (JSON, Connection: close): 413 payload_too_large (as soon as the
// declared length or a chunked stream passes the request's limit; a chunked stream over it is answered and
// closed over plain HTTP, closed without an answer over HTTPS), 503 server_busy (max_buffered_bytes), 400
// ambiguous_framing (several Content-Length, or Content-Length with Transfer-Encoding), 501
// unsupported_transfer_encoding (anything but one "chunked"), 431 header_fields_too_large, 414
// uri_too_long, 400 too_many_parameters, 505 http_version_not_supported; 503 server_stopping during stop.
// libmicrohttpd's memory for a connection is 2 * (max_header_bytes + max_url_bytes) + 64 KiB, all of it
// resident for a keep-alive connection once it has served a request.

typedef struct sk_server sk_server;

/// Starts a server. Returns NULL on failure and writes a reason into `error` (when not NULL), e.g.
/// "cannot resolve host X: …", "address in use", "cannot bind …: <strerror>".
/// Raises the process's RLIMIT_NOFILE soft limit to the hard limit.
sk_server *sk_server_start(const sk_server_options *options, sk_handler handler, void *context, char *error,
                           size_t error_size);

/// Each connection's memory pool for these limits: large enough that the limits are checked (and answered
/// in JSON) before libmicrohttpd runs out of room and answers with its own HTML page.
size_t sk_server_connection_memory(size_t max_header_bytes, size_t max_url_bytes);

/// The port actually bound.
uint16_t sk_server_port(const sk_server *server);

/// Answers an exchange, from any thread, exactly once; the server copies `body` and the headers at once.
/// Inside the handler it is queued when the handler returns; later, the suspended connection is resumed.
/// libmicrohttpd sets Content-Length and Date itself (a Content-Length header passed here is ignored).
void sk_exchange_respond(sk_exchange *exchange, unsigned int status, const uint8_t *body, size_t body_length,
                         const sk_header *headers, size_t header_count);

/// Gives up an exchange without answering it (the client gets 503 unless sk_server_stop already answered).
/// Like sk_exchange_respond it ends the handler's ownership, and may come after sk_server_stop.
void sk_exchange_abandon(sk_exchange *exchange);

/// Number of connections currently open (for tests and metrics).
unsigned int sk_server_connections(const sk_server *server);

/// Connections closed for a slow head or body, and connections refused at accept (per-address cap or
/// reserve), since the start (for tests and metrics).
unsigned long sk_server_slow_closed(const sk_server *server);
unsigned long sk_server_refused(const sk_server *server);

/// Request body bytes buffered now, over all requests in flight.
size_t sk_server_buffered_bytes(const sk_server *server);

/// Stops accepting and closes connections. Exchanges not yet answered are answered with 503 first. The
/// handler still answers (sk_exchange_respond) or abandons (sk_exchange_abandon) each exchange it was
/// handed, during or after stop: the first answer wins, and the server's memory is freed after the last.
void sk_server_stop(sk_server *server);

#endif
