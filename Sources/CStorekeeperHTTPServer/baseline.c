#include "chttpbaseline.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sk_baseline {
    struct MHD_Daemon *daemon;
    struct MHD_Response *response;
    uint16_t port;
};

static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size,
                              void **con_cls) {
    (void)url;
    (void)method;
    (void)version;
    (void)upload_data;
    if (*con_cls == NULL) {  // first call: headers only
        *con_cls = connection;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    return MHD_queue_response(connection, 200, cls);
}

sk_baseline *sk_baseline_start(uint16_t port, unsigned int threads, size_t memory_limit, const uint8_t *body,
                               size_t body_length, const char *content_type) {
    sk_baseline *baseline = calloc(1, sizeof(sk_baseline));
    if (!baseline) return NULL;
    baseline->response = MHD_create_response_from_buffer(body_length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!baseline->response) {
        free(baseline);
        return NULL;
    }
    MHD_add_response_header(baseline->response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (threads == 0) threads = (unsigned int)sysconf(_SC_NPROCESSORS_ONLN);
    struct sockaddr_in address;
    memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    baseline->daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, port, NULL, NULL, answer, baseline->response,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, 16384u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit ? memory_limit : (size_t)32 * 1024, MHD_OPTION_END);
    if (!baseline->daemon) {
        MHD_destroy_response(baseline->response);
        free(baseline);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(baseline->daemon, MHD_DAEMON_INFO_BIND_PORT);
    baseline->port = info ? info->port : port;
    return baseline;
}

uint16_t sk_baseline_port(const sk_baseline *baseline) { return baseline->port; }

void sk_baseline_stop(sk_baseline *baseline) {
    if (!baseline) return;
    MHD_stop_daemon(baseline->daemon);
    MHD_destroy_response(baseline->response);
    free(baseline);
}
