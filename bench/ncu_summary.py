#!/usr/bin/env python3
"""Kernel time by kernel name from an `ncu --metrics gpu__time_duration.sum --csv` log.

    ncu --metrics gpu__time_duration.sum --csv -c 1500 voxd_gpu_bench ... > run.csv
    python3 bench/ncu_summary.py run.csv [--top 25]
"""
import argparse
import collections
import csv

# ncu writes the unit in full or short, as its version and settings have it.
UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
         "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def kernel_times(path):
    """(nanoseconds by kernel name, launches by kernel name) of an ncu CSV log; names cut to 100
    characters. Lines that are not the CSV's (the program's own output) are skipped."""
    total = collections.defaultdict(float)
    calls = collections.Counter()
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
            name = fields["Kernel Name"][:100]
            total[name] += float(fields["Metric Value"].replace(",", "")) * UNITS[unit]
            calls[name] += 1
    return total, calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total, calls = kernel_times(args.csv)
    if not total:
        raise SystemExit(f"{args.csv}: no gpu__time_duration.sum rows (did ncu profile a kernel?)")
    overall = sum(total.values())
    print(f"{overall / 1e6:.2f} ms of kernel time in {sum(calls.values())} kernels")
    for name, ns in sorted(total.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{100 * ns / overall:5.1f} % {ns / 1e6:9.2f} ms {calls[name]:6d}  {name}")


if __name__ == "__main__":
    main()
