"""Runs tests/cli/openai_sdk (the official OpenAI Node SDK against `voxd serve`).

Installs the pinned SDK (package-lock.json) with `npm ci` into WORK, once per lock file, from
npm's cache when it has the packages; starts `voxd serve` with voices/en-demo on a free port of
127.0.0.1, with an API key and the alias alloy=en-demo; runs `node --test` on the SDK tests with
the server's URL in VOXD_BASE_URL; stops the server. Fails (never skips) when node, npm or ffmpeg
is missing.

    /usr/bin/python3 tests/cli/run_openai_sdk.py WORK    (VOXD_BIN: the voxd binary)
"""
import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SDK_DIR = os.path.join(ROOT, "tests", "cli", "openai_sdk")
SDK_FILES = ["package.json", "package-lock.json", "speech.test.mjs"]
VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))
VOICE = os.path.join(ROOT, "voices", "en-demo")
KEY = "sk-voxd-openai-sdk"
ALIAS = "alloy"
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def require(tool, package):
    path = shutil.which(tool)
    if path is None:
        sys.exit(f"run_openai_sdk: '{tool}' is not on PATH; install Debian's {package} "
                 "(make deps does)")
    return path


def install_sdk(work, npm):
    """Copies the SDK tests to `work` and runs `npm ci` there unless node_modules already holds
    what this package-lock.json pins."""
    os.makedirs(work, exist_ok=True)
    for name in SDK_FILES:
        shutil.copyfile(os.path.join(SDK_DIR, name), os.path.join(work, name))
    installed_lock = os.path.join(work, "node_modules", ".package-lock.json")
    stamp = os.path.join(work, "node_modules", ".voxd-installed-from")
    lock = os.path.join(work, "package-lock.json")
    if os.path.exists(installed_lock) and os.path.exists(stamp) and filecmp.cmp(stamp, lock, False):
        return
    command = [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund",
               "--cache", os.path.join(work, "npm-cache")]
    result = subprocess.run(command, cwd=work)
    if result.returncode != 0:
        sys.exit(f"run_openai_sdk: {' '.join(command)} failed with {result.returncode}")
    shutil.copyfile(lock, stamp)


def start_server(log):
    command = [VOXD, "serve", "--voice", VOICE, "--device", "cpu", "--threads", "2",
               "--host", "127.0.0.1", "--port", "0", "--log-format", "json", "--api-key", KEY,
               "--voice-alias", f"{ALIAS}={os.path.basename(VOICE)}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with open(log.name, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    entry = json.loads(line) if line.endswith("\n") else {}
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("msg") == "listening":
                    return process, entry["url"]
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    process.wait()
    with open(log.name, encoding="utf-8", errors="replace") as f:
        sys.exit(f"run_openai_sdk: voxd serve did not start listening:\n{f.read()}")


def stop_server(process):
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return -signal.SIGKILL


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    work = os.path.abspath(sys.argv[1])
    node = require("node", "nodejs")
    npm = require("npm", "npm")
    require("ffmpeg", "ffmpeg")
    install_sdk(work, npm)
    with tempfile.NamedTemporaryFile(prefix="voxd-openai-sdk-", suffix=".log") as log:
        process, url = start_server(log)
        try:
            env = {**os.environ, "VOXD_BASE_URL": url + "/v1", "VOXD_API_KEY": KEY,
                   "VOXD_VOICE": os.path.basename(VOICE), "VOXD_ALIAS": ALIAS}
            tests = subprocess.run([node, "--test", "speech.test.mjs"], cwd=work, env=env)
        finally:
            exit_code = stop_server(process)
        if exit_code != 0:
            with open(log.name, encoding="utf-8", errors="replace") as f:
                print(f"run_openai_sdk: voxd serve exited with {exit_code}:\n{f.read()}")
            return 1
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
