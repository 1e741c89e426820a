"""Runs tests/web/page.test.mjs: voxd's web page in Debian's headless Chromium (Playwright).

Installs the pinned playwright-core (package-lock.json; it drives /usr/bin/chromium, it downloads
no browser) with `npm ci` into WORK, once per lock file; starts `voxd serve` with voices/en-demo
and voices/zh-demo and an API key on a free port of 127.0.0.1; runs `node --test`; stops the
server. Fails (never skips) when node, npm or chromium is missing. VOXD_SCREENSHOTS: a folder to
write the page's screenshots to (docs/ when the page changes).

    /usr/bin/python3 tests/web/run_page_test.py WORK    (VOXD_BIN: the voxd binary)
"""
import filecmp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.join(ROOT, "tests", "web")
FILES = ["package.json", "package-lock.json", "page.test.mjs"]
VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))
KEY = "sk-voxd-web-page"
START_TIMEOUT_S = 120


def require(tool, package):
    path = shutil.which(tool)
    if path is None:
        sys.exit(f"run_page_test: '{tool}' is not on PATH; install Debian's {package} "
                 "(make deps does)")
    return path


def install(work, npm):
    os.makedirs(work, exist_ok=True)
    for name in FILES:
        shutil.copyfile(os.path.join(HERE, name), os.path.join(work, name))
    stamp = os.path.join(work, "node_modules", ".voxd-installed-from")
    lock = os.path.join(work, "package-lock.json")
    if os.path.exists(stamp) and filecmp.cmp(stamp, lock, False):
        return
    command = [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund",
               "--cache", os.path.join(work, "npm-cache")]
    if subprocess.run(command, cwd=work).returncode != 0:
        sys.exit(f"run_page_test: {' '.join(command)} failed")
    shutil.copyfile(lock, stamp)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: run_page_test.py WORK")
    work = os.path.abspath(sys.argv[1])
    node, npm = require("node", "nodejs"), require("npm", "npm")
    require("chromium", "chromium")
    install(work, npm)
    with tempfile.NamedTemporaryFile("w+", prefix="voxd-web-", suffix=".log") as log:
        server = subprocess.Popen(
            [VOXD, "serve", "--voice", os.path.join(ROOT, "voices", "en-demo"), "--voice",
             os.path.join(ROOT, "voices", "zh-demo"), "--device", "cpu", "--threads", "2",
             "--host", "127.0.0.1", "--port", "0", "--api-key", KEY],
            stdout=subprocess.DEVNULL, stderr=log)
        try:
            url, deadline = None, time.monotonic() + START_TIMEOUT_S
            while url is None:
                log.seek(0)
                for line in log.read().splitlines():
                    if " listening " in f" {line} " and "url=" in line:
                        url = line.split("url=", 1)[1].split()[0].strip('"')
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    sys.exit("run_page_test: voxd serve did not start:\n" + log.read())
                time.sleep(0.05)
            env = {**os.environ, "VOXD_BASE_URL": url, "VOXD_KEY": KEY}
            if env.get("VOXD_SCREENSHOTS"):
                env["VOXD_SCREENSHOTS"] = os.path.abspath(env["VOXD_SCREENSHOTS"])
            result = subprocess.run([node, "--test", "--test-concurrency=1", "page.test.mjs"],
                                    cwd=work, env=env)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
