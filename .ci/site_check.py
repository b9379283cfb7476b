"""The built site in a real browser: every page of `site/` loaded in headless Chromium with
the network off. It must ask no other host for anything, and its maths must lay out.

    python .ci/site_check.py [SITE] [--screenshots DIR [--pages GLOB] [--scale S]]

The site is served from a local HTTP server on 127.0.0.1, as a host would serve it, so
the pages' scripts run as they do online. Chromium (Debian's `chromium`, or `$CHROMIUM`)
runs headless with no name resolvable and a dead proxy, so nothing leaves the machine, and
is driven over the DevTools protocol on a pipe (no Python package needed). Recorded:

- every request of each page and of the workers it starts (the DevTools `Network`
  events: documents, scripts, styles, fonts, images, fetch, web sockets);
- the site's requests in Chromium's own network log (`--log-net-log`), which also sees
  what the protocol does not; the browser's own requests (its clock, its accounts) are
  not the site's and are left out;
- resource hints to another host in the pages (`<link rel=preconnect ...>`: a connection
  without a request);
- on each page with maths: that the math font loaded, and that no display formula
  overflows its box vertically (the theme drew scroll arrows beside each one).

Each finding is one line naming its page; the last line counts pages, requests and
findings. Exit status 1 with any finding, 0 without. Without a Chromium it prints one line
saying so and exits 0 (`--require-browser`: 1). `--screenshots DIR` also saves a
full-page PNG of each page matching `--pages` (a glob of site paths, default `*`), for a
person to look at: `--pages 'concepts/*' --scale 1.5` shows the maths.
"""

import argparse
import base64
import fcntl
import fnmatch
import functools
import http.server
import json
import os
import pathlib
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time

LOCAL = "127.0.0.1"
#: URL schemes that never leave the browser.
INTERNAL = ("data:", "blob:", "about:", "chrome:", "chrome-error:", "devtools:")
#: Seconds a page may take to load; seconds without network activity after which it is done.
LOAD_TIMEOUT, QUIET = 20.0, 0.4
#: The maths' font (docs/stylesheets/maths.css).
MATH_FONT = "STIX Two Math"


class Browser:
    """Headless Chromium over `--remote-debugging-pipe`: JSON messages, each ended by NUL,
    commands on the child's fd 3 and answers and events on its fd 4."""

    def __init__(self, executable: str, profile: pathlib.Path, netlog: pathlib.Path):
        to_chrome, self._out = os.pipe()
        self._in, from_chrome = os.pipe()
        flags = [
            "--headless",
            "--disable-gpu",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-quic",
            # The network off: no name resolves, and what is not loopback goes to a proxy
            # that does not exist. The local server is an address, not a name.
            f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {LOCAL}",
            "--proxy-server=http://127.0.0.1:9",
            f"--log-net-log={netlog}",
            "--window-size=1100,900",
        ]
        if os.geteuid() == 0:
            flags.append("--no-sandbox")  # Chromium refuses to run as root without it

        def child_fds():
            # Moved out of the way first, so that neither dup2 overwrites the other's source.
            high_r = fcntl.fcntl(to_chrome, fcntl.F_DUPFD, 10)
            high_w = fcntl.fcntl(from_chrome, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.process = subprocess.Popen(
            [executable, *flags, "about:blank"],
            preexec_fn=child_fds,
            pass_fds=(3, 4),  # kept open in the child, once child_fds has set them
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []

    def _read(self, timeout: float) -> dict | None:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._in], [], [], max(timeout, 0))
            if not ready:
                return None
            chunk = os.read(self._in, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe (did it crash?)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None):
        """Sends a command and returns its result; the events that come meanwhile are kept
        for `event`."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + 30
        while (reply := self._read(deadline - time.monotonic())) is not None:
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)
        raise RuntimeError(f"Chromium did not answer {method} within 30 s")

    def event(self, timeout: float) -> dict | None:
        if self._events:
            return self._events.pop(0)
        reply = self._read(timeout)
        return reply if reply is not None and "method" in reply else None

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._in)
        os.close(self._out)


#: The page's maths as laid out, once its fonts are loaded: how many formulas, whether the
#: math font is there, how many display formulas overflow their box vertically.
_MATHS_LAYOUT = (
    """document.fonts.ready.then(() => {
        const displays = [...document.querySelectorAll("div.arithmatex")];
        return JSON.stringify({
            maths: document.querySelectorAll("math").length,
            font: [...document.fonts].some(
                (f) => f.family.replace(/"/g, "") === "FONT" && f.status === "loaded"),
            overflowing: displays.filter((d) => d.scrollHeight > d.clientHeight + 1).length,
            displays: displays.length,
        });
    })"""
).replace("FONT", MATH_FONT)


class Tab:
    """One tab, and the workers it starts, with the DevTools `Network` domain on."""

    def __init__(self, browser: Browser):
        self.browser = browser
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]
        self._watch(self.session)
        browser.send("Page.enable", session=self.session)

    def _watch(self, session: str) -> None:
        self.browser.send("Network.enable", session=session)
        self.browser.send(
            "Target.setAutoAttach",
            {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True},
            session=session,
        )

    def load(self, url: str) -> tuple[list[str], bool]:
        """Loads `url` and waits until it is quiet; returns the URLs it and its workers
        requested, and whether its load event came."""
        requested: list[str] = []
        pending: set[str] = set()
        loaded = False
        self.browser.send("Page.navigate", {"url": url}, session=self.session)
        deadline = last = time.monotonic()
        deadline += LOAD_TIMEOUT
        while (now := time.monotonic()) < deadline:
            event = self.browser.event(0.05)
            if event is None:
                if loaded and not pending and now - last > QUIET:
                    break
                continue
            method, params = event["method"], event.get("params", {})
            if method == "Target.attachedToTarget":  # a worker, paused until watched
                self._watch(params["sessionId"])
                self.browser.send("Runtime.runIfWaitingForDebugger", session=params["sessionId"])
            elif method == "Network.requestWillBeSent":
                requested.append(params["request"]["url"])
                pending.add(params["requestId"])
            elif method == "Network.webSocketCreated":
                requested.append(params["url"])
            elif method in ("Network.loadingFinished", "Network.loadingFailed"):
                pending.discard(params["requestId"])
            elif method == "Page.loadEventFired" and event.get("sessionId") == self.session:
                loaded = True
            else:
                continue
            last = now
        return requested, loaded

    def evaluate(self, expression: str):
        result = self.browser.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        return result["result"].get("value")

    def maths_faults(self) -> list[str]:
        """What is wrong with the page's maths as laid out (nothing on a page without)."""
        report = json.loads(self.evaluate(_MATHS_LAYOUT))
        faults = []
        if report["maths"] and not report["font"]:
            faults.append(f"the math font {MATH_FONT!r} did not load")
        if report["overflowing"]:
            faults.append(
                f"{report['overflowing']} of {report['displays']} display formulas overflow "
                "their box vertically (scroll arrows)"
            )
        return faults

    def screenshot(self, path: pathlib.Path, scale: float) -> None:
        metrics = self.browser.send("Page.getLayoutMetrics", session=self.session)
        size = metrics["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"]}
        shot = self.browser.send(
            "Page.captureScreenshot",
            {"format": "png", "clip": {**clip, "scale": scale}, "captureBeyondViewport": True},
            session=self.session,
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))


def _serve(site: pathlib.Path) -> http.server.ThreadingHTTPServer:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        (LOCAL, 0), functools.partial(Quiet, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _outside(url: str, origin: str) -> bool:
    return not url.startswith(origin) and not url.lower().startswith(INTERNAL)


def _netlog_outside(netlog: pathlib.Path, origin: str) -> set[str]:
    """The URLs of the requests in Chromium's network log that the site made (its origin is
    their initiator or in their network isolation key) to another host."""
    text = netlog.read_text()
    try:
        log = json.loads(text)
    except ValueError:  # the list is closed only on a clean exit; the events are there
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    site = origin.rstrip("/")
    found = set()
    for event in log.get("events", []):
        params = event.get("params") or {}
        if event.get("type") != start_job or "url" not in params:
            continue
        keys = f"{params.get('initiator', '')} {params.get('network_isolation_key', '')}"
        if site in keys and _outside(params["url"], origin):
            found.add(params["url"])
    return found


#: Resource hints: a hint to another host opens a connection without a request.
_HINT = re.compile(
    r"<link\b[^>]*\brel=[\"']?(?:preconnect|dns-prefetch|prefetch|preload|prerender"
    r"|modulepreload)\b[^>]*>",
    re.I,
)


def _hints_outside(html: str) -> list[str]:
    return [h for h in _HINT.findall(html) if re.search(r"\bhref=[\"']?([a-z]+:)?//", h, re.I)]


def _chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def check(
    site: pathlib.Path, executable: str, shots: pathlib.Path | None, pages_glob: str, scale: float
) -> tuple[list[str], int, int]:
    """Loads every page of `site`; returns the findings, the pages and the requests."""
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    findings: list[str] = []
    requests = 0
    outside: set[str] = set()
    server = _serve(site)
    origin = f"http://{LOCAL}:{server.server_address[1]}/"
    with tempfile.TemporaryDirectory() as folder:
        netlog = pathlib.Path(folder) / "netlog.json"
        browser = Browser(executable, pathlib.Path(folder) / "profile", netlog)
        try:
            tab = Tab(browser)
            for page in pages:
                for hint in _hints_outside((site / page).read_text(errors="replace")):
                    findings.append(f"{page}: a resource hint to another host: {hint}")
                requested, loaded = tab.load(origin + page)
                requests += len(requested)
                for url in requested:
                    if _outside(url, origin):
                        outside.add(url)
                        findings.append(f"{page}: requested {url}")
                if not loaded:
                    findings.append(f"{page}: did not finish loading in {LOAD_TIMEOUT:.0f} s")
                    continue
                findings += [f"{page}: {fault}" for fault in tab.maths_faults()]
                if shots and fnmatch.fnmatch(page, pages_glob):
                    name = page.replace("/", "_").removesuffix(".html") + ".png"
                    tab.screenshot(shots / name, scale)
        finally:
            browser.close()
            server.shutdown()
        for url in sorted(_netlog_outside(netlog, origin) - outside):
            findings.append(f"(network log): the site requested {url}")
    return findings, len(pages), requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", default="site", type=pathlib.Path)
    parser.add_argument("--screenshots", type=pathlib.Path, help="save full-page PNGs here")
    parser.add_argument("--pages", default="*", help="the pages to screenshot (a glob)")
    parser.add_argument("--scale", type=float, default=1.0, help="of the screenshots")
    parser.add_argument("--require-browser", action="store_true")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        parser.error(f"SITE: expected a built site (index.html) in {args.site}: ./dev.sh docs")
    executable = _chromium()
    if executable is None:
        print("site-check: skipped, no chromium (apt-get install chromium, or set CHROMIUM)")
        return 1 if args.require_browser else 0
    start = time.monotonic()
    findings, pages, requests = check(
        args.site, executable, args.screenshots, args.pages, args.scale
    )
    for finding in findings:
        print(f"site-check: {finding}")
    print(
        f"site-check: {pages} pages, {requests} requests, {len(findings)} findings "
        f"({time.monotonic() - start:.0f} s)"
    )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
