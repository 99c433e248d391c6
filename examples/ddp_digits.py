#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare gradcodec codecs on a small DDP training run you can do on any CPU.

A 64-512-10 MLP learns scikit-learn's bundled 8x8 digits (no download) with
DistributedDataParallel over gloo, once with plain float32 allreduce and once per codec
through the gradcodec communication hook (error feedback on), with the same budget for
every run (model init, data order, epochs, learning rate, momentum, batch). It prints the
final test accuracy, the bytes each rank sent per step and the wall time of each run::

    python3 examples/ddp_digits.py                                # the default codec list
    python3 examples/ddp_digits.py --codecs topk:ratio=0.01 qsgd:levels=7 --world-size 2
    python3 examples/ddp_digits.py --epochs 10 --hidden 128 --codecs "powersgd:rank=1"

Build the bindings first (``pip install ./python_bindings``, or the CMake build with
-DGRADCODEC_PYTHON=ON and PYTHONPATH=<build>/python_bindings).
"""

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

BASELINE = "none"

# The convergence test's list, every codec family with error feedback. QSGD uses the max
# norm: with the L2 norm of a 512-bucket its variance exceeds the gradient's own norm, which
# error feedback (it needs a contractive codec) amplifies until training diverges. The 1-bit
# codecs use one scale per 128 elements: with 2048 they stall far below the baseline.
DEFAULT_CODECS = [
    "topk:ratio=0.01",
    "dgc:ratio=0.001",
    "qsgd:levels=7,norm=max",
    "terngrad",
    "minmax:bits=4",
    "onebit:bucket=128",
    "sign:scale=mean,bucket=128",
    "powersgd:rank=2",
]


@dataclass
class Budget:
    """The training budget, identical for every run.

    The defaults let every codec of DEFAULT_CODECS reach the baseline within a point or
    two. The hidden layer is wide because DGC at 0.1% of a 64-128-10 MLP (9.6k parameters)
    sends 9 values a step; with 512 it sends 38. Plain SGD: sparse error feedback with
    heavy momentum lags badly without DGC's momentum correction, which the hook does not
    do. The linearly decaying rate makes the final accuracy stable."""

    epochs: int = 30
    lr: float = 0.5  # decays linearly to 0 over the run
    momentum: float = 0.0
    batch: int = 32  # per rank
    hidden: int = 512
    seed: int = 0
    error_feedback: bool = True


def load_data(seed: int):
    """Digits scaled to [0, 1], split 80/20 by a fixed permutation."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    y = y.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


def train_one(spec: str, rank: int, world: int, budget: Budget, data) -> Dict[str, float]:
    """One DDP training run on an initialised process group; returns rank-local stats."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import gradcodec.torch as gct

    x_train, y_train, x_test, y_test = data
    torch.manual_seed(budget.seed)
    model = nn.Sequential(nn.Linear(64, budget.hidden), nn.ReLU(), nn.Linear(budget.hidden, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    n_params = sum(p.numel() for p in model.parameters())
    state = None
    if spec != BASELINE:
        state = gct.HookState(spec=spec, error_feedback=budget.error_feedback, seed=budget.seed)
        ddp.register_comm_hook(state, gct.hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=budget.lr, momentum=budget.momentum)
    loss_fn = nn.CrossEntropyLoss()
    xt = torch.from_numpy(x_train)
    yt = torch.from_numpy(y_train)
    # Every rank runs the same number of steps: its shard of an epoch-seeded permutation,
    # incomplete batches dropped.
    per_rank = len(y_train) // world
    steps_per_epoch = per_rank // budget.batch
    total_steps = budget.epochs * steps_per_epoch
    steps = 0
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(budget.epochs):
        perm = np.random.default_rng((budget.seed, epoch)).permutation(len(y_train))
        mine = perm[rank * per_rank:(rank + 1) * per_rank]
        for s in range(steps_per_epoch):
            idx = torch.from_numpy(mine[s * budget.batch:(s + 1) * budget.batch])
            for group in opt.param_groups:
                group["lr"] = budget.lr * (1.0 - steps / total_steps)
            opt.zero_grad()
            loss_fn(ddp(xt[idx]), yt[idx]).backward()
            opt.step()
            steps += 1
    seconds = time.perf_counter() - start
    with torch.no_grad():
        pred = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    accuracy = float((pred == y_test).mean())
    sent = state.bytes_sent if state is not None else 4 * n_params * steps
    return {"accuracy": accuracy, "bytes_per_step": sent / steps, "seconds": seconds,
            "dense_bytes_per_step": 4.0 * n_params}


def _worker(rank: int, world: int, init_file: str, specs: List[str], budget: Budget,
            queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    data = load_data(budget.seed)
    try:
        for spec in specs:
            stats = train_one(spec, rank, world, budget, data)
            if rank == 0:
                queue.put((spec, stats))
    finally:
        dist.destroy_process_group()


def compare(specs: List[str], world_size: int = 4, budget: Optional[Budget] = None,
            verbose: bool = True) -> Dict[str, Dict[str, float]]:
    """Trains the baseline and every spec in one group of world_size processes; returns
    {spec: {"accuracy", "bytes_per_step", "dense_bytes_per_step", "seconds"}} (rank 0's
    accuracy and time, rank 0's bytes; the baseline is under "none")."""
    import torch.multiprocessing as mp

    budget = budget or Budget()
    runs = [BASELINE] + [s for s in specs if s != BASELINE]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world_size, os.path.join(tmp, "init"), runs, budget, queue),
                 nprocs=world_size, join=True)
    results = {}
    while not queue.empty():
        spec, stats = queue.get()
        results[spec] = stats
    if verbose:
        print_table(results, budget, world_size)
    return results


def print_table(results: Dict[str, Dict[str, float]], budget: Budget, world: int) -> None:
    base = results.get(BASELINE)
    print(f"\ndigits MLP 64-{budget.hidden}-10, {world} ranks (gloo), {budget.epochs} epochs, "
          f"batch {budget.batch}/rank, lr {budget.lr} decaying to 0, momentum {budget.momentum}, "
          f"error feedback {'on' if budget.error_feedback else 'off'}")
    print(f"{'codec':<28} {'test acc':>8} {'vs fp32':>8} {'bytes/step':>11} {'smaller':>8} "
          f"{'time':>7}")
    for spec, r in results.items():
        name = "fp32 allreduce" if spec == BASELINE else spec
        delta = "" if base is None or spec == BASELINE else \
            f"{100 * (r['accuracy'] - base['accuracy']):+.1f}"
        ratio = r["dense_bytes_per_step"] / r["bytes_per_step"] if r["bytes_per_step"] else 0
        print(f"{name:<28} {100 * r['accuracy']:7.1f}% {delta:>8} {r['bytes_per_step']:11.0f} "
              f"{ratio:7.1f}x {r['seconds']:6.2f}s")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Budget()
    parser.add_argument("--codecs", nargs="+", default=DEFAULT_CODECS, metavar="SPEC",
                        help="codec specs to compare with the fp32 baseline")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--momentum", type=float, default=defaults.momentum)
    parser.add_argument("--batch", type=int, default=defaults.batch, help="per rank")
    parser.add_argument("--hidden", type=int, default=defaults.hidden)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--no-error-feedback", action="store_true")
    args = parser.parse_args()
    budget = Budget(epochs=args.epochs, lr=args.lr, momentum=args.momentum, batch=args.batch,
                    hidden=args.hidden, seed=args.seed,
                    error_feedback=not args.no_error_feedback)
    compare(args.codecs, world_size=args.world_size, budget=budget)


if __name__ == "__main__":
    main()
