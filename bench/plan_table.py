#!/usr/bin/env python3
"""The planner against measurement (docs/planner.md, docs/performance.md).

For each pair of a `gradcodec bench --allreduce --json` result and the `gradcodec
calibrate` profile measured on the same ranks and link, runs `gradcodec plan --json` for
the bench's size, rank count, segment length, codecs and PowerSGD tensor layout, and prints predicted against
measured time for every measured configuration, the planner's choice against the measured
best and against dense bf16, and the summary the targets ask for:

    bench/plan_table.py --tool build/dev/bench/gradcodec \\
        --cell bench_1gbit_np2.json:prof_1gbit_np2.json [--cell ...] [--check]

The uncompressed candidate is measured by the bench's dense_fp32 row (MPI_Allreduce: the
same bytes, a ring). With --check the script exits 1 when a choice is more than 3 %
slower than dense bf16 (measured: the better of gradcodec's bf16 and MPI's), the guarantee
the planner's margin gives; the ctest bench.planner_recorded runs it on the recorded cells
of bench/data/planner/.
"""
import argparse
import json
import subprocess
import sys


def plan(tool, profile, n, ranks, segment, codecs, margin, per_node=0):
    cmd = [tool, "plan", "--json", "--profile", profile, "--size", str(n), "--ranks", str(ranks),
           "--segments", str(segment), "--margin", str(margin), "--codecs", ",".join(codecs),
           "--tensors", "model"]  # the bench factorises PowerSGD over its model layout
    if per_node:
        cmd += ["--ranks-per-node", str(per_node)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def key(spec, strategy, pipeline):
    return (spec, strategy, bool(pipeline))


def cell(tool, bench_path, profile_path, margin, accept=None):
    bench = json.load(open(bench_path))
    records = bench["records"]
    by_n = {}
    for r in records:
        by_n.setdefault(r["n"], []).append(r)
    out = []
    for n, rows in sorted(by_n.items()):
        codecs = []
        for r in rows:
            name = r["codec"].split(":")[0]
            if r["codec"].startswith("dense_") or r["codec"] == "uncompressed" or \
                    r["codec"] in codecs:
                continue
            if accept is None or name in accept or name == "bf16":
                codecs.append(r["codec"])
        measured = {}
        dense_fp32 = dense_bf16_mpi = hierarchy_fp32 = None
        for r in rows:
            if r["codec"] == "dense_fp32":
                dense_fp32 = r["median_s"]
            elif r["codec"] == "uncompressed":  # through the hierarchy (--ranks-per-node)
                hierarchy_fp32 = r["median_s"]
            elif r["codec"] == "dense_bf16":
                dense_bf16_mpi = r["median_s"]
            else:
                measured[key(r["codec"], r["strategy"], r["pipeline"])] = r["median_s"]
        per_node = bench.get("ranks_per_node", 0)
        p = plan(tool, profile_path, n, bench["ranks"], bench["segment_elements"], codecs, margin,
                 per_node)
        table = []
        for i, row in enumerate(p["rows"]):
            if row["uncompressed"] and hierarchy_fp32 is not None:
                m = hierarchy_fp32
                name = "uncompressed (through the hierarchy)"
            elif row["uncompressed"]:
                m = dense_fp32
                name = "uncompressed (measured: MPI_Allreduce f32)"
            else:
                m = measured.get(key(row["spec"], row["strategy"], row["pipeline"]))
                name = f'{row["spec"]} {row["strategy"]}' + (" pipelined" if row["pipeline"] else "")
            if m is None:
                continue
            table.append({"name": name, "predicted": row["total_s"], "measured": m,
                          "chosen": i == p["chosen"], "row": row})
        best = min(table, key=lambda t: t["measured"])
        chosen = next(t for t in table if t["chosen"])
        bf16 = [t["measured"] for t in table
                if not t["row"]["uncompressed"] and t["row"]["spec"] == "bf16"
                and t["row"]["strategy"] == "dense"]
        dense_bf16 = min(bf16 + ([dense_bf16_mpi] if dense_bf16_mpi else []))
        out.append({"bench": bench_path, "n": n, "ranks": bench["ranks"], "per_node": per_node,
                    "table": table,
                    "best": best, "chosen": chosen, "dense_bf16": dense_bf16,
                    "reason": p["reason"]})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--cell", action="append", required=True, help="BENCH.json:PROFILE.json")
    ap.add_argument("--margin", default="0.05")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--details", action="store_true", help="print every configuration")
    ap.add_argument("--accept", help="codec names the planner may choose, separated by ',' "
                    "(default: every codec the bench measured; bf16 is always a candidate)")
    a = ap.parse_args()

    cells = []
    for c in a.cell:
        b, prof = c.rsplit(":", 1)
        cells.extend(cell(a.tool, b, prof, a.margin,
                          None if a.accept is None else a.accept.split(",")))

    within = total = 0
    good_choice = not_slower = 0
    print("| cell | best measured | chosen | chosen ms (measured / predicted) | best ms | vs best | vs dense bf16 | predictions within ±20 % |")
    print("|---|---|---|---|---|---|---|---|")
    failures = []
    for c in cells:
        ok = sum(1 for t in c["table"] if abs(t["predicted"] / t["measured"] - 1) <= 0.2)
        within += ok
        total += len(c["table"])
        ch, best = c["chosen"], c["best"]
        vs_best = ch["measured"] / best["measured"]
        vs_bf16 = ch["measured"] / c["dense_bf16"]
        good_choice += vs_best <= 1.10
        not_slower += vs_bf16 <= 1.03
        if vs_bf16 > 1.03:
            failures.append(f'{c["bench"]} n={c["n"]}: chose {ch["name"]} ({vs_best:.2f}x best, {vs_bf16:.2f}x dense bf16)')
        print(f'| {c["bench"].split("/")[-1]} n={c["n"]} | {best["name"]} | {ch["name"]} | '
              f'{ch["measured"]*1e3:.2f} / {ch["predicted"]*1e3:.2f} | {best["measured"]*1e3:.2f} | '
              f'{vs_best:.2f} | {vs_bf16:.2f} | {ok}/{len(c["table"])} |')
    print()
    print(f"predictions within ±20 %: {within}/{total} ({100*within/max(total,1):.0f} %, target ≥ 80 %)")
    print(f"choice within 10 % of the measured best: {good_choice}/{len(cells)} (target ≥ 90 %)")
    print(f"choice at most 3 % slower than dense bf16: {not_slower}/{len(cells)} (target: all)")
    if a.details:
        for c in cells:
            print(f'\n{c["bench"]} n={c["n"]} ranks={c["ranks"]}: {c["reason"]}')
            print("| configuration | predicted ms | measured ms | predicted / measured |")
            print("|---|---|---|---|")
            for t in sorted(c["table"], key=lambda t: t["measured"]):
                mark = " **(chosen)**" if t["chosen"] else ""
                print(f'| {t["name"]}{mark} | {t["predicted"]*1e3:.2f} | {t["measured"]*1e3:.2f} | {t["predicted"]/t["measured"]:.2f} |')
    if a.check and failures:
        print("\n".join(["planner check failed:"] + failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
