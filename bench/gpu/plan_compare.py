#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""plan_compare.py -- errors of `vram plan`'s predictions against the
measured peaks of bench/gpu/plan_measure.py, per kind of run.

    python3 bench/gpu/plan_compare.py DIR/plan_measure.jsonl [--table] [--vram PATH]

Error = (predicted - measured) / measured of max_memory_allocated. For each
kind (vision, generate, lora) and predictor (trace; structural where it
applies) prints runs, median and maximum absolute error against the
targets (median <= 5 %, every run <= 15 %), and with --table every run.
With --vram PATH the structural predictions are made again by that `vram`
(as plan_measure.py makes them) instead of read from the file.
Exit status: 0 when every target is met, 1 otherwise (or no data).
"""
import json
import os
import statistics
import sys

MEDIAN, WORST = 0.05, 0.15


def label(s):
    k = s["kind"]
    if k == "vision":
        return "%s b%d %s" % (s["model"], s["batch"], s["setting"])
    if k == "generate":
        return "%s b%d p%d+%d %s" % (s["family"], s["batch"], s["prompt"], s["new_tokens"],
                                      s["precision"])
    return "lora %s b%d s%d" % (s["base"], s["batch"], s["seq"])


def main(argv):
    if not argv:
        print(__doc__.split("\n\n")[1])
        return 2
    rows, head = [], {}
    with open(argv[0]) as f:
        for line in f:
            d = json.loads(line)
            if "spec" in d:
                rows.append(d)
            else:
                head = d
    if "--vram" in argv:
        i = argv.index("--vram")
        if i + 1 >= len(argv):
            print("plan_compare: --vram needs the path of a vram binary")
            return 2
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from plan_measure import predict_structural
        for r in rows:
            if r["spec"]["kind"] == "generate":
                for k in ("structural_bytes", "structural_phase", "structural_error"):
                    r.pop(k, None)
                r.update(predict_structural(r["spec"], argv[i + 1]))
    prov = head.get("provenance", {})
    print("vram plan against measured peaks: %s, torch %s, %s" % (
        prov.get("gpu", "?"), prov.get("torch", "?"), prov.get("date", "?")))
    if head.get("cublas_probe"):
        print("cuBLAS workspaces seen: %s" % head["cublas_probe"])
    ok, errs = True, {}
    for r in rows:
        m = r.get("measured") or {}
        meas = m.get("peak_allocated")
        for pred in ("trace", "structural"):
            p = r.get(pred + "_bytes")
            if meas and p is not None:
                errs.setdefault((r["spec"]["kind"], pred), []).append(
                    ((p - meas) / meas, r, p, meas))
    if not errs:
        print("no run has both a measurement and a prediction")
        return 1
    print("%-9s %-10s %5s %8s %8s  %s" % ("kind", "predictor", "runs", "median", "max",
                                         "target"))
    for (kind, pred), v in sorted(errs.items()):
        a = [abs(e) for e, _, _, _ in v]
        med, worst = statistics.median(a), max(a)
        good = med <= MEDIAN and worst <= WORST
        ok &= good or pred == "structural" and kind != "generate"
        print("%-9s %-10s %5d %7.2f%% %7.2f%%  %s" % (kind, pred, len(v), 100 * med,
                                                     100 * worst, "PASS" if good else "MISS"))
    missing = [r for r in rows if not (r.get("measured") or {}).get("peak_allocated")
               or "trace_bytes" not in r]
    for r in missing:
        print("  not compared: %s: %s" % (label(r["spec"]), r.get("measure_error") or
                                          r.get("trace_error") or "no figure"))
    if "--table" in argv:
        print("\n| run | measured MiB | trace MiB | error | structural MiB | error | "
              "structural peak at |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            meas = (r.get("measured") or {}).get("peak_allocated")
            if not meas:
                continue
            t, s = r.get("trace_bytes"), r.get("structural_bytes")
            print("| %s | %.0f | %s | %s | %s | %s | %s |" % (
                label(r["spec"]), meas / 2**20,
                "%.0f" % (t / 2**20) if t else "-",
                "%+.1f%%" % (100 * (t - meas) / meas) if t else "-",
                "%.0f" % (s / 2**20) if s else "-",
                "%+.1f%%" % (100 * (s - meas) / meas) if s else "-",
                r.get("structural_phase") or "-"))
    return 0 if ok and not missing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
