"""A notification receiver written with Apple's Python server library, for Storekeeper's interoperability tests.

Listens on 127.0.0.1 (port 0 picks one; the chosen port is printed as the first line of standard output) and
appends one JSON line per request it receives to --out:
  V2: {"version": 2, "uuid", "type", "subtype", "signedDate", "originalTransactionId", "status",
       "verification": "OK" | <Apple's VerificationStatus name> | "EXCEPTION:<type>", "answered": <HTTP status>}
  V1: {"version": 1, "type", "originalTransactionId", "password": "ok" | "mismatch", "answered": <HTTP status>}
V2 bodies are verified with SignedDataVerifier (chain to --root, --environment, --bundle-id, --app-apple-id);
V1 bodies are checked against --password. To exercise retries, the first delivery of every notification
whose UUID (V2) or body hash (V1) falls in --fail-percent is answered 503; later deliveries are answered 200
when they verify, 400 when they do not.
"""
import argparse
import base64
import hashlib
import http.server
import json
import signal
import sys
import threading

from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationException

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--out", required=True)
parser.add_argument("--root", required=True, help="base64 DER of the trusted root")
parser.add_argument("--environment", default="Production")
parser.add_argument("--bundle-id", required=True)
parser.add_argument("--app-apple-id", type=int, default=None)
parser.add_argument("--password", default=None)
parser.add_argument("--fail-percent", type=int, default=0)
options = parser.parse_args()
# A parent may spawn us with its thread's signals blocked (libdispatch's workers block them): let SIGTERM in.
signal.pthread_sigmask(signal.SIG_SETMASK, [])

verifier = SignedDataVerifier(
    [base64.b64decode(options.root)], False, Environment(options.environment), options.bundle_id,
    options.app_apple_id)
lock = threading.Lock()
seen = set()


def failing_first(key):
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % 100 < options.fail_percent


def record(entry):
    with lock:
        with open(options.out, "a") as out:
            out.write(json.dumps(entry) + "\n")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if "signedPayload" in body:
            entry = self.version_two(body["signedPayload"])
            key = entry.get("uuid") or body["signedPayload"]
        else:
            entry = self.version_one(body)
            key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        with lock:
            first = key not in seen
            seen.add(key)
        if first and failing_first(key):
            status = 503
        elif entry.get("verification", "OK") != "OK" or entry.get("password") == "mismatch":
            status = 400
        else:
            status = 200
        entry["answered"] = status
        record(entry)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def version_two(self, signed):
        entry = {"version": 2}
        try:
            payload = verifier.verify_and_decode_notification(signed)
            entry["verification"] = "OK"
        except VerificationException as error:
            entry["verification"] = error.status.name
            return entry
        except Exception as error:  # noqa: BLE001 - reported as data
            entry["verification"] = "EXCEPTION:" + type(error).__name__
            return entry
        entry["uuid"] = payload.notificationUUID
        entry["type"] = payload.rawNotificationType
        entry["subtype"] = payload.rawSubtype
        entry["signedDate"] = payload.signedDate
        data = payload.data
        if data is not None:
            entry["status"] = data.rawStatus
            if data.signedTransactionInfo:
                transaction = verifier.verify_and_decode_signed_transaction(data.signedTransactionInfo)
                entry["originalTransactionId"] = transaction.originalTransactionId
            if data.signedRenewalInfo:
                verifier.verify_and_decode_renewal_info(data.signedRenewalInfo)
        return entry

    def version_one(self, body):
        given = body.get("password")
        matches = options.password is None or given == options.password
        return {
            "version": 1, "type": body.get("notification_type"),
            "originalTransactionId": str(body.get("original_transaction_id")),
            "password": "ok" if matches else "mismatch",
        }

    def log_message(self, *arguments):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
print(server.server_address[1], flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
sys.exit(0)
