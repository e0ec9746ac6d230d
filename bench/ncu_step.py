"""One decode step's kernels from ncu's CSV (`--metrics gpu__time_duration.sum --csv`) of a run
whose last steps repeat the same launches: the step is the shortest tail that equals the launches
before it. Prints a Markdown table of the step's time by kernel name (calls, total us, share),
largest first, and the step's sum.

Usage: python3 ncu_step.py ncu.csv
"""

import csv
import sys
from collections import defaultdict


def launches(path):
    """(kernel name, duration in us) of each profiled launch, in order."""
    out = []
    with open(path, newline="") as f:
        # ncu prints its own lines (==PROF== ...) before the CSV's header
        rows = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
        out.append((row["Kernel Name"], value * scale))
    return out


def step_length(names):
    """The shortest period p with the last p launches' names equal to the p before them."""
    for p in range(8, len(names) // 2 + 1):
        if names[-p:] == names[-2 * p : -p]:
            return p
    return None


def main():
    runs = launches(sys.argv[1])
    names = [n for n, _ in runs]
    p = step_length(names)
    if p is None:
        sys.exit(f"no repeating decode step among {len(runs)} launches")
    step = runs[-p:]
    by_name = defaultdict(lambda: [0, 0.0])
    for name, us in step:
        short = name.split("(")[0]
        by_name[short][0] += 1
        by_name[short][1] += us
    total = sum(us for _, us in step)
    print(f"One decode step: {p} launches, {total:.1f} us of kernel time (ncu, one launch at a time)\n")
    print("| kernel | launches | us | share |")
    print("|---|---:|---:|---:|")
    for name, (calls, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"| `{name}` | {calls} | {us:.1f} | {100 * us / total:.1f}% |")


if __name__ == "__main__":
    main()
