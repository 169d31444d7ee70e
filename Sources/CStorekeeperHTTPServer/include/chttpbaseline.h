#ifndef STOREKEEPER_CHTTPBASELINE_H
#define STOREKEEPER_CHTTPBASELINE_H

// The "bare libmicrohttpd" baseline for `storekeeper bench http`: the same daemon flags and pool as
// server.c, answering every request with one fixed response and doing nothing else.

#include <stddef.h>
#include <stdint.h>

typedef struct sk_baseline sk_baseline;

/// Starts on 127.0.0.1:`port` (0 picks one) answering `body` with `content_type`, with `memory_limit`
/// bytes of connection memory (as the measured server has; 0: libmicrohttpd's default); NULL on failure.
sk_baseline *sk_baseline_start(uint16_t port, unsigned int threads, size_t memory_limit, const uint8_t *body,
                               size_t body_length, const char *content_type);
uint16_t sk_baseline_port(const sk_baseline *baseline);
void sk_baseline_stop(sk_baseline *baseline);

#endif
