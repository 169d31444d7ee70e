#!/usr/bin/env python3
"""Connection-load checks through the harness binary, on 127.0.0.1 only.

    load.py HARNESS_BINARY [IDLE_CONNECTIONS] [TRICKLERS]

1. IDLE_CONNECTIONS (default 10,000) keep-alive connections, each having made one request, stay open
   while curl, from another process, requests /inline: its latency must stay low.
2. TRICKLERS (default 1,000) clients send a request one byte per second for 8 s while curl requests
   /inline: the trickle must not stop it.
All loops are bounded in count and time; every socket is closed at the end. Exit status 1 on failure.
"""
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HARNESS = sys.argv[1]
IDLE = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
TRICKLERS = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
failures = []

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
if hard < IDLE + 100:
    print(f"SKIP: this process may open only {hard} files")
    sys.exit(0)


def check(name, condition, detail=""):
    print(("PASS " if condition else "FAIL ") + name + (f"  [{detail}]" if detail else ""))
    if not condition:
        failures.append(name)


process = subprocess.Popen([HARNESS, "127.0.0.1", "0", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
port = int(process.stdout.readline().split()[1])


def rss_mib():
    with open(f"/proc/{process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def curl_latencies(count, pause=0.0):
    """`count` sequential curl requests (a new process and connection each); curl's own time_total in ms."""
    times = []
    for _ in range(count):
        result = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "--max-time", "5",
                                 f"http://127.0.0.1:{port}/inline"], capture_output=True, text=True, timeout=10)
        code, seconds = result.stdout.split()
        times.append(float(seconds) * 1000 if code == "200" else float("inf"))
        time.sleep(pause)
    return times


def connections():
    result = subprocess.run(["curl", "-s", "--max-time", "5", f"http://127.0.0.1:{port}/connections"],
                            capture_output=True, text=True, timeout=10)
    return int(result.stdout.strip() or -1)


def summary(times):
    return f"median {statistics.median(times):.2f} ms, max {max(times):.2f} ms over {len(times)}"


baseline = curl_latencies(20)
print(f"INFO curl /inline with no other load: {summary(baseline)}; RSS {rss_mib():.1f} MiB")

# MARK: - Idle keep-alive connections

request = b"GET /inline HTTP/1.1\r\nHost: t\r\n\r\n"
sockets = []
deadline = time.time() + 120
start = time.time()
batch = 500
while len(sockets) < IDLE and time.time() < deadline:
    opened = []
    for _ in range(min(batch, IDLE - len(sockets))):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(request)
        opened.append(s)
    for s in opened:  # read each answer so the connection sits idle, keep-alive, after one request
        data = b""
        while not data.endswith(b"hello\n") and time.time() < deadline:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    sockets.extend(opened)
print(f"INFO opened {len(sockets)} keep-alive connections (one request each) in {time.time() - start:.1f} s")
open_count = connections()
check(f"server counts {IDLE} idle connections (+1 for the asking one)", open_count == IDLE + 1, str(open_count))
loaded = curl_latencies(20)
check(f"curl /inline with {IDLE} idle keep-alive connections open answers quickly", max(loaded) < 100, summary(loaded))
print(f"INFO RSS with {IDLE} idle keep-alive connections: {rss_mib():.1f} MiB")
for s in sockets:
    s.close()
sockets = []
for _ in range(100):  # bounded: 10 s
    if connections() == 1:
        break
    time.sleep(0.1)
check("all idle connections closed on the server side", connections() == 1)
print(f"INFO RSS after closing them: {rss_mib():.1f} MiB")

# MARK: - Tricklers: one byte per second

tricklers = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(TRICKLERS)]
latencies = []
stop = threading.Event()


def probe():
    while not stop.is_set():
        latencies.extend(curl_latencies(1))
        time.sleep(0.2)


thread = threading.Thread(target=probe)
thread.start()
for second in range(8):  # bounded: 8 bytes, one per second
    for s in tricklers:
        s.send(request[second:second + 1])
    time.sleep(1)
stop.set()
thread.join(timeout=20)
during = connections()
check(f"{TRICKLERS} clients trickling one byte per second do not stop another client",
      len(latencies) >= 10 and max(latencies) < 100, summary(latencies))
check(f"the tricklers' connections are all open meanwhile", during == TRICKLERS + 1, str(during))
for s in tricklers:
    s.close()

process.send_signal(signal.SIGTERM)
out, err = process.communicate(timeout=20)
check("harness stopped cleanly, nothing on stderr", process.returncode == 0 and err.strip() == "", err.strip()[-500:])
print(f"\n{len(failures)} failure(s)" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
