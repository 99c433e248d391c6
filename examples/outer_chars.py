#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fewer rounds: DiLoCo and Streaming DiLoCo against DDP on the character transformer.

The task of examples/ddp_chars.py (a 2-layer transformer on /usr/share/common-licenses,
AdamW, 4 gloo ranks, the same tokens for every run) trained with DDP's float32 allreduce,
with DDP and the best per-step codec through the gradcodec hook, and with
``gradcodec.torch.OuterSync`` instead of DDP: each rank trains its own copy, and every H
steps the pseudo-gradient Δ = θ_global − θ_local is averaged uncompressed, as 8- or 4-bit
min–max frames, or as top-k with error feedback, then applied by the outer Nesterov
SGD (docs/outer.md). It prints the held-out loss of θ_global, the bytes each rank put
on the wire per step (and per token: 8 sequences of 32 characters per rank and step),
the most bytes of one sync, and the wall time::

    python3 examples/outer_chars.py
    python3 examples/outer_chars.py --steps 800 --codecs outer/H=50/dense

Over a shaped network, each rank in its own namespace (``--launched`` with rank 0's
address); ``transport=mpi`` runs the syncs over the library's MPI communicator::

    scripts/shaped-network 100mbit 2 -- python3 examples/outer_chars.py --launched 10.78.0.1 \
        --eval-every 10 --codecs outer/H=50/P=4/tau=4/steps=400/transport=mpi/minmax:bits=4

Run names are those of examples/ddp_compare.py (``outer/H=50/P=4/tau=1/minmax:bits=4``).
Build the bindings first (see examples/ddp_digits.py).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_compare  # noqa: E402
from ddp_chars import Chars  # noqa: E402

DEFAULT_RUNS = [
    "minmax",  # the best per-step codec on this task (docs/python.md, "Convergence")
    "outer/H=10/dense",
    "outer/H=50/dense",
    "outer/H=50/minmax:bits=8",
    "outer/H=50/minmax:bits=4",
    "outer/H=50/topk:ratio=0.03",
    "outer/H=50/P=4/tau=1/minmax:bits=4",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c = Chars()
    ddp_compare.add_arguments(parser, c, DEFAULT_RUNS)
    parser.add_argument("--steps", type=int, default=c.steps_total)
    args = parser.parse_args()
    task = Chars(steps_total=args.steps, lr=args.lr, weight_decay=args.weight_decay,
                 batch_size=args.batch, width=args.width, seed=args.seed)
    results = ddp_compare.run(task, args)
    if not results:
        return
    tokens = task.batch_size * task.context  # per rank and step
    print(f"\nbytes on the wire per token ({tokens} tokens per rank and step):")
    for name, r in results.items():
        if not r.get("failure"):
            print(f"  {name:<44} {r['bytes_per_step'] / tokens:10.1f}")


if __name__ == "__main__":
    main()
