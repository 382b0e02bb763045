"""The chat page at / against the real `sluice serve` (frontend/webui/,
frontend/webui.c): its files are served, byte for byte the repository's, with
their content types and the page's security and caching headers, without an
API key even when the server has one; --no-webui makes them 404s again; a
page request is logged like any other and leaves the request counters alone.
Then a real headless Chromium (Debian's chromium and chromium-driver, driven
by selenium; nothing downloaded) uses the page: the 401 shown until the key
is typed in (for the model list and for a message), the model name, a
message streamed into the conversation, Stop ending a long generation on the
client and the server, the conversation kept for the next turn, and a
screenshot of it all."""
import json
import os
import re
import struct
import time
import urllib.request

import pytest

from paths import REPO
from serve import Server, wait_for

KEY = "webui-test-key"
ALIAS = "webui-test-model"
WEBUI = REPO / "frontend" / "webui"
PAGE = {"/": ("index.html", "text/html; charset=utf-8"),
        "/index.html": ("index.html", "text/html; charset=utf-8"),
        "/webui/app.js": ("app.js", "text/javascript; charset=utf-8"),
        "/webui/style.css": ("style.css", "text/css; charset=utf-8")}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def request(srv, path, method="GET", key=None, body=None):
    """(status, lowercased headers, body) of one request."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if body is not None:
        headers["content-type"] = "application/json"
    req = urllib.request.Request(srv.base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


@pytest.fixture(scope="module")
def server(chat_model, tmp_path_factory):
    # --ctx-size 4096: a generation the page starts runs to the context (the
    # page sends no max_tokens), long enough for the browser to press Stop.
    s = Server(chat_model, tmp_path_factory.mktemp("webui"), frontends=1,
               extra=["--api-key", KEY, "--model-alias", ALIAS, "--ctx-size", "4096"])
    yield s
    s.stop()


@pytest.mark.parametrize("path", list(PAGE))
def test_page_files_are_the_repositorys_with_their_headers(server, path):
    name, ctype = PAGE[path]
    status, h, body = request(server, path)      # no key: the page is where the key is typed in
    assert status == 200, body
    assert body == (WEBUI / name).read_bytes()
    assert h["content-type"] == ctype
    assert h["content-security-policy"] == CSP
    assert h["x-content-type-options"] == "nosniff"
    assert h["cache-control"] == "no-cache"
    assert h["referrer-policy"] == "no-referrer"
    assert int(h["content-length"]) == len(body)


def test_head_and_other_methods(server):
    status, h, body = request(server, "/", method="HEAD")
    assert status == 200 and body == b"" and h["content-type"] == "text/html; charset=utf-8"
    status, h, body = request(server, "/", method="POST", body=b"{}")
    assert status == 405 and h["allow"] == "GET, HEAD"
    assert json.loads(body)["error"]["message"] == "Method POST is not allowed here."


def test_only_the_page_is_open_without_the_key(server):
    assert request(server, "/v1/models")[0] == 401
    assert request(server, "/webui/")[0] == 401            # not a page file: the API's rules
    assert request(server, "/webui/nothing.js", key=KEY)[0] == 404
    assert request(server, "/index.htm", key=KEY)[0] == 404


def test_effective_config_names_the_setting(server):
    sources = json.loads(request(server, "/v1/effective-config", key=KEY)[2])["frontend"]["sources"]
    assert sources["webui"] == "default"
    assert sources["kv_type"] == "default" and sources["gpu_memory_fraction"] == "default"
    assert server.admin("effective-config")["config"]["webui"] == {"value": "1", "source": "default"}


def counters(srv):
    text = request(srv, "/metrics", key=KEY)[2].decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(sluice_requests_\w+_total)(?:\{[^}]*\})? (\S+)$", text, re.M)}


def test_page_requests_are_logged_and_not_counted_as_api_requests(server):
    before = counters(server)
    assert before
    req = urllib.request.Request(server.base + "/", headers={"x-request-id": "webui-page-1"})
    urllib.request.urlopen(req, timeout=10).read()
    line = re.compile(r'^sluice-fe .*method=GET path="/" status=200 request_id=webui-page-1 .*finish=- ', re.M)
    assert wait_for(lambda: line.search(server.log_path.read_text()), 5), server.log_path.read_text()[-2000:]
    assert counters(server) == before


def test_no_webui_answers_404(chat_model, tmp_path):
    s = Server(chat_model, tmp_path, frontends=1, extra=["--no-webui"])
    try:
        for path in PAGE:
            status, h, body = request(s, path)
            assert status == 404, path
            assert h["content-type"] == "application/json"
            assert json.loads(body)["error"]["message"] == "No route for this path."
            assert "content-security-policy" not in h
        cfg = s.admin("effective-config")
        assert cfg["config"]["webui"] == {"value": "0", "source": "flag"}, cfg["config"].get("webui")
        status, _, body = request(s, "/v1/effective-config")
        assert json.loads(body)["frontend"]["sources"]["webui"] == "flag"
    finally:
        s.stop()


# ---------------------------------------------------------------- the page in Chromium

@pytest.fixture
def browser(tmp_path):
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian packages chromium, chromium-driver; "
                    "tools/setup.sh installs them)")
    from selenium import webdriver          # tests/requirements.txt: a missing selenium is a failure
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    # A container has no user namespaces for Chromium's sandbox, no GPU and a
    # small /dev/shm; its own profile folder, so nothing outlives the test.
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1000,760", f"--user-data-dir={tmp_path / 'profile'}",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})   # the console, read at the end
    # The driver is given by path, so selenium never looks for one to download.
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER, log_output=str(tmp_path / "driver.log")),
                              options=opts)
    yield driver
    driver.quit()


def text_of(driver, css):
    """textContent of every element matching css (what the page wrote, spaces included)."""
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.textContent)", css)


def until(driver, cond, timeout=10, what="condition"):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: cond(), message=what)


def ask_and_stop(driver, server, question, turn):
    """Sends `question`, waits for the streamed answer to grow, presses Stop
    and checks the generation ended in the page and on the server. Returns
    the answer's text."""
    box = driver.find_element("id", "input")
    box.send_keys(question)
    driver.find_element("id", "send").click()
    until(driver, lambda: len(text_of(driver, ".msg.assistant .text")) == turn
          and len(text_of(driver, ".msg.assistant .text")[-1]) > 0, what="streamed text")
    first = len(text_of(driver, ".msg.assistant .text")[-1])
    until(driver, lambda: len(text_of(driver, ".msg.assistant .text")[-1]) > first, what="text still arriving")
    assert driver.find_element("id", "send").get_attribute("disabled") is not None   # busy while streaming
    driver.find_element("id", "stop").click()
    until(driver, lambda: driver.find_element("id", "stop").get_attribute("disabled") is not None, what="idle again")
    assert text_of(driver, ".msg.assistant .note")[-1] == "stopped"
    assert driver.find_element("id", "status").text == "stopped"
    answer = text_of(driver, ".msg.assistant .text")[-1]
    time.sleep(0.3)
    assert text_of(driver, ".msg.assistant .text")[-1] == answer, "text kept arriving after Stop"

    # The abort closed the connection: the server cancels and frees the mailbox.
    def idle():
        mb = json.loads(request(server, "/v1/effective-config", key=KEY)[2])["frontend"]["mailboxes"]
        return mb["running"] == 0 and mb["submitted"] == 0
    assert wait_for(idle, 10), "the server still generates after Stop"
    return answer


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_chat_in_a_real_browser(server, browser, tmp_path):
    d = browser
    d.get(server.base + "/")
    assert d.title == "sluice chat"
    # Without the key, /v1/models is a 401: its message is shown.
    until(d, lambda: d.find_element("id", "model").text == "model unknown", what="401 on /v1/models")
    assert d.find_element("id", "status").text.startswith("401: Incorrect or missing API key")
    # A message sent without the key: the chat's 401 is shown and the
    # unanswered question goes back into the box, out of the conversation.
    d.find_element("id", "input").send_keys("Are you there?")
    d.find_element("id", "send").click()
    until(d, lambda: text_of(d, ".msg.error .text") != [], what="the chat's 401")
    assert text_of(d, ".msg.error .text")[0].startswith("401: Incorrect or missing API key")
    assert d.find_element("id", "input").get_attribute("value") == "Are you there?"
    assert text_of(d, ".msg.user") == [] and d.execute_script("return messages.length") == 0
    d.find_element("id", "input").clear()
    d.get_log("browser")                     # drops the console's lines for those 401s
    key = d.find_element("id", "api-key")
    key.send_keys(KEY + "\t")                # the change event: stored, models asked again
    until(d, lambda: d.find_element("id", "model").text == ALIAS, what="model name")
    assert d.execute_script("return localStorage.getItem('sluice.api_key')") == KEY
    assert d.find_element("id", "status").text == ""

    first = ask_and_stop(d, server, "Tell me a long story.", 1)
    shot = tmp_path / "webui.png"
    assert d.save_screenshot(str(shot))
    width, height = png_size(shot)
    assert (width, height) == tuple(d.execute_script(
        "return [window.innerWidth * devicePixelRatio, window.innerHeight * devicePixelRatio]"))
    assert shot.stat().st_size > 5000        # a rendered page, not a blank image

    # The next turn carries the conversation, the stopped answer included.
    ask_and_stop(d, server, "And then?", 2)
    convo = d.execute_script("return messages")
    assert [m["role"] for m in convo] == ["user", "assistant", "user", "assistant"]
    assert convo[0]["content"] == "Tell me a long story." and convo[1]["content"] == first
    assert text_of(d, ".msg.user .text") == ["Tell me a long story.", "And then?"]

    # New chat forgets it; the key survives a reload.
    d.find_element("id", "new-chat").click()
    assert d.execute_script("return messages.length") == 0 and text_of(d, ".msg") == []
    d.refresh()
    until(d, lambda: d.find_element("id", "model").text == ALIAS, what="model name after reload")
    assert d.find_element("id", "api-key").get_attribute("value") == KEY
    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]]
    assert errors == [], errors              # no CSP violation, no script error
