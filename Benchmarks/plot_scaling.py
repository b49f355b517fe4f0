#!/usr/bin/env python3
"""Draws the scaling curves of `storectl-bench scaling --json` (or `all --json`) as a PNG.

Usage: python3 Benchmarks/plot_scaling.py RESULTS.json [OUTPUT.png]   (default: Benchmarks/scaling.png)
Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    points = report.get("scaling") or []
    if not points:
        sys.exit("no 'scaling' points in " + sys.argv[1])
    out = sys.argv[2] if len(sys.argv) > 2 else "Benchmarks/scaling.png"
    rows = [p["rows"] for p in points]
    fig, ax = plt.subplots(figsize=(7, 5))
    for key, label, style in [
        ("export_seconds", "export (engine)", "o-"),
        ("export_reference_seconds", "export reference (one INSERT ... SELECT)", "o--"),
        ("import_seconds", "import (engine)", "s-"),
        ("import_reference_seconds", "import reference (one INSERT ... SELECT)", "s--"),
    ]:
        ax.plot(rows, [p[key] for p in points], style, label=label)
    # A line of slope 1 through the smallest engine export: linear growth runs parallel to it.
    first = points[0]
    ax.plot(rows, [first["export_seconds"] * r / rows[0] for r in rows], ":", color="grey", label="linear")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows (N)")
    ax.set_ylabel("seconds")
    machine = report.get("machine", {})
    ax.set_title("storectl export and import time by N\n%s cores, %s, SQLite %s" % (
        machine.get("cores", "?"), machine.get("cpu", "?"), machine.get("sqlite_version", "?")), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote " + out)


if __name__ == "__main__":
    main()
