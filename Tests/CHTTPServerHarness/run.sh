#!/bin/sh
# Builds the C HTTP server facade (Sources/CStorekeeperHTTPServer) into a standalone harness with gcc and
# checks it without Swift: functional and lifecycle checks on a sanitizer build (checks.py), connection
# load (load.py: 10,000 idle keep-alive connections, 1,000 one-byte-per-second clients), a
# ThreadSanitizer pass with a stop under load, and wrk throughput against the harness and a bare
# libmicrohttpd server. Only 127.0.0.1 and ::1 are used (wildcard binds only inside `unshare -rn`).
#
#   Tests/CHTTPServerHarness/run.sh            binaries go to $OUT (default /tmp/chttpserver-harness)
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/Tests/CHTTPServerHarness"
OUT=${OUT:-/tmp/chttpserver-harness}
mkdir -p "$OUT"
cd "$ROOT"

WARN="-std=c11 -Wall -Wextra -Werror"
SOURCES="Sources/CStorekeeperHTTPServer/server.c $HERE/harness.c"
INCLUDE="-I Sources/CStorekeeperHTTPServer/include"
gcc -O2 $WARN $INCLUDE $SOURCES -lmicrohttpd -lpthread -o "$OUT/harness"
gcc -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined $WARN $INCLUDE $SOURCES -lmicrohttpd -lpthread \
    -o "$OUT/harness-asan"
gcc -O1 -g -fsanitize=thread $WARN $INCLUDE $SOURCES -lmicrohttpd -lpthread -o "$OUT/harness-tsan"
gcc -O2 $WARN "$HERE/bare.c" -lmicrohttpd -lpthread -o "$OUT/bare"

status=0

# Starts BINARY ARGS... in the background; sets $pid and $port (bounded wait for its "PORT n" line).
start() {
    log="$OUT/$(basename "$1").$$.out"
    "$@" > "$log" 2> "$log.err" &
    pid=$!
    port=""
    tries=0
    while [ -z "$port" ] && [ $tries -lt 50 ]; do
        sleep 0.1
        port=$(awk '/^PORT/{print $2}' "$log")
        tries=$((tries + 1))
    done
    [ -n "$port" ] || { echo "FAIL cannot start $*"; exit 1; }
}

echo "== functional and lifecycle checks (AddressSanitizer + UndefinedBehaviorSanitizer build)"
python3 "$HERE/checks.py" "$OUT/harness-asan" || status=1

if [ "${QUICK:-0}" = 1 ]; then
    [ $status -eq 0 ] && echo "ALL PASSED (quick: functional checks only)" || echo "SOME CHECKS FAILED"
    exit $status
fi

echo "== connection load"
python3 "$HERE/load.py" "$OUT/harness" 10000 1000 || status=1

echo "== ThreadSanitizer: inline, deferred, cross-thread and async answers, then a stop under load"
start "$OUT/harness-tsan" 127.0.0.1 0 2
wrk -t2 -c16 -d2s "http://127.0.0.1:$port/defer" > /dev/null
wrk -t1 -c8 -d1s "http://127.0.0.1:$port/cross" > /dev/null
wrk -t1 -c8 -d1s "http://127.0.0.1:$port/inline" > /dev/null
wrk -t2 -c32 -d3s "http://127.0.0.1:$port/defer" > /dev/null 2>&1 &
load1=$!
wrk -t1 -c8 -d3s "http://127.0.0.1:$port/async" > /dev/null 2>&1 &
load2=$!
sleep 1.5
kill -TERM $pid
wait $pid || true
wait $load1 $load2 || true
if [ -s "$log.err" ]; then
    echo "FAIL ThreadSanitizer reports:"; head -40 "$log.err"; status=1
else
    echo "PASS no ThreadSanitizer report"
fi

echo "== throughput: wrk -t2 -c16 -d5s (server and wrk share this machine's cores)"
start "$OUT/harness" 127.0.0.1 0 2
harness_pid=$pid
harness_port=$port
start "$OUT/bare" 0 2
bare_pid=$pid
bare_port=$port
for route in inline defer async; do
    printf '%-32s ' "harness /$route"
    wrk -t2 -c16 -d5s "http://127.0.0.1:$harness_port/$route" | awk '/Requests\/sec/{printf "%s req/s", $2} /Latency/{printf "  latency avg %s max %s  ", $2, $4}'
    echo
done
printf '%-32s ' "bare libmicrohttpd /inline"
wrk -t2 -c16 -d5s "http://127.0.0.1:$bare_port/inline" | awk '/Requests\/sec/{printf "%s req/s", $2} /Latency/{printf "  latency avg %s max %s  ", $2, $4}'
echo
kill -TERM $harness_pid $bare_pid
wait $harness_pid $bare_pid || true

[ $status -eq 0 ] && echo "ALL PASSED" || echo "SOME CHECKS FAILED"
exit $status
