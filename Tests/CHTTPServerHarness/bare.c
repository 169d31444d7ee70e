// The "bare" baseline for run.sh's wrk comparison: a minimal libmicrohttpd server with the same daemon
// flags and pool/limits as server.c, answering every request with the same bytes as the harness's
// /inline route ("hello\n", Content-Type: text/plain), without any of the facade's work.
//
//   bare PORT [THREADS] [MEMORY_LIMIT]     (binds 127.0.0.1; prints "PORT <n>"; runs until SIGTERM)

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size,
                              void **con_cls) {
    (void)url;
    (void)method;
    (void)version;
    (void)upload_data;
    struct MHD_Response *response = cls;
    if (*con_cls == NULL) {  // first call: headers only
        *con_cls = connection;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    return MHD_queue_response(connection, 200, response);
}

int main(int argc, char **argv) {
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);

    unsigned int port = argc > 1 ? (unsigned int)atoi(argv[1]) : 0;
    unsigned int threads = argc > 2 ? (unsigned int)atoi(argv[2]) : 2;
    size_t memory = argc > 3 ? (size_t)atol(argv[3]) : 2 * (8192 + 4096) + 64 * 1024;
    static const char body[] = "hello\n";
    struct MHD_Response *response =
        MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");

    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t)port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, (uint16_t)port, NULL, NULL, answer, response,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_LIMIT, 20000u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory, MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u, MHD_OPTION_END);
    if (!daemon) {
        printf("ERROR cannot start\n");
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    printf("PORT %u\n", info ? info->port : port);
    fflush(stdout);
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    MHD_stop_daemon(daemon);
    MHD_destroy_response(response);
    return 0;
}
