#!/usr/bin/python3
"""The operator console in a real browser: headless Chromium (Debian's) driven by Selenium
through chromium-driver, against a real `yaok-hub run` process.

Checks: login; the overview matches `yaok-hub status --json`; live updates arrive; switching a
transport off (asked twice while a phone is attached) changes the config file (comments kept)
and `yaok-hub status` agrees; a refused
switch shows the key/line error and leaves the file byte for byte; a POST without the CSRF
token is refused; three wrong passwords trigger the delay; security headers and cookie flags;
keyboard focus reaches the toggles; the browser's network log shows no request outside the
hub. Screenshots of every page at 360 px and 1280 px go to Tests/console/out (or $OUT).

Exit 0: passed; 1: failed; 77: skipped because a tool is missing (a failure when YAOK_CI=1).
"""
import base64, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.error, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BIN", os.path.join(ROOT, ".build", "debug"))
OUT = os.environ.get("OUT", os.path.join(ROOT, "Tests", "console", "out"))
PASSWORD = "field operator 42"
results = {"passed": 0, "failed": 0}


def skip_or_fail(why):
    if os.environ.get("YAOK_CI") == "1":
        print(f"FAIL: {why} (YAOK_CI=1: CI installs it, so a missing tool is a failure)")
        sys.exit(1)
    print(f"SKIP: {why}")
    sys.exit(77)


try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:
    skip_or_fail("python3-selenium is not installed (apt-get install python3-selenium)")
CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")
if not CHROMIUM or not DRIVER:
    skip_or_fail("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
if not os.path.exists(os.path.join(BIN, "yaok-hub")):
    print(f"FAIL: {BIN}/yaok-hub not built")
    sys.exit(1)


def check(name, ok, detail=""):
    if ok:
        results["passed"] += 1
        print(f"ok   {name}")
    else:
        results["failed"] += 1
        print(f"FAIL {name}{': ' + detail if detail else ''}")


def free_port(kind=socket.SOCK_STREAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, fn, timeout=15.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = fn()
            if v:
                return v
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


work = tempfile.mkdtemp(prefix="yaok-console-")
port = free_port()
udp_port = free_port(socket.SOCK_DGRAM)
base = f"http://127.0.0.1:{port}"
config = os.path.join(work, "hub.yaml")
with open(config, "w") as f:
    f.write(f"""# A hub for the console's browser test.
hub:
  name: field-hub
  data_dir: {work}/data
  control_socket: {work}/control.sock
console:
  enabled: true   # the test's console
  listen: 127.0.0.1:{port}
  sample_interval_s: 1
transports:
  # Phones over UDP on loopback.
  udp:
    enabled: true   # switched off by the test; this comment must survive
    listen: 127.0.0.1:{udp_port}
  mesh:
    enabled: false
    peer_roles: [hub]
  # Needs address and relay_key before it can be switched on: the test's refused edit.
  relay:
    enabled: false
""")
hub_bin = os.path.join(BIN, "yaok-hub")
subprocess.run([hub_bin, "console-password", "-c", config, "--stdin"], input=PASSWORD + "\n", text=True, check=True,
               stdout=subprocess.DEVNULL)
log = open(os.path.join(work, "hub.log"), "w")
hub = subprocess.Popen([hub_bin, "run", "-c", config], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
driver = None
phone = None


def status():
    out = subprocess.run([hub_bin, "status", "--json", "-c", config], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def status_out(peer):
    return sum(l["framesOut"] for l in status()["router"]["links"] if l["peer"] == peer)


def fetch(path, data=None, headers=None):
    req = urllib.request.Request(base + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


try:
    wait_until("the console", lambda: fetch("/login")[0] == 200)
    wait_until("the hub's status", lambda: status())
    # A real Ya OK user attaches over UDP, so the overview, links and charts have something to show.
    home = os.path.join(work, "alice")
    subprocess.run([os.path.join(BIN, "yaok"), "init", "--home", home, "--name", "Alice"], check=True, stdout=subprocess.DEVNULL)
    phone = subprocess.Popen([os.path.join(BIN, "yaok"), "listen", "--home", home, "--hub", f"udp://127.0.0.1:{udp_port}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_until("the phone's link", lambda: status()["router"]["links"])

    # Headers, without a browser: CSP and friends on every response, cookie flags.
    code, headers, _ = fetch("/login")
    csp = headers.get("Content-Security-Policy", "")
    check("CSP: script-src 'self', no inline, default-src 'none'", "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp, csp)
    check("login cookie is HttpOnly; SameSite=Strict", all(x in headers.get("Set-Cookie", "") for x in ("HttpOnly", "SameSite=Strict")),
          headers.get("Set-Cookie", ""))
    code, headers, _ = fetch("/")
    check("a page without a session sends the browser to the login", code in (200, 303) and "/login" in (headers.get("Location") or "/login"))
    code, _, _ = fetch("/events")
    check("live events need a session (401)", code == 401, str(code))

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
              "--no-first-run", "--disable-extensions", "--disable-background-networking", "--disable-sync",
              "--disable-component-update", "--disable-default-apps", "--lang=en-GB", "--force-device-scale-factor=1"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    # The TLS phase's certificate is self-signed: the test checks its fingerprint instead, as
    # an operator would.
    opts.set_capability("acceptInsecureCerts", True)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    driver.set_window_size(1280, 900)
    wait = WebDriverWait(driver, 15)

    # Log in.
    driver.get(base + "/")
    check("login page shown first", "Log in" in driver.title, driver.title)
    os.makedirs(OUT, exist_ok=True)

    def shoot(name):
        for width in (360, 1280):
            driver.set_window_size(width, 900)
            time.sleep(0.2)
            height = driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
            driver.set_window_size(width, min(max(height + 140, 600), 6000))
            time.sleep(0.2)
            path = os.path.join(OUT, f"{name}-{width}.png")
            driver.save_screenshot(path)
            overflow = driver.execute_script("return document.documentElement.scrollWidth > window.innerWidth + 1")
            check(f"{name} at {width} px: no sideways scrolling", not overflow)
        driver.set_window_size(1280, 900)

    shoot("login")
    pw = driver.find_element(By.ID, "password")
    label = driver.find_element(By.CSS_SELECTOR, "label[for=password]")
    check("password field is labelled", label.text.strip() != "")
    pw.send_keys(PASSWORD + Keys.ENTER)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-transport]"))
    check("logged in: overview with transport cards", driver.title.startswith("Overview"), driver.title)
    session = driver.get_cookie("yaok_console")
    check("session cookie HttpOnly and SameSite=Strict", bool(session) and session.get("httpOnly") and session.get("sameSite") == "Strict", str(session))

    # The overview against `yaok-hub status --json`.
    wait.until(lambda d: d.find_element(By.ID, "live").text.startswith("Live: updated"))
    check("live updates arrive over Server-Sent Events", True)
    def field(key):
        el = driver.find_element(By.CSS_SELECTOR, f'[data-field="{key}"]')
        return el.get_attribute("data-value"), el.text

    def mismatches_now():
        st = status()
        mismatches = []
        for t in st["transports"]:
            p = f"t.{t['name']}."
            s = t["status"]
            want = {"state": s["state"], "links": str(s["links"]), "peers": str(s["peers"]), "framesIn": str(s["frames_in"]),
                    "framesOut": str(s["frames_out"]), "bytesIn": str(s["bytes_in"]), "bytesOut": str(s["bytes_out"]),
                    "restarts": str(t.get("restarts") or 0), "lastError": s.get("last_error") or ""}
            for k, v in want.items():
                got = field(p + k)[0]
                if got != v:
                    mismatches.append(f"{p}{k}: page {got!r}, status {v!r}")
            reason = field(p + "reason")[1]
            if s["reason"] and s["reason"] not in reason:
                mismatches.append(f"{p}reason: page {reason!r}, status {s['reason']!r}")
        q = st["router"]["queue"]
        for k in ("queued", "inFlight", "handedOver", "delivered", "expired", "bytes"):
            if field("queue." + k)[0] != str(q[k]):
                mismatches.append(f"queue.{k}: page {field('queue.' + k)[0]}, status {q[k]}")
        c = st["router"]["counters"]
        for k, ck in (("accepted", "accepted"), ("forwarded", "forwarded"), ("delivered", "deliveredDirect"), ("duplicates", "duplicates")):
            if field("msg." + k)[0] != str(c[ck]):
                mismatches.append(f"msg.{k}: page {field('msg.' + k)[0]}, status {c[ck]}")
        # Whether the hub's clock can be believed (Docs/protocol.md, clock 0x0C).
        clock = st["router"].get("clock")
        if clock is None:
            mismatches.append("status has no router.clock")
        else:
            want = "known" if clock["source"] in ("system", "relay", "hubs") else ("unknown" if clock["source"] == "none" else "estimated")
            value, text = field("hub.clock")
            if value != want or not (text.startswith("synchronised") or text.startswith("unsynchronised")):
                mismatches.append(f"hub.clock: page {value!r} {text!r}, status source {clock['source']!r}")
        return st, mismatches

    # The page follows the hub live (every 2 s): it must reach exactly what status --json says.
    end = time.time() + 15
    while True:
        st, mismatches = mismatches_now()
        if not mismatches or time.time() > end:
            break
        time.sleep(0.5)
    cards = [c.get_attribute("data-transport") for c in driver.find_elements(By.CSS_SELECTOR, "[data-transport]")]
    check("one card per configured transport, in config order", cards == [t["name"] for t in st["transports"]], f"{cards}")
    udp_st = [t for t in st["transports"] if t["name"] == "udp"][0]["status"]
    check("the phone's traffic shows (udp links and frames in non-zero)", udp_st["links"] >= 1 and udp_st["frames_in"] > 0, json.dumps(udp_st))
    check("overview matches yaok-hub status --json (state, reason, links, peers, frames, bytes, restarts, queue, messages)",
          not mismatches, "; ".join(mismatches))
    # The first screen answers "is mail flowing?", as the CLI does.
    def glance_wanted():
        s = status()
        roles = [l["role"] for l in s["router"]["links"]]
        q = s["router"]["queue"]
        return {"glance.phones": str(roles.count("endpoint")), "glance.hubs": str(roles.count("hub")),
                "glance.waiting": str(q["queued"] + q["inFlight"])}
    end = time.time() + 15
    while True:
        want = glance_wanted()
        got = {k: field(k)[0] for k in want}
        if got == want or time.time() > end:
            break
        time.sleep(0.5)
    check("the first screen's phones, hubs and waiting messages match status --json", got == want and want["glance.phones"] != "0",
          f"page {got}, status {want}")
    cli = subprocess.run([hub_bin, "status", "-c", config], capture_output=True, text=True, check=True).stdout
    cli_transports = next((l[len("transports: "):] for l in cli.splitlines() if l.startswith("transports: ")), None)
    check("the first screen's transport summary is the CLI's", field("glance.transports")[1] == cli_transports,
          f"page {field('glance.transports')[1]!r}, CLI {cli_transports!r}")
    check("the CLI says first who is attached, what waits and the last delivery",
          re.search(r"^now: [1-9]\d* phones? attached, \d+ hubs? linked, \d+ messages? waiting, last delivery ", cli, re.M) is not None, cli[:400])
    size = driver.get_window_size()
    driver.set_window_size(360, 740)
    rect = driver.execute_script("""window.scrollTo(0, 0); var r = document.getElementById('glance').getBoundingClientRect();
      return [r.top, r.bottom, window.innerHeight];""")
    check("at 360 px the answers (phones, waiting, last delivery, relay, clock) fit the first screen", rect[1] <= rect[2], f"{rect}")
    driver.set_window_size(size["width"], size["height"])
    udp_state = driver.find_element(By.CSS_SELECTOR, '[data-transport="udp"] .state').text
    check("state in words and a glyph, not colour alone", "Working" in udp_state and "✓" in udp_state, udp_state)
    page_text = driver.page_source
    check("no full hub ID on the page", st["hub"]["id"] not in page_text)

    # Keyboard: Tab from the top reaches the skip link first, then the toggles.
    body = driver.find_element(By.TAG_NAME, "body")
    driver.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0,0)")
    body.send_keys(Keys.TAB)
    first = driver.switch_to.active_element
    check("first Tab stop is the skip link", first.text.strip() == "Skip to content" or first.get_attribute("class") == "skip",
          first.get_attribute("outerHTML")[:80])
    reached = False
    for _ in range(30):
        driver.switch_to.active_element.send_keys(Keys.TAB)
        if driver.switch_to.active_element.text.startswith("Switch "):
            reached = True
            break
    check("keyboard reaches the transport toggles", reached)
    # WCAG 2.1 AA: the text colour of every visible text element against the background it
    # actually sits on (the first ancestor with an opaque background), as the browser computed them.
    low = driver.execute_script("""
      function rgb(s) { var m = s.match(/[0-9.]+/g); return m ? m.map(Number) : null; }
      function lum(c) { var v = c.slice(0, 3).map(function (x) { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
        return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; }
      function bg(el) { for (; el; el = el.parentElement) { var c = rgb(getComputedStyle(el).backgroundColor);
        if (c && (c.length < 4 || c[3] > 0.99)) return c; } return [255, 255, 255]; }
      var bad = [];
      document.querySelectorAll('body *').forEach(function (el) {
        var own = Array.prototype.some.call(el.childNodes, function (n) { return n.nodeType === 3 && n.textContent.trim(); });
        if (!own || !el.offsetParent) return;
        var a = lum(rgb(getComputedStyle(el).color)), b = lum(bg(el));
        var ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
        if (ratio < 4.5) bad.push(el.tagName + '.' + el.className + ' "' + el.textContent.trim().slice(0, 20) + '" ' + ratio.toFixed(2));
      });
      return bad;""")
    check("every text on the overview has WCAG AA contrast (4.5:1) against its background", not low, "; ".join(low[:5]))
    shoot("overview")

    # A POST without the CSRF token, with the real session cookie: refused, nothing changes.
    before = open(config, "rb").read()
    code = driver.execute_async_script("""
        var done = arguments[arguments.length - 1];
        fetch('/transports/udp', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
              body: 'enabled=false', credentials: 'same-origin'}).then(r => done(r.status)).catch(e => done(String(e)));""")
    check("POST without CSRF token refused (403)", code == 403, str(code))
    code = driver.execute_async_script("""
        var done = arguments[arguments.length - 1];
        fetch('/transports/udp', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
              body: 'enabled=false&csrf=' + '0'.repeat(64), credentials: 'same-origin'}).then(r => done(r.status)).catch(e => done(String(e)));""")
    check("POST with a wrong CSRF token refused (403)", code == 403, str(code))
    check("refused POSTs left the config file unchanged", open(config, "rb").read() == before)

    # A refused switch: relay without address/relay_key. The error names key and line; the file is unchanged.
    driver.find_element(By.CSS_SELECTOR, '[data-transport="relay"] button').click()
    err = wait.until(lambda d: d.find_element(By.ID, "toggle-error"))
    check("refused switch shows the key and line", "transports.relay" in err.text and "line" in err.text, err.text)
    check("refused switch changed nothing in the file", open(config, "rb").read() == before)
    check("refused switch: status still says relay is off", [t for t in status()["transports"] if t["name"] == "relay"][0]["enabled"] is False)
    shoot("overview-refused")

    driver.get(base + "/links")
    rows = driver.find_elements(By.CSS_SELECTOR, "#links tbody tr")
    check("links page shows the phone's link: kind, role, 8-digit prefix, MTU", len(rows) == 1 and "udp" in rows[0].text and "endpoint" in rows[0].text,
          rows[0].text if rows else "no rows")
    # The user's ID is bytes 1-32 of the contact code's payload (Docs/protocol.md).
    code = subprocess.run([os.path.join(BIN, "yaok"), "qr", "--home", home], capture_output=True, text=True, check=True).stdout.strip()
    d = code.split("d=", 1)[1].split("&")[0]
    alice_id = base64.urlsafe_b64decode(d + "=" * (-len(d) % 4))[1:33].hex()
    check("links page never shows the user's full ID", len(alice_id) == 64 and alice_id not in driver.page_source.lower())
    # Frames and bytes both ways per link, as the router counts them: Bob sends Alice a
    # message through the hub, so Alice's link carries frames out.
    yaok = os.path.join(BIN, "yaok")
    bob = os.path.join(work, "bob")
    subprocess.run([yaok, "init", "--home", bob, "--name", "Bob"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([yaok, "contacts", "add", "--home", bob, code], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([yaok, "send", "--home", bob, "Alice", "hello from the console test", "--hub", f"udp://127.0.0.1:{udp_port}",
                    "--timeout", "30"], check=True, stdout=subprocess.DEVNULL, timeout=60)
    wait_until("the message on Alice's link", lambda: status_out(alice_id[:8]) >= 1)
    link = [l for l in status()["router"]["links"] if l["peer"] == alice_id[:8]]
    check("status --json counts frames and bytes out on Alice's link", len(link) == 1 and link[0]["framesOut"] >= 1 and link[0]["bytesOut"] > 200,
          json.dumps(link))
    driver.get(base + "/links")
    cells = {}
    for row in driver.find_elements(By.CSS_SELECTOR, "#links tbody tr"):
        c = {td.get_attribute("data-label"): td.text for td in row.find_elements(By.TAG_NAME, "td")}
        if c.get("Peer") == alice_id[:8]:
            cells = c
    shown = cells.get("Frames in / out", "").split(" / ")
    check("links page shows Alice's frames out, as the router counts them",
          len(shown) == 2 and shown[1].isdigit() and 1 <= int(shown[1]) <= status_out(alice_id[:8]), str(cells))
    time.sleep(2)  # two more chart samples with the phone attached
    driver.get(base + "/charts")
    check("frames chart has a line for udp", len(driver.find_elements(By.CSS_SELECTOR, "#chart-frames polyline")) >= 1)
    # Live: the charts are redrawn from new samples without a reload.
    driver.execute_script("window.__firstChart = document.getElementById('chart-queue'); window.__page = performance.timeOrigin;")
    wait.until(lambda d: d.execute_script("return document.getElementById('chart-queue') !== window.__firstChart"))
    check("charts update live: a new SVG replaced the first, without a page load",
          driver.execute_script("return window.__page === performance.timeOrigin && document.getElementById('live').textContent.indexOf('Live: updated') === 0"))
    check("the live chart is the SVG the server drew (still three charts, udp's line there)",
          len(driver.find_elements(By.CSS_SELECTOR, "figure.chart svg")) == 3 and len(driver.find_elements(By.CSS_SELECTOR, "#chart-frames polyline")) >= 1)
    # At 1280 px the charts fill the content width (two a row), not half of it.
    span = driver.execute_script("""
      var m = document.querySelector('main').getBoundingClientRect(), figs = document.querySelectorAll('figure.chart');
      var l = Infinity, r = -Infinity;
      figs.forEach(function (f) { var b = f.getBoundingClientRect(); l = Math.min(l, b.left); r = Math.max(r, b.right); });
      return (r - l) / (m.width - 2 * parseFloat(getComputedStyle(document.querySelector('main')).paddingLeft));""")
    check("at 1280 px the charts span the page's content width", span > 0.9, f"{span:.2f}")
    shoot("charts-attached")
    # At 360 px the axis labels are still readable (scaled with the chart they would shrink to ~10 px).
    driver.set_window_size(360, 900)
    px = driver.execute_script("""
      var t = document.querySelector('#chart-queue text.axis'), svg = document.getElementById('chart-queue');
      return parseFloat(getComputedStyle(t).fontSize) * svg.getBoundingClientRect().width / 400;""")
    check("at 360 px chart axis labels render at 11.5 px or more", px >= 11.5, f"{px:.1f} px")
    first = driver.execute_script("return [].map.call(document.querySelectorAll('#chart-queue text.axis'), function (t) { return t.textContent; }).join('|')")
    check("on a hub minutes old the time axis spans its minutes, not a fixed hour", "60 min ago" not in first and "min ago" in first, first)
    driver.get(base + "/links")
    shoot("links-attached")

    # Switch udp off in the browser; the file and `yaok-hub status` agree.
    driver.get(base + "/")
    driver.find_element(By.CSS_SELECTOR, '[data-transport="udp"] button').click()
    # Alice is attached over udp: the console asks before it drops her link.
    ask = wait.until(lambda d: d.find_element(By.ID, "toggle-confirm"))
    check("switching off a transport with a phone attached asks first, saying what it drops",
          "drops its 1 link" in ask.text and "Keep it on" in ask.text, ask.text)
    check("nothing changed before the confirmation", open(config, "rb").read() == before)
    shoot("confirm-switch-off")
    driver.find_element(By.ID, "confirm-off").click()
    wait.until(lambda d: d.find_elements(By.ID, "toggle-notice"))
    udp = wait_until("status to show udp off", lambda: [t for t in status()["transports"] if t["name"] == "udp" and not t["enabled"]])
    check("after switching off, yaok-hub status says udp is disabled and stopped",
          udp[0]["status"]["state"] == "stopped", json.dumps(udp[0]["status"]))
    text = open(config).read()
    check("the edit kept the file's comments", "# switched off by the test; this comment must survive" in text and "# Phones over UDP on loopback." in text)
    check("the edit changed exactly one line", sum(1 for a, b in zip(before.decode().splitlines(), text.splitlines()) if a != b) == 1)
    card = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, '[data-transport="udp"] .state'))
    check("the page shows udp switched off", "Switched off" in card.text, card.text)
    out = subprocess.run([hub_bin, "status", "-c", config], capture_output=True, text=True).stdout
    check("yaok-hub status (text) agrees", any(l.startswith("udp") and "stopped" in l for l in out.splitlines()), out[:400])

    for page in ("charts", "links", "plugins", "identity"):
        driver.get(f"{base}/{page}")
        check(f"{page} page loads", driver.find_element(By.TAG_NAME, "h1").text != "")
        if page == "plugins":
            rows = driver.find_elements(By.CSS_SELECTOR, "#plugins tbody tr")
            check("plugins page lists the plugin files, loaded, with version", len(rows) >= 4 and "Loaded" in rows[0].text and "0." in rows[0].text)
        if page == "identity":
            check("identity page has the contact QR as SVG", len(driver.find_elements(By.CSS_SELECTOR, "svg.qrcode")) == 1)
            # An independent decoder reads the QR from the browser's own rendering: the hub's contact code.
            png = os.path.join(OUT, "identity-qr.png")
            driver.find_element(By.CSS_SELECTOR, "svg.qrcode").screenshot(png)
            if shutil.which("zbarimg"):
                decoded = subprocess.run(["zbarimg", "-q", "--raw", png], capture_output=True, text=True).stdout.strip()
                ok = decoded.startswith("yaok://contact?v=1&d=")
                if ok:
                    d = decoded.split("d=", 1)[1]
                    ok = base64.urlsafe_b64decode(d + "=" * (-len(d) % 4))[1:33].hex() == st["hub"]["id"]
                check("the QR decodes (zbarimg) to the hub's contact code, with the hub's ID", ok, decoded[:80])
            elif os.environ.get("YAOK_CI") == "1":
                check("zbarimg installed to decode the QR", False)
            check("identity page shows the fingerprint of yaok-hub status", st["hub"]["fingerprint"] in driver.page_source)
        if page == "charts":
            check("charts page draws three SVG charts", len(driver.find_elements(By.CSS_SELECTOR, "figure.chart svg")) == 3)
        shoot(page)

    # Nothing left the hub: every request in the browser's network log went to the console.
    outside = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            url = msg["params"]["request"]["url"]
            if not url.startswith(base + "/"):
                outside.append(url)
    check("network log: no request outside the hub", not outside, ", ".join(outside[:5]))
    # The refused POSTs above log "Failed to load resource" by design; anything else is a fault.
    console_errors = [e["message"] for e in driver.get_log("browser")
                      if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]
    check("no CSP violations or script errors in the browser console", not console_errors, "; ".join(console_errors[:3]))

    # A reload applies a changed console section: a new port with TLS on. The old port closes;
    # the new one serves the certificate whose fingerprint `yaok-hub console-certificate` and
    # the hub's log give; the browser logs in over TLS and gets a Secure cookie.
    import hashlib, ssl
    tls_port = free_port()
    text = open(config).read()
    text = text.replace(f"  listen: 127.0.0.1:{port}\n", f"  listen: 127.0.0.1:{tls_port}\n  tls: true\n", 1)
    with open(config, "w") as f:
        f.write(text)
    os.kill(hub.pid, signal.SIGHUP)

    def tls_fingerprint():
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", tls_port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as t:
                return ":".join("%02X" % b for b in hashlib.sha256(t.getpeercert(binary_form=True)).digest())

    served = wait_until("the console over TLS on its new port", tls_fingerprint)

    def old_port_closed():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return False
        except OSError:
            return True
    check("after the reload the old plain-HTTP port is closed", wait_until("the old port to close", old_port_closed))
    printed = subprocess.run([hub_bin, "console-certificate", "-c", config], capture_output=True, text=True, check=True).stdout
    check("yaok-hub console-certificate prints the fingerprint the console serves", f"SHA-256 {served}" in printed, printed + " vs " + served)
    check("the hub's log names the same fingerprint", f"TLS certificate SHA-256 {served}" in open(os.path.join(work, "hub.log")).read())
    key_mode = os.stat(os.path.join(work, "data", "console-tls.key")).st_mode & 0o777
    check("the console's TLS key is mode 0600", key_mode == 0o600, oct(key_mode))
    base = f"https://127.0.0.1:{tls_port}"
    driver.get(base + "/")
    driver.find_element(By.ID, "password").send_keys(PASSWORD + Keys.ENTER)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-transport]"))
    check("logged in over TLS after the reload", driver.current_url.startswith(base) and driver.title.startswith("Overview"), driver.current_url)
    session = driver.get_cookie("yaok_console")
    check("over TLS the session cookie is Secure, HttpOnly, SameSite=Strict",
          bool(session) and session.get("secure") and session.get("httpOnly") and session.get("sameSite") == "Strict", str(session))
    wait.until(lambda d: d.find_element(By.ID, "live").text.startswith("Live: updated"))
    check("live updates arrive over TLS", True)
    shoot("overview-tls")
    check("the console's restart logged no error", " error " not in open(os.path.join(work, "hub.log")).read(),
          "".join(l for l in open(os.path.join(work, "hub.log")) if " error " in l)[:400])

    # Log out, then three wrong passwords: the third earns a 30 s wait, and even the right
    # password is not checked until it is over.
    driver.get(base + "/")
    driver.find_element(By.CSS_SELECTOR, ".logout button").click()
    wait.until(lambda d: d.find_elements(By.ID, "password"))
    from selenium.common.exceptions import WebDriverException

    def detached(element):
        # Selenium 4.8's staleness_of knows only StaleElementReferenceException; Chromium 156
        # reports a node of the page that was replaced as "Node with given id does not belong
        # to the document" (a plain WebDriverException), which failed one CI run.
        def check(_):
            try:
                element.is_enabled()
                return False
            except WebDriverException:
                return True
        return check

    def try_password(pw):
        old = driver.find_element(By.ID, "password")
        old.send_keys(pw + Keys.ENTER)
        wait.until(detached(old))
        return wait.until(lambda d: d.find_element(By.ID, "login-error")).text

    for i in range(3):
        msg = try_password("wrong password %d" % i)
    check("third wrong password triggers the 30 s delay", "wait 30 seconds" in msg, msg)
    shoot("login-delayed")
    msg = try_password(PASSWORD)
    check("during the delay even the right password is refused", "Wait" in msg and not driver.find_elements(By.CSS_SELECTOR, "[data-transport]"), msg)
    logtext = open(os.path.join(work, "hub.log")).read()
    check("the hub's log has no password in it", PASSWORD not in logtext and "wrong password 0" not in logtext)
except Exception as e:
    import traceback
    traceback.print_exc()
    check("browser test ran to the end", False, repr(e))
finally:
    if phone:
        os.killpg(phone.pid, signal.SIGTERM)
    if driver:
        driver.quit()
    os.killpg(hub.pid, signal.SIGTERM)
    try:
        hub.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(hub.pid, signal.SIGKILL)
    if results["failed"]:
        print("hub log tail:\n" + "".join(open(os.path.join(work, "hub.log")).readlines()[-30:]))
    shutil.rmtree(work, ignore_errors=True)

print(f"screenshots in {OUT}")
print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
