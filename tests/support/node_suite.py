"""What the runners of the Node.js suites against `voxd serve` share (tests/cli/run_openai_sdk.py,
tests/web/run_page_test.py): the tools they need, `npm ci` of a pinned package-lock.json into a
work folder (once per lock file), and a server on a free port of 127.0.0.1 started and stopped.
"""
import filecmp
import json
import os
import shutil
import signal
import subprocess
import sys
import time

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


def require(tool, package, who):
    """The path of `tool`; exits naming Debian's `package` when it is not on PATH."""
    path = shutil.which(tool)
    if path is None:
        sys.exit(f"{who}: '{tool}' is not on PATH; install Debian's {package} (make deps does)")
    return path


def npm_ci(work, source_dir, files, npm, who):
    """Copies `files` of `source_dir` (package.json and package-lock.json among them) to `work`
    and runs `npm ci` there unless node_modules already holds what this lock file pins."""
    os.makedirs(work, exist_ok=True)
    for name in files:
        shutil.copyfile(os.path.join(source_dir, name), os.path.join(work, name))
    stamp = os.path.join(work, "node_modules", ".voxd-installed-from")
    lock = os.path.join(work, "package-lock.json")
    if os.path.exists(stamp) and filecmp.cmp(stamp, lock, False):
        return
    command = [npm, "ci", "--prefer-offline", "--no-audit", "--no-fund",
               "--cache", os.path.join(work, "npm-cache")]
    result = subprocess.run(command, cwd=work)
    if result.returncode != 0:
        sys.exit(f"{who}: {' '.join(command)} failed with {result.returncode}")
    shutil.copyfile(lock, stamp)


def start_server(voxd, args, log, who):
    """`voxd serve ARGS` on a free port of 127.0.0.1, its JSON log in the open file `log`:
    (process, URL) once it listens; exits with the log when it does not."""
    command = [voxd, "serve", *args, "--host", "127.0.0.1", "--port", "0", "--log-format", "json"]
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
        sys.exit(f"{who}: voxd serve did not start listening:\n{f.read()}")


def stop_server(process):
    """SIGTERM, then the exit status (SIGKILL's after STOP_TIMEOUT_S)."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return -signal.SIGKILL
