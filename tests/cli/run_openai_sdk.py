"""Runs tests/cli/openai_sdk (the official OpenAI Node SDK against `voxd serve`).

Installs the pinned SDK (package-lock.json) with `npm ci` into WORK, once per lock file, from
npm's cache when it has the packages; starts `voxd serve` with voices/en-demo on a free port of
127.0.0.1, with an API key and the alias alloy=en-demo; runs `node --test` on the SDK tests with
the server's URL in VOXD_BASE_URL; stops the server. Fails (never skips) when node, npm or ffmpeg
is missing.

    /usr/bin/python3 tests/cli/run_openai_sdk.py WORK    (VOXD_BIN: the voxd binary)
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

from node_suite import npm_ci, require, start_server, stop_server  # noqa: E402

SDK_DIR = os.path.join(ROOT, "tests", "cli", "openai_sdk")
SDK_FILES = ["package.json", "package-lock.json", "speech.test.mjs"]
VOXD = os.environ.get("VOXD_BIN", os.path.join(ROOT, "build", "src", "cli", "voxd"))
VOICE = os.path.join(ROOT, "voices", "en-demo")
KEY = "sk-voxd-openai-sdk"
ALIAS = "alloy"
WHO = "run_openai_sdk"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    work = os.path.abspath(sys.argv[1])
    node = require("node", "nodejs", WHO)
    npm = require("npm", "npm", WHO)
    require("ffmpeg", "ffmpeg", WHO)
    npm_ci(work, SDK_DIR, SDK_FILES, npm, WHO)
    with tempfile.NamedTemporaryFile(prefix="voxd-openai-sdk-", suffix=".log") as log:
        process, url = start_server(
            VOXD, ["--voice", VOICE, "--device", "cpu", "--threads", "2", "--api-key", KEY,
                   "--voice-alias", f"{ALIAS}={os.path.basename(VOICE)}"], log, WHO)
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
