#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare gradcodec codecs on a small character-level transformer trained with AdamW.

A 2-layer pre-norm transformer predicts the next character of the licence texts every
Debian system has in /usr/share/common-licenses (base-files; no download), with
DistributedDataParallel over gloo: once with DDP's float32 allreduce, once with PyTorch's
fp16 and PowerSGD hooks, once per codec through the gradcodec hook at its defaults, all
with the same budget (model init, batches, steps, learning-rate schedule). It prints the
held-out loss (nats per character), the bytes each rank sent per step and the wall time::

    python3 examples/ddp_chars.py
    python3 examples/ddp_chars.py --codecs topk "minmax:bits=2" --steps 400 --world-size 2

Build the bindings first (see examples/ddp_digits.py).
"""

import argparse
import os
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_compare  # noqa: E402

from ddp_digits import DEFAULT_RUNS  # noqa: E402

TEXTS = "/usr/share/common-licenses"


@dataclass
class Chars:
    """The task and its budget, identical for every run."""

    steps_total: int = 200
    lr: float = 3e-3  # peak; linear warm-up over 5% of the steps, linear decay to 0
    weight_decay: float = 0.1
    batch_size: int = 8  # sequences per rank
    context: int = 32
    width: int = 48
    layers: int = 2
    heads: int = 4
    seed: int = 0
    optimizer_kind: str = "adamw"  # or "momentum" (SGD 0.9)

    metric = ("held-out loss", False)

    def describe(self, world: int) -> str:
        return (f"char transformer ({self.layers} layers, width {self.width}, context "
                f"{self.context}) on {TEXTS}, {world} ranks (gloo), {self.steps_total} "
                f"steps, batch {self.batch_size}x{self.context}/rank, {self.optimizer_kind} "
                f"lr {self.lr} wd {self.weight_decay}")

    def data(self):
        """Every regular file of TEXTS in name order; the last tenth of each is held out.
        Characters are numbered in sorted order of the whole text."""
        names = sorted(f for f in os.listdir(TEXTS)
                       if not os.path.islink(os.path.join(TEXTS, f)))
        texts = []
        for name in names:
            with open(os.path.join(TEXTS, name), "rb") as f:
                texts.append(f.read().decode("latin-1"))
        vocab = sorted(set("".join(texts)))
        index = {c: i for i, c in enumerate(vocab)}
        train, held = [], []
        for t in texts:
            ids = np.array([index[c] for c in t], dtype=np.int64)
            cut = int(0.9 * len(ids))
            train.append(ids[:cut])
            held.append(ids[cut:])
        return np.concatenate(train), np.concatenate(held), len(vocab)

    def model(self):
        import torch

        torch.manual_seed(self.seed)
        vocab = self.data()[2]  # a quarter of a megabyte: cheaper than keeping it around
        return _CharTransformer(vocab, self.width, self.heads, self.layers, self.context)

    def steps(self, world: int) -> int:
        return self.steps_total

    def optimizer(self, params, world: int):
        import torch

        if self.optimizer_kind == "momentum":
            opt = torch.optim.SGD(list(params), lr=self.lr, momentum=0.9,
                                  weight_decay=self.weight_decay)
        else:
            opt = torch.optim.AdamW(list(params), lr=self.lr, betas=(0.9, 0.99),
                                    weight_decay=self.weight_decay)
        return opt, ddp_compare.warmup_then_linear_decay(self.lr, self.steps_total)

    def batch(self, data, step: int, rank: int, world: int):
        import torch

        train = data[0]
        rng = np.random.default_rng((self.seed, step, rank))
        starts = rng.integers(0, len(train) - self.context - 1, size=self.batch_size)
        x = np.stack([train[s:s + self.context] for s in starts])
        y = np.stack([train[s + 1:s + self.context + 1] for s in starts])
        return torch.from_numpy(x), torch.from_numpy(y)

    def loss(self, model, batch):
        import torch.nn.functional as F

        x, y = batch
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def evaluate(self, model, data):
        import torch
        import torch.nn.functional as F

        held = data[1]
        n = (len(held) - 1) // self.context
        x = torch.from_numpy(held[:n * self.context].reshape(n, self.context))
        y = torch.from_numpy(held[1:n * self.context + 1].reshape(n, self.context))
        total = 0.0
        with torch.no_grad():
            for i in range(0, n, 64):
                logits = model(x[i:i + 64])
                total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               y[i:i + 64].reshape(-1), reduction="sum"))
        return {"held-out loss": total / (n * self.context)}


def _CharTransformer(vocab: int, width: int, heads: int, layers: int, context: int):
    import torch
    import torch.nn as nn

    class CharTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, width)
            self.position = nn.Parameter(torch.randn(context, width) * 0.02)
            block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, layers)
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab)
            mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
            self.register_buffer("mask", mask)

        def forward(self, x):
            t = x.shape[1]
            h = self.embed(x) + self.position[:t]
            h = self.blocks(h, mask=self.mask[:t, :t])
            return self.head(self.norm(h))

    return CharTransformer()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    c = Chars()
    ddp_compare.add_arguments(parser, c, DEFAULT_RUNS)
    parser.add_argument("--steps", type=int, default=c.steps_total)
    parser.add_argument("--context", type=int, default=c.context)
    parser.add_argument("--optimizer", choices=("adamw", "momentum"), default=c.optimizer_kind)
    args = parser.parse_args()
    task = Chars(steps_total=args.steps, lr=args.lr, weight_decay=args.weight_decay,
                 batch_size=args.batch, context=args.context, width=args.width, seed=args.seed,
                 optimizer_kind=args.optimizer)
    ddp_compare.run(task, args)


if __name__ == "__main__":
    main()
