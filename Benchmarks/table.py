#!/usr/bin/env python3
"""Prints the figures of a `storectl-bench ... --json` document as a Markdown table (for BENCHMARKS.md).

Usage: python3 Benchmarks/table.py RESULTS.json
"""
import json
import sys


def fmt(value, unit):
    if value is None:
        return "skipped"
    if unit == "percent":
        return "%.0f%%" % (value * 100)
    if unit == "ratio":
        return "%.2f×" % value
    if unit == "ms":
        return "%.1f ms" % value
    if unit == "MiB":
        return "%.1f MiB" % value
    if unit == "B":
        return "%.0f B" % value
    return str(value)


def target(t, unit):
    if not t:
        return "—"
    op = "≥" if t["kind"] == "at_least" else "≤"
    return "%s %s" % (op, fmt(t["bound"], unit))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    print("| what | figure | target | | measured |")
    print("|---|---:|---:|---|---|")
    for f in report["figures"]:
        verdict = "skipped" if f.get("skipped") else {True: "met", False: "**missed**", None: ""}[f.get("met")]
        print("| %s | **%s** | %s | %s | %s |" % (
            f["what"].replace("|", "\\|"), fmt(f.get("value"), f["unit"]), target(f.get("target"), f["unit"]),
            verdict, (f.get("skipped") or f["detail"]).replace("|", "\\|")))


if __name__ == "__main__":
    main()
