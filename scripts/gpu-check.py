#!/usr/bin/env python3
"""GPU checks for voxd's CUDA backend, on the GPU machine (Ubuntu 24.04, CUDA 13 driver, cuBLAS 13
in /usr/lib/x86_64-linux-gnu, Python 3 without extra packages, no package registry), from the
repository root (the working tree has tests/fixtures/), with build-gpu/dist.tar.xz from
scripts/gpu-pack.sh on the build machine. The archive replaces any build-gpu/dist/ an earlier
call left. The GPU tests and their properties come from dist/gpu-tests.json, which
tests/cuda/CMakeLists.txt (voxd_add_gpu_test) writes; the reasons for each setting are there.

  scripts/gpu-check.py [check]
      1. nvidia-smi summary;
      2. every GPU test through ctest -L gpu --output-on-failure -j 4, one ctest test per gtest
         case, from a CTestTestfile written here for build-gpu/dist/bin (serial, timeout from the
         manifest); then test_cuda_ops's convolution cases through VOXD_CUDA_CONV=wgmma
         (Hopper's wgmma implicit GEMM where it applies), cudnn and im2col, the paths the
         default does not take everywhere (CONV_PATHS narrows them; empty skips them);
      3. each test binary under compute-sanitizer --tool memcheck with the manifest's gtest
         filter (or not at all), capped at MEMCHECK_TIMEOUT seconds (150): the SERIAL ones one
         at a time, after the others, which run all at once;
      4. benchmarks: voxd_gpu_bench (bench/gpu_bench.cpp) on random-weight voices at the public
         checkpoints' sizes, made here by tools/make_bench_voices.py in BENCH_VOICES
         (/tmp/voxd-bench-voices), and on voices/en-demo; BENCH_RUNS overrides the list, one
         option line per run; then ChatTTS's decode steps and vocoding
         (bench/chattts_bench.cpp, f32, f16 and bf16 or CHATTTS_DTYPES) beside the original's
         loop (bench/chattts_peer.py) on the same random weights (CHATTTS_BENCH=0 skips them);
      5. a summary table (tests passed/failed, sanitizer errors).
  scripts/gpu-check.py quick
      Steps 1, 2 and 5 only: about 6 minutes (ctest -L gpu about 3, then the convolution
      paths' cases).
  scripts/gpu-check.py memcheck
      Steps 1, 3 and 5 only: the sanitizer's run, for a call after a quick one.
  scripts/gpu-check.py bench
      Steps 1, 4 and 5 only.
  scripts/gpu-check.py ab
      The working tree's build against the variants scripts/gpu-pack.sh packed with VARIANTS
      (other commits' test_cuda_ops and voxd_gpu_bench), in one call:
      1. nvidia-smi summary;
      2. each one's test_cuda_ops on AB_TESTS (a gtest filter, default the convolutions'
         cases), all at once; a binary whose tests fail is still timed, and the summary says so;
      3. with ncu on the machine (NCU names another), each one's kernel time under ncu (locked
         clocks) for each batch of AB_NCU_BATCHES (32 1), through AB_NCU_ARGS (default: every
         mma.sync convolution kernel of voxd_gpu_bench's first and timed run, whatever kernels
         a build splits them into), and bench/ncu_summary.py's table; AB_NCU_METRICS (a comma
         list, e.g. sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum) adds
         metrics to the CSVs in ab.tar.gz;
      4. voxd_gpu_bench on the lj-v1 bench voice (tools/make_bench_voices.py, BENCH_VOICES)
         with --batches AB_BATCHES (32,8,1), AB_ROUNDS (2) rounds, the binaries taking turns
         within each round so that they share the host's drift;
      5. a table: tests, ncu sums, each batch's vocoder ms and the one request (B = 1 total) in
         each round, also written to ab-summary.txt. The logs go into ab.tar.gz (a run returns
         a handful of files, not one per log). Each step is capped to stay under AB_DEADLINE
         seconds (560).
  scripts/gpu-check.py serve
      `voxd serve` on the GPU with the packed voxd (LD_LIBRARY_PATH on dist/lib,
      ESPEAK_DATA_PATH on dist/share, open files raised to 65536):
      1. nvidia-smi summary;
      2. the end-to-end suites tests/cli/test_serve.py, test_serve_chattts.py and
         test_serve_sambert.py with
         VOXD_BIN=dist/bin/voxd and VOXD_TEST_DEVICE=cuda, capped at E2E_TIMEOUT seconds (240; 0
         skips them, and fails);
      3. load: makes the lj-v1 bench voice if missing, starts `voxd serve --device cuda` on it
         with SERVE_ARGS (--max-connections 1100 --max-queue 2048 --max-batch 64
         --gpu-memory-limit 8GiB), waits for /readyz and then up to WARM_WAIT seconds (20) for
         its warm-up in idle time to end, runs bench/stream_load.py once per line of
         LOAD_RUNS (1 client, 100, 1000 at once, and 1000 of four sentences each started over
         5 s, so that all are open at once), counting the listen queue's overflows around each
         and printing the model steps from /metrics after each; with IDLE_CONNECTIONS=N, N idle
         keep-alive connections from bench/idle_connections.py are held open meanwhile for
         IDLE_HOLD seconds (240). Then SIGTERMs the server and wants exit status 0; with
         --log-level debug in SERVE_ARGS, bench/step_timeline.py's account of the device's time
         around the p95 first audio (all rounds together: give one LOAD_RUNS line), and from
         the last run's request times (stream_load.py --request-times, in the logs) the time
         outside the server's clock;
      4. a summary table, and the issue's target for 1,000 streams (p95 TTFA <= 200 ms, peak
         memory <= 8 GiB, no errors) as met or missed (informational).
      Each step is capped, children killed, so that the whole stays under SERVE_DEADLINE
      (570) seconds.
  scripts/gpu-check.py chattts-serve
      ChatTTS served (issue 14): the original against `voxd serve`, on the same random weights
      at the release's sizes, in about 8 minutes:
      1. nvidia-smi summary;
      2. the bench voice CHATTTS_BENCH_VOICE (/tmp/chattts-bench, made by
         bench/make_chattts_bench_voice.py if missing), and from it
         /tmp/chattts-serve-bench-L: its infer_code min_new_token = max_new_token = L
         (CHATTTS_SERVE_TOKENS, 64), so that every sentence makes L codes on either side
         (random weights end no sentence sensibly), the other files linked;
      3. bench/chattts_serve_peer.py: the original served one request at a time, infer() on
         padded lists, a thread per request (TTFA, audio-s/s, the most real-time streams, the
         batched way on through lists of 256 for its best throughput, torch's peak and steady
         memory, random-length requests), CHATTTS_SENTENCES (3)
         sentences a request, CHATTTS_PEER_ARGS added to its options, capped at
         CHATTTS_PEER_TIMEOUT (210) seconds;
      4. `voxd serve` on that voice with CHATTTS_SERVE_ARGS (--device cuda --max-batch 512
         --kv-cache 6GiB --gpu-memory-limit 16GiB --max-connections 2048 --max-queue 4096)
         under bench/chattts_serve_load.py (rounds of 1 and 100 streams, the search for the
         most real-time streams, 1,000 random-length requests with the server's reserved
         memory before and after), CHATTTS_LOAD_ARGS added to its options, capped at
         CHATTTS_LOAD_TIMEOUT (180) seconds; then SIGTERM, exit status 0 wanted;
      5. the side-by-side table, then the summary and the issue's four targets as met or
         missed (informational).
      Both sides write JSON (chattts-serve-peer.json, chattts-serve-voxd.json in OUT) after
      each part, so a run cut short still tabulates what it measured.

  scripts/gpu-check.py sambert-serve
      Sambert-HiFiGAN served (issue 15): 1. nvidia-smi; 2. tests/cli/test_serve_sambert.py on
      CUDA with the packed voxd; 3. bench/sambert_serve_bench.py: KAN-TTS's own inference code
      (a checkout at KANTTS_DIR, default .peer/KAN-TTS: carry it, it is not committed) one
      request at a time and from threads, against voxd serve on the same random weights at
      sambert_16k / hifigan_v1_16k sizes, SAMBERT_SERVE_ARGS added to its options, capped at
      SAMBERT_SERVE_TIMEOUT seconds (400); writes sambert-serve.json in OUT.

  scripts/gpu-check.py seeds
      The seeds' before/after table (issue 19): 1. nvidia-smi; 2. bench/seeds_table.py for each
      family of SEEDS_FAMILIES (fastspeech2,sambert,chattts): voxd serve (F16) beside
      bench/pytorch_server.py (the family's PyTorch model in eager mode: a thread per request,
      and seed 003's padded batch of 4 or, for KAN-TTS, a pool of 4 model copies), one way after
      the other: cold start, one request, GPU utilisation at 1 and 2 users, the most users
      within 200 ms p95 first audio, peak memory (allocator and NVML). Voices: lj-v1; the
      Sambert bench voice of bench/sambert_serve_bench.py with KAN-TTS from KANTTS_DIR
      (.peer/KAN-TTS: carry it); the ChatTTS bench voice at CHATTTS_SERVE_TOKENS codes a
      sentence. SEEDS_ARGS added to each run's options, each capped at SEEDS_TIMEOUT seconds
      (180); seeds-FAMILY.json in OUT (the charts are drawn from them afterwards:
      bench/seeds_table.py --from-json).

GPU_TESTS (names separated by spaces) narrows the test binaries run. Logs go to OUT (or a
temporary folder). Exit status 0 only when every step passed (serve: the suite passed, every
load run had no errors and the server exited 0), 2 when the packed tree is missing; each mode
stays under the run tool's 600 s. The device runs, after scripts/gpu-pack.sh here:

  run(command="scripts/gpu-check.py", carry=["build-gpu/dist.tar.xz"], kind="nvidia-h200",
      timeout_s=600)
  run(command="scripts/gpu-check.py ab", carry=["build-gpu/dist.tar.xz"], kind="nvidia-h200",
      timeout_s=600)      (after VARIANTS="NAME=REF ..." scripts/gpu-pack.sh)
  run(command="scripts/gpu-check.py serve", carry=["build-gpu/dist.tar.xz"],
      kind="nvidia-h200", timeout_s=600)
  run(command="scripts/gpu-check.py chattts-serve", carry=["build-gpu/dist.tar.xz"],
      kind="nvidia-h200", timeout_s=600)
"""
import dataclasses
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build-gpu"
DIST = BUILD / "dist"
MANIFEST = "gpu-tests.json"
START = time.monotonic()

NVIDIA_SMI = ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,memory.used,"
              "temperature.gpu,clocks.max.sm", "--format=csv"]
DEFAULT_SERVE_ARGS = ("--max-connections 1100 --max-queue 2048 --max-batch 64 "
                      "--gpu-memory-limit 8GiB")
DEFAULT_LOAD_RUNS = """--clients 1
--clients 100
--clients 1000
--clients 1000 --sentences 4 --ramp 5"""


def default_bench_runs(voices):
    """voxd_gpu_bench's option lines when BENCH_RUNS is unset."""
    return (f"--voice {voices}/lj-v1 --dtype f16 --batches 1,8,32,64\n"
            f"--voice {voices}/lj-v1 --dtype f32 --batches 1\n"
            f"--voice {ROOT}/voices/en-demo --dtype f16 --batches 1,32")


@dataclasses.dataclass
class GpuTest:
    """One GPU test binary as the manifest lists it; memcheck_filter None: not under memcheck."""
    name: str
    serial: bool
    timeout: int
    memcheck_filter: str | None


class Report:
    """The summary rows and whether every step passed."""

    def __init__(self):
        self.rows = []
        self.failed = False

    def add(self, label, text, ok=True):
        self.rows.append((label, text))
        self.failed = self.failed or not ok

    def table(self, width):
        return "".join(f"{label:<{width}} {text}\n" for label, text in self.rows)

    def exit_status(self):
        return 1 if self.failed else 0


def load_manifest(path):
    """The GPU tests of a gpu-tests.json."""
    with open(path) as f:
        manifest = json.load(f)
    return [GpuTest(t["name"], t["serial"], t["timeout"], t["memcheck_filter"])
            for t in manifest["tests"]]


def select_tests(tests, names):
    """The tests named in `names` (GPU_TESTS, separated by spaces), all when it is empty."""
    if not names.split():
        return tests
    by_name = {t.name: t for t in tests}
    unknown = [n for n in names.split() if n not in by_name]
    if unknown:
        raise ValueError(f"GPU_TESTS names tests the packed manifest lacks: {' '.join(unknown)}")
    return [by_name[n] for n in names.split()]


def gtest_cases(listing):
    """The full names of the cases in a --gtest_list_tests output."""
    cases, suite = [], ""
    for line in listing.splitlines():
        if line and not line.startswith(" "):
            suite = line.split(" ")[0]
        elif match := re.match(r"  (\S+)", line):
            cases.append(suite + match.group(1))
    return cases


def ctest_lines(test, binary, cases, root):
    """The CTestTestfile commands for the gtest cases of one binary."""
    lines = []
    for case in cases:
        lines.append(f'add_test([=[{case}]=] "{binary}" [=[--gtest_filter={case}]=])\n')
        lines.append(f'set_tests_properties([=[{case}]=] PROPERTIES LABELS gpu WORKING_DIRECTORY '
                     f'"{root}" ENVIRONMENT "VOXD_SOURCE_DIR={root}" TIMEOUT {test.timeout} '
                     f'RUN_SERIAL {"TRUE" if test.serial else "FALSE"})\n')
    return lines


def write_ctest_file(tests, bin_dir, root):
    """Writes a CTestTestfile.cmake with one test per gtest case into a new temporary folder;
    returns the folder and the tests whose binaries could not list their cases."""
    folder = Path(tempfile.mkdtemp(prefix="voxd-gpu-ctest."))
    unlisted = []
    with open(folder / "CTestTestfile.cmake", "w") as f:
        for test in tests:
            binary = bin_dir / test.name
            listing = subprocess.run([binary, "--gtest_list_tests"], capture_output=True, text=True)
            if listing.returncode != 0:
                unlisted.append(test.name)
            f.writelines(ctest_lines(test, binary, gtest_cases(listing.stdout), root))
    return folder, unlisted


def memcheck_command(sanitizer, binary, gtest_filter, timeout):
    """compute-sanitizer memcheck on `binary`'s cases in `gtest_filter`, ended after `timeout` s
    (exit status 124)."""
    return ["timeout", str(timeout), sanitizer, "--tool", "memcheck", "--leak-check", "full",
            "--error-exitcode", "99", binary, f"--gtest_filter={gtest_filter}"]


def memcheck_row(log, rc, timeout):
    """The summary text of one memcheck run from its log and exit status."""
    errors = re.findall(r"ERROR SUMMARY: ([0-9]+) error", log)
    count = errors[-1] if errors else "?"
    if rc == 124:
        return f"timed out after {timeout} s ({count} errors so far)"
    return f"{count} errors, gtest {gtest_results(log)}(exit {rc})"


def gtest_results(log):
    """gtest's PASSED and FAILED counts in a log, each followed by a space."""
    return "".join(m + " " for m in re.findall(r"\[  (?:PASSED|FAILED)  \] [0-9]+", log))


def last_match(pattern, text):
    """The last line of `text` that matches `pattern` from its start, or ""."""
    lines = [line for line in text.splitlines() if re.match(pattern, line)]
    return lines[-1] if lines else ""


def ctest_summary(text):
    """ctest's last result line: "100% tests passed out of 114" when none failed (ctest 3.28 and
    later), "97% tests passed, 3 tests failed out of 114" otherwise; "" when there is none."""
    return last_match(r"[0-9]+% tests passed(, [0-9]+ tests failed)? out of [0-9]+", text)


def exit_code(returncode):
    """A subprocess's exit status as a shell reports it (128 + N for a signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def run_logged(command, log, append=False, **kwargs):
    """Runs `command`, its output to stdout and to the file `log`; returns its exit status."""
    with open(log, "a" if append else "w") as f, subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", **kwargs) as process:
        for line in process.stdout:
            sys.stdout.write(line)
            f.write(line)
    sys.stdout.flush()
    return exit_code(process.returncode)


def head(path, n):
    """The first `n` lines of a file, as text."""
    return "".join(Path(path).read_text(errors="replace").splitlines(keepends=True)[:n])


def tail(path, n):
    """The last `n` lines of a file, as text."""
    return "".join(Path(path).read_text(errors="replace").splitlines(keepends=True)[-n:])


def nvidia_smi(report):
    """Prints the GPU's summary; a failure fails the run."""
    print("== 1. GPU", flush=True)
    if shutil.which(NVIDIA_SMI[0]) is None:
        report.add("nvidia-smi", "not found: is this the GPU machine?", ok=False)
    elif subprocess.run(NVIDIA_SMI).returncode != 0:
        report.failed = True


def logs_folder():
    """OUT, made if missing, or a new temporary folder."""
    out = os.environ.get("OUT") or tempfile.mkdtemp(prefix="voxd-gpu-logs.")
    os.makedirs(out, exist_ok=True)
    return Path(out)


def unpack_dist():
    """The carried archive replaces whatever dist/ an earlier call left on this machine."""
    archive = BUILD / "dist.tar.xz"
    if archive.is_file():
        shutil.rmtree(DIST, ignore_errors=True)
        subprocess.run(["tar", "-C", BUILD, "-xJf", archive], check=True)


def use_dist_libraries():
    """Puts dist/lib, then the system's CUDA libraries, first on the library path."""
    old = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = (f"{DIST}/lib:/usr/lib/x86_64-linux-gnu"
                                     + (f":{old}" if old else ""))


def find_sanitizer():
    """compute-sanitizer's path, or None."""
    for candidate in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
                      "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def gpu_tests_step(tests, logs, report):
    """Step 2: ctest -L gpu over every case, then the convolution paths."""
    print("== 2. GPU tests (ctest -L gpu)", flush=True)
    folder, unlisted = write_ctest_file(tests, DIST / "bin", ROOT)
    for name in unlisted:
        report.add(f"list {name}", "--gtest_list_tests failed", ok=False)
    rc = run_logged(["ctest", "-L", "gpu", "--output-on-failure", "-j", "4"], logs / "ctest.log",
                    cwd=folder)
    summary = ctest_summary((logs / "ctest.log").read_text())
    report.add("gpu tests", summary or f"no summary (ctest exit {rc})", rc == 0)
    ops = DIST / "bin" / "test_cuda_ops"
    if os.access(ops, os.X_OK):
        # The three paths at once: each is mostly the reference's CPU time (~2 min alone).
        runs = {}
        for path in os.environ.get("CONV_PATHS", "wgmma cudnn im2col").split():
            log = logs / f"conv-{path}.log"
            with open(log, "w") as f:
                runs[path] = (log, subprocess.Popen(
                    [ops, "--gtest_filter=*Conv*:*Strided*"], stdout=f,
                    stderr=subprocess.STDOUT, env={**os.environ, "VOXD_CUDA_CONV": path}))
        for path, (log, process) in runs.items():
            rc = exit_code(process.wait())
            report.add(f"conv ops via {path}", f"{gtest_results(log.read_text())}(exit {rc})",
                       rc == 0)


def memcheck_step(tests, logs, report):
    """Step 3: each test binary under compute-sanitizer memcheck with its manifest's filter; the
    binaries that may share the device all at once (each is mostly the sanitizer's CPU time), then
    the serial ones (they compare with the driver's free memory) one at a time."""
    print("== 3. compute-sanitizer memcheck", flush=True)
    sanitizer = find_sanitizer()
    if sanitizer is None:
        report.add("memcheck", "compute-sanitizer not found", ok=False)
        return
    timeout = int(os.environ.get("MEMCHECK_TIMEOUT") or 150)

    def start(test):
        log = logs / f"memcheck-{test.name}.log"
        with open(log, "w") as f:
            return log, subprocess.Popen(memcheck_command(sanitizer, DIST / "bin" / test.name,
                                                          test.memcheck_filter, timeout),
                                         stdout=f, stderr=subprocess.STDOUT)

    def finish(test, log, process):
        rc = exit_code(process.wait())
        print(tail(log, 5), end="", flush=True)
        row = memcheck_row(log.read_text(errors="replace"), rc, timeout)
        report.add(f"memcheck {test.name}", row, rc == 0)

    checked = [t for t in tests if t.memcheck_filter is not None]
    for test in tests:
        if test.memcheck_filter is None:
            report.add(f"memcheck {test.name}", "not run (step 2 ran it)")
    parallel = [(test, *start(test)) for test in checked if not test.serial]
    for test, log, process in parallel:
        finish(test, log, process)
    for test in checked:
        if test.serial:
            finish(test, *start(test))


def bench_step(logs, report):
    """Step 4: the bench voices made if missing, then voxd_gpu_bench once per BENCH_RUNS line."""
    print("== 4. benchmarks", flush=True)
    voices = os.environ.get("BENCH_VOICES") or "/tmp/voxd-bench-voices"
    if not Path(voices, "lj-v1", "config.json").is_file():
        with open(logs / "bench-voices.log", "w") as f:
            make = ["python3", ROOT / "tools" / "make_bench_voices.py", "--out", voices]
            rc = subprocess.run(make, stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            report.add("bench voices", "make_bench_voices.py failed (see bench-voices.log)",
                       ok=False)
    runs = os.environ.get("BENCH_RUNS") or default_bench_runs(voices)
    for run in filter(None, runs.splitlines()):
        rc = run_logged([DIST / "bench" / "voxd_gpu_bench", *run.split()], logs / "bench.log",
                        append=True)
        report.add(f"bench {run}", f"exit {rc}", rc == 0)
    if os.environ.get("CHATTTS_BENCH", "1") != "0":
        chattts_bench(logs, report)


def chattts_bench_voice(logs, report):
    """CHATTTS_BENCH_VOICE (/tmp/chattts-bench), made by bench/make_chattts_bench_voice.py if
    missing; None (and a failed row) when making it failed."""
    voice = Path(os.environ.get("CHATTTS_BENCH_VOICE") or "/tmp/chattts-bench")
    if not (voice / "config.json").is_file():
        with open(logs / "chattts-bench-voice.log", "w") as f:
            make = ["python3", ROOT / "bench" / "make_chattts_bench_voice.py", voice]
            if subprocess.run(make, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
                report.add("chattts bench voice", "failed (see chattts-bench-voice.log)", ok=False)
                return None
    return voice


def chattts_bench(logs, report):
    """ChatTTS's decode steps and vocoding (voxd_chattts_bench, per dtype of CHATTTS_DTYPES)
    beside the original's loop (bench/chattts_peer.py) on the same random weights at the
    release's sizes, made here by bench/make_chattts_bench_voice.py."""
    voice = chattts_bench_voice(logs, report)
    if voice is None:
        return
    shape = ["--voice", str(voice), "--steps", "300", "--runs", "3", "--frames", "1000"]
    for dtype in (os.environ.get("CHATTTS_DTYPES") or "f32 f16 bf16").split():
        rc = run_logged([DIST / "bench" / "voxd_chattts_bench", *shape, "--dtype", dtype],
                        logs / "chattts-bench.log", append=True)
        report.add(f"chattts bench {dtype}", f"exit {rc}", rc == 0)
    rc = run_logged(["python3", ROOT / "bench" / "chattts_peer.py", *shape],
                    logs / "chattts-bench.log", append=True)
    report.add("chattts peer", f"exit {rc}", rc == 0)


def check(mode):
    """check, quick, memcheck or bench: the steps of `mode`; returns the exit status."""
    logs = logs_folder()
    use_dist_libraries()
    os.environ["VOXD_SOURCE_DIR"] = str(ROOT)
    unpack_dist()
    # The served tests (test_cuda_graphs' AcousticGraphsServed) speak text through eSpeak NG.
    os.environ["ESPEAK_DATA_PATH"] = str(DIST / "share")
    report = Report()
    nvidia_smi(report)
    if not (DIST / MANIFEST).is_file():
        print(f"missing {DIST}/{MANIFEST}: run 'scripts/gpu-pack.sh' first")
        return 2
    try:
        tests = select_tests(load_manifest(DIST / MANIFEST), os.environ.get("GPU_TESTS", ""))
    except ValueError as e:
        print(f"{e} (scripts/gpu-pack.sh packs those of its GPU_TESTS)")
        return 2
    for test in tests:
        if not os.access(DIST / "bin" / test.name, os.X_OK):
            print(f"missing {DIST}/bin/{test.name}: run 'scripts/gpu-pack.sh' first")
            return 2
    if mode in ("check", "quick"):
        gpu_tests_step(tests, logs, report)
    if mode in ("check", "memcheck"):
        memcheck_step(tests, logs, report)
    if mode in ("check", "bench"):
        bench_step(logs, report)
    print("== 5. summary")
    print(report.table(26), end="")
    return report.exit_status()


# Every mma.sync convolution kernel (mma_conv_kernel, mma_pair_on_chip_kernel) of the run: a
# count of launches would cover different work in builds that split a pass into other kernels.
AB_DEFAULT_NCU_ARGS = "-k regex:mma_"


def ab_budget(cap):
    """Seconds an ab step may take: at most `cap`, within AB_DEADLINE (560) less 20 for the
    summary; 0 when there is no time left."""
    deadline = int(os.environ.get("AB_DEADLINE") or 560)
    return max(0, min(cap, deadline - 20 - int(time.monotonic() - START)))


def ab_binaries():
    """{name: (test_cuda_ops, voxd_gpu_bench)}: "main" (the working tree's build in dist/), then
    each variant in dist/variants/, with the commit each was built from ({name: "commit subject"}).
    """
    binaries = {"main": (DIST / "bin" / "test_cuda_ops", DIST / "bench" / "voxd_gpu_bench")}
    commits = {"main": "the working tree"}
    refs = DIST / "variants" / "refs.txt"
    if refs.is_file():
        for line in refs.read_text().splitlines():
            name, commit = line.split(" ", 1)
            commits[name] = commit
            folder = DIST / "variants" / name
            binaries[name] = (folder / "test_cuda_ops", folder / "voxd_gpu_bench")
    return binaries, commits


def bench_rows(text):
    """{batch: (acoustic ms, vocoder ms, total ms)} from voxd_gpu_bench's table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].isdigit():
            try:
                rows[int(cells[0])] = tuple(float(c) for c in cells[1:4])
            except ValueError:
                continue
    return rows


def ab_tests(binaries, logs, report):
    """Step 2: every binary's test_cuda_ops on AB_TESTS at once; {name: passed}."""
    print("== 2. op tests", flush=True)
    gtest_filter = os.environ.get("AB_TESTS") or "CudaOps.Conv*"
    runs = {}
    for name, (tests, _) in binaries.items():
        log = logs / f"tests-{name}.log"
        with open(log, "w") as f:
            runs[name] = (log, subprocess.Popen([tests, f"--gtest_filter={gtest_filter}"],
                                                stdout=f, stderr=subprocess.STDOUT))
    passed = {}
    end = time.monotonic() + ab_budget(240)
    for name, (log, process) in runs.items():
        try:
            rc = exit_code(process.wait(timeout=max(1, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            rc = 124
        passed[name] = rc == 0
        report.add(f"tests {name}", f"{gtest_results(log.read_text(errors='replace'))}(exit {rc})",
                   rc == 0)
    return passed


def ab_ncu(binaries, voice, logs, report):
    """Step 3: {(name, batch): kernel ms under ncu}, or {} without ncu."""
    ncu = os.environ.get("NCU") or shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    if not os.access(ncu, os.X_OK):
        report.add("ncu", "not found: no kernel times")
        return {}
    print("== 3. ncu", flush=True)
    sys.path.insert(0, str(ROOT / "bench"))  # bench/ is scripts, not a package
    import ncu_summary
    sums = {}
    ncu_args = (os.environ.get("AB_NCU_ARGS") or AB_DEFAULT_NCU_ARGS).split()
    extra_metrics = [m for m in (os.environ.get("AB_NCU_METRICS") or "").split(",") if m]
    for batch in (os.environ.get("AB_NCU_BATCHES") or "32 1").split():
        for name, (_, bench) in binaries.items():
            log = logs / f"ncu-{name}-b{batch}.csv"
            metrics = ",".join(["gpu__time_duration.sum", *extra_metrics])
            command = [ncu, *ncu_args, "--metrics", metrics, "--csv", bench,
                       "--voice", voice, "--dtype", "f16", "--batches", batch, "--repeats", "1",
                       "--warmup-seconds", "0"]
            with open(log, "w") as f:
                rc = run_capped(ab_budget(90), command, stdout=f, stderr=subprocess.STDOUT)
            total, calls = ncu_summary.kernel_times(log)
            if rc != 0 or not total:
                report.add(f"ncu {name} B={batch}", f"exit {rc}, {sum(calls.values())} kernels",
                           ok=False)
                continue
            sums[(name, batch)] = sum(total.values()) / 1e6
            with open(logs / f"ncu-{name}-b{batch}.txt", "w") as f:
                subprocess.run(["python3", ROOT / "bench" / "ncu_summary.py", log, "--top", "20"],
                               stdout=f, stderr=subprocess.STDOUT)
            print(f"ncu {name} B={batch}: {sums[(name, batch)]:.2f} ms in "
                  f"{sum(calls.values())} kernels", flush=True)
    return sums


def ab_bench(binaries, voice, logs, report):
    """Step 4: {name: [{batch: (acoustic, vocoder, total ms)} per round]}."""
    print("== 4. voxd_gpu_bench", flush=True)
    batches = os.environ.get("AB_BATCHES") or "32,8,1"
    results = {name: [] for name in binaries}
    for round_number in range(1, int(os.environ.get("AB_ROUNDS") or 2) + 1):
        for name, (_, bench) in binaries.items():
            log = logs / f"bench-{name}-{round_number}.log"
            with open(log, "w") as f:
                rc = run_capped(ab_budget(60), [bench, "--voice", voice, "--dtype", "f16",
                                                "--batches", batches],
                                stdout=f, stderr=subprocess.STDOUT)
            if rc != 0:
                report.add(f"bench {name} round {round_number}", f"exit {rc}", ok=False)
            results[name].append(bench_rows(log.read_text(errors="replace")))
            print(f"bench {name} round {round_number}: {results[name][-1]}", flush=True)
    return results


def ab_table(binaries, commits, passed, sums, results):
    """The summary: one row per binary."""
    batches = sorted({b for rounds in results.values() for r in rounds for b in r}, reverse=True)
    ncu_batches = sorted({batch for (_, batch) in sums}, key=int, reverse=True)
    header = (["binary", "op tests"] + [f"ncu B={b} ms" for b in ncu_batches]
              + [f"vocoder B={b} ms" for b in batches] + ["one request ms"])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name in binaries:
        rounds = results.get(name, [])

        def per_round(batch, column):
            return " / ".join(f"{r[batch][column]:.2f}" if batch in r else "-" for r in rounds)

        cells = ([name, "pass" if passed.get(name) else "FAIL"]
                 + [f"{sums[(name, b)]:.2f}" if (name, b) in sums else "-" for b in ncu_batches]
                 + [per_round(b, 1) for b in batches] + [per_round(1, 2)])
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""] + [f"{name}: {commits[name]}" for name in binaries]
    return "\n".join(lines) + "\n"


def ab():
    """The ab mode (see the top); returns the exit status."""
    out = logs_folder()
    logs = out / "ab"
    logs.mkdir(exist_ok=True)
    use_dist_libraries()
    unpack_dist()
    report = Report()
    nvidia_smi(report)
    binaries, commits = ab_binaries()
    missing = [str(p) for pair in binaries.values() for p in pair if not os.access(p, os.X_OK)]
    if missing:
        print(f"missing {', '.join(missing)}: run scripts/gpu-pack.sh (VARIANTS=...) first")
        return 2
    voices = os.environ.get("BENCH_VOICES") or "/tmp/voxd-bench-voices"
    if not Path(voices, "lj-v1", "config.json").is_file():
        with open(logs / "bench-voices.log", "w") as f:
            make = ["python3", ROOT / "tools" / "make_bench_voices.py", "--out", voices]
            if subprocess.run(make, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
                report.add("bench voices", "make_bench_voices.py failed (see bench-voices.log)",
                           ok=False)
    voice = f"{voices}/lj-v1"
    passed = ab_tests(binaries, logs, report)
    sums = ab_ncu(binaries, voice, logs, report)
    results = ab_bench(binaries, voice, logs, report)
    print("== 5. summary")
    table = ab_table(binaries, commits, passed, sums, results)
    (out / "ab-summary.txt").write_text(table)
    print(table + report.table(26), end="")
    subprocess.run(["tar", "-C", out, "-czf", out / "ab.tar.gz", "ab"], check=True)
    shutil.rmtree(logs)
    return report.exit_status()


def budget(cap, reserve=30):
    """Seconds a serve step may take: at most `cap`, leaving `reserve` of SERVE_DEADLINE for what
    follows; 0 when there is no time left."""
    deadline = int(os.environ.get("SERVE_DEADLINE") or 570)
    return max(0, min(cap, deadline - int(time.monotonic() - START) - reserve))


def children_of(pid):
    """The ids of the processes whose parent is `pid` (from /proc: procps may be missing)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # After "pid (comm) ": the state, then the parent's id.
        if int(text.rpartition(") ")[2].split()[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def signal_all(pids, sig):
    """Sends `sig` to each of `pids` that is still there."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def run_capped(cap, command, **kwargs):
    """Runs `command` for at most `cap` seconds; when time is up, ends its children (the servers
    a test started) with it. Returns its exit status, or 124 when time ran out."""
    process = subprocess.Popen(command, **kwargs)
    end = time.monotonic() + cap
    while process.poll() is None:
        if time.monotonic() >= end:
            pids = [*children_of(process.pid), process.pid]
            signal_all(pids, signal.SIGTERM)
            time.sleep(5)
            signal_all(pids, signal.SIGKILL)
            process.wait()
            return 124
        time.sleep(0.5)
    return exit_code(process.returncode)


def listen_overflows():
    """TcpExt ListenOverflows (connections the kernel dropped because a listen queue was full),
    or None where /proc/net/netstat does not say."""
    try:
        lines = [line.split() for line in Path("/proc/net/netstat").read_text().splitlines()
                 if line.startswith("TcpExt:")]
        return int(dict(zip(lines[0][1:], lines[1][1:]))["ListenOverflows"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def http_get(url):
    """The body of a GET of `url` when it answers 200, else None."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode() if response.status == 200 else None
    except (OSError, ValueError):
        return None


def step_summary(metrics):
    """The server's model steps so far from its /metrics text: per kind the steps, their mean
    batch and time, and the total time spent in them."""
    values, kinds = {}, []
    for line in metrics.splitlines():
        match = re.match(r'(voxd_engine_(?:step_seconds|batch_size)_(?:sum|count))'
                         r'\{.*kind="([a-z]+)".*\}\s+(\S+)', line)
        if match:
            name, kind, value = match.groups()
            values[name, kind] = float(value)
            if kind not in kinds:
                kinds.append(kind)
    lines = []
    for kind in kinds:
        n = values.get(("voxd_engine_step_seconds_count", kind), 0)
        seconds = values.get(("voxd_engine_step_seconds_sum", kind), 0)
        batch = values.get(("voxd_engine_batch_size_sum", kind), 0)
        if n > 0:
            lines.append(f"steps so far: {kind} {int(n)} steps, mean batch {batch / n:.1f}, "
                         f"mean {1000 * seconds / n:.1f} ms, total {seconds:.2f} s\n")
    return "".join(lines)


def memory_line(memory):
    """The allocator's peaks and NVML's reading from /debug/memory?format=json."""
    stats, reading = memory["stats"], memory.get("device_reading") or {}

    def gib(n):
        return f"{n / 2**30:.2f} GiB"
    limit = gib(stats["limit_bytes"]) if stats.get("limit_bytes") else "none"
    used = gib(reading["used_bytes"]) if "used_bytes" in reading else reading.get("reason", "-")
    return (f"memory after the load: peak reserved {gib(stats['peak_reserved_bytes'])} peak "
            f"allocated {gib(stats['peak_allocated_bytes'])} limit {limit} | NVML used now {used}")


def leading_number(text):
    """The number `text` starts with (after blanks), as awk reads it: 0 when there is none."""
    match = re.match(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text)
    return float(match.group(0)) if match else 0.0


def target_line(rows):
    """The issue's target, from the first load run of 1,000 clients or more started at once."""
    for label, text in rows:
        words = label.split()
        if not re.match(r"load --clients [0-9]+", label) or "--ramp" in label:
            continue
        if int(words[2]) < 1000:
            continue
        if not text.lstrip().startswith("|"):
            return f"{words[2]} clients: {text}: missed"
        fields = f"{label}|{text}".split("|") + [""] * 12
        errors, p95 = int(leading_number(fields[4])), int(leading_number(fields[6]))
        nvml = re.search("[0-9]", fields[10]) is not None
        memory = leading_number(fields[10] if nvml else fields[9])
        met = errors == 0 and p95 <= 200 and memory <= 8
        return (f"{words[2]} clients: p95 TTFA {p95} ms (<= 200), peak "
                f"{'NVML device used' if nvml else 'reserved'} {memory:.2f} GiB (<= 8), "
                f"{errors} errors: {'met' if met else 'missed'}")
    return "no run of 1,000 clients at once"


def e2e_step(voxd, logs, report):
    """Serve step 2: the end-to-end suites (FastSpeech2's, ChatTTS's, Sambert's) on the GPU."""
    print("== 2. end to end: tests/cli/test_serve.py, test_serve_chattts.py and "
          "test_serve_sambert.py with VOXD_TEST_DEVICE=cuda", flush=True)
    timeout = int(os.environ.get("E2E_TIMEOUT") or 240)
    if timeout == 0:
        report.add("e2e tests (cuda)", "not run (E2E_TIMEOUT=0)", ok=False)
        return
    cap = budget(timeout, 240)
    log = logs / "serve-e2e.log"
    with open(log, "w") as f:
        rc = run_capped(cap, ["python3", "-m", "unittest", "-v", "tests/cli/test_serve.py",
                              "tests/cli/test_serve_chattts.py", "tests/cli/test_serve_sambert.py"],
                        cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                        env={**os.environ, "VOXD_BIN": str(voxd), "VOXD_TEST_DEVICE": "cuda"})
    print(tail(log, 40), end="", flush=True)
    text = log.read_text(errors="replace")
    failing = " ".join(line.split()[0] for line in text.splitlines()
                       if re.search(r" \.\.\. (FAIL|ERROR)$", line))
    failed = f"; failed: {failing}" if failing else ""
    if rc == 124:
        passed = sum(1 for line in text.splitlines() if line.endswith(" ... ok"))
        report.add("e2e tests (cuda)", f"timed out after {cap} s, {passed} passed so far{failed}",
                   ok=False)
    else:
        ran = last_match(r"Ran [0-9]+ tests? in", text) or "no result"
        result = last_match(r"(OK|FAILED)", text) or "?"
        report.add("e2e tests (cuda)", f"{ran}: {result} (exit {rc}){failed}", rc == 0)


def server_url(log):
    """The URL a `voxd serve --log-format json` says it listens on, or None yet."""
    match = re.search(r'"url":"(http://[^"]*)"', Path(log).read_text(errors="replace"))
    return match.group(1) if match else None


def grep_lines(pattern, path, first=False):
    """The lines of a file in which `pattern` occurs (only the first with `first`), as text."""
    lines = [line for line in Path(path).read_text(errors="replace").splitlines(keepends=True)
             if re.search(pattern, line)]
    return "".join(lines[:1] if first else lines)


def start_idle_connections(url, server, logs):
    """bench/idle_connections.py holding IDLE_CONNECTIONS open (None when unset), once they are
    open or after 60 s. The server needs a --keep-alive-timeout longer than the rounds and
    --max-connections above them."""
    count = int(os.environ.get("IDLE_CONNECTIONS") or 0)
    if count <= 0:
        return None
    log = logs / "idle-connections.log"
    with open(log, "w") as f:
        idle = subprocess.Popen(
            ["python3", ROOT / "bench" / "idle_connections.py", "--url", url,
             "--pid", str(server.pid), "--connections", str(count),
             "--hold", os.environ.get("IDLE_HOLD") or "240"],
            stdout=f, stderr=subprocess.STDOUT)
    end = time.monotonic() + 60
    while time.monotonic() < end and idle.poll() is None and not grep_lines("^opened", log):
        time.sleep(0.5)
    print(head(log, 1), end="", flush=True)
    return idle


def load_rounds(url, server, logs, report):
    """bench/stream_load.py once per LOAD_RUNS line, with the listen overflows around each and
    the model steps after each."""
    for round_number, run in enumerate(filter(None, (os.environ.get("LOAD_RUNS") or
                                                     DEFAULT_LOAD_RUNS).splitlines()), 1):
        cap = budget(150, 45)
        if cap == 0 or server.poll() is not None:
            why = "out of time" if cap == 0 else "the server is gone"
            report.add(f"load {run}", f"not run: {why}", ok=False)
            continue
        before = listen_overflows()
        times = logs / f"request-times-{round_number}.jsonl"
        with tempfile.TemporaryFile("w+") as out:
            rc = run_capped(cap, ["python3", ROOT / "bench" / "stream_load.py", "--url", url,
                                  "--voice", "lj-v1", "--timeout", "60", "--request-times",
                                  times, *run.split()],
                            stdout=out, stderr=subprocess.STDOUT)
            out.seek(0)
            output = out.read()
        after = listen_overflows()
        overflows = after - before if before is not None and after is not None else "n/a"
        text = (f"$ stream_load.py {run} (exit {rc}; listen queue overflows meanwhile: "
                f"{overflows})\n{output}")
        metrics = http_get(f"{url}/metrics")
        if metrics is not None:
            (logs / f"metrics-after-round-{round_number}.txt").write_text(metrics)
            text += step_summary(metrics)
        print(text, end="", flush=True)
        with open(logs / "load.log", "a") as f:
            f.write(text)
        row = last_match(r"\| [0-9]", output) or "no table row"
        report.add(f"load {run}", f"{row} exit {rc}, listen overflows {overflows}", rc == 0)


def lj_voice(logs, report):
    """The lj-v1 bench voice (HiFiGAN V1 at LJSpeech size, random weights) in BENCH_VOICES, made
    if missing; None (reported) when it could not be made."""
    voices = Path(os.environ.get("BENCH_VOICES") or "/tmp/voxd-bench-voices")
    if not (voices / "lj-v1" / "config.json").is_file():
        log = logs / "bench-voices.log"
        with open(log, "w") as f:
            rc = run_capped(budget(180, 150), ["python3", ROOT / "tools" / "make_bench_voices.py",
                                               "--out", voices, "--voices", "lj-v1"],
                            stdout=f, stderr=subprocess.STDOUT)
        print(tail(log, 3), end="", flush=True)
        if rc != 0:
            report.add("bench voice lj-v1",
                       f"make_bench_voices.py exit {rc} (see bench-voices.log)", ok=False)
    return voices / "lj-v1" if (voices / "lj-v1" / "config.json").is_file() else None


def load_step(voxd, logs, report):
    """Serve step 3: the lj-v1 voice made if missing, the server on it under
    bench/stream_load.py."""
    print("== 3. load: voxd serve --device cuda on lj-v1, bench/stream_load.py", flush=True)
    voice = lj_voice(logs, report)
    server_rc = "not started"
    if voice is not None:
        server_rc = serve_load(voxd, voice, logs, report)
    report.add("load server exit", str(server_rc), server_rc == 0)


def start_server(command, log, ready_cap):
    """Starts `command` (a `voxd serve --port 0 --log-format json ...`), its standard error to
    `log`; waits up to `ready_cap` seconds for /readyz. Returns (the process, its URL or None
    when it did not get ready); (None, None) without starting it when `ready_cap` is 0 (no time
    left under SERVE_DEADLINE)."""
    if ready_cap <= 0:
        print(f"not starting voxd serve: no time left under SERVE_DEADLINE, {log.name} not written")
        return None, None
    print(" ".join(map(str, command)), flush=True)
    with open(log, "w") as f:
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=f)
    url, end = None, time.monotonic() + ready_cap
    while time.monotonic() < end and server.poll() is None:
        url = url or server_url(log)
        if url and http_get(f"{url}/readyz") is not None:
            break
        time.sleep(0.5)
    print(grep_lines('"msg":"listening"', log, first=True), end="")
    if not url or http_get(f"{url}/readyz") is None:
        print("voxd serve did not get ready:")
        print(tail(log, 20), end="")
        return server, None
    return server, url


def wait_for_idle_warm_up(log):
    """Waits up to WARM_WAIT seconds (20; 0 does not wait) for the server's warm-up in idle time
    to end (its "warmed up further while idle" line), so that the load meets a server that has
    been up a moment rather than one that has just become ready."""
    cap = float(os.environ.get("WARM_WAIT", "20"))
    end = time.monotonic() + cap
    pattern = '"msg":"warmed up further while idle"'
    while time.monotonic() < end and not grep_lines(pattern, log, first=True):
        time.sleep(0.2)
    print(grep_lines(pattern, log, first=True) or
          f"no end of the idle warm-up within WARM_WAIT={cap:g} s: the load starts now\n", end="")


def not_ready(server, log):
    """What to report of a server start_server did not get ready."""
    return (f"not ready (see {log.name})" if server is not None
            else "not started: no time left under SERVE_DEADLINE")


def stop_server(server, log):
    """SIGTERM, then the exit status (or why there is none)."""
    if server is None:
        return "not started"
    server.send_signal(signal.SIGTERM)
    try:
        server_rc = exit_code(server.wait(timeout=budget(60, 5)))
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        server_rc = "did not exit after SIGTERM (killed)"
    print(grep_lines('"msg":"(shutting down|stopped)"', log), end="", flush=True)
    return server_rc


def serve_load(voxd, voice, logs, report):
    """Starts the server on `voice`, runs the load rounds once it is ready, stops it; returns its
    exit status (or why there is none)."""
    serve_log = logs / "serve-load.log"
    server_args = (os.environ.get("SERVE_ARGS") or DEFAULT_SERVE_ARGS).split()
    command = [str(voxd), "serve", "--device", "cuda", "--voice", str(voice), "--port", "0",
               "--log-format", "json", *server_args]
    server, url = start_server(command, serve_log, budget(90, 120))
    if url is None:
        report.add("load server", not_ready(server, serve_log), ok=False)
    else:
        wait_for_idle_warm_up(serve_log)
        idle = start_idle_connections(url, server, logs)
        load_rounds(url, server, logs, report)
        if idle is not None:
            rc = exit_code(idle.wait())
            idle_text = (logs / "idle-connections.log").read_text(errors="replace")
            print(idle_text, end="")
            row = last_match(r"\| [0-9]", idle_text) or "no table row"
            report.add("idle connections", f"{row} exit {rc}", rc == 0)
        memory = http_get(f"{url}/debug/memory?format=json")
        if memory is not None:
            (logs / "memory-after-load.json").write_text(memory)
            print(memory_line(json.loads(memory)))
    server_rc = stop_server(server, serve_log)
    if server is not None and '"msg":"step"' in serve_log.read_text(errors="replace"):
        # SERVE_ARGS had --log-level debug
        # The last load run's request times beside the server's: a burst is one run.
        times = sorted(logs.glob("request-times-*.jsonl"),
                       key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        timeline = subprocess.run(["python3", ROOT / "bench" / "step_timeline.py", serve_log,
                                   "--json", logs / "step-timeline.json",
                                   *(["--load-times", times[-1]] if times else [])],
                                  capture_output=True, text=True, timeout=120)
        print(timeline.stdout + timeline.stderr, end="", flush=True)
    return server_rc


def raise_open_files():
    """A socket per stream on both sides: up to 65536 open files (the hard limit if lower)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = 65536 if hard == resource.RLIM_INFINITY or hard >= 65536 else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def packed_voxd():
    """The packed voxd, its libraries, eSpeak's and OpenCC's data and the Mandarin lexicon in
    place (LD_LIBRARY_PATH, ESPEAK_DATA_PATH, VOXD_OPENCC_DIR, VOXD_DATA_DIR), the open files
    raised; None (after saying why) when the packed tree is missing."""
    unpack_dist()
    use_dist_libraries()
    os.environ["ESPEAK_DATA_PATH"] = str(DIST / "share")
    os.environ["VOXD_OPENCC_DIR"] = str(DIST / "share" / "opencc")
    os.environ["VOXD_DATA_DIR"] = str(ROOT / "data")
    os.environ["PYTHONUNBUFFERED"] = "1"
    voxd = DIST / "bin" / "voxd"
    espeak_data = DIST / "share" / "espeak-ng-data"
    if not os.access(voxd, os.X_OK) or not (espeak_data / "phontab").is_file():
        print(f"missing {voxd} or {espeak_data}: run 'scripts/gpu-pack.sh' first")
        return None
    raise_open_files()
    return voxd


def packed_start():
    """What a mode that runs the packed voxd starts with: (the logs folder, voxd, a Report with
    nvidia-smi's row), or None (said why) when the packed tree is missing."""
    logs = logs_folder()
    voxd = packed_voxd()
    if voxd is None:
        return None
    report = Report()
    nvidia_smi(report)
    return logs, voxd, report


def torch_environment():
    """(os.environ without the packed libraries' path, that path): torch loads its own cuDNN, so
    the path goes to voxd alone."""
    env = dict(os.environ)
    return env, env.pop("LD_LIBRARY_PATH")


def script_step(report, label, log, cap, command, tail_lines, **kwargs):
    """Runs `command` for at most `cap` seconds, its output to `log`; prints the log's last
    `tail_lines` lines and reports `label` as its exit status; returns that."""
    with open(log, "w") as f:
        rc = run_capped(cap, command, stdout=f, stderr=subprocess.STDOUT, **kwargs)
    print(tail(log, tail_lines), end="", flush=True)
    report.add(label, "timed out" if rc == 124 else f"exit {rc}", rc == 0)
    return rc


def serve():
    """serve: the end-to-end suite and the load on the GPU; returns the exit status."""
    start = packed_start()
    if start is None:
        return 2
    logs, voxd, report = start
    print(f"open files: {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}; voxd: {voxd}; "
          f"ESPEAK_DATA_PATH={os.environ['ESPEAK_DATA_PATH']}", flush=True)
    e2e_step(voxd, logs, report)
    load_step(voxd, logs, report)
    print("== 4. summary")
    print(report.table(34), end="")
    print(f"{'target (informational)':<34} {target_line(report.rows)}")
    return report.exit_status()


# ---------------------------------------------------------------------------------------------
# chattts-serve: the original ChatTTS served against voxd serve (issue 14)

DEFAULT_CHATTTS_SERVE_ARGS = ("--device cuda --max-batch 512 --kv-cache 6GiB "
                              "--gpu-memory-limit 16GiB --max-connections 2048 --max-queue 4096")
# The original's batched way measured past the lists its streams keep up at: its throughput grows
# with the list, and the 30x target is against its best.
CHATTTS_PEER_THROUGHPUT_ARGS = ["--search-batched", "1,2,4,8,16,32,64,128,256", "--past-real-time"]
GIB = 2**30


def derive_serve_voice(base, out, tokens):
    """`out`: the voice `base` with infer_code's min_new_token = max_new_token = `tokens` (every
    sentence makes that many codes, on either side), its other files linked to base's. Returns
    the voice's name."""
    config = json.loads((base / "config.json").read_text())
    config["infer_code"]["min_new_token"] = config["infer_code"]["max_new_token"] = tokens
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for entry in base.iterdir():
        if entry.name != "config.json":
            (out / entry.name).symlink_to(entry.resolve())
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return config["name"]


def read_json(path):
    """A JSON file's content, or None when it is missing or cut short."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def figure(value, digits=0):
    return "-" if value is None else f"{value:,.{digits}f}"


def gib_text(n):
    return "-" if n is None else f"{n / GIB:.2f}"


def round_rate(entry):
    """A round's audio-s/s (None when it has none)."""
    return entry["summary"]["audio_per_s"] if entry else None


def most_text(most, exact):
    """The most real-time streams: '>= N' when every round of the search kept up (N a lower
    bound), '-' when none ran."""
    if most is None:
        return "-"
    return str(most) if exact else f">= {most}"


def pair_text(first, second):
    """Two byte counts as 'a / b' GiB."""
    return f"{gib_text(first)} / {gib_text(second)}"


def ttfa_text(summary):
    return f"{figure(summary['ttfa_p50_ms'])} / {figure(summary['ttfa_p95_ms'])}"


def peer_rows(peer):
    """The side-by-side rows of the original's ways: their non-streaming rounds, and the TTFA
    of the largest stream=True round of at most as many requests."""
    rows = []
    for way in ("sequential", "batched", "threads"):
        entry = (peer or {}).get("ways", {}).get(way)
        if not entry or not entry["main"]:
            label = entry["label"] if entry else way
            rows.append([f"original: {label}", "-", "not run", "-", "-", "-", "-"])
            continue
        main, mem = entry["main"], entry["main"]["memory"]
        random = peer.get("random") if way == "batched" else None
        random_text = "-"
        if random and random["before"]:
            random_text = (pair_text(random["before"]["reserved"], random["after"]["reserved"])
                           + f" ({random['requests']} requests)")
        streams = [e for e in entry["search"] if e["concurrency"] <= main["concurrency"]]
        ttfa = ttfa_text(main["summary"])
        if streams:
            ttfa += (f" (stream=True, {streams[-1]['concurrency']} at once: "
                     f"{ttfa_text(streams[-1]['summary'])})")
        rows.append([f"original: {entry['label']}", str(main["concurrency"]), ttfa,
                     figure(round_rate(main), 1),
                     most_text(entry["most_realtime"], entry["most_realtime_exact"]),
                     pair_text(mem["peak_reserved"], mem["reserved"]) if mem else "-",
                     random_text])
    return rows


def voxd_rows(voxd):
    """The side-by-side rows of voxd's rounds; the most real-time streams and the random-length
    memory (properties of the server, not of a round) in the first."""
    if not voxd or not voxd["rounds"]:
        return [["voxd serve", "-", "not run", "-", "-", "-", "-"]]
    rows = []
    for i, entry in enumerate(voxd["rounds"]):
        mem, random = entry["memory"], voxd["random"]
        random_text = most = ""
        if i == 0:
            most = most_text(voxd["most_realtime"], voxd["most_realtime_exact"])
            random_text = "-" if not random else (
                pair_text(random["before"]["reserved"], random["after"]["reserved"])
                + f" ({random['sent']} requests)")
        rows.append([f"voxd serve, {entry['concurrency']} at once", str(entry["concurrency"]),
                     ttfa_text(entry["summary"]), figure(round_rate(entry), 1), most,
                     pair_text(mem["peak_reserved"], mem["reserved"]), random_text])
    return rows


SIDE_BY_SIDE_COLUMNS = ["way", "requests at once", "TTFA p50 / p95 ms", "audio-s/s",
                        "most real-time streams", "peak / steady reserved GiB",
                        "random-length requests: reserved before / after GiB"]


def side_by_side(peer, voxd):
    """The Markdown table of both sides."""
    lines = ["| " + " | ".join(SIDE_BY_SIDE_COLUMNS) + " |",
             "|" + "---|" * len(SIDE_BY_SIDE_COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in peer_rows(peer) + voxd_rows(voxd)]
    return "\n".join(lines) + "\n"


def best_rate(entries):
    """(audio-s/s, label) of the fastest of (label, round entry) pairs, or (None, None)."""
    rated = [(round_rate(e), label) for label, e in entries if e and round_rate(e) is not None]
    return max(rated) if rated else (None, None)


def peer_rounds(peer):
    """Every measured round of the original, labelled."""
    out = []
    for entry in (peer or {}).get("ways", {}).values():
        out.append((entry["label"], entry["main"]))
        out += [(f"{entry['label']}, stream, {e['concurrency']} at once", e)
                for e in entry["search"]]
    if peer and peer.get("random"):
        out.append(("random-length requests", peer["random"]))
    return out


def voxd_rounds(voxd):
    """Every measured round of voxd, labelled."""
    if not voxd:
        return []
    out = [(f"{e['concurrency']} at once", e) for e in voxd["rounds"]]
    out += [(f"search, {e['concurrency']} at once", e) for e in voxd["search"]]
    if voxd.get("random"):
        out.append(("random-length requests", voxd["random"]))
    return out


def verdict(met):
    return "met" if met else "missed"


def target_lines(peer, voxd):
    """The issue's four targets as measured (informational: met, missed or not measured)."""
    lines = []
    most = voxd["most_realtime"] if voxd else None
    name = ">= 256 concurrent streams each faster than real time within 16 GiB"
    if most is None:
        lines.append(f"{name}: not measured")
    else:
        at = [e for e in voxd["search"] if e["concurrency"] == most]
        peak = at[0]["memory"]["peak_reserved"] if at else None
        text = (f"{name}: {most_text(most, voxd['most_realtime_exact'])} streams, peak reserved "
                f"by then {gib_text(peak)} GiB")
        if most >= 256:
            lines.append(f"{text}: {verdict(peak is not None and peak <= 16 * GIB)}")
        elif voxd["most_realtime_exact"]:
            lines.append(f"{text}: missed")
        else:
            lines.append(f"{text}: not measured at 256 (the search ended before a stream fell "
                         "behind)")
    hundred = [e for e in (voxd or {}).get("rounds", []) if e["concurrency"] == 100]
    name = "p95 TTFA <= 300 ms at 100 concurrent requests"
    if not hundred:
        lines.append(f"{name}: not measured (no round of 100)")
    else:
        s = hundred[0]["summary"]
        met = s["errors"] == 0 and s["ttfa_p95_ms"] is not None and s["ttfa_p95_ms"] <= 300
        lines.append(f"{name}: {figure(s['ttfa_p95_ms'])} ms, {s['errors']} errors: "
                     f"{verdict(met)}")
    voxd_best, voxd_label = best_rate(voxd_rounds(voxd))
    peer_best, peer_label = best_rate(peer_rounds(peer))
    if voxd_best is None or peer_best is None:
        lines.append("aggregate audio-s/s >= 30x the original's best way: not measured")
    else:
        ratio = voxd_best / peer_best
        lines.append(f"aggregate audio-s/s >= 30x the original's best way: voxd {voxd_best:,.1f} "
                     f"({voxd_label}) / original {peer_best:,.1f} ({peer_label}) = {ratio:.1f}x: "
                     f"{verdict(ratio >= 30)}")
    random = voxd.get("random") if voxd else None
    if not random:
        lines.append("reserved within 5% before/after 1,000 random-length requests: not measured")
    else:
        before, after = random["before"]["reserved"], random["after"]["reserved"]
        change = (after - before) / before
        text = (f"reserved within 5% before/after 1,000 random-length requests: "
                f"{gib_text(before)} -> {gib_text(after)} GiB ({100 * change:+.1f} %) over "
                f"{random['sent']} requests, {random['summary']['errors']} errors")
        if random["sent"] < 1000:
            lines.append(f"{text}: not measured at 1,000")
        else:
            lines.append(f"{text}: {verdict(abs(change) <= 0.05)}")
    return lines


def kv_line(voxd):
    """voxd's KV pool after the random-length requests (servers since 6c15a6f say), or None."""
    random = (voxd or {}).get("random")
    kv = random["after"].get("kv_cache") if random else None
    if not kv:
        return None
    return (f"voxd's KV cache after the random-length requests: {kv['used_pages']} of "
            f"{kv['pages']} pages used, {kv['preemptions']} preemptions since it started")


def run_to_log(cap, command, log):
    """run_capped with the output to `log`, then printed; returns the exit status."""
    with open(log, "w") as f:
        rc = run_capped(cap, command, stdout=f, stderr=subprocess.STDOUT)
    print(Path(log).read_text(errors="replace"), end="", flush=True)
    return rc


def chattts_serve():
    """chattts-serve: the original ChatTTS served three ways beside voxd serve on the same random
    weights; returns the exit status."""
    start = packed_start()
    if start is None:
        return 2
    logs, voxd, report = start
    tokens = int(os.environ.get("CHATTTS_SERVE_TOKENS") or 64)
    sentences = os.environ.get("CHATTTS_SENTENCES") or "3"
    print("== 2. the bench voice (bench/make_chattts_bench_voice.py), "
          f"{tokens} codes a sentence", flush=True)
    base = chattts_bench_voice(logs, report)
    if base is None:
        return report.exit_status()
    voice = Path(f"/tmp/chattts-serve-bench-{tokens}")
    name = derive_serve_voice(base, voice, tokens)
    print(f"{voice}: {base} with infer_code min_new_token = max_new_token = {tokens}", flush=True)

    print("== 3. the original, served (bench/chattts_serve_peer.py)", flush=True)
    cap = budget(int(os.environ.get("CHATTTS_PEER_TIMEOUT") or 210), 200)
    peer_json = logs / "chattts-serve-peer.json"
    rc = run_to_log(cap, ["python3", ROOT / "bench" / "chattts_serve_peer.py", "--voice", voice,
                          "--sentences", sentences, "--deadline", str(max(cap - 30, 0)),
                          "--json", peer_json, *CHATTTS_PEER_THROUGHPUT_ARGS,
                          *(os.environ.get("CHATTTS_PEER_ARGS") or "").split()],
                    logs / "chattts-serve-peer.log")
    report.add("original, served", "timed out" if rc == 124 else f"exit {rc}", rc == 0)

    print("== 4. voxd serve (bench/chattts_serve_load.py)", flush=True)
    serve_log = logs / "chattts-serve.log"
    command = [str(voxd), "serve", "--voice", str(voice), "--port", "0", "--log-format", "json",
               *(os.environ.get("CHATTTS_SERVE_ARGS") or DEFAULT_CHATTTS_SERVE_ARGS).split()]
    server, url = start_server(command, serve_log, budget(90, 60))
    voxd_json = logs / "chattts-serve-voxd.json"
    if url is None:
        report.add("voxd serve", not_ready(server, serve_log), ok=False)
    else:
        cap = budget(int(os.environ.get("CHATTTS_LOAD_TIMEOUT") or 180), 30)
        rc = run_to_log(cap, ["python3", ROOT / "bench" / "chattts_serve_load.py", "--url", url,
                              "--voice", name, "--sentences", sentences,
                              "--deadline", str(max(cap - 40, 0)), "--json", voxd_json,
                              *(os.environ.get("CHATTTS_LOAD_ARGS") or "").split()],
                        logs / "chattts-serve-load.log")
        report.add("voxd serve, load", "timed out" if rc == 124 else f"exit {rc}", rc == 0)
    server_rc = stop_server(server, serve_log)
    report.add("voxd serve exit", str(server_rc), server_rc == 0)

    peer, voxd_result = read_json(peer_json), read_json(voxd_json)
    print(f"== 5. side by side: {tokens} codes a sentence, {sentences} sentences a request "
          "in the rounds; the original's rows its non-streaming rounds (stream=True for the most "
          "real-time streams), each way from an emptied cache; voxd's peak reserved since the "
          "server started")
    print(side_by_side(peer, voxd_result), end="")
    if kv_line(voxd_result):
        print(kv_line(voxd_result))
    print("== 6. summary")
    print(report.table(26), end="")
    for line in target_lines(peer, voxd_result):
        print(f"{'target (informational)':<26} {line}")
    return report.exit_status()


# ---------------------------------------------------------------------------------------------
# sambert-serve: KAN-TTS's own inference code against voxd serve (issue 15)


def sambert_serve():
    """sambert-serve: the Sambert end-to-end suite on CUDA, then KAN-TTS's own inference code
    beside voxd serve on the same random weights (bench/sambert_serve_bench.py); returns the exit
    status."""
    start = packed_start()
    if start is None:
        return 2
    logs, voxd, report = start
    print("== 2. end to end: tests/cli/test_serve_sambert.py with VOXD_TEST_DEVICE=cuda",
          flush=True)
    script_step(report, "e2e tests (cuda)", logs / "sambert-e2e.log", budget(120, 300),
                ["python3", "-m", "unittest", "-v", "tests/cli/test_serve_sambert.py"], 20,
                cwd=ROOT, env={**os.environ, "VOXD_BIN": str(voxd), "VOXD_TEST_DEVICE": "cuda"})
    kantts = os.environ.get("KANTTS_DIR") or str(ROOT / ".peer" / "KAN-TTS")
    print(f"== 3. KAN-TTS ({kantts}) against voxd serve (bench/sambert_serve_bench.py)",
          flush=True)
    env, library_path = torch_environment()
    env["VOXD_LIBRARY_PATH"] = library_path
    script_step(report, "KAN-TTS vs voxd serve", logs / "sambert-serve.log",
                budget(int(os.environ.get("SAMBERT_SERVE_TIMEOUT") or 400), 20),
                ["python3", ROOT / "bench" / "sambert_serve_bench.py", "--voxd", voxd,
                 "--kantts", kantts, "--json", logs / "sambert-serve.json",
                 *(os.environ.get("SAMBERT_SERVE_ARGS") or "").split()], 40, env=env)
    print("== 4. summary")
    print(report.table(26), end="")
    return report.exit_status()


# ---------------------------------------------------------------------------------------------
# seeds: the seeds' before/after table, voxd serve beside PyTorch served their way (issue 19)


# voxd serve's options for ChatTTS in the seeds' table: chattts-serve's memory and batch, the
# device and connection limits being the table's own.
SEEDS_CHATTTS_SERVE_ARGS = "--max-batch 512 --kv-cache 6GiB --gpu-memory-limit 16GiB"


def seeds_voice(family, logs, report, env):
    """seeds_table.py's options naming `family`'s voices (made here if missing), or None (reported)
    when they could not be made: lj-v1; the Sambert bench voice of bench/sambert_serve_bench.py
    (its ModelScope folder for KAN-TTS, KANTTS_DIR's checkout); the ChatTTS bench voice with
    CHATTTS_SERVE_TOKENS codes a sentence. `env`: torch's environment (torch_environment())."""
    if family == "fastspeech2":
        voice = lj_voice(logs, report)
        return None if voice is None else ["--voice", voice]
    if family == "sambert":
        work = Path("/tmp/sambert-serve-bench")
        rc = script_step(report, "sambert bench voice", logs / "sambert-voice.log", budget(120, 60),
                         ["python3", "-c", "import sys; sys.path.insert(0, 'bench'); "
                          "import sambert_serve_bench as b; b.make_voice(sys.argv[1])", work],
                         3, cwd=ROOT, env=env)
        if rc != 0:
            return None
        kantts = os.environ.get("KANTTS_DIR") or str(ROOT / ".peer" / "KAN-TTS")
        return ["--voice", work / "voice", "--voice-name", "sambert-bench", "--peer-voice",
                work / "modelscope", "--kantts", kantts, "--peer-dtype", "f32"]
    base = chattts_bench_voice(logs, report)
    if base is None:
        return None
    tokens = int(os.environ.get("CHATTTS_SERVE_TOKENS") or 64)
    voice = Path(f"/tmp/chattts-serve-bench-{tokens}")
    name = derive_serve_voice(base, voice, tokens)
    return ["--voice", voice, "--voice-name", name, "--peer-dtype", "f32",
            f"--serve-args={SEEDS_CHATTTS_SERVE_ARGS}"]


def seeds():
    """seeds: nvidia-smi, then bench/seeds_table.py for each family of SEEDS_FAMILIES
    (fastspeech2, sambert, chattts): voxd serve (F16 on CUDA) beside the family's PyTorch server
    (bench/pytorch_server.py), each capped at SEEDS_TIMEOUT seconds (180) and the time left;
    returns the exit status."""
    start = packed_start()
    if start is None:
        return 2
    logs, voxd, report = start
    env, library_path = torch_environment()
    families = (os.environ.get("SEEDS_FAMILIES") or "fastspeech2,sambert,chattts").split(",")
    for n, family in enumerate(families):
        print(f"== {n + 2}. bench/seeds_table.py --family {family}", flush=True)
        voice = seeds_voice(family, logs, report, env)
        if voice is None:
            continue
        script_step(report, f"seeds table, {family}", logs / f"seeds-{family}.log",
                    budget(int(os.environ.get("SEEDS_TIMEOUT") or 180), 20),
                    ["python3", ROOT / "bench" / "seeds_table.py", "--family", family, *voice,
                     "--voxd", voxd, "--voxd-library-path", library_path, "--device", "cuda",
                     "--dtype", "f16", "--json", logs / f"seeds-{family}.json",
                     *(os.environ.get("SEEDS_ARGS") or "").split()], 8, env=env)
    print(f"== {len(families) + 2}. summary")
    print(report.table(26), end="")
    return report.exit_status()


def main(argv):
    mode = argv[1] if len(argv) > 1 else "check"
    if mode in ("check", "quick", "memcheck", "bench"):
        return check(mode)
    if mode == "ab":
        return ab()
    if mode == "serve":
        return serve()
    if mode == "chattts-serve":
        return chattts_serve()
    if mode == "sambert-serve":
        return sambert_serve()
    if mode == "seeds":
        return seeds()
    print("usage: scripts/gpu-check.py "
          "[check|quick|memcheck|bench|ab|serve|chattts-serve|sambert-serve|seeds]")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
