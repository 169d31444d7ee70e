#include "chttpserver.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

struct sk_server {
    struct MHD_Daemon *daemon;
    sk_handler handler;
    void *context;
    size_t max_body;
    uint16_t port;
};

struct sk_response {
    struct MHD_Connection *connection;
    int sent;
    enum MHD_Result result;
};

typedef struct request_state {
    uint8_t *body;
    size_t length;
    int too_large;
} request_state;

typedef struct collected {
    sk_header *items;
    size_t count;
    size_t capacity;
} collected;

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    collected *list = cls;
    if (list->count == list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 16;
        sk_header *items = realloc(list->items, capacity * sizeof(sk_header));
        if (!items) return MHD_NO;
        list->items = items;
        list->capacity = capacity;
    }
    list->items[list->count].name = key;
    list->items[list->count].value = value ? value : "";
    list->count += 1;
    return MHD_YES;
}

static enum MHD_Result respond(struct MHD_Connection *connection, unsigned int status, const uint8_t *body,
                               size_t length, const sk_header *headers, size_t header_count) {
    struct MHD_Response *response =
        MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!response) return MHD_NO;
    for (size_t index = 0; index < header_count; index++) {
        MHD_add_response_header(response, headers[index].name, headers[index].value);
    }
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

void sk_response_send(sk_response *response, unsigned int status, const uint8_t *body, size_t body_length,
                      const sk_header *headers, size_t header_count) {
    if (response->sent) return;
    response->sent = 1;
    response->result = respond(response->connection, status, body, body_length, headers, header_count);
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *connection, const char *url,
                                      const char *method, const char *version, const char *upload_data,
                                      size_t *upload_data_size, void **con_cls) {
    (void)version;
    sk_server *server = cls;
    request_state *state = *con_cls;
    if (!state) {
        state = calloc(1, sizeof(request_state));
        if (!state) return MHD_NO;
        *con_cls = state;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (!state->too_large) {
            if (state->length + *upload_data_size > server->max_body) {
                state->too_large = 1;
            } else {
                uint8_t *grown = realloc(state->body, state->length + *upload_data_size);
                if (!grown) return MHD_NO;
                memcpy(grown + state->length, upload_data, *upload_data_size);
                state->body = grown;
                state->length += *upload_data_size;
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (state->too_large) {
        static const char body[] = "{\"error\":{\"code\":\"payload_too_large\",\"message\":\"request body too large\"}}";
        sk_header type = {"Content-Type", "application/json"};
        return respond(connection, 413, (const uint8_t *)body, sizeof(body) - 1, &type, 1);
    }

    collected headers = {0};
    MHD_get_connection_values(connection, MHD_HEADER_KIND, collect, &headers);
    collected arguments = {0};
    MHD_get_connection_values(connection, MHD_GET_ARGUMENT_KIND, collect, &arguments);
    // Rebuild a query string from the parsed arguments (values are already percent-decoded by MHD).
    size_t query_length = 1;
    for (size_t index = 0; index < arguments.count; index++) {
        query_length += strlen(arguments.items[index].name) + strlen(arguments.items[index].value) + 2;
    }
    char *query = calloc(query_length, 1);
    for (size_t index = 0; query && index < arguments.count; index++) {
        if (index > 0) strcat(query, "&");
        strcat(query, arguments.items[index].name);
        strcat(query, "=");
        strcat(query, arguments.items[index].value);
    }

    sk_request request = {method, url, query ? query : "", headers.items, headers.count, state->body, state->length};
    sk_response response = {connection, 0, MHD_NO};
    server->handler(server->context, &request, &response);
    enum MHD_Result result = response.sent ? response.result : respond(connection, 500, NULL, 0, NULL, 0);
    free(headers.items);
    free(arguments.items);
    free(query);
    return result;
}

static void completed(void *cls, struct MHD_Connection *connection, void **con_cls, enum MHD_RequestTerminationCode code) {
    (void)cls;
    (void)connection;
    (void)code;
    request_state *state = *con_cls;
    if (state) {
        free(state->body);
        free(state);
        *con_cls = NULL;
    }
}

sk_server *sk_server_start(const char *host, uint16_t port, size_t max_body, size_t max_header,
                           unsigned int connection_limit, unsigned int timeout_seconds,
                           sk_handler handler, void *context) {
    sk_server *server = calloc(1, sizeof(sk_server));
    if (!server) return NULL;
    server->handler = handler;
    server->context = context;
    server->max_body = max_body;
    struct sockaddr_in address;
    memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    if (inet_pton(AF_INET, host, &address.sin_addr) != 1) {
        free(server);
        return NULL;
    }
    server->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, port, NULL, NULL,
        access_handler, server, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address, MHD_OPTION_CONNECTION_LIMIT,
        connection_limit, MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        max_header, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (!server->daemon) {
        free(server);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(server->daemon, MHD_DAEMON_INFO_BIND_PORT);
    server->port = info ? info->port : port;
    return server;
}

uint16_t sk_server_port(const sk_server *server) { return server->port; }

void sk_server_stop(sk_server *server) {
    if (!server) return;
    MHD_stop_daemon(server->daemon);
    free(server);
}
