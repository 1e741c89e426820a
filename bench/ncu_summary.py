#!/usr/bin/env python3
"""Kernel time by kernel name from an `ncu --metrics gpu__time_duration.sum --csv` log.

    ncu --metrics gpu__time_duration.sum --csv -c 1500 voxd_gpu_bench ... > run.csv
    python3 bench/ncu_summary.py run.csv [--top 25] [--last N]

--last N sums only the log's last N launches (in ncu's order): the bench's timed pass, when a
pass is N kernels (a B = 64 FastSpeech2 pass of lj-v1 is 196, a HiFiGAN V1 pass 65), without its
warm-up passes and the weights' arrangement at load.
"""
import argparse
import collections
import csv

# ncu writes the unit in full or short, as its version and settings have it.
UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
         "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def kernel_times(path, last=None):
    """(nanoseconds by kernel name, launches by kernel name) of an ncu CSV log, or of its last
    `last` launches; names cut to 100 characters. Lines that are not the CSV's (the program's own
    output) are skipped."""
    launches = []  # (name, nanoseconds) in the log's order
    header = None
    with open(path, newline="", errors="replace") as f:
        for row in csv.reader(f):
            if "Kernel Name" in row and "Metric Value" in row:
                header = row
                continue
            if header is None or len(row) != len(header):
                continue
            fields = dict(zip(header, row))
            if fields.get("Metric Name") != "gpu__time_duration.sum":
                continue
            unit = fields.get("Metric Unit", "nsecond")
            if unit not in UNITS:
                raise ValueError(f"{path}: gpu__time_duration.sum in an unknown unit '{unit}'")
            nanoseconds = float(fields["Metric Value"].replace(",", "")) * UNITS[unit]
            launches.append((fields["Kernel Name"][:100], nanoseconds))
    total = collections.defaultdict(float)
    calls = collections.Counter()
    for name, nanoseconds in launches[-last:] if last else launches:
        total[name] += nanoseconds
        calls[name] += 1
    return total, calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--last", type=int, help="only the log's last LAST launches")
    args = parser.parse_args()
    if args.last is not None and args.last < 1:
        parser.error(f"--last takes a number of launches, 1 or more, not {args.last}")
    total, calls = kernel_times(args.csv, args.last)
    if not total:
        raise SystemExit(f"{args.csv}: no gpu__time_duration.sum rows (did ncu profile a kernel?)")
    overall = sum(total.values())
    print(f"{overall / 1e6:.2f} ms of kernel time in {sum(calls.values())} kernels")
    for name, ns in sorted(total.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{100 * ns / overall:5.1f} % {ns / 1e6:9.2f} ms {calls[name]:6d}  {name}")


if __name__ == "__main__":
    main()
