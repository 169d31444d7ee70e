#!/usr/bin/env python3
"""Local test server for the C curl harness: binds 127.0.0.1 on a free port, writes the port to argv[1],
and serves until killed (run.sh also bounds it with `timeout`)."""
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep the harness output quiet
        pass

    def send(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if status not in (204, 304):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and status not in (204, 304):
            self.wfile.write(body)

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def route(self):
        path = self.path.split("?")[0]
        body = self.read_body()
        if path == "/echo":  # method, request headers and body, as text
            lines = [f"method={self.command}"]
            lines += [f"{k}: {v}" for k, v in self.headers.items()]
            lines += ["", ""]
            self.send(200, "\n".join(lines).encode() + body, [("Content-Type", "text/plain")])
        elif path == "/peer":  # the client's port: the same on a reused connection
            self.send(200, str(self.client_address[1]).encode())
        elif path == "/body":  # the request body only
            self.send(200, body, [("X-Method", self.command)])
        elif path.startswith("/status/"):
            self.send(int(path.rsplit("/", 1)[1]))
        elif path == "/slow":
            time.sleep(5)
            self.send(200, b"late")
        elif path == "/big":
            self.send(200, b"x" * (1024 * 1024))
        elif path == "/exact":
            self.send(200, b"y" * 1000)
        elif path == "/headers":
            self.send(200, b"ok", [("X-One", "1"), ("X-Spaced", "   padded value   "),
                                  ("X-Empty", ""), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])
        elif path == "/interim":  # an unsolicited 100 Continue with its own header, then the real answer
            self.wfile.write(b"HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\n")
            self.send(201, b"final", [("X-Final", "yes")])
        elif path == "/redirect":
            self.send(302, b"", [("Location", "/echo")])
        else:
            self.send(404, b"not found")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = route

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeouts, size limit): expected


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(sys.argv[1], "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
