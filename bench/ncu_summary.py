#!/usr/bin/env python3
"""Kernel time by kernel name from an `ncu --metrics gpu__time_duration.sum --csv` log.

    ncu --metrics gpu__time_duration.sum --csv -c 1500 voxd_gpu_bench ... > run.csv
    python3 bench/ncu_summary.py run.csv [--top 25]
"""
import argparse
import collections
import csv

UNITS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    total = collections.defaultdict(float)
    calls = collections.Counter()
    header = None
    with open(args.csv, newline="") as f:
        for row in csv.reader(f):
            if "Kernel Name" in row and "Metric Value" in row:
                header = row
                continue
            if header is None or len(row) != len(header):
                continue
            fields = dict(zip(header, row))
            if fields.get("Metric Name") != "gpu__time_duration.sum":
                continue
            name = fields["Kernel Name"][:100]
            value = float(fields["Metric Value"].replace(",", ""))
            total[name] += value * UNITS.get(fields.get("Metric Unit", "nsecond"), 1.0)
            calls[name] += 1
    overall = sum(total.values())
    print(f"{overall / 1e6:.2f} ms of kernel time in {sum(calls.values())} kernels")
    for name, ns in sorted(total.items(), key=lambda item: -item[1])[: args.top]:
        print(f"{100 * ns / overall:5.1f} % {ns / 1e6:9.2f} ms {calls[name]:6d}  {name}")


if __name__ == "__main__":
    main()
