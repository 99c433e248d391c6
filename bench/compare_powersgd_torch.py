#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One local PowerSGD step with error feedback done with torch ops on the CPU, to compare
with gradcodec's bench_powersgd (BM_phase_step, BM_encode_feedback): M = g + e, P = M Q,
orthogonalise P, Q = M^T P, out = P Q^T, e = M - out. Torch's matmul calls its BLAS
(MKL or OpenBLAS); the orthogonalisation is torch.linalg.qr (PyTorch's powerSGD_hook for
rank > 2) or the Gram-Schmidt loop of the hook for rank <= 2. One thread by default, like
the micro benchmark.

usage: compare_powersgd_torch.py [--rows 4096] [--cols 4096] [--rank 4] [--threads 1]
                                 [--repeat 20]
"""
import argparse
import time

import torch


def gram_schmidt(p, eps=1e-8):
    # torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py _orthogonalize_gram_schmidt
    for i in range(p.shape[1]):
        col = p[:, i : i + 1]
        col /= torch.norm(col) + eps
        if i + 1 < p.shape[1]:
            rest = p[:, i + 1 :]
            rest -= torch.sum(col * rest, dim=0) * col
    return p


def step(g, e, q, out, use_qr):
    m = e.add_(g)  # M = g + e, in the residual's memory like gradcodec's phase API
    p = m @ q
    if use_qr:
        p = torch.linalg.qr(p).Q
    else:
        p = gram_schmidt(p)
    q = m.t() @ p
    torch.matmul(p, q.t(), out=out)
    e.sub_(out)  # e = M - out
    return q


def time_ms(fn, repeat):
    fn()  # warm up (allocations, first-touch)
    best = float("inf")
    total = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        total += dt
    return 1e3 * best, 1e3 * total / repeat


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    g = torch.randn(args.rows, args.cols)
    e = 0.1 * torch.randn(args.rows, args.cols)
    q0 = torch.linalg.qr(torch.randn(args.cols, args.rank)).Q.contiguous()
    out = torch.empty(args.rows, args.cols)
    n = args.rows * args.cols
    blas = [w for w in torch.__config__.show().replace(",", " ").split() if w.startswith("BLAS_INFO=")]
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rows} x {args.cols}, "
          f"rank {args.rank}, {blas[0] if blas else 'BLAS_INFO unknown'}")
    for name, use_qr in (("qr", True), ("gram-schmidt", False)):
        state = {"q": q0.clone()}

        def run():
            state["q"] = step(g, e, state["q"], out, use_qr)

        best, mean = time_ms(run, args.repeat)
        # gradcodec's phase step bytes model: 28 bytes per element (performance.md).
        print(f"step ({name}): best {best:.2f} ms, mean {mean:.2f} ms, "
              f"{28 * n / best / 1e6:.2f} GB/s by the 28 B/element model")
    m = e.clone()
    p = m @ q0
    for name, fn in (
        ("P = M Q", lambda: torch.matmul(m, q0, out=p)),
        ("Q = M^T P", lambda: m.t() @ p),
        ("out = P Q^T", lambda: torch.matmul(p, q0.t(), out=out)),
        ("e = M - out", lambda: m.sub_(out)),
        ("memcpy", lambda: out.copy_(g)),
    ):
        best, mean = time_ms(fn, args.repeat)
        print(f"{name}: best {best:.2f} ms, mean {mean:.2f} ms")


if __name__ == "__main__":
    main()
