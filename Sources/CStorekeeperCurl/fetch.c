// A synchronous facade over libcurl's easy interface (see storekeeper_curl.h).
//
// Each sk_fetch call borrows an easy handle from a small pool (one thread at a time per handle) and
// resets it; a handle keeps its own cache of kept-alive connections across resets, so consecutive
// requests to the same server reuse a connection instead of opening a new one each time. libcurl's
// global state is set up exactly once (sk_fetch_global_init); the DNS cache is shared between handles
// behind a mutex. (libcurl's shared connection cache is not safe across threads, so it is not used.) Redirects are never followed, only http and
// https are allowed, and the response body can be capped. Error text comes from libcurl only: the request's
// headers and body (which may carry credentials) are never copied into it.

#include "storekeeper_curl.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// MARK: - Global initialisation

static pthread_once_t sk_init_once = PTHREAD_ONCE_INIT;
static CURLSH *sk_share = NULL;  // NULL when it could not be made: every transfer then connects anew
static pthread_mutex_t sk_share_locks[CURL_LOCK_DATA_LAST];

static void sk_share_lock(CURL *handle, curl_lock_data data, curl_lock_access access, void *context) {
    (void)handle, (void)access, (void)context;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST) pthread_mutex_lock(&sk_share_locks[data]);
}

static void sk_share_unlock(CURL *handle, curl_lock_data data, void *context) {
    (void)handle, (void)context;
    if (data >= 0 && data < CURL_LOCK_DATA_LAST) pthread_mutex_unlock(&sk_share_locks[data]);
}

static void sk_init_curl(void) {
    // Not thread-safe in libcurl itself, hence pthread_once. A failure here surfaces later as a failing
    // curl_easy_init, which sk_fetch reports.
    (void)curl_global_init(CURL_GLOBAL_ALL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_init(&sk_share_locks[i], NULL);
    CURLSH *share = curl_share_init();
    if (!share) return;
    if (curl_share_setopt(share, CURLSHOPT_LOCKFUNC, sk_share_lock) != CURLSHE_OK
        || curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, sk_share_unlock) != CURLSHE_OK
        || curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK) {
        curl_share_cleanup(share);
        return;
    }
    sk_share = share;
}

void sk_fetch_global_init(void) {
    pthread_once(&sk_init_once, sk_init_curl);
}

// MARK: - The handle pool

// Idle handles kept at most; a transfer finding none makes one, and one returned to a full pool is freed.
#define SK_POOL_SIZE 32

static pthread_mutex_t sk_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static CURL *sk_pool[SK_POOL_SIZE];
static size_t sk_pool_count = 0;

// A handle with no options set (its connection cache kept), or NULL when none can be made.
static CURL *sk_handle_take(void) {
    CURL *curl = NULL;
    pthread_mutex_lock(&sk_pool_lock);
    if (sk_pool_count > 0) curl = sk_pool[--sk_pool_count];
    pthread_mutex_unlock(&sk_pool_lock);
    if (curl) {
        curl_easy_reset(curl);  // options back to defaults; live connections and the DNS share stay
        return curl;
    }
    return curl_easy_init();
}

static void sk_handle_give_back(CURL *curl) {
    // Nothing of the request may outlive it in the handle: the header list and the body are the caller's.
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, NULL);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, NULL);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, NULL);
    pthread_mutex_lock(&sk_pool_lock);
    bool kept = sk_pool_count < SK_POOL_SIZE;
    if (kept) sk_pool[sk_pool_count++] = curl;
    pthread_mutex_unlock(&sk_pool_lock);
    if (!kept) curl_easy_cleanup(curl);
}

// MARK: - Per-transfer state

typedef struct sk_transfer {
    // Response body.
    uint8_t *body;
    size_t body_length;
    size_t body_capacity;
    size_t max_body;          // 0: no limit
    bool too_large;           // the write callback refused data because of max_body
    bool truncate;            // past max_body: keep the first max_body bytes and stop, not an error
    bool truncated;           // the body was cut at max_body (the transfer stopped there)

    // Response headers of the latest (final) response.
    sk_fetch_header *headers;
    size_t header_count;
    size_t header_capacity;

    bool out_of_memory;       // a callback could not allocate
} sk_transfer;

static void sk_free_headers(sk_fetch_header *headers, size_t count) {
    for (size_t i = 0; i < count; i++) {
        free((char *)headers[i].name);
        free((char *)headers[i].value);
    }
    free(headers);
}

// Called by libcurl with chunks of the response body.
static size_t sk_write_body(char *data, size_t size, size_t count, void *context) {
    sk_transfer *t = context;
    size_t n = size * count;  // size is always 1 for libcurl
    if (n == 0) return 0;
    if (t->max_body != 0 && (t->body_length > t->max_body || n > t->max_body - t->body_length)) {
        if (t->truncate) {
            // Keep what fits, then stop reading: the answer's status is known, its body is not wanted whole.
            n = t->max_body - t->body_length;
            t->truncated = true;
        } else {
            t->too_large = true;
            return 0;  // anything but n aborts the transfer with CURLE_WRITE_ERROR
        }
        if (n == 0) return 0;
    }
    if (n > t->body_capacity - t->body_length) {
        size_t capacity = t->body_capacity ? t->body_capacity : 16384;
        while (capacity - t->body_length < n) {
            if (capacity > SIZE_MAX / 2) { t->out_of_memory = true; return 0; }
            capacity *= 2;
        }
        uint8_t *grown = realloc(t->body, capacity);
        if (!grown) { t->out_of_memory = true; return 0; }
        t->body = grown;
        t->body_capacity = capacity;
    }
    memcpy(t->body + t->body_length, data, n);
    t->body_length += n;
    return n;
}

static bool sk_is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Copies [start, end) with surrounding whitespace removed into a fresh NUL-terminated string.
static char *sk_trimmed_copy(const char *start, const char *end) {
    while (start < end && sk_is_space(*start)) start++;
    while (end > start && sk_is_space(end[-1])) end--;
    size_t length = (size_t)(end - start);
    char *copy = malloc(length + 1);
    if (!copy) return NULL;
    memcpy(copy, start, length);
    copy[length] = '\0';
    return copy;
}

// Called by libcurl once per received header line, status lines and the blank terminator included. Lines of
// interim responses (1xx) arrive too, so a new status line discards everything collected so far.
static size_t sk_write_header(char *data, size_t size, size_t count, void *context) {
    sk_transfer *t = context;
    size_t n = size * count;
    const char *end = data + n;

    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {  // status line: a new response begins
        sk_free_headers(t->headers, t->header_count);
        t->headers = NULL;
        t->header_count = 0;
        t->header_capacity = 0;
        return n;
    }

    // Obsolete line folding (RFC 9112 §5.2): a line starting with whitespace continues the previous value.
    if (n > 0 && (data[0] == ' ' || data[0] == '\t') && t->header_count > 0) {
        char *extra = sk_trimmed_copy(data, end);
        if (!extra) { t->out_of_memory = true; return 0; }
        if (extra[0] != '\0') {
            sk_fetch_header *last = &t->headers[t->header_count - 1];
            size_t old_length = strlen(last->value), extra_length = strlen(extra);
            char *joined = malloc(old_length + 1 + extra_length + 1);
            if (!joined) { free(extra); t->out_of_memory = true; return 0; }
            memcpy(joined, last->value, old_length);
            joined[old_length] = ' ';
            memcpy(joined + old_length + 1, extra, extra_length + 1);
            free((char *)last->value);
            last->value = joined;
        }
        free(extra);
        return n;
    }

    const char *colon = memchr(data, ':', n);
    if (!colon) return n;  // blank line or something that is not a header

    char *name = sk_trimmed_copy(data, colon);
    char *value = sk_trimmed_copy(colon + 1, end);
    if (!name || !value) { free(name); free(value); t->out_of_memory = true; return 0; }
    if (name[0] == '\0') { free(name); free(value); return n; }

    if (t->header_count == t->header_capacity) {
        size_t capacity = t->header_capacity ? t->header_capacity * 2 : 16;
        sk_fetch_header *grown = realloc(t->headers, capacity * sizeof *grown);
        if (!grown) { free(name); free(value); t->out_of_memory = true; return 0; }
        t->headers = grown;
        t->header_capacity = capacity;
    }
    t->headers[t->header_count].name = name;
    t->headers[t->header_count].value = value;
    t->header_count++;
    return n;
}

// MARK: - Request assembly

// A header name or value must not be able to inject further header lines.
static bool sk_header_is_valid(const sk_fetch_header *h) {
    if (!h->name || h->name[0] == '\0' || !h->value) return false;
    if (strpbrk(h->name, ":\r\n \t") != NULL) return false;
    if (strpbrk(h->value, "\r\n") != NULL) return false;
    return true;
}

// ASCII case-insensitive equality (header names are ASCII; avoids the locale and POSIX-only strcasecmp).
static bool sk_names_equal(const char *a, const char *b) {
    for (;; a++, b++) {
        char x = (*a >= 'A' && *a <= 'Z') ? (char)(*a + 32) : *a;
        char y = (*b >= 'A' && *b <= 'Z') ? (char)(*b + 32) : *b;
        if (x != y) return false;
        if (x == '\0') return true;
    }
}

static bool sk_has_header(const sk_fetch_request *request, const char *name) {
    for (size_t i = 0; i < request->header_count; i++)
        if (sk_names_equal(request->headers[i].name, name)) return true;
    return false;
}

// Appends "Name: value" (or "Name;" for an empty value: libcurl's spelling of "send it empty", since
// "Name:" would remove the header instead). Returns false when out of memory; `*list` stays valid.
static bool sk_append_header(struct curl_slist **list, const char *name, const char *value) {
    size_t length = strlen(name) + 2 + strlen(value) + 1;
    char *line = malloc(length);
    if (!line) return false;
    if (value[0] == '\0') snprintf(line, length, "%s;", name);
    else snprintf(line, length, "%s: %s", name, value);
    struct curl_slist *appended = curl_slist_append(*list, line);
    free(line);
    if (!appended) return false;
    *list = appended;
    return true;
}

static int sk_outcome_for(CURLcode code) {
    switch (code) {
    case CURLE_OK: return SK_FETCH_OK;
    case CURLE_OPERATION_TIMEDOUT: return SK_FETCH_TIMED_OUT;
    case CURLE_COULDNT_CONNECT: return SK_FETCH_CONNECT_FAILED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return SK_FETCH_RESOLVE_FAILED;
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL: return SK_FETCH_INVALID_URL;
    case CURLE_FILESIZE_EXCEEDED: return SK_FETCH_TOO_LARGE;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_PEER_FAILED_VERIFICATION:  // also CURLE_SSL_CACERT since 7.62
    case CURLE_USE_SSL_FAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
#if LIBCURL_VERSION_NUM >= 0x074D00  // 7.77.0
    case CURLE_SSL_CLIENTCERT:
#endif
        return SK_FETCH_TLS_FAILED;
    default: return SK_FETCH_OTHER;
    }
}

static void sk_fail(sk_fetch_result *result, int outcome, const char *message) {
    result->outcome = outcome;
    snprintf(result->error, sizeof result->error, "%s", message);
}

// MARK: - sk_fetch

void sk_fetch(const sk_fetch_request *request, sk_fetch_result *result) {
    memset(result, 0, sizeof *result);
    sk_fetch_global_init();  // cheap after the first call; protects callers that forgot

    if (!request || !request->url || request->url[0] == '\0') {
        sk_fail(result, SK_FETCH_INVALID_URL, "no URL given");
        return;
    }
    if (request->body_length > 0 && !request->body) {
        sk_fail(result, SK_FETCH_OTHER, "request body is NULL but body_length is not 0");
        return;
    }
    if (request->header_count > 0 && !request->headers) {
        sk_fail(result, SK_FETCH_OTHER, "request headers are NULL but header_count is not 0");
        return;
    }
    for (size_t i = 0; i < request->header_count; i++) {
        if (!sk_header_is_valid(&request->headers[i])) {
            // Deliberately names neither the header nor its value: either may be a secret.
            snprintf(result->error, sizeof result->error, "request header #%zu is malformed", i);
            result->outcome = SK_FETCH_OTHER;
            return;
        }
    }

    CURL *curl = sk_handle_take();
    if (!curl) {
        sk_fail(result, SK_FETCH_OTHER, "curl_easy_init failed");
        return;
    }

    sk_transfer transfer = {0};
    transfer.max_body = request->max_response_bytes;
    transfer.truncate = request->truncate_response != 0;
    struct curl_slist *header_list = NULL;
    char error_buffer[CURL_ERROR_SIZE] = {0};
    bool ok = true;  // becomes false when building the request runs out of memory

    // Request headers: the caller's, then "Expect:" (no 100-continue round trip) and an empty
    // "Content-Type:" (no invented form-urlencoded type for bodies) unless the caller set them.
    for (size_t i = 0; ok && i < request->header_count; i++)
        ok = sk_append_header(&header_list, request->headers[i].name, request->headers[i].value);
    if (ok && !sk_has_header(request, "Expect")) {
        struct curl_slist *appended = curl_slist_append(header_list, "Expect:");
        if (appended) header_list = appended; else ok = false;
    }
    if (ok && !sk_has_header(request, "Content-Type")) {
        struct curl_slist *appended = curl_slist_append(header_list, "Content-Type:");
        if (appended) header_list = appended; else ok = false;
    }
    if (!ok) {
        curl_slist_free_all(header_list);
        sk_handle_give_back(curl);
        sk_fail(result, SK_FETCH_OTHER, "out of memory");
        return;
    }

    curl_easy_setopt(curl, CURLOPT_URL, request->url);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: required with threads
    if (sk_share) curl_easy_setopt(curl, CURLOPT_SHARE, sk_share);  // the DNS cache
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85.0
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    if (request->connect_timeout_ms > 0)
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, request->connect_timeout_ms);
    if (request->timeout_ms > 0)
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, request->timeout_ms);
    if (request->insecure) {
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (request->ca_file)
        curl_easy_setopt(curl, CURLOPT_CAINFO, request->ca_file);
    char interface[80];
    if (request->local_address && strlen(request->local_address) < sizeof(interface) - 5) {
        snprintf(interface, sizeof(interface), "host!%s", request->local_address);
        curl_easy_setopt(curl, CURLOPT_INTERFACE, interface);
    }

    // Method and body. GET and HEAD have dedicated options (a custom "HEAD" would wait for a body that never
    // comes). POST, PUT and PATCH, and any method given a body, send it as POSTFIELDS, which also yields an
    // explicit "Content-Length: 0" for an empty body; CUSTOMREQUEST then replaces the word "POST".
    const char *method = (request->method && request->method[0]) ? request->method : "GET";
    static const uint8_t empty_body[1] = {0};
    if (strcmp(method, "HEAD") == 0 && request->body_length == 0) {
        curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    } else if (strcmp(method, "GET") == 0 && request->body_length == 0) {
        curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    } else if (request->body_length > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
               strcmp(method, "PATCH") == 0) {
        const uint8_t *body = request->body_length > 0 ? request->body : empty_body;
        curl_easy_setopt(curl, CURLOPT_POST, 1L);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)request->body_length);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (const char *)body);  // not copied: lives across perform
        if (strcmp(method, "POST") != 0) curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    } else {
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);  // DELETE, OPTIONS, … without a body
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, header_list);

    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, sk_write_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, sk_write_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);

    CURLcode code = curl_easy_perform(curl);

    long status = 0;
    if (curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK) result->status = status;

    if (!transfer.out_of_memory
        && (code == CURLE_OK || (transfer.truncated && code == CURLE_WRITE_ERROR && status > 0))) {
        result->outcome = SK_FETCH_OK;
    } else if (transfer.too_large) {
        snprintf(result->error, sizeof result->error, "response body exceeds the limit of %zu bytes",
                 transfer.max_body);
        result->outcome = SK_FETCH_TOO_LARGE;
    } else if (transfer.out_of_memory) {
        sk_fail(result, SK_FETCH_OTHER, "out of memory while receiving the response");
    } else {
        result->outcome = sk_outcome_for(code);
        sk_fail(result, result->outcome, error_buffer[0] ? error_buffer : curl_easy_strerror(code));
    }

    // Hand over the headers always (useful even on failure), the body only after success.
    result->headers = transfer.headers;
    result->header_count = transfer.header_count;
    if (result->outcome == SK_FETCH_OK && transfer.body_length > 0) {
        result->body = transfer.body;
        result->body_length = transfer.body_length;
    } else {
        free(transfer.body);
    }

    sk_handle_give_back(curl);
    curl_slist_free_all(header_list);
}

void sk_fetch_result_free(sk_fetch_result *result) {
    if (!result) return;
    free(result->body);
    sk_free_headers(result->headers, result->header_count);
    memset(result, 0, sizeof *result);
}
