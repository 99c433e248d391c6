#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns the JSON of `gradcodec bench --allreduce --json FILE` into a Markdown table.

One row per codec, strategy and pipelining setting, per gradient size: median time,
speedup over the dense fp32 and bf16 MPI_Allreduce of the same run, wire bytes per rank,
compression ratio, the pure-transfer replay and the per-phase times of the slowest rank.

    python3 bench/allreduce_table.py RUN.json [RUN2.json ...]
"""
import json
import sys


def ms(seconds):
    return "–" if seconds is None else f"{seconds * 1e3:.1f}"


def table(run):
    out = []
    sizes = sorted({r["n"] for r in run["records"]})
    for n in sizes:
        rows = [r for r in run["records"] if r["n"] == n]
        out.append(
            f"{run['ranks']} ranks, n = {n} f32 elements ({n * 4 / 2**20:.0f} MiB) per rank, "
            f"median of {run['iterations']} calls after {run['warmup']} warm-up\n")
        out.append("| codec | strategy | pipeline | median ms | × dense fp32 | × dense bf16 "
                   "| wire MiB/rank | ratio | pure transfer ms | encode ms | reduce ms "
                   "| decode ms | comm ms |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            dense = r["strategy"] == "mpi_allreduce"
            out.append("| " + " | ".join([
                r["codec"] if dense else f"`{r['codec']}`",
                r["strategy"],
                "–" if dense else ("on" if r["pipeline"] else "off"),
                ms(r["median_s"]),
                f"{r['speedup_fp32']:.2f}",
                f"{r['speedup_bf16']:.2f}",
                f"{r['wire_bytes'] / 2**20:.2f}",
                f"{r['codec_ratio']:.1f}",
                ms(r["transfer_s"]),
                "–" if dense else ms(r["encode_s"]),
                "–" if dense else ms(r["reduce_s"]),
                "–" if dense else ms(r["decode_s"]),
                "–" if dense else ms(r["comm_s"]),
            ]) + " |")
        out.append("")
    return "\n".join(out)


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in paths:
        with open(path) as f:
            print(table(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
