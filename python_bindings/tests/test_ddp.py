# SPDX-License-Identifier: Apache-2.0
"""The DDP communication hook over gloo with 2 and 4 ranks: for every codec, the gradient
the hook writes back equals what the library computes for the same inputs.

Each rank's gradients are known: the model's loss is sum(param * c) with coefficients c
drawn from (rank, iteration, parameter), so every rank can rebuild every other rank's
bucket. The test records each hook call (bucket index, step, parameters, result) and
replays it with gradcodec.encode / decode / the PowerSGD phases, keeping its own residuals
(three iterations: error feedback, the step counter and DDP's bucket rebuild after the
first iteration all take part). Coefficients are multiples of 1/32 in [-2, 2], so the
dense sums (fp16, bf16, randomk values) are exact in any order; PowerSGD's allreduced
P and Q are rounded sums, which with 4 ranks gloo may add in another order than the
replay, so there the comparison has a tolerance (with 2 ranks it is exact).

The same cases run over NCCL on CUDA buckets (one rank per GPU, at most 2; a 1-rank group
on a machine with one GPU), where the hook encodes and decodes on the GPU: the result must
equal the same CPU replay, since the CUDA backend writes the CPU backend's bytes."""

import os
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import gradcodec as gc  # noqa: E402
import gradcodec.torch as gct  # noqa: E402

ITERATIONS = 3
SHAPES = [(24, 16), (24,), (8, 3, 2, 2), (8, 24), (8,)]

# (spec, HookState keyword arguments, DDP bucket_cap_mb)
CASES = [
    ("topk:ratio=0.05", {}, 25),
    ("dgc:ratio=0.02", {}, 25),
    ("randomk:ratio=0.1", {}, 25),
    ("randomk:ratio=0.1,unbiased=1", {"strategy": "allgather"}, 25),
    ("threshold:tau=1.5", {}, 25),
    ("threshold:tau=100", {}, 25),  # nothing passes: empty payloads must not hang
    ("qsgd:levels=7", {}, 25),
    ("qsgd:levels=7", {"error_feedback": False}, 25),
    ("terngrad", {}, 25),
    ("minmax:bits=4", {}, 0.0005),  # small buckets: one per parameter or two
    ("onebit:bucket=64", {}, 25),
    ("sign", {}, 25),  # majority vote
    ("sign:scale=mean,bucket=64", {}, 25),
    ("fp16", {}, 25),
    ("bf16", {}, 25),
    ("powersgd:rank=2", {}, 25),
    ("powersgd:rank=1", {"error_feedback": False}, 0.0005),
    ("powersgd:rank=2", {"strategy": "allgather"}, 25),
]


class Known(torch.nn.Module):
    """Gradient of parameter i on rank r at iteration t: coeffs(r, t)[i]."""

    def __init__(self):
        super().__init__()
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES])

    def forward(self, coeffs):
        return sum((p * c).sum() for p, c in zip(self.params, coeffs))


def coeffs(rank, it):
    out = []
    for i, shape in enumerate(SHAPES):
        g = torch.Generator().manual_seed(1000 * rank + 100 * it + i)
        out.append(torch.randint(-64, 65, shape, generator=g).to(torch.float32) / 32)
    return out


def record_hook(records):
    def recording(state, bucket):
        rec = {"index": bucket.index(), "step": state.step, "layout": gct._layout(bucket),
               "ptrs": [p.data_ptr() for p in bucket.parameters()]}
        records.append(rec)

        def keep(fut):
            rec["out"] = fut.value().detach().clone()
            return fut.value()

        return gct.hook(state, bucket).then(keep)

    return recording


# --- the replay -----------------------------------------------------------------------


class Replay:
    """Computes, for every rank's known input, what the hook must return."""

    def __init__(self, spec, kwargs, world):
        self.state = gct.HookState(spec=spec, **kwargs)  # for its settings only
        self.codec = self.state.codec
        self.world = world
        self.buckets = {}  # index -> (layout, per-bucket replay state)

    def bucket(self, index, layout):
        have = self.buckets.get(index)
        if have is None or have[0] != layout:
            have = (layout, {})
            self.buckets[index] = have
        return have[1]

    def expected(self, rec, inputs):
        st = self.bucket(rec["index"], rec["layout"])
        kind = self.state.strategy
        ctx = dict(seed=self.state.seed, step=rec["step"], tensor_id=rec["index"])
        if kind == "powersgd":
            return self.powersgd(st, rec, inputs)
        if kind == "dense" and self.codec.name != "randomk":
            inputs = [x / self.world for x in inputs]
        frames = []
        for r, x in enumerate(inputs):
            if self.state.error_feedback:
                res = st.setdefault(r, torch.zeros(x.numel()))
                frames.append(gc.encode_with_feedback(self.codec, x, res, **ctx))
            else:
                frames.append(gc.encode(self.codec, x, **ctx))
        n = inputs[0].numel()
        if kind == "vote":
            return torch.from_numpy(gc.sign_majority_vote(frames))
        if kind == "dense":
            return self.dense_sum(frames, n)
        acc = torch.zeros(n)
        for f in frames:
            gc.decode_accumulate(f, acc, 1.0 / self.world)
        return acc

    def dense_sum(self, frames, n):
        """Sums the values sections of the frames (exact here), then decodes frame 0 with
        the sums in place, as the hook does after its allreduce."""
        name = self.codec.name
        start = gc.header_bytes + (16 if name == "randomk" else 0)
        count = gc.peek(frames[0]).count if name == "randomk" else n
        wire = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name, torch.float32)
        width = 4 if wire == torch.float32 else 2
        total = torch.zeros(count)
        for f in frames:
            raw = torch.from_numpy(f[start:start + count * width].copy())
            total += raw.view(wire).to(torch.float32)
        frame = frames[0].copy()
        frame[start:start + count * width] = total.to(wire).view(torch.uint8).numpy()
        acc = torch.zeros(n)
        if name == "randomk":
            gc.decode_accumulate(frame, acc, 1.0 / self.world)
        else:
            gc.decode(frame, acc)
        return acc

    def powersgd(self, st, rec, inputs):
        codec, world = self.codec, self.world
        shapes = rec["layout"][2]
        if not st:
            mats, dense, offset = [], [], 0
            for position, shape in enumerate(shapes):
                numel = int(np.prod(shape))
                rows = shape[0] if len(shape) >= 2 else 0
                if rows and gc.powersgd_compresses(codec, rows, numel // rows):
                    cols = numel // rows
                    r = gc.powersgd_rank(codec, rows, cols)
                    q = torch.empty(cols * r)
                    gc.powersgd_init_q(codec, rows, cols, q, seed=self.state.seed,
                                       tensor_id=(rec["index"] << 16) | position)
                    mats.append({"off": offset, "rows": rows, "cols": cols, "r": r, "q": q,
                                 "m": [torch.zeros(numel) for _ in range(world)]})
                else:
                    dense.append((offset, numel))
                offset += numel
            st.update(mats=mats, dense=dense)
        mats, dense = st["mats"], st["dense"]
        n = inputs[0].numel()
        p_sum = [None] * len(mats)
        for r, x in enumerate(inputs):
            for j, mat in enumerate(mats):
                size = mat["rows"] * mat["cols"]
                p = torch.empty(mat["rows"] * mat["r"])
                gc.powersgd_compute_p(codec, x[mat["off"]:mat["off"] + size], mat["m"][r],
                                      mat["q"], p, rows=mat["rows"])
                p_sum[j] = p if p_sum[j] is None else p_sum[j] + p
        q_sum = [None] * len(mats)
        p_hat = [None] * len(mats)
        for r in range(world):
            for j, mat in enumerate(mats):
                p = p_sum[j].clone()
                q = torch.empty(mat["cols"] * mat["r"])
                gc.powersgd_compute_q(codec, p, mat["m"][r], mat["rows"], mat["cols"], q)
                p_hat[j] = p
                q_sum[j] = q if q_sum[j] is None else q_sum[j] + q
        outs = []
        for r, x in enumerate(inputs):
            out = torch.empty(n)
            for j, mat in enumerate(mats):
                size = mat["rows"] * mat["cols"]
                q = q_sum[j].clone()
                gc.powersgd_finish(codec, p_hat[j], q, world, mat["m"][r],
                                   out[mat["off"]:mat["off"] + size],
                                   error_feedback=self.state.error_feedback, rows=mat["rows"])
                if r == world - 1:
                    mat["q"] = q
            for off, numel in dense:
                total = sum(y[off:off + numel] for y in inputs)
                out[off:off + numel] = total / world
            outs.append(out)
        assert all(torch.equal(outs[0], o) for o in outs)
        return outs[0]


# --- the ranks ------------------------------------------------------------------------


def run_case(rank, world, spec, kwargs, cap_mb, device=None):
    device = torch.device("cpu") if device is None else device
    model = Known().to(device)
    ids = [device.index] if device.type == "cuda" else None
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                                    bucket_cap_mb=cap_mb)
    state = gct.HookState(spec=spec, seed=7, **kwargs)
    records = []
    ddp.register_comm_hook(state, record_hook(records))
    for it in range(ITERATIONS):
        ddp.zero_grad()
        ddp([c.to(device) for c in coeffs(rank, it)]).backward()
    assert state.step == ITERATIONS
    if device.type == "cuda" and state.strategy == "powersgd":
        # The phases ran on the GPU: P, Q and the residual M stayed there.
        for b in state._buckets.values():
            for name in ("p", "q", "m"):
                assert getattr(b, name).device == device, f"{spec}: {name} on the host"
    if device.type == "cuda" and state.strategy != "powersgd":
        # The CUDA path ran: frames and residuals stayed on the GPU.
        for b in state._buckets.values():
            assert b.send is not None and b.send.device == device, f"{spec}: frames on the host"
            if state.error_feedback:
                assert b.residual.device == device, f"{spec}: residual on the host"
    positions = {p.data_ptr(): i for i, p in enumerate(model.parameters())}
    replay = Replay(spec, dict(kwargs, seed=7), world)
    exact = not (replay.state.strategy == "powersgd" and world > 2)
    for rec in records:
        order = [positions[ptr] for ptr in rec["ptrs"]]
        inputs = [torch.cat([coeffs(r, rec["step"])[i].flatten() for i in order])
                  for r in range(world)]
        want = replay.expected(rec, inputs)
        got = rec["out"].cpu()
        where = f"{spec} {kwargs} bucket {rec['index']} step {rec['step']}"
        if exact:
            assert torch.equal(got, want), f"{where}: max diff {(got - want).abs().max()}"
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=where)
    # Every rank ends with the same gradients.
    grads = torch.cat([p.grad.flatten() for p in model.parameters()])
    gathered = [torch.empty_like(grads) for _ in range(world)]
    dist.all_gather(gathered, grads)
    assert all(torch.equal(gathered[0], g) for g in gathered), f"{spec}: ranks differ"
    # State round trip: a fresh state loaded from this one continues identically.
    copy = gct.HookState(spec=spec, seed=7, **kwargs)
    copy.load_state_dict(state.state_dict())
    assert copy.step == state.step and set(copy._buckets) == set(state._buckets)
    return len(records)


def worker(rank, world, init_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    try:
        # A failing case raises: torch.multiprocessing.spawn then stops the other ranks
        # and re-raises the failure with its traceback here.
        for spec, kwargs, cap in CASES:
            run_case(rank, world, spec, kwargs, cap)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_hook_equals_the_library_for_every_codec(world):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(world, os.path.join(tmp, "init")), nprocs=world)


def nccl_worker(rank, world, init_file):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + init_file, rank=rank,
                            world_size=world)
    try:
        for spec, kwargs, cap in CASES:
            try:
                run_case(rank, world, spec, kwargs, cap, torch.device("cuda", rank))
            except Exception as e:  # name the case in what spawn re-raises (chained)
                raise AssertionError(f"NCCL case {spec} {kwargs}: {e}") from e
    finally:
        dist.destroy_process_group()


def _nccl_missing():
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no CUDA device, or a CPU-only PyTorch)"
    if not gc.backend_available("cuda"):
        return "gradcodec has no usable CUDA backend (built without CUDA, or no device)"
    if not dist.is_nccl_available():
        return "this PyTorch has no NCCL"
    return None


def test_hook_on_cuda_over_nccl_equals_the_library():
    """Every case over NCCL with CUDA buckets: 2 ranks on 2 GPUs, else 1 rank on 1 GPU."""
    missing = _nccl_missing()
    if missing is not None:
        if os.environ.get("GRADCODEC_REQUIRE_CUDA") == "1":
            pytest.fail(f"GRADCODEC_REQUIRE_CUDA=1 but {missing}")
        pytest.skip(missing)
    import torch.multiprocessing as mp

    world = min(2, torch.cuda.device_count())
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(nccl_worker, args=(world, os.path.join(tmp, "init")), nprocs=world)


def test_hook_state_checks():
    with pytest.raises(ValueError):
        gct.HookState(spec="qsgd", strategy="dense")
    with pytest.raises(ValueError):
        gct.HookState(spec="topk", strategy="ring")
    with pytest.raises(gc.Error):
        gct.HookState(spec="nosuch")
    assert gct.HookState(spec="sign").strategy == "vote"
    assert gct.HookState(spec="sign:scale=mean").strategy == "allgather"
    assert gct.HookState(spec="fp16").strategy == "dense"
    assert gct.HookState(spec="powersgd").strategy == "powersgd"
    s = gct.HookState(spec="topk", seed=3)
    s.step = 5
    d = s.state_dict()
    t = gct.HookState(spec="topk", seed=3)
    t.load_state_dict(d)
    assert t.step == 5
    with pytest.raises(ValueError):
        gct.HookState(spec="topk", seed=4).load_state_dict(d)
    with pytest.raises(ValueError):
        gct.HookState(spec="qsgd", seed=3).load_state_dict(d)
    # Every strategy has a CUDA path, PowerSGD's phases included.
    assert gct.HookState(spec="powersgd", backend="cuda").backend == "cuda"
    assert gct.HookState(spec="powersgd", strategy="allgather", backend="cuda").backend == "cuda"


def test_collective_backend_per_device_type(monkeypatch):
    for name, cpu, cuda in [("gloo", "gloo", "gloo"), ("nccl", "nccl", "nccl"),
                            ("cpu:gloo,cuda:nccl", "gloo", "nccl")]:
        monkeypatch.setattr(gct.dist, "get_backend", lambda group=None, name=name: name)
        assert gct._backend_of(None, "cpu") == cpu and gct._backend_of(None, "cuda") == cuda
    # A CPU bucket never takes the CUDA path; backend="cuda" says why it cannot.
    state = gct.HookState(spec="topk")
    assert not state._on_device(torch.device("cpu"))
    with pytest.raises(ValueError):
        gct.HookState(spec="topk", backend="cuda")._on_device(torch.device("cpu"))
    # With NCCL and the CUDA backend, CUDA buckets run on the GPU, except for nonfinite=error
    # specs (their check scans on the host): backend="auto" takes the host path for them.
    monkeypatch.setattr(gct._gc, "backend_available", lambda name: True)
    gpu = torch.device("cuda", 0)
    for spec in ("topk", "powersgd:rank=2"):
        assert gct.HookState(spec=spec)._on_device(gpu)
        assert not gct.HookState(spec=spec + ",nonfinite=error" if ":" in spec
                                 else spec + ":nonfinite=error")._on_device(gpu)
    with pytest.raises(ValueError):
        gct.HookState(spec="topk:nonfinite=error", backend="cuda")._on_device(gpu)
