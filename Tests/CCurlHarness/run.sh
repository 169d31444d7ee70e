#!/bin/sh
# Builds the C harness for Sources/CStorekeeperCurl/fetch.c into /tmp and runs it against a local
# python3 server on 127.0.0.1 (started here, bounded by `timeout`, stopped on exit).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/sk-curl-harness.XXXXXX)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

cd "$root"
gcc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -O1 -g -pthread \
    -I Sources/CStorekeeperCurl/include \
    Sources/CStorekeeperCurl/fetch.c "$here/harness.c" -lcurl -o "$work/harness"

timeout 120 python3 "$here/server.py" "$work/port" &
server_pid=$!
i=0
while [ ! -s "$work/port" ]; do
    i=$((i + 1)); [ "$i" -le 100 ] || { echo "server did not start" >&2; exit 1; }
    sleep 0.1
done

# No proxy may get between the harness and 127.0.0.1.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
timeout 90 "$work/harness" "http://127.0.0.1:$(cat "$work/port")"
