"""Drives Storekeeper's emulated App Store Server API with Apple's own Python client, for the interoperability tests.

Usage:
  apple_api_client.py --base URL --key-file F --key-id K --issuer-id I --bundle-id B --root BASE64DER
      --environment Sandbox --subscription TXID --consumable TXID --order ORDERID --refunded TXID
      [--product com.example.storekeeper.monthly] [--wrong-key-file F2] [--app-apple-id N] [--control-token T]

--base is the API base the client talks to (production: http://HOST:PORT, sandbox: http://HOST:PORT/sandbox);
Apple's client has no public option for it, so the private _base_url is set. Every signed payload the API
returns is checked with Apple's SignedDataVerifier, trusting only --root.

Prints one JSON line per step: {"step": name, "ok": bool, ...details}, where ok means the emulator answered as
Apple's API should. A step that raises something unexpected prints ok false with "error": repr(exception).
Always exits 0: the caller asserts on the lines.
"""
import argparse
import base64
import json
import os
import sys
import time
import urllib.request
import uuid
import warnings

from appstoreserverlibrary.api_client import APIException, AppStoreServerAPIClient, GetTransactionHistoryVersion
from appstoreserverlibrary.models.AccountTenure import AccountTenure
from appstoreserverlibrary.models.ConsumptionRequest import ConsumptionRequest
from appstoreserverlibrary.models.ConsumptionRequestV1 import ConsumptionRequestV1
from appstoreserverlibrary.models.ConsumptionStatus import ConsumptionStatus
from appstoreserverlibrary.models.DeliveryStatus import DeliveryStatus
from appstoreserverlibrary.models.DeliveryStatusV1 import DeliveryStatusV1
from appstoreserverlibrary.models.Environment import Environment
from appstoreserverlibrary.models.ExtendReasonCode import ExtendReasonCode
from appstoreserverlibrary.models.ExtendRenewalDateRequest import ExtendRenewalDateRequest
from appstoreserverlibrary.models.LifetimeDollarsPurchased import LifetimeDollarsPurchased
from appstoreserverlibrary.models.LifetimeDollarsRefunded import LifetimeDollarsRefunded
from appstoreserverlibrary.models.MassExtendRenewalDateRequest import MassExtendRenewalDateRequest
from appstoreserverlibrary.models.NotificationHistoryRequest import NotificationHistoryRequest
from appstoreserverlibrary.models.OrderLookupStatus import OrderLookupStatus
from appstoreserverlibrary.models.Platform import Platform
from appstoreserverlibrary.models.PlayTime import PlayTime
from appstoreserverlibrary.models.RefundPreference import RefundPreference
from appstoreserverlibrary.models.RefundPreferenceV1 import RefundPreferenceV1
from appstoreserverlibrary.models.Status import Status
from appstoreserverlibrary.models.TransactionHistoryRequest import Order, ProductType, TransactionHistoryRequest
from appstoreserverlibrary.models.UpdateAppAccountTokenRequest import UpdateAppAccountTokenRequest
from appstoreserverlibrary.models.UserStatus import UserStatus
from appstoreserverlibrary.signed_data_verifier import SignedDataVerifier

warnings.simplefilter("ignore", DeprecationWarning)  # send_consumption_data (v1) is deprecated, and still served

parser = argparse.ArgumentParser()
parser.add_argument("--base", required=True, help="API base URL (…/sandbox for the sandbox)")
parser.add_argument("--key-file", required=True, help="the .p8 (PEM) private key the emulator minted")
parser.add_argument("--key-id", required=True)
parser.add_argument("--issuer-id", required=True)
parser.add_argument("--bundle-id", required=True)
parser.add_argument("--root", required=True, help="base64 DER of the root that signs all JWS")
parser.add_argument("--environment", default="Sandbox", help="Sandbox or Production")
parser.add_argument("--app-apple-id", type=int, default=None,
                    help="the verifier needs it for Production (default: the appAppleId the history endpoint reports)")
parser.add_argument("--subscription", required=True, help="an auto-renewable subscription's original transaction id")
parser.add_argument("--consumable", required=True, help="a consumable's transaction id (same customer)")
parser.add_argument("--order", required=True, help="an order id of the same customer")
parser.add_argument("--refunded", required=True, help="a refunded transaction id (same customer)")
parser.add_argument("--product", default="com.example.storekeeper.monthly", help="the subscription's product id")
parser.add_argument("--commitment", default=None,
                    help="a subscription bought on a monthly plan with a 12-month commitment (its original id)")
parser.add_argument("--sandbox-subscription", default=None,
                    help="a sandbox subscription's original transaction id, for the Retention Messaging performance "
                         "test (default: --subscription in the sandbox; the retention steps are skipped otherwise)")
parser.add_argument("--wrong-key-file", default=None,
                    help="a P-256 PEM key the emulator does not know (default: a fresh one made here)")
parser.add_argument("--control-token", default=os.environ.get("STOREKEEPER_TOKEN"),
                    help="the emulator's control-plane token, if it requires one (default: $STOREKEEPER_TOKEN)")
options = parser.parse_args()

environment = Environment(options.environment)
with open(options.key_file, "rb") as handle:
    signing_key = handle.read()


class RecordingClient(AppStoreServerAPIClient):
    """Apple's client, unchanged, but remembering the last HTTP response (the library drops headers)."""

    last_response = None

    def _execute_request(self, method, url, params, headers, json, data):
        response = super()._execute_request(method, url, params, headers, json, data)
        self.last_response = response
        return response


def make_client(key=signing_key, bundle_id=options.bundle_id):
    made = RecordingClient(signing_key=key, key_id=options.key_id, issuer_id=options.issuer_id,
                           bundle_id=bundle_id, environment=environment)
    made._base_url = options.base.rstrip("/")  # the library has no public option for its base URL
    return made


client = make_client()


def emit(step, ok, **details):
    print(json.dumps({"step": step, "ok": bool(ok), **details}, default=str), flush=True)


app_apple_id = options.app_apple_id
if environment == Environment.PRODUCTION and app_apple_id is None:
    # Apple's verifier insists on the app's Apple ID in production; the history response carries it.
    try:
        app_apple_id = client.get_transaction_history(
            options.subscription, None, TransactionHistoryRequest(), GetTransactionHistoryVersion.V2).appAppleId
    except Exception as error:  # noqa: BLE001
        emit("setup", False, error="could not learn appAppleId: " + repr(error))
        sys.exit(0)
verifier = SignedDataVerifier([base64.b64decode(options.root)], False, environment, options.bundle_id, app_apple_id)


def run(step, body):
    """Runs body() -> (ok, details); any exception is an unexpected outcome."""
    try:
        ok, details = body()
        emit(step, ok, **details)
    except APIException as error:
        emit(step, False, error=repr(error), httpStatus=error.http_status_code, rawApiError=error.raw_api_error,
             errorMessage=error.error_message)
    except Exception as error:  # noqa: BLE001 - reported as data
        emit(step, False, error=repr(error))


def expect_api_error(step, call, raw_api_error, http_status=None, extra=None):
    """The call must raise APIException with this raw error code (None: no JSON error body) and HTTP status."""
    def body():
        try:
            result = call()
        except APIException as error:
            ok = error.raw_api_error == raw_api_error and (http_status is None or error.http_status_code == http_status)
            details = {"httpStatus": error.http_status_code, "rawApiError": error.raw_api_error,
                       "errorMessage": error.error_message,
                       "expected": {"rawApiError": raw_api_error, "httpStatus": http_status}}
            if extra is not None:
                details.update(extra())
            return ok, details
        return False, {"error": "no APIException", "result": repr(result),
                       "expected": {"rawApiError": raw_api_error, "httpStatus": http_status}}
    run(step, body)


def value(enum_or_raw):
    return getattr(enum_or_raw, "value", enum_or_raw)


def now_ms():
    return int(time.time() * 1000)


def history(request, revision=None):
    """Pages through Get Transaction History v2; returns the decoded transactions and the number of pages."""
    decoded, pages = [], 0
    while True:
        response = client.get_transaction_history(options.subscription, revision, request,
                                                  GetTransactionHistoryVersion.V2)
        pages += 1
        for signed in response.signedTransactions or []:
            decoded.append(verifier.verify_and_decode_signed_transaction(signed))
        if not response.hasMore:
            return decoded, pages, response
        if pages > 100:
            raise RuntimeError("more than 100 pages of history")
        revision = response.revision


def summary(transactions):
    return [{"transactionId": t.transactionId, "productId": t.productId, "type": value(t.type),
             "revocationDate": t.revocationDate} for t in transactions]


state = {}

# 1. Get Transaction Info


def transaction_info():
    response = client.get_transaction_info(options.subscription)
    decoded = verifier.verify_and_decode_signed_transaction(response.signedTransactionInfo)
    state["originalTransactionId"] = decoded.originalTransactionId
    state["expiresDate"] = decoded.expiresDate
    return decoded.transactionId == options.subscription, {
        "transactionId": decoded.transactionId, "originalTransactionId": decoded.originalTransactionId,
        "productId": decoded.productId, "expiresDate": decoded.expiresDate}


run("transaction_info", transaction_info)

# 2-4. Get Transaction History (v2)


def history_v2():
    decoded, pages, response = history(TransactionHistoryRequest(sort=Order.ASCENDING))
    ids = [t.transactionId for t in decoded]
    expected = {options.subscription, options.consumable, options.refunded}
    # Apple sorts by the records' modification date, which the payloads do not carry: the order is only reported.
    ok = (len(decoded) >= 3 and expected <= set(ids)
          and response.bundleId == options.bundle_id and value(response.environment) == options.environment)
    return ok, {"count": len(decoded), "pages": pages, "transactionIds": sorted(set(ids)), "order": ids,
                "bundleId": response.bundleId, "environment": value(response.environment)}


run("history_v2", history_v2)


def history_filtered():
    decoded, pages, _ = history(TransactionHistoryRequest(sort=Order.ASCENDING, productIds=[options.product],
                                                          productTypes=[ProductType.AUTO_RENEWABLE]))
    products = sorted({t.productId for t in decoded})
    ok = len(decoded) >= 1 and all(t.productId == options.product for t in decoded)
    return ok, {"count": len(decoded), "productIds": products, "transactions": summary(decoded)}


run("history_filtered", history_filtered)


def history_revoked():
    decoded, pages, _ = history(TransactionHistoryRequest(sort=Order.ASCENDING, revoked=True))
    ids = [t.transactionId for t in decoded]
    unrevoked = [t.transactionId for t in decoded if t.revocationDate is None]
    ok = options.refunded in ids and not unrevoked
    return ok, {"count": len(decoded), "transactionIds": ids, "withoutRevocationDate": unrevoked}


run("history_revoked", history_revoked)

# 5-6. Get All Subscription Statuses


def statuses_items(response):
    items = []
    for group in response.data or []:
        for item in group.lastTransactions or []:
            transaction = verifier.verify_and_decode_signed_transaction(item.signedTransactionInfo)
            renewal = verifier.verify_and_decode_renewal_info(item.signedRenewalInfo)
            items.append({"group": group.subscriptionGroupIdentifier, "originalTransactionId": item.originalTransactionId,
                          "status": item.rawStatus, "transactionId": transaction.transactionId,
                          "transactionOriginalId": transaction.originalTransactionId,
                          "renewalOriginalId": renewal.originalTransactionId,
                          "expiresDate": transaction.expiresDate, "renewalDate": renewal.renewalDate})
    return items


def statuses():
    response = client.get_all_subscription_statuses(options.subscription)
    items = statuses_items(response)
    original = state.get("originalTransactionId", options.subscription)
    ok = any(i["originalTransactionId"] == original and i["status"] == Status.ACTIVE.value
             and i["transactionOriginalId"] == original and i["renewalOriginalId"] == original for i in items)
    ok = ok and response.bundleId == options.bundle_id and value(response.environment) == options.environment
    return ok, {"items": items, "bundleId": response.bundleId, "environment": value(response.environment)}


run("statuses", statuses)


def statuses_filtered():
    response = client.get_all_subscription_statuses(options.subscription, [Status.EXPIRED])
    items = statuses_items(response)
    return all(i["status"] != Status.ACTIVE.value for i in items), {"items": items}


run("statuses_filtered", statuses_filtered)

# 7. Get Refund History


def refund_history():
    decoded, revision, pages = [], None, 0
    while True:
        response = client.get_refund_history(options.subscription, revision)
        pages += 1
        decoded += [verifier.verify_and_decode_signed_transaction(s) for s in response.signedTransactions or []]
        if not response.hasMore or pages > 100:
            break
        revision = response.revision
    ids = [t.transactionId for t in decoded]
    unrevoked = [t.transactionId for t in decoded if t.revocationDate is None]
    return options.refunded in ids and not unrevoked, {"count": len(decoded), "pages": pages, "transactionIds": ids,
                                                       "withoutRevocationDate": unrevoked}


run("refund_history", refund_history)

# 8. Look Up Order ID


def order():
    response = client.look_up_order_id(options.order)
    decoded = [verifier.verify_and_decode_signed_transaction(s) for s in response.signedTransactions or []]
    ok = response.status == OrderLookupStatus.VALID and len(decoded) >= 1
    return ok, {"status": response.rawStatus, "transactionIds": [t.transactionId for t in decoded]}


run("order", order)


def order_invalid():
    response = client.look_up_order_id("NOSUCHORDER1")
    ok = response.status == OrderLookupStatus.INVALID and not response.signedTransactions
    return ok, {"status": response.rawStatus, "signedTransactions": len(response.signedTransactions or [])}


run("order_invalid", order_invalid)

# 9. Extend a Subscription Renewal Date
extend_request_id = str(uuid.uuid4())


def extend():
    before = verifier.verify_and_decode_signed_transaction(
        client.get_transaction_info(options.subscription).signedTransactionInfo).expiresDate
    response = client.extend_subscription_renewal_date(options.subscription, ExtendRenewalDateRequest(
        extendByDays=5, extendReasonCode=ExtendReasonCode.CUSTOMER_SATISFACTION, requestIdentifier=extend_request_id))
    state["effectiveDate"] = response.effectiveDate
    ok = (response.success is True and before is not None and response.effectiveDate is not None
          and response.effectiveDate > before and response.originalTransactionId == state.get(
              "originalTransactionId", options.subscription))
    return ok, {"success": response.success, "effectiveDate": response.effectiveDate, "expiresDateBefore": before,
                "extendedByMs": (response.effectiveDate - before) if before and response.effectiveDate else None,
                "originalTransactionId": response.originalTransactionId,
                "webOrderLineItemId": response.webOrderLineItemId}


run("extend", extend)
expect_api_error("extend_too_many_days", lambda: client.extend_subscription_renewal_date(
    options.subscription, ExtendRenewalDateRequest(extendByDays=91, extendReasonCode=ExtendReasonCode.CUSTOMER_SATISFACTION,
                                                   requestIdentifier=str(uuid.uuid4()))), 4000009, 400)


def extend_again_same_id():
    response = client.extend_subscription_renewal_date(options.subscription, ExtendRenewalDateRequest(
        extendByDays=5, extendReasonCode=ExtendReasonCode.CUSTOMER_SATISFACTION, requestIdentifier=extend_request_id))
    first = state.get("effectiveDate")
    ok = response.success is True and first is not None and response.effectiveDate == first
    return ok, {"success": response.success, "effectiveDate": response.effectiveDate, "firstEffectiveDate": first}


run("extend_again_same_id", extend_again_same_id)

# 10. Extend Subscription Renewal Dates for All Active Subscribers, then its status


def mass_extend():
    request_id = str(uuid.uuid4())
    response = client.extend_renewal_date_for_all_active_subscribers(MassExtendRenewalDateRequest(
        extendByDays=1, extendReasonCode=ExtendReasonCode.UNDECLARED, requestIdentifier=request_id,
        productId=options.product))
    echoed = response.requestIdentifier
    status, polls, deadline = None, 0, time.time() + 10
    while True:
        status = client.get_status_of_subscription_renewal_date_extensions(request_id, options.product)
        polls += 1
        if status.complete or time.time() > deadline:
            break
        time.sleep(0.25)
    ok = (echoed == request_id and status.complete is True and (status.succeededCount or 0) >= 1
          and status.requestIdentifier == request_id)
    return ok, {"requestIdentifier": echoed, "complete": status.complete, "completeDate": status.completeDate,
                "succeededCount": status.succeededCount, "failedCount": status.failedCount, "polls": polls,
                "statusRequestIdentifier": status.requestIdentifier}


run("mass_extend", mass_extend)

# 11. Request a Test Notification, then its status


def test_notification():
    token = client.request_test_notification().testNotificationToken
    response, polls, deadline = None, 0, time.time() + 10
    while True:
        response = client.get_test_notification_status(token)
        polls += 1
        if response.sendAttempts or time.time() > deadline:
            break
        time.sleep(0.25)
    attempts = [{"attemptDate": a.attemptDate, "sendAttemptResult": a.rawSendAttemptResult}
                for a in response.sendAttempts or []]
    decoded = verifier.verify_and_decode_notification(response.signedPayload)
    ok = bool(attempts) and value(decoded.notificationType) == "TEST"
    return ok, {"testNotificationToken": token, "notificationType": value(decoded.notificationType),
                "notificationUUID": decoded.notificationUUID, "sendAttempts": attempts,
                "sendAttemptResult": attempts[-1]["sendAttemptResult"] if attempts else None, "polls": polls}


run("test_notification", test_notification)

# 12. Get Notification History


def notification_history(only_failures=None):
    request = NotificationHistoryRequest(startDate=now_ms() - 3600 * 1000, endDate=now_ms() + 60 * 1000,
                                         onlyFailures=only_failures)
    decoded, token, pages = [], None, 0
    while True:
        response = client.get_notification_history(token, request)
        pages += 1
        for item in response.notificationHistory or []:
            decoded.append((verifier.verify_and_decode_notification(item.signedPayload), item.sendAttempts or []))
        token = response.paginationToken
        if not response.hasMore or not token or pages > 100:
            break
    return decoded, pages


def notification_history_all():
    decoded, pages = notification_history()
    types = sorted({value(n.notificationType) for n, _ in decoded})
    return "TEST" in types, {"count": len(decoded), "pages": pages, "types": types}


run("notification_history", notification_history_all)


def notification_history_only_failures():
    decoded, pages = notification_history(True)
    results = sorted({a.rawSendAttemptResult for _, attempts in decoded for a in attempts})
    return True, {"count": len(decoded), "pages": pages, "types": sorted({value(n.notificationType) for n, _ in decoded}),
                  "sendAttemptResults": results}


run("notification_history_only_failures", notification_history_only_failures)

# 13. Send Consumption Information (v2 and the deprecated v1)


def consumption_v2():
    client.send_consumption_information(options.consumable, ConsumptionRequest(
        customerConsented=True, sampleContentProvided=False, deliveryStatus=DeliveryStatus.DELIVERED,
        consumptionPercentage=50000, refundPreference=RefundPreference.GRANT_PRORATED))
    return True, {"httpStatus": client.last_response.status_code}


run("consumption_v2", consumption_v2)
expect_api_error("consumption_v2_no_consent", lambda: client.send_consumption_information(
    options.consumable, ConsumptionRequest(customerConsented=False, sampleContentProvided=False,
                                           deliveryStatus=DeliveryStatus.DELIVERED)), 4000035, 400)


def consumption_v1():
    client.send_consumption_data(options.consumable, ConsumptionRequestV1(
        customerConsented=True, consumptionStatus=ConsumptionStatus.PARTIALLY_CONSUMED, platform=Platform.APPLE,
        sampleContentProvided=False, deliveryStatus=DeliveryStatusV1.DELIVERED_AND_WORKING_PROPERLY,
        appAccountToken="", accountTenure=AccountTenure.THIRTY_DAYS_TO_NINETY_DAYS,
        playTime=PlayTime.ONE_TO_SIX_HOURS,
        lifetimeDollarsRefunded=LifetimeDollarsRefunded.ZERO_DOLLARS,
        lifetimeDollarsPurchased=LifetimeDollarsPurchased.ONE_CENT_TO_FORTY_NINE_DOLLARS_AND_NINETY_NINE_CENTS,
        userStatus=UserStatus.ACTIVE, refundPreference=RefundPreferenceV1.NO_PREFERENCE))
    return True, {"httpStatus": client.last_response.status_code}


run("consumption_v1", consumption_v1)

# 14. Set App Account Token


def app_account_token():
    token = str(uuid.uuid4())
    client.set_app_account_token(options.subscription, UpdateAppAccountTokenRequest(appAccountToken=token))
    decoded = verifier.verify_and_decode_signed_transaction(
        client.get_transaction_info(options.subscription).signedTransactionInfo)
    return decoded.appAccountToken == token.lower(), {"set": token, "decoded": decoded.appAccountToken}


run("app_account_token", app_account_token)

# 15. Get App Transaction Info


app_transaction_ids = []


def app_transaction():
    response = client.get_app_transaction_info(options.subscription)
    decoded = verifier.verify_and_decode_app_transaction(response.signedAppTransactionInfo)
    if decoded.appTransactionId:
        app_transaction_ids.append(decoded.appTransactionId)
    return decoded.bundleId == options.bundle_id and bool(decoded.appTransactionId), {
        "bundleId": decoded.bundleId, "receiptType": value(decoded.receiptType),
        "appAppleId": decoded.appAppleId, "appTransactionId": decoded.appTransactionId,
        "originalPlatform": value(decoded.originalPlatform)}


run("app_transaction", app_transaction)

# 15b. Finish Transaction (API 1.20)


def finish_transaction():
    client.finish_transaction(options.subscription)
    client.finish_transaction(options.subscription)
    return True, {"finished": options.subscription}


run("finish_transaction", finish_transaction)


# 15c. appTransactionId where any id of the customer goes, and where it does not (4000048)


def any_transaction_id():
    app_id = app_transaction_ids[0]
    history = client.get_transaction_history(
        app_id, None, TransactionHistoryRequest(), GetTransactionHistoryVersion.V2)
    ids = [verifier.verify_and_decode_signed_transaction(jws).transactionId for jws in history.signedTransactions]
    statuses = client.get_all_subscription_statuses(app_id)
    by_app = verifier.verify_and_decode_app_transaction(
        client.get_app_transaction_info(app_id).signedAppTransactionInfo)
    ok = options.subscription in ids and len(statuses.data) > 0 and by_app.appTransactionId == app_id
    return ok, {"appTransactionId": app_id, "history": ids[:5], "groups": len(statuses.data)}


run("any_transaction_id", any_transaction_id)
expect_api_error("app_transaction_id_info", lambda: client.get_transaction_info(app_transaction_ids[0]), 4000048, 400)
expect_api_error("app_transaction_id_finish", lambda: client.finish_transaction(app_transaction_ids[0]), 4000048, 400)

# 16. Errors
expect_api_error("not_found", lambda: client.get_transaction_info("9999999999999999"), 4040010, 404)
expect_api_error("invalid_id", lambda: client.get_transaction_info("abc"), 4000006, 400)
expect_api_error("bad_revision", lambda: client.get_transaction_history(
    options.subscription, "garbage", TransactionHistoryRequest(sort=Order.ASCENDING),
    GetTransactionHistoryVersion.V2), 4000005, 400)


def wrong_key_pem():
    if options.wrong_key_file:
        with open(options.wrong_key_file, "rb") as handle:
            return handle.read()
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


expect_api_error("wrong_key", lambda: make_client(key=wrong_key_pem()).get_transaction_info(options.subscription),
                 None, 401)
expect_api_error("wrong_bundle", lambda: make_client(bundle_id="com.example.other").get_transaction_info(
    options.subscription), None, 401)

# 17. Faults injected through the emulator's control plane
control_base = options.base.rstrip("/")
if control_base.endswith("/sandbox"):
    control_base = control_base[: -len("/sandbox")]


def control(method, path, body=None):
    headers = {"Content-Type": "application/json"}
    if options.control_token:
        headers["Authorization"] = "Bearer " + options.control_token
    request = urllib.request.Request(control_base + path, method=method, headers=headers,
                                     data=json.dumps(body).encode() if body is not None else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def retry_after():
    # Apple's client does not surface headers; Apple documents Retry-After as a UNIX time in milliseconds.
    response = client.last_response
    header = response.headers.get("Retry-After") if response is not None else None
    try:
        from_now = int(header) - now_ms()
    except (TypeError, ValueError):
        from_now = None
    return {"retryAfter": header, "retryAfterMsFromNow": from_now}


def with_fault(step, fault, raw_api_error, http_status, extra=None):
    try:
        control("DELETE", "/_emulator/v1/faults")
        control("POST", "/_emulator/v1/faults", fault)
    except Exception as error:  # noqa: BLE001
        emit(step, False, error="could not inject the fault: " + repr(error))
        return
    expect_api_error(step, lambda: client.get_transaction_info(options.subscription), raw_api_error, http_status, extra)


with_fault("fault_429", {"path": "*/inApps/v1/transactions/*", "status": 429, "retryAfter": 1, "count": 1},
           4290000, 429, retry_after)
with_fault("fault_retryable", {"path": "*/inApps/v1/transactions/*", "errorCode": 4040002, "count": 1},
           4040002, 404)


def faults_cleared():
    control("DELETE", "/_emulator/v1/faults")
    decoded = verifier.verify_and_decode_signed_transaction(
        client.get_transaction_info(options.subscription).signedTransactionInfo)
    return decoded.transactionId == options.subscription, {"transactionId": decoded.transactionId}


run("faults_cleared", faults_cleared)

# 18. Retention Messaging: images, messages, default messages, the realtime URL and its performance test,
# with a receiver here that verifies each realtime request with Apple's verifier and answers with a message.
import http.server
import struct
import threading
import zlib

from appstoreserverlibrary.models.DefaultConfigurationRequest import DefaultConfigurationRequest
from appstoreserverlibrary.models.ImageSize import ImageSize
from appstoreserverlibrary.models.ImageState import ImageState
from appstoreserverlibrary.models.MessageState import MessageState
from appstoreserverlibrary.models.PerformanceTestRequest import PerformanceTestRequest
from appstoreserverlibrary.models.PerformanceTestStatus import PerformanceTestStatus
from appstoreserverlibrary.models.RealtimeUrlRequest import RealtimeUrlRequest
from appstoreserverlibrary.models.UploadMessageImage import UploadMessageImage
from appstoreserverlibrary.models.UploadMessageRequestBody import UploadMessageRequestBody
from appstoreserverlibrary.models.BulletPoint import BulletPoint


def png(width, height):
    """An opaque RGB PNG of one colour, made with zlib."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    rows = b"".join(b"\x00" + b"\x20\x60\xa0" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


sandbox_subscription = options.sandbox_subscription or (
    options.subscription if environment == Environment.SANDBOX else None)
sandbox_client = make_client()
sandbox_client._base_url = control_base + "/sandbox"
verifiers = {
    "sandbox": SignedDataVerifier([base64.b64decode(options.root)], False, Environment.SANDBOX, options.bundle_id,
                                  None),
    "production": SignedDataVerifier([base64.b64decode(options.root)], False, Environment.PRODUCTION,
                                     options.bundle_id, app_apple_id or 1234567890),
}
received = []
answer_message = {"id": None}


class RetentionReceiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the standard library's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        which = self.path.strip("/")
        try:
            decoded = verifiers[which].verify_and_decode_realtime_request(json.loads(body)["signedPayload"])
            received.append({"path": which, "originalTransactionId": decoded.originalTransactionId,
                             "productId": decoded.productId, "environment": value(decoded.environment),
                             "requestIdentifier": str(decoded.requestIdentifier), "userLocale": decoded.userLocale})
            answer = json.dumps({"message": {"messageIdentifier": answer_message["id"]}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
        except Exception as error:  # noqa: BLE001 - an unverifiable request is answered 400 and recorded
            received.append({"path": which, "error": repr(error)})
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args):
        pass


receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RetentionReceiver)
threading.Thread(target=receiver.serve_forever, daemon=True).start()
receiver_base = "http://127.0.0.1:%d" % receiver.server_address[1]
env_path = "sandbox" if environment == Environment.SANDBOX else "production"
main_image, bullet_image, message_id, spare_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
answer_message["id"] = str(message_id)
pending = MessageState.APPROVED if environment == Environment.SANDBOX else MessageState.PENDING


def upload_images():
    client.upload_image(main_image, png(3840, 200), ImageSize.FULL_SIZE)
    client.upload_image(bullet_image, png(1024, 1024), ImageSize.BULLET_POINT)
    listed = {item.imageIdentifier: item for item in client.get_image_list().imageIdentifiers}
    ok = (main_image in listed and bullet_image in listed
          and value(listed[bullet_image].imageSize) == "BULLET_POINT"
          and value(listed[main_image].imageState) == value(pending))
    return ok, {"images": {str(k): [value(v.imageState), value(v.imageSize)] for k, v in listed.items()}}


run("retention_upload_images", upload_images)
expect_api_error("retention_image_exists", lambda: client.upload_image(main_image, png(3840, 200)), 4090000, 409)
expect_api_error("retention_image_invalid", lambda: client.upload_image(uuid.uuid4(), b"not a png"), 4000161, 400)


def upload_message():
    client.upload_message(message_id, UploadMessageRequestBody(
        header="Before you go", body="Stay for half price next month.",
        image=UploadMessageImage(imageIdentifier=main_image, altText="A calm picture"),
        bulletPoints=[BulletPoint(text="Keep your library", imageIdentifier=bullet_image, altText="Books")]))
    client.upload_message(spare_id, UploadMessageRequestBody(header="Spare", body="To be deleted."))
    listed = {item.messageIdentifier: value(item.messageState) for item in client.get_message_list().messageIdentifiers}
    return listed.get(message_id) == value(pending), {"messages": {str(k): v for k, v in listed.items()}}


run("retention_upload_message", upload_message)
expect_api_error("retention_message_exists", lambda: client.upload_message(
    message_id, UploadMessageRequestBody(header="Again", body="Again.")), 4090001, 409)


def delete_message():
    client.delete_message(spare_id)
    listed = [item.messageIdentifier for item in client.get_message_list().messageIdentifiers]
    return spare_id not in listed, {"messages": [str(m) for m in listed]}


run("retention_delete_message", delete_message)
expect_api_error("retention_message_not_found", lambda: client.delete_message(spare_id), 4040015, 404)
expect_api_error("retention_image_in_use", lambda: client.delete_image(bullet_image), 4030019, 403)

if environment == Environment.PRODUCTION:
    # Production uploads wait for App Review: not approved, a message cannot be a default yet.
    expect_api_error("retention_default_not_approved", lambda: client.configure_default_message(
        options.product, "en-US", DefaultConfigurationRequest(messageIdentifier=message_id)), 4030017, 403)

    def review():
        for kind, ident in (("images", main_image), ("images", bullet_image), ("messages", message_id)):
            control("POST", "/_emulator/v1/apps/%s/retention/%s/%s/review" % (options.bundle_id, kind, ident),
                    {"approved": True})
        listed = {item.messageIdentifier: value(item.messageState)
                  for item in client.get_message_list().messageIdentifiers}
        return listed.get(message_id) == "APPROVED", {"messages": {str(k): v for k, v in listed.items()}}

    run("retention_review", review)


def default_message():
    client.configure_default_message(options.product, "en-US", DefaultConfigurationRequest(messageIdentifier=message_id))
    got = client.get_default_message(options.product, "en-US").messageIdentifier
    client.delete_default_message(options.product, "en-US")
    try:
        client.get_default_message(options.product, "en-US")
        gone = False
    except APIException as error:
        gone = error.raw_api_error == 4040020
    client.configure_default_message(options.product, "en-US", DefaultConfigurationRequest(messageIdentifier=message_id))
    return got == message_id and gone, {"default": str(got), "deletedAnswers4040020": gone}


run("retention_default_message", default_message)
expect_api_error("retention_invalid_locale", lambda: client.get_default_message(options.product, "not a locale!"),
                 4000164, 400)


def performance_test():
    sandbox_client.configure_realtime_url(RealtimeUrlRequest(realtimeURL=receiver_base + "/sandbox"))
    started = sandbox_client.initiate_performance_test(PerformanceTestRequest(originalTransactionId=sandbox_subscription))
    deadline = time.time() + 90
    result = sandbox_client.get_performance_test_results(started.requestId)
    while value(result.result) == "PENDING" and time.time() < deadline:
        time.sleep(0.5)
        result = sandbox_client.get_performance_test_results(started.requestId)
    ok = (value(result.result) == value(PerformanceTestStatus.PASS) and result.successRate >= 95
          and result.config.totalRequests == started.config.totalRequests)
    return ok, {"result": value(result.result), "successRate": result.successRate,
                "p90": result.responseTimes.p90 if result.responseTimes else None,
                "failures": {value(k): v for k, v in (result.failures or {}).items()},
                "config": {"totalRequests": started.config.totalRequests,
                           "responseTimeThreshold": started.config.responseTimeThreshold}}


if sandbox_subscription is None:
    emit("retention_performance_test", False, error="no sandbox subscription given (--sandbox-subscription)")
else:
    if environment == Environment.PRODUCTION:
        expect_api_error("retention_realtime_url_needs_test", lambda: client.configure_realtime_url(
            RealtimeUrlRequest(realtimeURL=receiver_base + "/production")), 4030026, 403)
    run("retention_performance_test", performance_test)
expect_api_error("retention_test_not_found", lambda: client.get_performance_test_results(str(uuid.uuid4())),
                 4040018, 404)


def realtime_url():
    client.configure_realtime_url(RealtimeUrlRequest(realtimeURL=receiver_base + "/" + env_path))
    configured = client.get_realtime_url().realtimeURL
    client.delete_realtime_url()
    try:
        client.get_realtime_url()
        gone = False
    except APIException as error:
        gone = error.raw_api_error == 4040021
    client.configure_realtime_url(RealtimeUrlRequest(realtimeURL=receiver_base + "/" + env_path))
    return configured == receiver_base + "/" + env_path and gone, {"realtimeURL": configured, "deleted": gone}


run("retention_realtime_url", realtime_url)


def realtime_request():
    before = len(received)
    request = urllib.request.Request(
        control_base + "/_emulator/v1/transactions/%s/retention-request" % options.subscription, method="POST",
        headers=dict({"Content-Type": "application/json"},
                     **({"Authorization": "Bearer " + options.control_token} if options.control_token else {})),
        data=json.dumps({"locale": "en-US"}).encode())
    with urllib.request.urlopen(request, timeout=10) as response:
        answer = json.loads(response.read())
    mine = [item for item in received[before:] if item.get("path") == env_path]
    ok = (len(mine) == 1 and "error" not in mine[0] and mine[0]["originalTransactionId"] == options.subscription
          and answer["outcome"] == "message" and answer["shown"]["messageIdentifier"] == str(message_id)
          and mine[0]["requestIdentifier"] == answer["requestIdentifier"])
    return ok, {"received": mine, "outcome": answer.get("outcome"), "milliseconds": answer.get("milliseconds")}


run("retention_realtime_request", realtime_request)
errors = [item for item in received if "error" in item]
emit("retention_requests_verified", not errors and len(received) > 0, received=len(received), errors=errors[:3])


def delete_image():
    spare = uuid.uuid4()
    client.upload_image(spare, png(1024, 1024), ImageSize.BULLET_POINT)
    client.delete_image(spare)
    listed = [item.imageIdentifier for item in client.get_image_list().imageIdentifiers]
    return spare not in listed, {"images": len(listed)}


run("retention_delete_image", delete_image)
receiver.shutdown()

# 19. Monthly billing with a 12-month commitment (API 1.21): Apple's models read the fields.


def commitment_transaction():
    decoded = verifier.verify_and_decode_signed_transaction(
        client.get_transaction_info(options.commitment).signedTransactionInfo)
    info = decoded.commitmentInfo
    ok = (value(decoded.billingPlanType) == "MONTHLY" and info is not None and info.billingPeriodNumber == 1
          and info.totalBillingPeriods == 12 and info.commitmentPrice == 12 * decoded.price
          and info.commitmentExpiresDate > decoded.expiresDate)
    return ok, {"billingPlanType": value(decoded.billingPlanType), "price": decoded.price,
                "commitmentInfo": {"billingPeriodNumber": info.billingPeriodNumber if info else None,
                                   "totalBillingPeriods": info.totalBillingPeriods if info else None,
                                   "commitmentPrice": info.commitmentPrice if info else None}}


def commitment_renewal_info():
    statuses = client.get_all_subscription_statuses(options.commitment)
    item = statuses.data[0].lastTransactions[0]
    renewal = verifier.verify_and_decode_renewal_info(item.signedRenewalInfo)
    info = renewal.commitmentInfo
    ok = (value(renewal.renewalBillingPlanType) == "MONTHLY" and info is not None
          and value(info.commitmentAutoRenewStatus) == 1 and value(info.commitmentRenewalBillingPlanType) == "MONTHLY"
          and info.commitmentRenewalDate is not None and info.commitmentAutoRenewProductId == renewal.productId)
    return ok, {"renewalBillingPlanType": value(renewal.renewalBillingPlanType), "renewalPrice": renewal.renewalPrice,
                "commitmentRenewalPrice": info.commitmentRenewalPrice if info else None}


if options.commitment:
    run("commitment_transaction", commitment_transaction)
    run("commitment_renewal_info", commitment_renewal_info)
sys.exit(0)
