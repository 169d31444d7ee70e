"""Independent verifier for Storekeeper's interoperability tests: Apple's own Python server library.

Reads one JSON object per line from standard input:
  {"token": str, "roots": [base64 DER], "environment": "Sandbox", "bundleId": str,
   "appAppleId": int|null, "type": "transaction"|"renewal-info"|"notification"|"app-transaction",
   "strict": bool}
and writes one line per case: {"status": NAME} where NAME is Apple's VerificationStatus name, or
"EXCEPTION:<type>" when the library raises something else.
"""
import base64
import json
import sys

from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier, VerificationException


def verify(case):
    verifier = SignedDataVerifier(
        [base64.b64decode(root) for root in case["roots"]],
        False,
        Environment(case["environment"]),
        case["bundleId"],
        case.get("appAppleId"),
    )
    if not case.get("strict", True):
        # Apple's own tests do this for its key-identifier-less test chain.
        verifier._chain_verifier.enable_strict_checks = False
    method = {
        "transaction": verifier.verify_and_decode_signed_transaction,
        "renewal-info": verifier.verify_and_decode_renewal_info,
        "notification": verifier.verify_and_decode_notification,
        "app-transaction": verifier.verify_and_decode_app_transaction,
    }[case["type"]]
    try:
        method(case["token"])
        return "OK"
    except VerificationException as error:
        return error.status.name
    except Exception as error:  # noqa: BLE001 - reported to the caller as data
        return "EXCEPTION:" + type(error).__name__


for line in sys.stdin:
    line = line.strip()
    if line:
        print(json.dumps({"status": verify(json.loads(line))}), flush=True)
