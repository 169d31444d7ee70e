#ifndef STOREKEEPER_CURL_H
#define STOREKEEPER_CURL_H

// A small synchronous facade over libcurl's easy interface for outbound HTTP(S): one call performs one
// request with deadlines and a response-size limit. libcurl's types stay inside fetch.c.

#include <stddef.h>
#include <stdint.h>

typedef struct sk_fetch_header {
    const char *name;
    const char *value;
} sk_fetch_header;

typedef struct sk_fetch_request {
    const char *method;               // "GET", "POST", "PUT", "DELETE", …
    const char *url;
    const sk_fetch_header *headers;
    size_t header_count;
    const uint8_t *body;              // may be NULL when body_length is 0
    size_t body_length;
    long connect_timeout_ms;          // 0: libcurl's default
    long timeout_ms;                  // whole request deadline; 0: none
    size_t max_response_bytes;        // 0: no limit
    int truncate_response;            // 1: past max_response_bytes, keep what came and stop reading (not an error)
    int insecure;                     // 1: do not verify the peer's TLS certificate (tests only)
    const char *ca_file;              // PEM bundle to trust instead of the system's; NULL: system default
    const char *local_address;        // the address to connect from (127.0.0.2, say); NULL: the system's
} sk_fetch_request;

enum {
    SK_FETCH_OK = 0,
    SK_FETCH_TIMED_OUT = 1,
    SK_FETCH_CONNECT_FAILED = 2,
    SK_FETCH_RESOLVE_FAILED = 3,
    SK_FETCH_TLS_FAILED = 4,
    SK_FETCH_TOO_LARGE = 5,
    SK_FETCH_INVALID_URL = 6,
    SK_FETCH_OTHER = 7,
};

typedef struct sk_fetch_result {
    int outcome;            // SK_FETCH_*
    long status;            // HTTP status, 0 when no answer was received
    char error[256];        // libcurl's message when outcome != SK_FETCH_OK
    uint8_t *body;          // malloc'd, may be NULL
    size_t body_length;
    sk_fetch_header *headers;  // response headers of the final response, malloc'd strings
    size_t header_count;
} sk_fetch_result;

/// Once per process, before any other call (thread-safe, idempotent).
void sk_fetch_global_init(void);

/// Performs one request; fills `result` (always, even on failure). Thread-safe: each call has its own handle.
void sk_fetch(const sk_fetch_request *request, sk_fetch_result *result);

/// Frees what `sk_fetch` allocated in `result`.
void sk_fetch_result_free(sk_fetch_result *result);

#endif
