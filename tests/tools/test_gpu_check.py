"""Tests of scripts/gpu-check.py's parts that need no GPU, and of the manifest it reads.

Run by ctest with VOXD_BUILD_DIR (the build tree, whose gpu-tests.json tests/cuda/CMakeLists.txt
writes when CUDA is on) and CTEST_COMMAND set; standard library only.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu-check.py")
gpu_check = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpu_check)
CTEST = os.environ.get("CTEST_COMMAND") or shutil.which("ctest")

LISTING = """\
Running main() from gtest_main.cc
CudaOps/F32.  # TypeParam = float
  Relu
  Conv1d
CaptureOnGpu.
  ReplayMatchesEager/0  # GetParam() = 4
"""


def write_script(path, text):
    """An executable shell script."""
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)


def write_fake_binary(path, listing, exit_status=0):
    """An executable that prints `listing` for --gtest_list_tests, as a gtest binary does."""
    write_script(path, f"cat <<'END'\n{listing}END\nexit {exit_status}\n")


class ManifestTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="voxd-gpu-check-test."))
        self.addCleanup(shutil.rmtree, self.dir)

    def test_reads_each_test_and_its_memcheck_filter(self):
        manifest = {"tests": [
            {"name": "test_a", "file": "/b/test_a", "serial": False, "timeout": 300,
             "memcheck_filter": "-*/F16"},
            {"name": "test_b", "file": "/b/test_b", "serial": True, "timeout": 60,
             "memcheck_filter": None}],
            "benches": [{"name": "voxd_gpu_bench", "file": "/b/voxd_gpu_bench"}]}
        (self.dir / "gpu-tests.json").write_text(json.dumps(manifest))
        self.assertEqual(gpu_check.load_manifest(self.dir / "gpu-tests.json"), [
            gpu_check.GpuTest("test_a", False, 300, "-*/F16"),
            gpu_check.GpuTest("test_b", True, 60, None)])

    def test_gpu_tests_narrows_in_its_order_and_refuses_unknown_names(self):
        tests = [gpu_check.GpuTest(n, False, 300, "*") for n in ("a", "b", "c")]
        self.assertEqual(gpu_check.select_tests(tests, ""), tests)
        self.assertEqual(gpu_check.select_tests(tests, " c  a "), [tests[2], tests[0]])
        with self.assertRaisesRegex(ValueError, "lacks: d"):
            gpu_check.select_tests(tests, "a d")


class CTestFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="voxd-gpu-check-test."))
        self.addCleanup(shutil.rmtree, self.dir)

    def test_gtest_cases_joins_suites_and_names_without_comments(self):
        self.assertEqual(gpu_check.gtest_cases(LISTING), [
            "CudaOps/F32.Relu", "CudaOps/F32.Conv1d", "CaptureOnGpu.ReplayMatchesEager/0"])

    def test_one_ctest_test_per_case_with_the_manifest_properties(self):
        write_fake_binary(self.dir / "test_a", LISTING)
        write_fake_binary(self.dir / "test_b", "Leak.\n  TenThousandCalls\n")
        tests = [gpu_check.GpuTest("test_a", False, 300, "*"),
                 gpu_check.GpuTest("test_b", True, 120, None)]
        folder, unlisted = gpu_check.write_ctest_file(tests, self.dir, Path("/repo"))
        self.addCleanup(shutil.rmtree, folder)
        self.assertEqual(unlisted, [])
        text = (folder / "CTestTestfile.cmake").read_text()
        self.assertIn(f'add_test([=[CudaOps/F32.Relu]=] "{self.dir}/test_a" '
                      '[=[--gtest_filter=CudaOps/F32.Relu]=])\n', text)
        self.assertIn('set_tests_properties([=[Leak.TenThousandCalls]=] PROPERTIES LABELS gpu '
                      'WORKING_DIRECTORY "/repo" ENVIRONMENT "VOXD_SOURCE_DIR=/repo" TIMEOUT 120 '
                      'RUN_SERIAL TRUE)\n', text)
        # What ctest makes of it.
        shown = json.loads(subprocess.run([CTEST, "--show-only=json-v1", "-L", "gpu"], cwd=folder,
                                          capture_output=True, text=True, check=True).stdout)
        by_name = {t["name"]: t for t in shown["tests"]}
        self.assertEqual(len(by_name), 4)
        leak = by_name["Leak.TenThousandCalls"]
        self.assertEqual(leak["command"],
                         [f"{self.dir}/test_b", "--gtest_filter=Leak.TenThousandCalls"])
        properties = {p["name"]: p["value"] for p in leak["properties"]}
        self.assertEqual(properties["TIMEOUT"], 120)
        self.assertIs(properties["RUN_SERIAL"], True)
        self.assertEqual(properties["LABELS"], ["gpu"])
        relu = {p["name"]: p["value"] for p in by_name["CudaOps/F32.Relu"]["properties"]}
        self.assertNotIn("RUN_SERIAL", relu)

    def test_a_binary_that_cannot_list_its_cases_is_named(self):
        write_fake_binary(self.dir / "test_a", "", exit_status=127)
        tests = [gpu_check.GpuTest("test_a", False, 300, "*")]
        folder, unlisted = gpu_check.write_ctest_file(tests, self.dir, Path("/repo"))
        self.addCleanup(shutil.rmtree, folder)
        self.assertEqual(unlisted, ["test_a"])


class MemcheckTest(unittest.TestCase):
    def test_command_line(self):
        binary = Path("/d/bin/test_a")
        self.assertEqual(
            gpu_check.memcheck_command("/cuda/compute-sanitizer", binary, "-*/F16:X.Y", 150),
            ["timeout", "150", "/cuda/compute-sanitizer", "--tool", "memcheck", "--leak-check",
             "full", "--error-exitcode", "99", binary, "--gtest_filter=-*/F16:X.Y"])

    def test_rows(self):
        log = ("[  PASSED  ] 40 tests.\n[  FAILED  ] 2 tests, listed below:\n"
               "========= ERROR SUMMARY: 3 errors\n")
        self.assertEqual(gpu_check.memcheck_row(log, 99, 150),
                         "3 errors, gtest [  PASSED  ] 40 [  FAILED  ] 2 (exit 99)")
        self.assertEqual(gpu_check.memcheck_row("========= ERROR SUMMARY: 1 error\n", 124, 150),
                         "timed out after 150 s (1 errors so far)")
        self.assertEqual(gpu_check.memcheck_row("", 1, 150), "? errors, gtest (exit 1)")


class SummaryTest(unittest.TestCase):
    def test_table_and_exit_status(self):
        report = gpu_check.Report()
        report.add("gpu tests", "100% tests passed, 0 tests failed out of 122")
        self.assertEqual(report.exit_status(), 0)
        report.add("memcheck test_a", "2 errors, gtest [  PASSED  ] 3 (exit 99)", ok=False)
        report.add("memcheck test_b", "not run (step 2 ran it)")
        self.assertEqual(report.exit_status(), 1)
        self.assertEqual(report.table(26),
                         "gpu tests                  100% tests passed, 0 tests failed out of 122\n"
                         "memcheck test_a            2 errors, gtest [  PASSED  ] 3 (exit 99)\n"
                         "memcheck test_b            not run (step 2 ran it)\n")

    def test_ctest_summary_in_both_of_ctests_forms(self):
        log = ("1/2 Test #1: a ... Passed\n\n100% tests passed out of 114\n\n"
               "Label Time Summary:\n")
        self.assertEqual(gpu_check.ctest_summary(log), "100% tests passed out of 114")
        log = "97% tests passed, 3 tests failed out of 114\n"
        self.assertEqual(gpu_check.ctest_summary(log), log.strip())
        self.assertEqual(gpu_check.ctest_summary("Errors while running CTest\n"), "")

    def test_a_failed_step_without_a_row_fails_the_run(self):
        report = gpu_check.Report()
        report.failed = True
        self.assertEqual(report.exit_status(), 1)

    def test_target_from_the_first_burst_of_a_thousand(self):
        def row(clients, p95, reserved, used, errors=0):
            return (f"| {clients} | {clients - errors} | {errors} | 100 | {p95} | 1.20 | 2350.0 | "
                    f"{reserved} | {used} | {clients} | 0 | 0 | exit 0, listen overflows 0")
        rows = [("load --clients 100", row(100, 50, "0.50", "1.00")),
                ("load --clients 1000 --sentences 4 --ramp 5", row(1000, 140, "1.84", "3.04")),
                ("load --clients 1000", row(1000, 833, "1.84", "3.04")),
                ("load --clients 2000", row(2000, 100, "1.84", "3.04"))]
        self.assertEqual(gpu_check.target_line(rows),
                         "1000 clients: p95 TTFA 833 ms (<= 200), peak NVML device used 3.04 GiB "
                         "(<= 8), 0 errors: missed")
        burst = ("load --clients 1000", row(1000, 150, "1.84", "-"))
        self.assertEqual(gpu_check.target_line([burst]),
                         "1000 clients: p95 TTFA 150 ms (<= 200), peak reserved 1.84 GiB (<= 8), "
                         "0 errors: met")
        self.assertEqual(gpu_check.target_line([("load --clients 1000", "no table row exit 1")]),
                         "1000 clients: no table row exit 1: missed")
        self.assertEqual(gpu_check.target_line(rows[:2]), "no run of 1,000 clients at once")

    def test_step_summary_from_metrics(self):
        metrics = textwrap.dedent("""\
            # TYPE voxd_engine_step_seconds histogram
            voxd_engine_step_seconds_bucket{kind="acoustic",le="0.01"} 3
            voxd_engine_step_seconds_sum{kind="acoustic"} 0.5
            voxd_engine_step_seconds_count{kind="acoustic"} 20
            voxd_engine_batch_size_sum{kind="acoustic"} 100
            voxd_engine_batch_size_count{kind="acoustic"} 20
            voxd_engine_step_seconds_sum{kind="vocoder"} 0
            voxd_engine_step_seconds_count{kind="vocoder"} 0
            """)
        self.assertEqual(gpu_check.step_summary(metrics), "steps so far: acoustic 20 steps, "
                         "mean batch 5.0, mean 25.0 ms, total 0.50 s\n")

    def test_memory_line(self):
        memory = {"stats": {"peak_reserved_bytes": 2 * 2**30, "peak_allocated_bytes": 2**29,
                            "limit_bytes": 8 * 2**30},
                  "device_reading": {"reason": "no NVML"}}
        self.assertEqual(gpu_check.memory_line(memory),
                         "memory after the load: peak reserved 2.00 GiB peak allocated 0.50 GiB "
                         "limit 8.00 GiB | NVML used now no NVML")


class RunCappedTest(unittest.TestCase):
    def test_time_up_ends_the_command_and_its_children(self):
        with tempfile.TemporaryDirectory() as d:
            pid_file = Path(d, "child")
            script = f"sleep 60 & echo $! > {pid_file}; wait"
            start = time.monotonic()
            self.assertEqual(gpu_check.run_capped(1, ["sh", "-c", script]), 124)
            self.assertLess(time.monotonic() - start, 20)
            child = int(pid_file.read_text())
            # The child is gone, or a zombie until init reaps it.
            stat = Path(f"/proc/{child}/stat")
            self.assertTrue(not stat.exists() or stat.read_text().rpartition(") ")[2][0] == "Z")

    def test_exit_status_as_a_shell_gives_it(self):
        self.assertEqual(gpu_check.run_capped(10, ["sh", "-c", "exit 3"]), 3)
        self.assertEqual(gpu_check.run_capped(10, ["sh", "-c", "kill -TERM $$"]), 143)


class ServerStartTest(unittest.TestCase):
    def test_no_time_left_starts_nothing_and_says_so(self):
        with tempfile.TemporaryDirectory() as d:
            log = Path(d, "serve.log")
            marker = Path(d, "started")
            server, url = gpu_check.start_server(["touch", marker], log, 0)
            self.assertEqual((server, url), (None, None))
            self.assertFalse(marker.exists())
            self.assertEqual(gpu_check.not_ready(server, log),
                             "not started: no time left under SERVE_DEADLINE")
            self.assertEqual(gpu_check.stop_server(server, log), "not started")

    def test_a_server_that_never_gets_ready_is_named_by_its_log(self):
        with tempfile.TemporaryDirectory() as d:
            log = Path(d, "serve.log")
            server, url = gpu_check.start_server(["sh", "-c", "echo no"], log, 2)
            self.assertIsNone(url)
            self.assertEqual(gpu_check.not_ready(server, log), "not ready (see serve.log)")
            server.wait()


BENCH_TABLE = """\
voice lj-v1 on cuda:0, f16: weights 99.0 MiB loaded in 0.116 s

| batch | acoustic ms | vocoder ms | total ms | audio-s/s | acoustic TFLOP/s |
|---|---|---|---|---|---|
| 32 | 6.29 | 56.62 | 62.84 | 4257 | 190.6 |
| 1 | 1.29 | 2.81 | 4.10 | 2041 | 29.1 |

cold start: process start to the first batch's audio on the host 0.694 s
"""

NCU_CSV = """\
==PROF== Connected to process 1
"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"
"0","1","conv_a","gpu__time_duration.sum","ns","1,500"
"1","1","conv_a","gpu__time_duration.sum","ms","2.5"
"2","1","conv_b","gpu__time_duration.sum","nsecond","1000"
"3","1","conv_b","launch__grid_size","","768"
"""


class AbTest(unittest.TestCase):
    """The ab mode's parts, and the mode end to end on stand-in binaries, nvidia-smi and ncu."""

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="voxd-gpu-check-test."))
        self.addCleanup(shutil.rmtree, self.dir)

    def test_bench_rows_reads_each_batch(self):
        self.assertEqual(gpu_check.bench_rows(BENCH_TABLE),
                         {32: (6.29, 56.62, 62.84), 1: (1.29, 2.81, 4.10)})
        self.assertEqual(gpu_check.bench_rows("| batch | acoustic ms |\nerror: no GPU\n"), {})

    def test_ncu_summary_sums_each_kernel_in_any_unit(self):
        spec = importlib.util.spec_from_file_location("ncu_summary",
                                                      ROOT / "bench" / "ncu_summary.py")
        ncu_summary = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ncu_summary)
        (self.dir / "run.csv").write_text(NCU_CSV)
        total, calls = ncu_summary.kernel_times(self.dir / "run.csv")
        self.assertEqual(dict(total), {"conv_a": 2501500.0, "conv_b": 1000.0})
        self.assertEqual(dict(calls), {"conv_a": 2, "conv_b": 1})
        # The last two launches: the second conv_a and conv_b.
        total, calls = ncu_summary.kernel_times(self.dir / "run.csv", last=2)
        self.assertEqual(dict(total), {"conv_a": 2500000.0, "conv_b": 1000.0})
        self.assertEqual(dict(calls), {"conv_a": 1, "conv_b": 1})
        (self.dir / "odd.csv").write_text(NCU_CSV.replace('"ms"', '"fortnight"'))
        with self.assertRaisesRegex(ValueError, "unknown unit 'fortnight'"):
            ncu_summary.kernel_times(self.dir / "odd.csv")

    def test_the_mode_end_to_end(self):
        build = self.dir / "build-gpu"
        dist = build / "dist"
        for folder in (dist / "bin", dist / "bench", dist / "variants" / "fast", self.dir / "path",
                       self.dir / "out", self.dir / "voices" / "lj-v1"):
            folder.mkdir(parents=True)
        (self.dir / "voices" / "lj-v1" / "config.json").write_text("{}")
        (dist / "variants" / "refs.txt").write_text("fast 0123abc a faster kernel\n")
        write_script(dist / "bin" / "test_cuda_ops", "echo '[  PASSED  ] 6 tests.'\n")
        write_script(dist / "variants" / "fast" / "test_cuda_ops",
                     "echo '[  PASSED  ] 5 tests.'; echo '[  FAILED  ] 1 test'; exit 1\n")
        write_script(dist / "bench" / "voxd_gpu_bench", f"cat <<'END'\n{BENCH_TABLE}END\n")
        write_script(dist / "variants" / "fast" / "voxd_gpu_bench",
                     f"cat <<'END'\n{BENCH_TABLE.replace('56.62', '50.00')}END\n")
        write_script(self.dir / "path" / "nvidia-smi", "echo 'NVIDIA H200'\n")
        # ncu as the mode calls it: the profiled program's path follows --csv.
        write_script(self.dir / "ncu", f"""\
case "$*" in *variants*) cat <<'END'
{NCU_CSV.replace('"2.5"', '"2.0"')}END
;; *) cat <<'END'
{NCU_CSV}END
;; esac
""")
        environment = {"OUT": str(self.dir / "out"), "NCU": str(self.dir / "ncu"),
                       "BENCH_VOICES": str(self.dir / "voices"), "AB_ROUNDS": "2",
                       "AB_NCU_BATCHES": "32", "LD_LIBRARY_PATH": "",
                       "PATH": f"{self.dir / 'path'}:{os.environ['PATH']}"}
        saved = (gpu_check.BUILD, gpu_check.DIST, dict(os.environ))
        gpu_check.BUILD, gpu_check.DIST = build, dist
        os.environ.update(environment)
        try:
            status = gpu_check.ab()
        finally:
            gpu_check.BUILD, gpu_check.DIST = saved[0], saved[1]
            os.environ.clear()
            os.environ.update(saved[2])
        self.assertEqual(status, 1, "the variant's failed test fails the run")
        summary = (self.dir / "out" / "ab-summary.txt").read_text()
        self.assertIn("| binary | op tests | ncu B=32 ms | vocoder B=32 ms | vocoder B=1 ms | "
                      "one request ms |", summary)
        self.assertIn("| main | pass | 2.50 | 56.62 / 56.62 | 2.81 / 2.81 | 4.10 / 4.10 |",
                      summary)
        self.assertIn("| fast | FAIL | 2.00 | 50.00 / 50.00 | 2.81 / 2.81 | 4.10 / 4.10 |",
                      summary)
        self.assertIn("fast: 0123abc a faster kernel", summary)
        listing = subprocess.run(["tar", "-tzf", self.dir / "out" / "ab.tar.gz"],
                                 capture_output=True, text=True, check=True).stdout.split()
        self.assertIn("ab/bench-fast-2.log", listing)
        self.assertIn("ab/ncu-main-b32.txt", listing)
        self.assertFalse((self.dir / "out" / "ab").exists(), "the logs are only in the archive")


class ManifestCompletenessTest(unittest.TestCase):
    """Every gpu-labelled test of the build is in its manifest (voxd_add_gpu_test wrote it), so
    the GPU machine runs it."""

    def test_every_gpu_test_binary_is_in_the_manifest(self):
        build = os.environ.get("VOXD_BUILD_DIR")
        if not build:
            self.skipTest("VOXD_BUILD_DIR unset (ctest sets it)")
        shown = json.loads(subprocess.run([CTEST, "--show-only=json-v1", "-L", "gpu"], cwd=build,
                                          capture_output=True, text=True, check=True).stdout)
        binaries = {t["command"][0] for t in shown["tests"]}
        manifest = Path(build, "gpu-tests.json")
        if not binaries and not manifest.exists():
            self.skipTest("a build without CUDA: no GPU tests")
        with open(manifest) as f:
            listed = {t["file"] for t in json.load(f)["tests"]}
        self.assertEqual(binaries - listed, set(), "gpu-labelled tests not made with "
                         "voxd_add_gpu_test (tests/cuda/CMakeLists.txt)")


if __name__ == "__main__":
    unittest.main()
