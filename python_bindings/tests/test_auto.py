# SPDX-License-Identifier: Apache-2.0
"""HookState(spec="auto") over gloo: the planner's choice follows the link (a codec on a
slow one, dense on a fast one), every rank makes the same plan, the calibration runs over
the process group, the uncompressed choice is DDP's mean, and the state checkpoints."""

import datetime
import json
import os
import tempfile

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import gradcodec as gc  # noqa: E402
import gradcodec.torch as gct  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=120)
CANDIDATES = ["minmax:bits=4", "topk:ratio=0.01"]


def profile(bytes_per_s, latency_s=50e-6):
    """The codec costs of this machine (small sizes: quick) over a link of this rate."""
    p = json.loads(gc._gradcodec.measure_codec_costs(CANDIDATES, small=1024, large=16384,
                                                      seconds=0.001))
    for kind in ("allgather", "alltoall", "allreduce"):
        p["link"][kind] = {"step_latency_s": latency_s, "bytes_per_s": bytes_per_s}
    return p


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 64))


def train(state, rank, steps=3):
    """A few steps of DDP with the hook of `state` (None: DDP's own allreduce)."""
    net = torch.nn.parallel.DistributedDataParallel(model())
    if state is not None:
        net.register_comm_hook(state, gct.hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        opt.zero_grad()
        x = torch.randn(8, 64, generator=g)
        net(x).square().mean().backward()
        opt.step()
    return net, [p.grad.clone() for p in net.parameters()]


def gathered(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def choices_worker(rank, world, init_file, slow, fast):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=TIMEOUT)
    try:
        slow_state = gct.HookState("auto", candidates=CANDIDATES, profile=slow)
        train(slow_state, rank)
        report = slow_state.plan_report()
        assert report, "no bucket was planned"
        assert all(r["spec"] and not r["spec"].startswith("bf16") for r in report), report
        assert slow_state.bytes_sent < slow_state.dense_bytes / 4, (
            slow_state.bytes_sent, slow_state.dense_bytes)
        assert all(r == report for r in gathered(report))

        fast_state = gct.HookState("auto", candidates=CANDIDATES, profile=fast)
        _, grads = train(fast_state, rank)
        report = fast_state.plan_report()
        assert all(r["strategy"] == "uncompressed" for r in report), report
        assert all(r == report for r in gathered(report))
        # The uncompressed choice is DDP's own mean (its sum is divided after, not before).
        _, reference = train(None, rank)
        for a, b in zip(grads, reference):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)

        # Checkpoint: a fresh auto state resumes with the same plans and residuals.
        saved = slow_state.state_dict()
        again = gct.HookState("auto", candidates=CANDIDATES, profile=fast)
        again.load_state_dict(saved)
        assert again.plan_report() == slow_state.plan_report()
        assert again.step == slow_state.step
    finally:
        dist.destroy_process_group()


def test_auto_follows_the_link_and_every_rank_plans_the_same():
    import torch.multiprocessing as mp
    # 100 Mbit/s; and a link with no latency far faster than any encode
    slow, fast = profile(12.5e6), profile(1e13, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(choices_worker, args=(2, os.path.join(tmp, "init"), slow, fast), nprocs=2)


def calibrate_worker(rank, world, init_file, queue):
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=TIMEOUT)
    try:
        state = gct.HookState("auto", candidates=["minmax:bits=4"])
        train(state, rank, steps=2)
        queue.put((rank, state._auto.profile, state.plan_report()))
    finally:
        dist.destroy_process_group()


def test_auto_calibrates_over_the_process_group():
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(calibrate_worker, args=(2, os.path.join(tmp, "init"), queue), nprocs=2)
    got = sorted(queue.get() for _ in range(2))
    (_, p0, r0), (_, p1, r1) = got
    assert p0 == p1  # the agreed profile, to the bit
    assert r0 == r1
    prof = json.loads(p0)
    assert prof["ranks"] == 2
    assert {c["spec"].split(":")[0] for c in prof["codecs"]} == {"minmax", "bf16"}
    assert prof["link"]["allgather"]["bytes_per_s"] > 0


def test_auto_argument_checks():
    with pytest.raises(ValueError, match="auto"):
        gct.HookState("auto", strategy="allgather")
    with pytest.raises(ValueError, match="spec='auto' only"):
        gct.HookState("topk", candidates=["minmax"])
    with pytest.raises(ValueError, match="margin"):
        gct.HookState("auto", margin=1.5)
    with pytest.raises(ValueError, match="plan_report"):
        gct.HookState("topk").plan_report()
