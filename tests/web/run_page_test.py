"""Runs tests/web/page.test.mjs: voxd's web page in Debian's headless Chromium (Playwright).

Installs the pinned playwright-core (package-lock.json; it drives /usr/bin/chromium, it downloads
no browser) with `npm ci` into WORK, once per lock file; starts `voxd serve` with voices/en-demo,
voices/zh-demo and the tiny ChatTTS and Chinese Sambert fixture voices and an API key, and a
second one with en-demo and a queue of one request (for the page's "busy" message), each on a
free port of 127.0.0.1; runs `node --test`; stops the servers and wants them to exit cleanly.
Fails (never skips) when node, npm or chromium is missing.
VOXD_SCREENSHOTS: a folder to write the page's screenshots to (docs/ when the page changes).

    /usr/bin/python3 tests/web/run_page_test.py WORK    (VOXD_BIN: the voxd binary)
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

from node_suite import npm_ci, require, start_server, stop_server  # noqa: E402

HERE = os.path.join(ROOT, "tests", "web")
FILES = ["package.json", "package-lock.json", "page.test.mjs"]
VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))
KEY = "sk-voxd-web-page"
WHO = "run_page_test"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    work = os.path.abspath(sys.argv[1])
    node = require("node", "nodejs", WHO)
    npm = require("npm", "npm", WHO)
    require("chromium", "chromium", WHO)
    npm_ci(work, HERE, FILES, npm, WHO)
    fixtures = os.path.join(ROOT, "tests", "fixtures", "voices")
    en_demo = os.path.join(ROOT, "voices", "en-demo")
    with tempfile.NamedTemporaryFile(prefix="voxd-web-", suffix=".log") as log, \
            tempfile.NamedTemporaryFile(prefix="voxd-web-busy-", suffix=".log") as busy_log:
        process, url = start_server(
            VOXD, ["--voice", en_demo, "--voice", os.path.join(ROOT, "voices", "zh-demo"),
                   "--voice", os.path.join(fixtures, "tiny-chattts"), "--voice",
                   os.path.join(fixtures, "tiny-sambert-zh"), "--device", "cpu", "--threads", "2",
                   "--api-key", KEY], log, WHO)
        busy = None
        try:
            busy, busy_url = start_server(
                VOXD, ["--voice", en_demo, "--device", "cpu", "--threads", "1", "--max-queue",
                       "1", "--api-key", KEY], busy_log, WHO)
            env = {**os.environ, "VOXD_BASE_URL": url, "VOXD_BUSY_URL": busy_url, "VOXD_KEY": KEY}
            if env.get("VOXD_SCREENSHOTS"):
                env["VOXD_SCREENSHOTS"] = os.path.abspath(env["VOXD_SCREENSHOTS"])
            tests = subprocess.run([node, "--test", "--test-concurrency=1", "page.test.mjs"],
                                   cwd=work, env=env)
        finally:
            codes = [(stop_server(process), log)]
            if busy is not None:
                codes.append((stop_server(busy), busy_log))
        for exit_code, server_log in codes:
            if exit_code != 0:
                with open(server_log.name, encoding="utf-8", errors="replace") as f:
                    print(f"{WHO}: voxd serve exited with {exit_code}:\n{f.read()}")
                return 1
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
