// Standalone checks for Sources/CStorekeeperCurl/fetch.c, run by run.sh against server.py on 127.0.0.1.
// Usage: harness http://127.0.0.1:PORT
// Only 127.0.0.1 is ever contacted; the resolve-failure case uses a name under the reserved ".invalid" TLD.

#define _POSIX_C_SOURCE 200809L

#include "storekeeper_curl.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *base;
static atomic_int failures;
static atomic_int checks;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        atomic_fetch_add(&checks, 1);                                                    \
        if (!(cond)) {                                                                   \
            atomic_fetch_add(&failures, 1);                                              \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
        }                                                                                \
    } while (0)

static char *url_for(const char *path) {
    static _Thread_local char buffer[512];
    snprintf(buffer, sizeof buffer, "%s%s", base, path);
    return buffer;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

// The body as a NUL-terminated string (static per thread; tests only).
static const char *body_text(const sk_fetch_result *r) {
    static _Thread_local char buffer[8192];
    size_t n = r->body_length < sizeof buffer - 1 ? r->body_length : sizeof buffer - 1;
    if (n) memcpy(buffer, r->body, n);
    buffer[n] = '\0';
    return buffer;
}

static const char *header_value(const sk_fetch_result *r, const char *name) {
    for (size_t i = 0; i < r->header_count; i++)
        if (strcmp(r->headers[i].name, name) == 0) return r->headers[i].value;
    return NULL;
}

static sk_fetch_request simple(const char *method, const char *path) {
    sk_fetch_request q = {0};
    q.method = method;
    q.url = url_for(path);
    q.connect_timeout_ms = 2000;
    q.timeout_ms = 5000;
    return q;
}

static void test_get_with_headers(void) {
    sk_fetch_header headers[] = {{"X-Test", "abc"}, {"Accept", "text/plain"}, {"X-Blank", ""}};
    sk_fetch_request q = simple("GET", "/echo");
    q.headers = headers;
    q.header_count = 3;
    sk_fetch_result r;
    sk_fetch(&q, &r);
    const char *text = body_text(&r);
    CHECK(r.outcome == SK_FETCH_OK, "outcome %d (%s)", r.outcome, r.error);
    CHECK(r.status == 200, "status %ld", r.status);
    CHECK(strstr(text, "method=GET") != NULL, "%s", text);
    CHECK(strstr(text, "X-Test: abc\n") != NULL, "%s", text);
    CHECK(strstr(text, "Accept: text/plain\n") != NULL, "%s", text);
    CHECK(strstr(text, "X-Blank: \n") != NULL, "empty header not sent: %s", text);
    CHECK(strstr(text, "Expect") == NULL, "Expect sent: %s", text);
    CHECK(r.error[0] == '\0', "error on success: %s", r.error);
    sk_fetch_result_free(&r);
    sk_fetch_result_free(&r);  // safe twice
    CHECK(r.body == NULL && r.headers == NULL && r.header_count == 0, "not zeroed after free");
}

static void test_post_echo(void) {
    // Binary body with a NUL in the middle and no Content-Type from the caller.
    static const uint8_t payload[] = {'a', 'b', 0, 'c', 0xff, '\n'};
    sk_fetch_request q = simple("POST", "/body");
    q.body = payload;
    q.body_length = sizeof payload;
    sk_fetch_result r;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK, "outcome %d (%s)", r.outcome, r.error);
    CHECK(r.status == 200, "status %ld", r.status);
    CHECK(r.body_length == sizeof payload && memcmp(r.body, payload, sizeof payload) == 0, "body mismatch (%zu)",
          r.body_length);
    const char *method = header_value(&r, "X-Method");
    CHECK(method && strcmp(method, "POST") == 0, "method %s", method ? method : "(none)");
    sk_fetch_result_free(&r);

    // The echo shows the request as sent: Content-Length, no invented Content-Type, no Expect.
    sk_fetch_header headers[] = {{"Content-Type", "application/json"}};
    q = simple("POST", "/echo");
    q.headers = headers;
    q.header_count = 1;
    q.body = (const uint8_t *)"{\"k\":1}";
    q.body_length = 7;
    sk_fetch(&q, &r);
    const char *text = body_text(&r);
    CHECK(r.outcome == SK_FETCH_OK, "outcome %d (%s)", r.outcome, r.error);
    CHECK(strstr(text, "Content-Length: 7\n") != NULL, "%s", text);
    CHECK(strstr(text, "Content-Type: application/json\n") != NULL, "%s", text);
    CHECK(strstr(text, "\n\n{\"k\":1}") != NULL, "%s", text);
    sk_fetch_result_free(&r);

    // Empty POST: Content-Length 0, no form type.
    q = simple("POST", "/echo");
    sk_fetch(&q, &r);
    text = body_text(&r);
    CHECK(r.outcome == SK_FETCH_OK, "outcome %d (%s)", r.outcome, r.error);
    CHECK(strstr(text, "method=POST") != NULL, "%s", text);
    CHECK(strstr(text, "Content-Length: 0\n") != NULL, "%s", text);
    CHECK(strstr(text, "Content-Type") == NULL, "%s", text);
    sk_fetch_result_free(&r);
}

static void test_other_methods(void) {
    sk_fetch_result r;
    sk_fetch_request q = simple("PUT", "/body");
    q.body = (const uint8_t *)"put-data";
    q.body_length = 8;
    sk_fetch(&q, &r);
    const char *method = header_value(&r, "X-Method");
    CHECK(r.outcome == SK_FETCH_OK && r.status == 200, "outcome %d status %ld", r.outcome, r.status);
    CHECK(method && strcmp(method, "PUT") == 0, "method %s", method ? method : "(none)");
    CHECK(strcmp(body_text(&r), "put-data") == 0, "%s", body_text(&r));
    sk_fetch_result_free(&r);

    q = simple("DELETE", "/echo");
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK, "outcome %d (%s)", r.outcome, r.error);
    CHECK(strstr(body_text(&r), "method=DELETE") != NULL, "%s", body_text(&r));
    sk_fetch_result_free(&r);

    q = simple("HEAD", "/big");  // would hang until the timeout if HEAD waited for a body
    double start = now_seconds();
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.status == 200, "outcome %d status %ld (%s)", r.outcome, r.status, r.error);
    CHECK(r.body_length == 0 && r.body == NULL, "HEAD body %zu", r.body_length);
    CHECK(now_seconds() - start < 2, "HEAD took %.2fs", now_seconds() - start);
    const char *length = header_value(&r, "Content-Length");
    CHECK(length && strcmp(length, "1048576") == 0, "Content-Length %s", length ? length : "(none)");
    sk_fetch_result_free(&r);

    q = simple("GET", "/redirect");  // not followed
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.status == 302, "outcome %d status %ld", r.outcome, r.status);
    sk_fetch_result_free(&r);
}

static void test_statuses(void) {
    sk_fetch_result r;
    sk_fetch_request q = simple("GET", "/status/500");
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.status == 500, "outcome %d status %ld", r.outcome, r.status);
    sk_fetch_result_free(&r);

    q = simple("GET", "/status/204");
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.status == 204, "outcome %d status %ld", r.outcome, r.status);
    CHECK(r.body == NULL && r.body_length == 0, "204 body %zu", r.body_length);
    sk_fetch_result_free(&r);
}

static void test_timeout(void) {
    sk_fetch_request q = simple("GET", "/slow");
    q.timeout_ms = 300;
    sk_fetch_result r;
    double start = now_seconds();
    sk_fetch(&q, &r);
    double elapsed = now_seconds() - start;
    CHECK(r.outcome == SK_FETCH_TIMED_OUT, "outcome %d (%s)", r.outcome, r.error);
    CHECK(elapsed < 1.5, "took %.2fs", elapsed);
    CHECK(r.error[0] != '\0', "no error text");
    CHECK(r.body == NULL, "body on failure");
    printf("  timeout: %.3fs, \"%s\"\n", elapsed, r.error);
    sk_fetch_result_free(&r);
}

// A port on 127.0.0.1 that nothing listens on: bind an ephemeral port, then close it.
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("closed_port");
        exit(2);
    }
    close(fd);
    return ntohs(a.sin_port);
}

static void test_connection_errors(void) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", closed_port());
    sk_fetch_request q = {.method = "GET", .url = url, .connect_timeout_ms = 2000, .timeout_ms = 5000};
    sk_fetch_result r;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_CONNECT_FAILED, "outcome %d (%s)", r.outcome, r.error);
    CHECK(r.status == 0, "status %ld", r.status);
    printf("  closed port: \"%s\"\n", r.error);
    sk_fetch_result_free(&r);

    q.url = "ftp://x";
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_INVALID_URL, "outcome %d (%s)", r.outcome, r.error);
    printf("  ftp: \"%s\"\n", r.error);
    sk_fetch_result_free(&r);

    q.url = "http://[::1";  // malformed
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_INVALID_URL, "outcome %d (%s)", r.outcome, r.error);
    sk_fetch_result_free(&r);

    q.url = "http://storekeeper-harness.invalid/";  // RFC 6761: never resolves
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_RESOLVE_FAILED, "outcome %d (%s)", r.outcome, r.error);
    printf("  .invalid: \"%s\"\n", r.error);
    sk_fetch_result_free(&r);
}

static void test_size_limit(void) {
    sk_fetch_request q = simple("GET", "/big");
    q.max_response_bytes = 64 * 1024;
    sk_fetch_result r;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_TOO_LARGE, "outcome %d (%s)", r.outcome, r.error);
    CHECK(r.status == 200, "status %ld", r.status);
    CHECK(r.body == NULL && r.body_length == 0, "partial body kept");
    printf("  too large: \"%s\"\n", r.error);
    sk_fetch_result_free(&r);

    q.max_response_bytes = 2 * 1024 * 1024;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.body_length == 1024 * 1024, "outcome %d length %zu", r.outcome,
          r.body_length);
    sk_fetch_result_free(&r);

    q = simple("GET", "/exact");  // exactly at the limit is fine, one byte less is not
    q.max_response_bytes = 1000;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.body_length == 1000, "outcome %d length %zu", r.outcome, r.body_length);
    sk_fetch_result_free(&r);
    q.max_response_bytes = 999;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_TOO_LARGE, "outcome %d", r.outcome);
    sk_fetch_result_free(&r);
}

static void test_response_headers(void) {
    sk_fetch_request q = simple("GET", "/headers");
    sk_fetch_result r;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK, "outcome %d (%s)", r.outcome, r.error);
    const char *v;
    CHECK((v = header_value(&r, "X-One")) && strcmp(v, "1") == 0, "X-One %s", v ? v : "(none)");
    CHECK((v = header_value(&r, "X-Spaced")) && strcmp(v, "padded value") == 0, "X-Spaced [%s]", v ? v : "(none)");
    CHECK((v = header_value(&r, "X-Empty")) && strcmp(v, "") == 0, "X-Empty [%s]", v ? v : "(none)");
    CHECK((v = header_value(&r, "Content-Length")) && strcmp(v, "2") == 0, "Content-Length %s", v ? v : "(none)");
    int cookies = 0;
    for (size_t i = 0; i < r.header_count; i++) {
        CHECK(strncmp(r.headers[i].name, "HTTP/", 5) != 0, "status line kept as header");
        CHECK(r.headers[i].name[0] != '\0', "empty header name");
        if (strcmp(r.headers[i].name, "Set-Cookie") == 0) cookies++;
    }
    CHECK(cookies == 2, "Set-Cookie count %d", cookies);
    sk_fetch_result_free(&r);

    // Headers of an interim 100 response are dropped; only the final response's remain.
    q = simple("GET", "/interim");
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.status == 201, "outcome %d status %ld (%s)", r.outcome, r.status, r.error);
    CHECK(header_value(&r, "X-Interim") == NULL, "interim header kept");
    CHECK(header_value(&r, "X-Final") != NULL, "final header missing");
    CHECK(strcmp(body_text(&r), "final") == 0, "%s", body_text(&r));
    sk_fetch_result_free(&r);
}

static void test_bad_input(void) {
    // Header injection is refused, and the error names neither the header nor its (secret) value.
    sk_fetch_header headers[] = {{"Authorization", "Bearer SECRET\r\nX-Evil: 1"}};
    sk_fetch_request q = simple("POST", "/echo");
    q.headers = headers;
    q.header_count = 1;
    q.body = (const uint8_t *)"BODYSECRET";
    q.body_length = 10;
    sk_fetch_result r;
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_OTHER, "outcome %d", r.outcome);
    CHECK(strstr(r.error, "SECRET") == NULL && strstr(r.error, "Authorization") == NULL, "leak: %s", r.error);
    sk_fetch_result_free(&r);

    // Secrets do not leak into errors from libcurl either.
    headers[0].value = "Bearer SECRET";
    q.url = "http://storekeeper-harness.invalid/";
    sk_fetch(&q, &r);
    CHECK(r.outcome == SK_FETCH_RESOLVE_FAILED, "outcome %d", r.outcome);
    CHECK(strstr(r.error, "SECRET") == NULL, "leak: %s", r.error);
    sk_fetch_result_free(&r);

    sk_fetch_request empty = {0};
    sk_fetch(&empty, &r);
    CHECK(r.outcome == SK_FETCH_INVALID_URL, "outcome %d", r.outcome);
    sk_fetch_result_free(&r);
    sk_fetch(NULL, &r);
    CHECK(r.outcome == SK_FETCH_INVALID_URL, "outcome %d", r.outcome);
    sk_fetch_result_free(&r);
}

// MARK: - Concurrency
static void test_reuse(void) {
    // One thread, one request after another: the second goes over the first one's kept-alive connection,
    // and a request after an error (a timeout closes its connection) still works.
    char first[32] = "", second[32] = "";
    for (int i = 0; i < 2; i++) {
        sk_fetch_request q = simple("GET", "/peer");
        sk_fetch_result r;
        sk_fetch(&q, &r);
        CHECK(r.outcome == SK_FETCH_OK && r.status == 200, "peer: outcome %d status %ld", r.outcome, r.status);
        snprintf(i == 0 ? first : second, sizeof first, "%s", body_text(&r));
        sk_fetch_result_free(&r);
    }
    CHECK(first[0] != '\0' && strcmp(first, second) == 0, "connection not reused: ports %s then %s", first, second);
    sk_fetch_request slow = simple("GET", "/slow");
    slow.timeout_ms = 200;
    sk_fetch_result r;
    sk_fetch(&slow, &r);
    CHECK(r.outcome == SK_FETCH_TIMED_OUT, "slow: outcome %d", r.outcome);
    sk_fetch_result_free(&r);
    sk_fetch_request again = simple("GET", "/peer");
    sk_fetch(&again, &r);
    CHECK(r.outcome == SK_FETCH_OK && r.status == 200, "after a timeout: outcome %d status %ld", r.outcome, r.status);
    sk_fetch_result_free(&r);
}

enum { THREADS = 8, PER_THREAD = 25 };

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        char value[64], expected[96], payload[64];
        snprintf(value, sizeof value, "thread-%d-request-%d", id, i);
        snprintf(expected, sizeof expected, "X-Id: %s\n", value);
        int length = snprintf(payload, sizeof payload, "payload-%d-%d", id, i);
        sk_fetch_header headers[] = {{"X-Id", value}};
        sk_fetch_request q = simple(i % 2 ? "POST" : "GET", "/echo");
        q.headers = headers;
        q.header_count = 1;
        if (i % 2) { q.body = (const uint8_t *)payload; q.body_length = (size_t)length; }
        sk_fetch_result r;
        sk_fetch(&q, &r);
        const char *text = body_text(&r);
        CHECK(r.outcome == SK_FETCH_OK && r.status == 200, "thread %d: outcome %d status %ld (%s)", id, r.outcome,
              r.status, r.error);
        CHECK(strstr(text, expected) != NULL, "thread %d: %s", id, text);
        if (i % 2) CHECK(strstr(text, payload) != NULL, "thread %d: body missing", id);
        sk_fetch_result_free(&r);
    }
    return NULL;
}

static void test_threads(void) {
    pthread_t threads[THREADS];
    double start = now_seconds();
    for (int i = 0; i < THREADS; i++) pthread_create(&threads[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    printf("  %d threads x %d requests: %.2fs\n", THREADS, PER_THREAD, now_seconds() - start);
}

int main(int argc, char **argv) {
    if (argc != 2 || strncmp(argv[1], "http://127.0.0.1:", 17) != 0) {
        fprintf(stderr, "usage: %s http://127.0.0.1:PORT\n", argv[0]);
        return 2;
    }
    base = argv[1];
    sk_fetch_global_init();
    sk_fetch_global_init();  // idempotent

    struct { const char *name; void (*run)(void); } tests[] = {
        {"GET with headers", test_get_with_headers},
        {"POST echo", test_post_echo},
        {"PUT, DELETE, HEAD, no redirects", test_other_methods},
        {"status 500 and 204", test_statuses},
        {"timeout", test_timeout},
        {"connect, URL and resolve errors", test_connection_errors},
        {"size limit", test_size_limit},
        {"response headers", test_response_headers},
        {"bad input", test_bad_input},
        {"kept-alive connections reused", test_reuse},
        {"concurrency", test_threads},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = atomic_load(&failures);
        printf("- %s\n", tests[i].name);
        tests[i].run();
        printf("  %s\n", atomic_load(&failures) == before ? "ok" : "FAILED");
    }
    printf("%d checks, %d failures\n", atomic_load(&checks), atomic_load(&failures));
    return atomic_load(&failures) == 0 ? 0 : 1;
}
