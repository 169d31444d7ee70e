// A standalone server over chttpserver.h for run.sh's checks (curl, python3 raw sockets, wrk).
//
//   harness HOST PORT [THREADS]
//
// Prints "PORT <n>" once listening (or "ERROR <reason>" and exits 1), then serves until SIGTERM/SIGINT,
// stops the server and prints "STOPPED". Routes:
//   /inline        200 "hello\n", answered inside the handler
//   /defer         the same, answered at once from another thread (measures suspend/resume)
//   /async         the same, answered 50 ms later from another thread
//   /hold          answered 2 s later from another thread (client-gone-while-suspended checks)
//   /never         never answered by the handler: sk_server_stop must answer it with 503 (the harness
//                  abandons it after stop, as it does every deferred answer still queued)
//   /cross         answered from another thread while the handler is still running (joined before return)
//   /slow          the handler blocks 300 ms, then answers inline (stop racing a running handler)
//   /connections   the number of open connections, as text
//   anything else  a JSON echo of method, raw path, query pairs, header count, remote and body
//
// Limits (fixed, run.sh relies on them): max_body 1 MiB, headers 8 KiB, URL 4 KiB, 64 parameters,
// 20,000 connections, 30 s idle timeout.

#define _GNU_SOURCE
#include "chttpserver.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const sk_header text_plain[] = {{"Content-Type", "text/plain"}};
static const sk_header application_json[] = {{"Content-Type", "application/json"}};
static const uint8_t hello[] = "hello\n";

// MARK: - A thread answering exchanges at given times

typedef struct deferred {
    sk_exchange *exchange;
    struct timespec due;
    struct deferred *next;
} deferred;

typedef struct deferrer {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    deferred *queue;  // sorted by `due`
    bool quit;
    pthread_t thread;
} deferrer;

static bool before(struct timespec a, struct timespec b) {
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static void defer_answer(deferrer *d, sk_exchange *exchange, long milliseconds) {
    deferred *item = malloc(sizeof(deferred));
    if (!item) abort();
    item->exchange = exchange;
    clock_gettime(CLOCK_MONOTONIC, &item->due);
    item->due.tv_sec += milliseconds / 1000;
    item->due.tv_nsec += (milliseconds % 1000) * 1000000L;
    if (item->due.tv_nsec >= 1000000000L) {
        item->due.tv_sec += 1;
        item->due.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->lock);
    deferred **slot = &d->queue;
    while (*slot && !before(item->due, (*slot)->due)) slot = &(*slot)->next;
    item->next = *slot;
    *slot = item;
    pthread_cond_signal(&d->changed);
    pthread_mutex_unlock(&d->lock);
}

static void *deferrer_main(void *argument) {
    deferrer *d = argument;
    pthread_mutex_lock(&d->lock);
    while (!d->quit) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (d->queue && !before(now, d->queue->due)) {
            deferred *item = d->queue;
            d->queue = item->next;
            pthread_mutex_unlock(&d->lock);
            sk_exchange_respond(item->exchange, 200, hello, sizeof(hello) - 1, text_plain, 1);
            free(item);
            pthread_mutex_lock(&d->lock);
        } else if (d->queue) {
            pthread_cond_timedwait(&d->changed, &d->lock, &d->queue->due);
        } else {
            pthread_cond_wait(&d->changed, &d->lock);
        }
    }
    // Exchanges still queued stay unanswered: sk_server_stop answers them with 503, then main abandons
    // them (every exchange is answered or abandoned exactly once).
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

// MARK: - Handler

typedef struct harness {
    sk_server *server;
    deferrer deferrer;
} harness;

typedef struct buffer {
    char *data;
    size_t length, capacity;
} buffer;

static void append(buffer *b, const char *data, size_t length) {
    if (b->length + length + 1 > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 256;
        while (capacity < b->length + length + 1) capacity *= 2;
        b->data = realloc(b->data, capacity);
        if (!b->data) abort();
        b->capacity = capacity;
    }
    memcpy(b->data + b->length, data, length);
    b->length += length;
    b->data[b->length] = '\0';
}

static void append_text(buffer *b, const char *text) { append(b, text, strlen(text)); }

static void append_json_string(buffer *b, const uint8_t *bytes, size_t length) {
    append_text(b, "\"");
    for (size_t index = 0; index < length; index++) {
        uint8_t byte = bytes[index];
        char escaped[8];
        if (byte == '"' || byte == '\\') {
            escaped[0] = '\\';
            escaped[1] = (char)byte;
            append(b, escaped, 2);
        } else if (byte < 0x20 || byte >= 0x7f) {
            snprintf(escaped, sizeof(escaped), "\\u%04x", byte);
            append_text(b, escaped);
        } else {
            append(b, (const char *)&byte, 1);
        }
    }
    append_text(b, "\"");
}

static void append_json_text(buffer *b, const char *text) {
    append_json_string(b, (const uint8_t *)text, strlen(text));
}

static void echo(sk_exchange *exchange, const sk_request *request) {
    buffer b = {0};
    char number[32];
    append_text(&b, "{\"method\":");
    append_json_text(&b, request->method);
    append_text(&b, ",\"path\":");
    append_json_text(&b, request->path);
    append_text(&b, ",\"query\":[");
    for (size_t index = 0; index < request->query_count; index++) {
        append_text(&b, index ? ",[" : "[");
        append_json_text(&b, request->query[index].name);
        append_text(&b, ",");
        append_json_text(&b, request->query[index].value);
        append_text(&b, "]");
    }
    append_text(&b, "],\"headers\":[");
    for (size_t index = 0; index < request->header_count; index++) {
        append_text(&b, index ? ",[" : "[");
        append_json_text(&b, request->headers[index].name);
        append_text(&b, ",");
        append_json_text(&b, request->headers[index].value);
        append_text(&b, "]");
    }
    append_text(&b, "],\"remote\":");
    append_json_text(&b, request->remote);
    snprintf(number, sizeof(number), ",\"body_length\":%zu", request->body_length);
    append_text(&b, number);
    append_text(&b, ",\"body\":");
    append_json_string(&b, request->body, request->body_length);
    append_text(&b, "}");
    sk_exchange_respond(exchange, 200, (const uint8_t *)b.data, b.length, application_json, 1);
    free(b.data);
}

static void *answer_from_thread(void *argument) {
    sk_exchange_respond(argument, 200, hello, sizeof(hello) - 1, text_plain, 1);
    return NULL;
}

static void handle(void *context, sk_exchange *exchange, const sk_request *request) {
    harness *h = context;
    const char *path = request->path;
    if (strcmp(path, "/inline") == 0) {
        sk_exchange_respond(exchange, 200, hello, sizeof(hello) - 1, text_plain, 1);
    } else if (strcmp(path, "/defer") == 0) {
        defer_answer(&h->deferrer, exchange, 0);
    } else if (strcmp(path, "/async") == 0) {
        defer_answer(&h->deferrer, exchange, 50);
    } else if (strcmp(path, "/hold") == 0) {
        defer_answer(&h->deferrer, exchange, 2000);
    } else if (strcmp(path, "/never") == 0) {
        defer_answer(&h->deferrer, exchange, 24L * 3600 * 1000);  // left for sk_server_stop
    } else if (strcmp(path, "/cross") == 0) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, answer_from_thread, exchange) != 0) abort();
        pthread_join(thread, NULL);
    } else if (strcmp(path, "/slow") == 0) {
        nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
        sk_exchange_respond(exchange, 200, hello, sizeof(hello) - 1, text_plain, 1);
    } else if (strcmp(path, "/connections") == 0) {
        char text[32];
        int length = snprintf(text, sizeof(text), "%u\n", sk_server_connections(h->server));
        sk_exchange_respond(exchange, 200, (const uint8_t *)text, (size_t)length, text_plain, 1);
    } else {
        echo(exchange, request);
    }
}

int main(int argc, char **argv) {
    long port = argc >= 3 ? strtol(argv[2], NULL, 10) : -1;
    if (argc < 3 || port < 0 || port > 65535) {
        fprintf(stderr, "usage: %s HOST PORT [THREADS]\n", argv[0]);
        return 2;
    }
    // Signals are taken by sigwait below; block them before any thread starts so they all inherit it.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);

    static harness h;
    pthread_mutex_init(&h.deferrer.lock, NULL);
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);  // `due` times are monotonic
    pthread_cond_init(&h.deferrer.changed, &attributes);
    if (pthread_create(&h.deferrer.thread, NULL, deferrer_main, &h.deferrer) != 0) return 1;

    sk_server_options options = {
        .host = strcmp(argv[1], "NULL") == 0 ? NULL : argv[1],
        .port = (uint16_t)port,
        .max_body = 1 << 20,
        .max_header_bytes = 8192,
        .max_url_bytes = 4096,
        .max_query_parameters = 64,
        .connection_limit = 20000,
        .idle_timeout_seconds = 30,
        .threads = argc > 3 ? (unsigned int)atoi(argv[3]) : 0,
    };
    char error[256];
    h.server = sk_server_start(&options, handle, &h, error, sizeof(error));
    if (!h.server) {
        printf("ERROR %s\n", error);
        return 1;
    }
    printf("PORT %u\n", sk_server_port(h.server));
    fflush(stdout);

    int signal_number = 0;
    sigwait(&signals, &signal_number);

    // No answer may come after sk_server_stop returns: stop the answering thread first.
    pthread_mutex_lock(&h.deferrer.lock);
    h.deferrer.quit = true;
    pthread_cond_signal(&h.deferrer.changed);
    pthread_mutex_unlock(&h.deferrer.lock);
    pthread_join(h.deferrer.thread, NULL);
    sk_server_stop(h.server);
    // Answers that never came are given up; the server's memory goes with the last of them.
    while (h.deferrer.queue) {
        deferred *item = h.deferrer.queue;
        h.deferrer.queue = item->next;
        sk_exchange_abandon(item->exchange);
        free(item);
    }
    printf("STOPPED\n");
    fflush(stdout);
    return 0;
}
