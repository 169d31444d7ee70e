"""Both dashboards in a real browser (headless Chromium driven by Selenium).

Starts the emulator (`storekeeper appstore serve`, with a control-plane token) and the purchase server
(`storekeeper serve`) on free ports in a temporary folder, points the emulator's sandbox notifications at
the server, then, as a person would, from the emulator's dashboard only: signs in, creates an account and a
device, buys the monthly subscription, makes renewals fail and advances the clock a period (billing retry),
resolves the billing issue, and refunds the purchase. The app's one step (posting the purchase to the
server for its user) is done over HTTP, as the app would. Then on the server's dashboard: signs in, looks up
the user and finds the story (events, the refunded subscription, notifications received), and reads the
charts: every number drawn equals `GET /v1/metrics/{chart}` and a recount from the subscriber's events and
purchases. A screenshot of each page goes to --artifacts.

Usage: dashboards.py --storekeeper <binary> --artifacts <dir>. Exits 0 when every check holds; prints each
failure and exits 1 otherwise.
"""
import argparse
import email.utils
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

parser = argparse.ArgumentParser()
parser.add_argument("--storekeeper", required=True)
parser.add_argument("--artifacts", required=True)
arguments = parser.parse_args()

TOKEN = "emulator-token-0123456789"
SECRET = "sk_browser_0123456789abcdef"
PUBLIC = "pk_browser_0001"
BUNDLE = "com.example.storekeeper"
MONTHLY = "com.example.storekeeper.monthly"
USER = "browser-user-1"

failures = []


def check(condition, message):
    print(("ok   " if condition else "FAIL ") + message, flush=True)
    if not condition:
        failures.append(message)


def start(command, log_path):
    log = open(log_path, "w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        time.sleep(0.1)
        with open(log_path) as text:
            for line in text:
                if "listening" in line and "http://" in line:
                    address = line[line.index("http://"):].split()[0].rstrip("/.,")
                    return process, address
        if process.poll() is not None:
            break
    raise SystemExit(f"{command[1]} did not start: {open(log_path).read()}")


answered_at = [0.0]


def request(method, url, body=None, token=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers, method=method), timeout=30) as answer:
        # When the server answered, by its clock (the Date header, to the second).
        if answer.headers.get("Date"):
            answered_at[0] = email.utils.parsedate_to_datetime(answer.headers["Date"]).timestamp() * 1000
        return json.loads(answer.read() or b"null")


work = tempfile.mkdtemp(prefix="storekeeper-browser-")
os.makedirs(arguments.artifacts, exist_ok=True)
processes = []
driver = None
try:
    emulator, emulator_url = start(
        [arguments.storekeeper, "appstore", "serve", "--data", f"{work}/emulator", "--port", "0", "--token", TOKEN],
        f"{work}/emulator.log")
    processes.append(emulator)
    subprocess.run(
        [arguments.storekeeper, "appstore", "certs", "--url", emulator_url, "--token", TOKEN, "--out", f"{work}/certs"],
        check=True, stdout=subprocess.DEVNULL)
    with open(f"{work}/server.json", "w") as config:
        json.dump({
            "secretKey": SECRET, "reconciliation": {"intervalSeconds": 0},
            "apps": [{
                "bundleId": BUNDLE, "publicKey": PUBLIC, "currency": "USD",
                "receiptRoots": ["certs/receipt-root.pem"], "jwsRoots": ["certs/jws-root.pem"],
                "entitlements": {"plus": [MONTHLY, "com.example.storekeeper.yearly"]},
                "subscriptionPeriods": {MONTHLY: "P1M", "com.example.storekeeper.yearly": "P1Y"},
            }],
        }, config)
    server, server_url = start(
        [arguments.storekeeper, "serve", "--config", f"{work}/server.json", "--port", "0", "--data", f"{work}/server"],
        f"{work}/server.log")
    processes.append(server)

    options = Options()
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"]:
        options.add_argument(flag)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    wait = WebDriverWait(driver, 20)
    shots = 0

    def shot(name):
        global shots
        shots += 1
        driver.save_screenshot(os.path.join(arguments.artifacts, f"{shots:02d}-{name}.png"))

    def press(form_id):
        """Clicks a form's button and waits for the page the script goes to (a reload or the next page)."""
        driver.execute_script("window.__before = true;")
        driver.find_element(By.CSS_SELECTOR, f"form#{form_id} button").click()
        try:
            wait.until(lambda d: d.execute_script(
                "return window.__before === undefined && document.readyState === 'complete';"))
        except Exception:
            status = driver.find_element(By.ID, "status").text
            raise AssertionError(f"{form_id}: the page did not move on ({status})")

    def text(element_id):
        return driver.find_element(By.ID, element_id).get_attribute("textContent")

    # ---- The emulator's dashboard
    driver.get(emulator_url + "/")
    check(driver.current_url.endswith("/dashboard/login"), "a signed-out reader of / is sent to the sign-in form")
    driver.find_element(By.NAME, "secret").send_keys(TOKEN)
    driver.find_element(By.CSS_SELECTOR, "form#login button").click()
    wait.until(lambda d: d.find_elements(By.ID, "clock-heading"))
    check(driver.title.startswith("App Store emulator"), "signed in, the overview shows")
    shot("emulator-overview")
    # Where the sandbox's notifications go: the purchase server.
    driver.find_element(By.CSS_SELECTOR, "form#notifications-form input[name=sandboxURL]").send_keys(
        f"{server_url}/v1/notifications/apple/{BUNDLE}")
    press("notifications-form")
    check(server_url in text(f"notifications-{BUNDLE}"), "the app's sandbox notifications go to the server")
    press("create-account")
    check("/dashboard/accounts/" in driver.current_url, "creating an account opens its page")
    account = driver.current_url.rsplit("/", 1)[1]
    press("add-device")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#devices tbody tr")) == 1, "the account has one device")
    Select(driver.find_element(By.CSS_SELECTOR, "form#buy select[name=productId]")).select_by_value(MONTHLY)
    shot("emulator-account")
    press("buy")
    check("/dashboard/transactions/" in driver.current_url, "buying opens the transaction's page")
    transaction = driver.current_url.rsplit("/", 1)[1]
    check("active" in text("subscription-facts"), "the new subscription is active")
    shot("emulator-transaction-bought")
    press("finish")
    check(len(driver.find_elements(By.ID, "finish")) == 0 and "on" in text("transaction-facts"),
          "finishing it (as the app would) marks it finished")

    # The app posts its purchase to the server for its user (what an app does; not a dashboard step).
    signed = request("GET", f"{emulator_url}/_emulator/v1/transactions/{transaction}", token=TOKEN)["jwsRepresentation"]
    request("POST", f"{server_url}/v1/transactions", {"bundleId": BUNDLE, "appUserId": USER, "signedTransaction": signed}, PUBLIC)

    press("billing-retry")
    press("advance-period")
    facts = text("subscription-facts")
    check("billing retry" in facts or "billing grace period" in facts, "a failed renewal puts it in billing retry")
    shot("emulator-billing-retry")
    press("resolve-issue")
    check("active" in text("subscription-facts"), "resolving the billing issue makes it active again")
    timeline = text("timeline")
    check("DID_FAIL_TO_RENEW" in timeline and "DID_RENEW" in timeline, "the timeline shows the failure and the recovery")
    # Refund the period the customer is in: the renewal, reached from the timeline.
    driver.find_element(By.LINK_TEXT, "Renewal 1").click()
    wait.until(lambda d: d.find_elements(By.ID, "transaction-facts"))
    check(driver.current_url.rsplit("/", 1)[1] != transaction, "the timeline links the renewal's own page")
    press("refund")
    check("Refunded" in text("timeline") and "REFUND" in text("timeline"), "the refund is on the timeline")
    shot("emulator-transaction-refunded")
    driver.set_window_size(390, 1400)
    driver.refresh()
    wait.until(lambda d: d.find_elements(By.ID, "timeline"))
    width = driver.execute_script("return document.documentElement.scrollWidth")
    check(width <= 400, f"the transaction page fits a phone's width ({width}px)")
    shot("emulator-transaction-phone")
    driver.set_window_size(1280, 1600)
    driver.get(emulator_url + "/")
    check(transaction in text("transactions"), "the overview lists the transaction")
    shot("emulator-overview-after")

    # ---- The server's dashboard: wait until the notifications are in.
    events = []
    for _ in range(100):
        events = request("GET", f"{server_url}/v1/subscribers/{USER}/events?limit=500", token=SECRET)["events"]
        if any(e["type"] == "REFUND" for e in events):
            break
        time.sleep(0.2)
    driver.get(server_url + "/dashboard")
    check(driver.current_url.endswith("/dashboard/login"), "the server's dashboard asks for the secret key")
    driver.find_element(By.NAME, "secret").send_keys("not-the-key")
    driver.find_element(By.CSS_SELECTOR, "form#login button").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[role=alert]"))
    check(len(driver.find_elements(By.ID, "lookup")) == 0, "a wrong key does not sign in")
    driver.find_element(By.NAME, "secret").send_keys(SECRET)
    driver.find_element(By.CSS_SELECTOR, "form#login button").click()
    wait.until(lambda d: d.find_elements(By.ID, "lookup"))
    check("DID_FAIL_TO_RENEW" in text("notifications") and "REFUND" in text("notifications"),
          "recent notifications list the billing issue and the refund")
    shot("server-overview")
    driver.find_element(By.CSS_SELECTOR, "form#lookup input[name=user]").send_keys(USER)
    driver.find_element(By.CSS_SELECTOR, "form#lookup button").click()
    wait.until(lambda d: d.find_elements(By.ID, "app-user"))
    shown = [cell.get_attribute("textContent") for cell in driver.find_elements(By.CSS_SELECTOR, "#events .event-type")]
    check(shown == [e["type"] for e in events], f"the events shown are the API's: {shown}")
    for kind in ["INITIAL_PURCHASE", "BILLING_ISSUE", "RENEWAL", "REFUND"]:
        check(kind in shown, f"the subscriber's events include {kind}")
    check("revoked" in text("subscriptions"), "the subscription shows as revoked")
    shot("server-subscriber")

    driver.get(server_url + "/dashboard/charts")
    wait.until(lambda d: d.find_elements(By.ID, "chart-actives"))
    shot("server-charts")
    start_day = driver.find_element(By.NAME, "from").get_attribute("value")
    end_day = driver.find_element(By.NAME, "to").get_attribute("value")
    subscriber = request("GET", f"{server_url}/v1/subscribers/{USER}", token=SECRET)
    for chart in ["actives", "trials", "actives_new", "churn", "revenue", "mrr"]:
        drawn = [float(cell.get_attribute("textContent"))
                 for cell in driver.find_elements(By.CSS_SELECTOR, f"#chart-{chart}-table .value")]
        points = len(driver.find_elements(By.CSS_SELECTOR, f"#chart-{chart}-svg circle"))
        # The page's range in milliseconds: its first day's start to the end of its last day.
        first = int(time.mktime(time.strptime(start_day, "%Y-%m-%d")) - time.timezone) * 1000
        last = int(time.mktime(time.strptime(end_day, "%Y-%m-%d")) - time.timezone) * 1000 + 86_400_000
        metrics = request("GET", f"{server_url}/v1/metrics/{chart}?bundleId={BUNDLE}&from={first}&to={last}", token=SECRET)
        api = [round(point["value"], 2) for point in metrics["values"]]
        check(drawn == api, f"{chart}: the page's numbers equal GET /v1/metrics/{chart}")
        check(points == len(api), f"{chart}: one point drawn per period")
        if chart == "actives_new":
            recount = sum(1 for e in events if e["type"] == "INITIAL_PURCHASE")
            check(sum(api) == recount, f"actives_new: {sum(api)} equals the INITIAL_PURCHASE events ({recount})")
        if chart == "revenue":
            paid = subscriber["purchases"]
            prices = {p["transactionId"]: 2.99 for p in paid}  # the monthly's catalogue price
            recount = round(sum(prices.values()) - sum(2.99 for p in paid if p["revoked"]), 2)
            check(round(sum(api), 2) == recount, f"revenue: {round(sum(api), 2)} equals purchases minus refunds ({recount})")
        if chart == "actives":
            # The current period's snapshot is taken at the server's now; store time may run ahead of it.
            at = answered_at[0]
            covering = {p["originalTransactionId"] for p in subscriber["purchases"]
                        if p["purchaseDate"] <= at + 1000 and at < min(p["expiresDate"], p["revocationDate"] or p["expiresDate"])}
            check(api[-1] == len(covering), f"actives: {api[-1]} at the end equals the paid periods covering now ({len(covering)})")
    # Phone width: the charts page still has its content, with no sideways scrolling of the page.
    driver.set_window_size(390, 1400)
    driver.refresh()
    wait.until(lambda d: d.find_elements(By.ID, "chart-mrr"))
    width = driver.execute_script("return document.documentElement.scrollWidth")
    check(width <= 400, f"the charts page fits a phone's width ({width}px)")
    shot("server-charts-phone")
except AssertionError as error:
    failures.append(str(error))
    print("FAIL " + str(error))
finally:
    if driver is not None:
        try:
            driver.save_screenshot(os.path.join(arguments.artifacts, "last.png"))
        except Exception:
            pass
        driver.quit()
    for process in processes:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    for name in ["emulator.log", "server.log"]:
        if os.path.exists(f"{work}/{name}"):
            shutil.copy(f"{work}/{name}", os.path.join(arguments.artifacts, name))
    shutil.rmtree(work, ignore_errors=True)

print(f"{len(failures)} failure(s)" if failures else "all browser checks passed")
sys.exit(1 if failures else 0)
