#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare gradcodec codecs on a small DDP training run you can do on any CPU.

A small CNN (or the MLP of earlier releases) learns scikit-learn's bundled 8x8 digits (no
download) with DistributedDataParallel over gloo, with momentum SGD and weight decay (or
plain SGD, or AdamW), once with DDP's own float32 allreduce, once with each of PyTorch's
fp16 and PowerSGD hooks and once per codec through the gradcodec hook at its defaults,
all with the same budget (model init, data order, steps, learning rate). It prints the
final test accuracy, the bytes each rank sent per step and the wall time of each run::

    python3 examples/ddp_digits.py                                # the default list
    python3 examples/ddp_digits.py --codecs topk:ratio=0.01 qsgd --world-size 2
    python3 examples/ddp_digits.py --model mlp --optimizer sgd --codecs "powersgd:rank=1"
    python3 examples/ddp_digits.py --codecs "qsgd@error_feedback=1"   # a HookState option

Build the bindings first (``pip install ./python_bindings``, or the CMake build with
-DGRADCODEC_PYTHON=ON and PYTHONPATH=<build>/python_bindings).
"""

import argparse
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_compare  # noqa: E402

# Every codec at its defaults, and PyTorch's own hooks beside them.
DEFAULT_RUNS = [
    "topk", "dgc", "randomk", "threshold", "qsgd", "terngrad", "minmax", "onebit", "sign",
    "fp16", "bf16", "powersgd", "torch:fp16", "torch:powersgd:rank=4",
]


@dataclass
class Digits:
    """The task and its budget, identical for every run."""

    model_kind: str = "cnn"  # "cnn" or "mlp"
    optimizer_kind: str = "momentum"  # "momentum" (SGD 0.9), "sgd" or "adamw"
    epochs: int = 20
    lr: float = 0.1  # peak; warms up linearly over 5% of the steps, decays linearly to 0
    weight_decay: float = 5e-4
    batch_size: int = 32  # per rank
    width: int = 16
    seed: int = 0

    metric = ("accuracy", True)

    def describe(self, world: int) -> str:
        return (f"digits {self.model_kind} (width {self.width}), {world} ranks (gloo), "
                f"{self.epochs} epochs, batch {self.batch_size}/rank, {self.optimizer_kind} "
                f"lr {self.lr} wd {self.weight_decay}")

    def data(self):
        """Digits scaled to [0, 1], split 80/20 by a fixed permutation."""
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        x = (x / 16.0).astype(np.float32)
        y = y.astype(np.int64)
        perm = np.random.default_rng(self.seed).permutation(len(y))
        cut = int(0.8 * len(y))
        return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]

    def model(self):
        import torch
        import torch.nn as nn

        torch.manual_seed(self.seed)
        w = self.width
        if self.model_kind == "mlp":
            return nn.Sequential(nn.Linear(64, 32 * w), nn.ReLU(), nn.Linear(32 * w, 10))
        return nn.Sequential(
            nn.Unflatten(1, (1, 8, 8)),
            nn.Conv2d(1, w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(2 * w * 16, 8 * w), nn.ReLU(), nn.Linear(8 * w, 10))

    def steps(self, world: int) -> int:
        return self.epochs * self._steps_per_epoch(world)

    def _steps_per_epoch(self, world: int) -> int:
        return (1437 // world) // self.batch_size

    def optimizer(self, params, world: int):
        import torch

        params = list(params)
        if self.optimizer_kind == "adamw":
            opt = torch.optim.AdamW(params, lr=self.lr, weight_decay=self.weight_decay)
        else:
            momentum = 0.9 if self.optimizer_kind == "momentum" else 0.0
            opt = torch.optim.SGD(params, lr=self.lr, momentum=momentum,
                                  weight_decay=self.weight_decay)
        return opt, ddp_compare.warmup_then_linear_decay(self.lr, self.steps(world))

    def batch(self, data, step: int, rank: int, world: int):
        import torch

        x_train, y_train = data[0], data[1]
        per_epoch = self._steps_per_epoch(world)
        epoch, s = divmod(step, per_epoch)
        per_rank = len(y_train) // world
        perm = np.random.default_rng((self.seed, epoch)).permutation(len(y_train))
        mine = perm[rank * per_rank:(rank + 1) * per_rank]
        idx = mine[s * self.batch_size:(s + 1) * self.batch_size]
        return torch.from_numpy(x_train[idx]), torch.from_numpy(y_train[idx])

    def loss(self, model, batch):
        import torch.nn.functional as F

        x, y = batch
        return F.cross_entropy(model(x), y)

    def evaluate(self, model, data):
        import torch

        with torch.no_grad():
            pred = model(torch.from_numpy(data[2])).argmax(dim=1).numpy()
        return {"accuracy": float((pred == data[3]).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Digits()
    ddp_compare.add_arguments(parser, d, DEFAULT_RUNS)
    parser.add_argument("--model", choices=("cnn", "mlp"), default=d.model_kind)
    parser.add_argument("--optimizer", choices=("momentum", "sgd", "adamw"),
                        default=d.optimizer_kind)
    parser.add_argument("--epochs", type=int, default=d.epochs)
    args = parser.parse_args()
    task = Digits(model_kind=args.model, optimizer_kind=args.optimizer, epochs=args.epochs,
                  lr=args.lr, weight_decay=args.weight_decay, batch_size=args.batch,
                  width=args.width, seed=args.seed)
    ddp_compare.run(task, args)


if __name__ == "__main__":
    main()
