# SPDX-License-Identifier: Apache-2.0
"""HookState(spec="auto") over gloo: the planner's choice follows the link (a codec on a
slow one, dense on a fast one), every rank makes the same plan, the calibration runs over
the process group, the uncompressed choice is DDP's mean, and the state checkpoints."""

import contextlib
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


@contextlib.contextmanager
def gloo_group(rank, world, init_file):
    """The default process group of one rank of a test, destroyed on the way out."""
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=TIMEOUT)
    try:
        yield
    finally:
        dist.destroy_process_group()


def gathered(obj):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def agreed(report):
    """A plan report without the rank's own timings: what every rank must share."""
    return [{k: v for k, v in r.items() if k != "measured_s"} for r in report]


def choices_worker(rank, world, init_file, slow, fast):
    with gloo_group(rank, world, init_file):
        slow_state = gct.HookState("auto", candidates=CANDIDATES, profile=slow)
        train(slow_state, rank)
        report = slow_state.plan_report()
        assert report, "no bucket was planned"
        assert all(r["spec"] and not r["spec"].startswith("bf16") for r in report), report
        assert slow_state.bytes_sent < slow_state.dense_bytes / 4, (
            slow_state.bytes_sent, slow_state.dense_bytes)
        assert all(r == agreed(report) for r in gathered(agreed(report)))

        fast_state = gct.HookState("auto", candidates=CANDIDATES, profile=fast)
        _, grads = train(fast_state, rank)
        report = fast_state.plan_report()
        assert all(r["strategy"] == "uncompressed" for r in report), report
        assert all(r == agreed(report) for r in gathered(agreed(report)))
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


def test_auto_follows_the_link_and_every_rank_plans_the_same():
    import torch.multiprocessing as mp
    # 100 Mbit/s; and a link with no latency far faster than any encode
    slow, fast = profile(12.5e6), profile(1e13, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(choices_worker, args=(2, os.path.join(tmp, "init"), slow, fast), nprocs=2)


def calibrate_worker(rank, world, init_file, queue):
    with gloo_group(rank, world, init_file):
        state = gct.HookState("auto", candidates=["minmax:bits=4"])
        train(state, rank, steps=2)
        queue.put((rank, state._auto.profile, agreed(state.plan_report())))


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


def replan_worker(rank, world, init_file, fast):
    with gloo_group(rank, world, init_file):
        # The profile promises a link with no cost: the uncompressed mean is predicted to
        # take microseconds and takes milliseconds, so its drift must be agreed and acted on.
        state = gct.HookState("auto", candidates=CANDIDATES, profile=fast, replan_every=2)
        before = json.loads(state._auto.profile)["link"]["allreduce"]["bytes_per_s"]
        train(state, rank, steps=7)
        assert state._auto.replans >= 1, state.plan_report()
        after = json.loads(state._auto.profile)["link"]["allreduce"]["bytes_per_s"]
        assert after < before
        assert all(p == state._auto.profile for p in gathered(state._auto.profile))
        report = agreed(state.plan_report())
        assert all(r == report for r in gathered(report))
        assert all(r["measured_s"] and r["measured_s"] > 0 for r in state.plan_report())


def test_auto_replans_the_buckets_whose_time_drifts_from_the_prediction():
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(replan_worker, args=(2, os.path.join(tmp, "init"), profile(1e13, 0.0)),
                 nprocs=2)


def outer_worker(rank, world, init_file, slow, fast):
    with gloo_group(rank, world, init_file):
        net = model()
        slow_sync = gct.OuterSync(net, spec="auto", candidates=CANDIDATES, profile=slow,
                                  sync_every=2)
        row = slow_sync.plan["row"]
        assert not row["uncompressed"] and not row["spec"].startswith("bf16"), row
        fast_sync = gct.OuterSync(net, spec="auto", candidates=CANDIDATES, profile=fast,
                                  sync_every=2)
        assert fast_sync.plan["row"]["uncompressed"], fast_sync.plan
        for _ in range(4):  # the chosen configuration runs
            with torch.no_grad():
                for p in net.parameters():
                    p.add_(0.01 * (rank + 1))
            slow_sync.step()
        g = torch.from_numpy(slow_sync.global_params().copy())
        assert all(torch.equal(g, o) for o in gathered(g))
        plans = gathered((slow_sync.plan["row"]["candidate"], fast_sync.plan["row"]["candidate"]))
        assert all(p == plans[0] for p in plans)


def test_outer_sync_auto_chooses_the_pseudo_gradients_codec():
    import torch.multiprocessing as mp
    slow, fast = profile(12.5e6), profile(1e13, 0.0)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(outer_worker, args=(2, os.path.join(tmp, "init"), slow, fast), nprocs=2)


def test_auto_argument_checks():
    with pytest.raises(ValueError, match="auto"):
        gct.HookState("auto", strategy="allgather")
    with pytest.raises(ValueError, match="spec='auto' only"):
        gct.HookState("topk", candidates=["minmax"])
    with pytest.raises(ValueError, match="margin"):
        gct.HookState("auto", margin=1.5)
    with pytest.raises(ValueError, match="replan_every"):
        gct.HookState("auto", replan_every=-1)
    with pytest.raises(ValueError, match="plan_report"):
        gct.HookState("topk").plan_report()


def powersgd_worker(rank, world, init_file, slow, expected):
    with gloo_group(rank, world, init_file):
        state = gct.HookState("auto", candidates=["powersgd:rank=4"], profile=slow)
        train(state, rank, steps=2)
        report = state.plan_report()
        assert [(r["strategy"], r["predicted_wire_bytes"]) for r in report] == \
            [("powersgd", expected)], report


def test_auto_predicts_powersgd_on_the_buckets_matrices():
    """The hook's PowerSGD factorises each parameter of two or more dimensions: the planner
    is given those shapes, and its predicted bytes are the hook's two ring allreduces (all
    P factors beside the 1-D parameters, then all Q factors) of model()'s parameters."""
    import torch.multiprocessing as mp
    from gradcodec import _hook_plan
    shapes = [tuple(p.shape) for p in model().parameters()]  # 256x64, 256, 64x256, 64
    assert _hook_plan.powersgd_tensors(shapes) == [(0, 16384, 256), (16640, 16384, 64)]
    psgd = gc.Codec("powersgd", rank=4)
    p = json.loads(gc._gradcodec.measure_codec_costs([psgd.spec], small=1024, large=16384,
                                                      seconds=0.001))
    for kind in ("allgather", "alltoall", "allreduce"):
        p["link"][kind] = {"step_latency_s": 50e-6, "bytes_per_s": 12.5e6}
    n, world = 16384 + 256 + 16384 + 64, 2

    def powersgd_wire(tensors):
        planned = gc._gradcodec.plan(json.dumps(p), n, world, [psgd.spec],
                                     transport_allreduce=True, tensors=tensors)
        rows = [r for r in planned["rows"] if r["spec"].startswith("powersgd")
                and r["strategy"] == "dense"]
        assert len(rows) == 1, planned["rows"]
        return rows[0]["wire_bytes"]

    ranks = [gc._gradcodec.powersgd_rank(psgd, 256, 64),
             gc._gradcodec.powersgd_rank(psgd, 64, 256)]
    p_values = 256 * ranks[0] + 64 * ranks[1] + 256 + 64
    q_values = 64 * ranks[0] + 256 * ranks[1]
    ring = lambda nbytes: 2 * (world - 1) * nbytes // world  # noqa: E731
    expected = ring(4 * p_values) + ring(4 * q_values)
    assert powersgd_wire(_hook_plan.powersgd_tensors(shapes)) == expected
    assert powersgd_wire([]) != expected  # one near-square matrix of the bucket instead
    # The hook hands its bucket's shapes to the planner.
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(powersgd_worker, args=(world, os.path.join(tmp, "init"), p, expected),
                 nprocs=world)
