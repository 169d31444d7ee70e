#ifndef STOREKEEPER_CHTTPSERVER_H
#define STOREKEEPER_CHTTPSERVER_H

// A tiny synchronous facade over libmicrohttpd: each complete request (body accumulated up to a limit) is
// handed to one callback that fills in the response. libmicrohttpd's own types stay inside server.c.

#include <stddef.h>
#include <stdint.h>

typedef struct sk_header {
    const char *name;
    const char *value;
} sk_header;

typedef struct sk_request {
    const char *method;
    const char *url;
    const char *query;         // raw query string without '?', or "" (rebuilt from the parsed arguments)
    const sk_header *headers;
    size_t header_count;
    const uint8_t *body;
    size_t body_length;
} sk_request;

/// The pending answer to one request; the handler answers it with `sk_response_send` before returning.
typedef struct sk_response sk_response;

/// Queues the answer; the server copies `body` and the headers at once. Only the first call counts.
void sk_response_send(sk_response *response, unsigned int status, const uint8_t *body, size_t body_length,
                      const sk_header *headers, size_t header_count);

typedef void (*sk_handler)(void *context, const sk_request *request, sk_response *response);

typedef struct sk_server sk_server;

/// Starts a server on `host` (IPv4 dotted quad) and `port` (0 picks a free one). Returns NULL on failure.
sk_server *sk_server_start(const char *host, uint16_t port, size_t max_body, size_t max_header,
                           unsigned int connection_limit, unsigned int timeout_seconds,
                           sk_handler handler, void *context);
/// The port actually bound.
uint16_t sk_server_port(const sk_server *server);
/// Stops accepting, finishes running requests and frees the server.
void sk_server_stop(sk_server *server);

#endif
