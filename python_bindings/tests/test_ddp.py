# SPDX-License-Identifier: Apache-2.0
"""The DDP communication hook over gloo with 2 and 4 ranks: for every codec, the gradient
the hook writes back equals what the library computes for the same inputs.

Each rank's gradients are known: the model's loss is sum(param * c) with coefficients c
drawn from (rank, iteration, parameter), so every rank can rebuild every other rank's
bucket. The test records each hook call (bucket index, step, parameters, result) and
replays it with gradcodec.encode / decode / the PowerSGD phases, keeping its own residuals
(four iterations: error feedback, the step counter and DDP's bucket rebuild after the
first iteration all take part). Coefficients are multiples of 1/32 in [-2, 2], so the
dense sums (fp16, bf16, randomk values) are exact in any order; PowerSGD's allreduced
P and Q are rounded sums, which with 4 ranks gloo may add in another order than the
replay, so there the comparison has a tolerance (with 2 ranks it is exact).

The same cases run over NCCL on CUDA buckets (one rank per GPU, at most 2; a 1-rank group
on a machine with one GPU), where the hook encodes and decodes on the GPU: the result must
equal the same CPU replay, since the CUDA backend writes the CPU backend's bytes."""

import datetime
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

ITERATIONS = 4
# A rank that fails leaves the others in a collective: bound the wait.
TIMEOUT = datetime.timedelta(seconds=120)
SHAPES = [(24, 16), (24,), (8, 3, 2, 2), (8, 24), (8,)]

# (spec, HookState keyword arguments, DDP bucket_cap_mb)
CASES = [
    ("topk:ratio=0.05", {}, 25),  # one frame per bucket (the sparsifiers' default)
    ("topk:ratio=0.05", {"per_tensor": True}, 25),  # one per parameter, 1-D ones dense
    ("topk:ratio=0.05", {"momentum": 0.9}, 25),  # DGC's momentum correction and masking
    ("topk:ratio=0.05", {"warmup_steps": 2}, 25),  # two dense steps first
    ("topk:ratio=0.05", {"warmup_steps": 2, "warmup": "ramp"}, 25),
    ("dgc:ratio=0.02", {}, 25),
    ("randomk:ratio=0.1", {}, 25),
    ("randomk:ratio=0.1", {"per_tensor": True}, 25),
    ("randomk:ratio=0.1,unbiased=1", {"strategy": "allgather"}, 25),
    ("threshold:tau=1.5", {}, 25),
    ("threshold:tau=1.5", {"per_tensor": True}, 25),  # a size per segment
    ("threshold:tau=100", {}, 25),  # nothing passes: empty payloads must not hang
    ("qsgd:levels=7", {}, 25),  # max norm: error feedback on
    ("qsgd:levels=7,norm=l2", {}, 25),  # not a contraction: error feedback off
    ("qsgd:levels=7", {"error_feedback": False, "min_numel": 100}, 25),
    ("qsgd:levels=7", {"momentum": 0.5, "per_tensor": False, "compress_1d": True}, 25),
    ("terngrad", {}, 25),
    ("minmax:bits=4", {}, 0.0005),  # small buckets: one per parameter or two
    ("minmax:bits=4", {"strategy": "two_phase"}, 25),
    ("onebit:bucket=64", {}, 25),
    ("sign:scale=none", {}, 25),  # majority vote
    ("sign:scale=mean,bucket=64", {}, 25),
    ("sign", {"strategy": "two_phase"}, 25),
    ("fp16", {}, 25),
    ("bf16", {}, 25),  # gloo cannot sum bfloat16: two phases of 16-bit frames
    ("powersgd:rank=2", {}, 25),
    ("powersgd:rank=2", {"momentum": 0.9}, 25),
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
        rec = {"index": bucket.index(), "step": state.step, "layout": gct._plan.layout(bucket),
               "ptrs": [p.data_ptr() for p in bucket.parameters()]}
        records.append(rec)

        def keep(fut):
            rec["out"] = fut.value().detach().clone()
            return fut.value()

        return gct.hook(state, bucket).then(keep)

    return recording


# --- the replay -----------------------------------------------------------------------


class Replay:
    """Computes, for every rank's known input, what the hook must return: the library's
    encodes and decodes per rank, written here from docs/python.md, not from the hook."""

    SPARSIFIERS = ("topk", "dgc", "randomk", "threshold")

    def __init__(self, spec, kwargs, world):
        self.state = gct.HookState(spec=spec, **kwargs)  # for its resolved settings only
        self.codec = self.state.codec
        self.world = world
        self.buckets = {}  # index -> (layout, per-bucket replay state)

    def bucket(self, index, layout):
        have = self.buckets.get(index)
        if have is None or have[0] != layout:
            have = (layout, {})
            self.buckets[index] = have
        return have[1]

    def codec_at(self, step):
        """(codec, dense) of a step: warm-up steps are dense, or ramp the kept fraction."""
        st = self.state
        if step >= st.warmup_steps:
            return self.codec, False
        if st.warmup == "ramp" and self.codec.name in ("topk", "dgc", "randomk"):
            ratio = self.codec.params["ratio"] ** ((step + 1) / (st.warmup_steps + 1))
            return gc.Codec(self.codec.name, **dict(self.codec.params, ratio=ratio)), False
        return self.codec, True

    def segments(self, shapes, index, vote=False, everything=False):
        """(offset, numel, rows, compressed, tensor_id) of the bucket's parameters."""
        st = self.state
        out, offset = [], 0
        for position, shape in enumerate(shapes):
            numel = int(np.prod(shape)) if shape else 1
            if numel == 0:
                continue
            dense = not (vote or everything) and (
                (len(shape) <= 1 and not st.compress_1d) or numel < st.min_numel)
            rows = shape[0] if len(shape) >= 2 else 0
            if not st.per_tensor and out and out[-1][3] == (not dense):
                o, m, _, c, t = out[-1]
                out[-1] = (o, m + numel, 0, c, t)
            else:
                out.append((offset, numel, rows, not dense, (index << 16) | position))
            offset += numel
        return out

    def expected(self, rec, inputs):
        st = self.bucket(rec["index"], rec["layout"])
        step = rec["step"]
        codec, dense = self.codec_at(step)
        kind = self.state.strategy
        if dense:
            return self.with_momentum(st, [(0, inputs[0].numel(), 0, False, 0)], inputs,
                                      lambda xs: sum(xs) / self.world)
        if kind == "powersgd":
            return self.powersgd(st, rec, inputs)
        if kind == "two_phase" or (kind == "dense" and codec.name == "bf16"):
            return self.two_phase(st, rec, codec, inputs)
        if kind == "dense" and codec.name == "fp16":
            return self.cast_sum(st, rec, codec, inputs)
        shapes = rec["layout"][2]
        segs = self.segments(shapes, rec["index"], vote=kind == "vote",
                             everything=kind == "dense")
        return self.with_momentum(st, segs, inputs,
                                  lambda xs: self.allgather(st, rec, codec, segs, xs))

    def with_momentum(self, st, segs, inputs, reduce):
        """DGC's momentum correction around a reduction: compressed segments send the
        local u = m·u + g, dense ones get u = m·u + mean(g) after it."""
        m = self.state.momentum
        if m == 0.0:
            return reduce(inputs)
        us = st.setdefault("u", [torch.zeros(inputs[0].numel()) for _ in inputs])
        sent = [x.clone() for x in inputs]
        for r, x in enumerate(inputs):
            for off, numel, _, compressed, _ in segs:
                sl = slice(off, off + numel)
                if compressed:
                    sent[r][sl] = m * us[r][sl] + x[sl]
        out = reduce(sent)
        mask = self.codec.name in self.SPARSIFIERS and self.state.error_feedback
        for r in range(len(inputs)):
            for off, numel, _, compressed, _ in segs:
                sl = slice(off, off + numel)
                if compressed:
                    us[r][sl] = sent[r][sl]
                    if mask:
                        us[r][sl][st["res"][r][sl] == 0] = 0.0
                else:
                    us[r][sl] = m * us[r][sl] + out[sl]
        for off, numel, _, compressed, _ in segs:
            if not compressed:
                out[off:off + numel] = us[0][off:off + numel]
        return out

    def residual(self, st, key, r, n):
        """Rank r's residual (key "res": the worker's, "server": the owner's in two_phase),
        None without error feedback."""
        if not self.state.error_feedback:
            return None
        return st.setdefault(key, {}).setdefault(r, torch.zeros(n))

    def encode(self, codec, x, res, tensor_id, step, rows=0):
        kw = dict(seed=self.state.seed, step=step, tensor_id=tensor_id)
        if codec.name == "powersgd" and rows:
            kw["rows"] = rows
        if res is not None:
            return gc.encode_with_feedback(codec, x, res, **kw)
        return gc.encode(codec, x, **kw)

    def allgather(self, st, rec, codec, segs, inputs):
        n = inputs[0].numel()
        res = [self.residual(st, "res", r, n) for r in range(self.world)]
        acc = torch.zeros(n)
        for off, numel, rows, compressed, tid in segs:
            sl = slice(off, off + numel)
            if not compressed:
                acc[sl] = sum(x[sl] for x in inputs) / self.world
                continue
            frames = [self.encode(codec, x[sl], None if res[r] is None else res[r][sl], tid,
                                  rec["step"], rows) for r, x in enumerate(inputs)]
            if self.state.strategy == "vote":
                acc[sl] = torch.from_numpy(gc.sign_majority_vote(frames))
            elif self.state.strategy == "dense":  # randomk: the values summed
                acc[sl] = self.values_sum(frames, numel)
            else:
                for f in frames:
                    gc.decode_accumulate(f, acc[sl], 1.0 / self.world)
        return acc

    def values_sum(self, frames, n):
        """randomk under "dense": the value sections summed (exact here), then frame 0
        decoded with the sums in place, as the hook does after its allreduce."""
        start = gc.header_bytes + 16
        count = gc.peek(frames[0]).count
        total = torch.zeros(count)
        for f in frames:
            total += torch.from_numpy(f[start:start + 4 * count].copy()).view(torch.float32)
        frame = frames[0].copy()
        frame[start:start + 4 * count] = total.view(torch.uint8).numpy()
        acc = torch.zeros(n)
        gc.decode_accumulate(frame, acc, 1.0 / self.world)
        return acc

    def cast_sum(self, st, rec, codec, inputs):
        """fp16 under "dense": x / W cast, the 16-bit values summed, decoded."""
        n = inputs[0].numel()
        frames = [self.encode(codec, x / self.world, self.residual(st, "res", r, n),
                              rec["index"], rec["step"]) for r, x in enumerate(inputs)]
        total = torch.zeros(n)
        for f in frames:
            raw = torch.from_numpy(f[gc.header_bytes:gc.header_bytes + 2 * n].copy())
            total += raw.view(torch.float16).to(torch.float32)
        frame = frames[0].copy()
        frame[gc.header_bytes:gc.header_bytes + 2 * n] = \
            total.to(torch.float16).view(torch.uint8).numpy()
        out = torch.zeros(n)
        gc.decode(frame, out)
        return out

    def two_phase(self, st, rec, codec, inputs):
        """Chunk c of every rank decode-accumulated by rank c, re-encoded (its own
        residual under error feedback), decoded by everyone."""
        n, w, index = inputs[0].numel(), self.world, rec["index"]
        lo = [c * n // w for c in range(w + 1)]
        out = torch.zeros(n)
        for c in range(w):
            sl = slice(lo[c], lo[c + 1])
            acc = torch.zeros(lo[c + 1] - lo[c])
            for r, x in enumerate(inputs):
                res = self.residual(st, "res", r, n)
                f = self.encode(codec, x[sl], None if res is None else res[sl],
                                (index << 16) | c, rec["step"])
                gc.decode_accumulate(f, acc, 1.0 / w)
            f = self.encode(codec, acc, self.residual(st, "server", c, acc.numel()),
                            (index << 16) | 0x8000 | c, rec["step"])
            gc.decode(f, out[sl])
        return out

    def powersgd(self, st, rec, inputs):
        shapes = rec["layout"][2]
        segs, offset = [], 0
        for shape in shapes:
            numel = int(np.prod(shape))
            rows = shape[0] if len(shape) >= 2 else 0
            segs.append((offset, numel, rows, bool(rows) and gc.powersgd_compresses(
                self.codec, rows, numel // max(rows, 1)), 0))
            offset += numel
        return self.with_momentum(st, segs, inputs,
                                  lambda xs: self.powersgd_reduce(st, rec, xs))

    def powersgd_reduce(self, st, rec, inputs):
        codec, world = self.codec, self.world
        shapes = rec["layout"][2]
        if "mats" not in st:
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
    if state.momentum and state.codec.name in Replay.SPARSIFIERS and state.error_feedback:
        # DGC's factor masking: the momentum is zero wherever the last step sent the value.
        for b in state._buckets.values():
            assert not torch.any(b.momentum[b.residual == 0] != 0), f"{spec}: momentum not masked"
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
                            world_size=world, timeout=TIMEOUT)
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
                            world_size=world, timeout=TIMEOUT)
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
    assert gct.HookState(spec="sign:scale=none").strategy == "vote"
    assert gct.HookState(spec="sign").strategy == "allgather"  # scaled (l2) by default
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


def test_error_feedback_follows_the_codec_bounds():
    # On where the codec keeps the residual bounded, off where it would amplify.
    for spec, on in [("topk", True), ("qsgd", True), ("qsgd:norm=l2", False), ("terngrad", False),
                     ("randomk", True), ("randomk:unbiased=1", False), ("sign:scale=none", False),
                     ("onebit", True), ("bf16", True), ("powersgd", True)]:
        state = gct.HookState(spec=spec)
        assert state.error_feedback == on, spec
        assert state.error_feedback == gc.Codec(spec).bounds()["feedback_safe"], spec
    # Forcing it on an unsafe codec warns once, with the reason.
    gct._warned.clear()
    with pytest.warns(UserWarning, match="l2 norm"):
        assert gct.HookState(spec="qsgd:norm=l2", error_feedback=True).error_feedback
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gct.HookState(spec="qsgd:norm=l2", error_feedback=True)  # no second warning
        gct.HookState(spec="topk", error_feedback=True)  # safe: none
    assert not gct.HookState(spec="topk", error_feedback=False).error_feedback
    with pytest.raises(ValueError):
        gct.HookState(spec="topk", nonfinite="ignore")
    with pytest.raises(ValueError):
        gct.HookState(spec="topk", momentum=1.0)
    with pytest.raises(ValueError):
        gct.HookState(spec="topk", warmup="linear")


# --- non-finite gradients, the 16-bit wire over gloo, threads ---------------------------

NONFINITE_CASES = ["topk:ratio=0.05", "qsgd", "fp16", "bf16", "randomk:ratio=0.1",
                   "powersgd:rank=2", "sign:scale=none", "minmax:bits=4@two_phase"]
BAD_RANK, BAD_STEP = 1, 2  # after DDP's bucket rebuild (which resets the hook's state)


def nonfinite_case(rank, world, spec, nonfinite):
    """Four steps; at BAD_STEP rank BAD_RANK's gradient holds a NaN."""
    strategy = None
    if "@" in spec:
        spec, strategy = spec.split("@")
    model = Known()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = gct.HookState(spec=spec, seed=7, nonfinite=nonfinite, strategy=strategy)
    ddp.register_comm_hook(state, gct.hook)
    before = None
    for it in range(4):
        ddp.zero_grad()
        c = coeffs(rank, it)
        if it == BAD_STEP and rank == BAD_RANK:
            c[0] = c[0].clone()
            c[0].view(-1)[3] = float("nan")
        if it == BAD_STEP:
            before = {i: {k: None if getattr(b, k) is None else getattr(b, k).clone()
                          for k in ("residual", "m")} for i, b in state._buckets.items()}
        try:
            ddp(c).backward()
        except RuntimeError as e:
            assert nonfinite == "raise" and it == BAD_STEP, f"{spec} {nonfinite}: {e}"
            assert "NonFiniteGradient" in str(e) and "not finite" in str(e), str(e)
            assert f"rank {BAD_RANK}" in str(e) or "1 of" in str(e), str(e)
            return "raised"
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        if it == BAD_STEP:
            assert nonfinite != "raise", f"{spec}: nothing raised"
            if nonfinite == "skip":
                assert torch.count_nonzero(grads) == 0, spec
            else:
                assert torch.isnan(grads).all(), spec
            assert state.skipped == 1
            if rank == BAD_RANK:
                # The bad gradient entered no state: the residuals are as before the step.
                for i, b in state._buckets.items():
                    for k, old in before[i].items():
                        if old is not None:
                            assert torch.equal(getattr(b, k), old), f"{spec}: {k} changed"
        else:
            assert torch.isfinite(grads).all(), f"{spec} {nonfinite} step {it}: not finite"
        for b in state._buckets.values():
            for k in ("residual", "m", "q", "momentum"):
                t = getattr(b, k)
                assert t is None or torch.isfinite(t).all(), f"{spec}: {k} poisoned"
    return "finished"


def nonfinite_worker(rank, world, init_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=TIMEOUT)
    try:
        for spec in NONFINITE_CASES:
            for nonfinite in gct.NONFINITE:
                outcome = nonfinite_case(rank, world, spec, nonfinite)
                assert outcome == ("raised" if nonfinite == "raise" else "finished"), spec
                # Every rank took the same decision.
                flags = [torch.zeros(1) for _ in range(world)]
                dist.all_gather(flags, torch.tensor([1.0 if outcome == "raised" else 0.0]))
                assert len({float(f) for f in flags}) == 1, f"{spec} {nonfinite}: ranks differ"
    finally:
        dist.destroy_process_group()


def test_a_nonfinite_gradient_gets_the_same_decision_on_every_rank():
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(nonfinite_worker, args=(3, os.path.join(tmp, "init")), nprocs=3)


def wire_bytes(rank, spec):
    # A function of its own: the DDP object (which holds the process group) must be gone
    # before destroy_process_group, or its destructor can wait on peers that have left.
    model = Known()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = gct.HookState(spec=spec, threads=1)
    ddp.register_comm_hook(state, gct.hook)
    ddp(coeffs(rank, 0)).backward()
    return state.bytes_sent, state.dense_bytes


def wire_worker(rank, world, init_file, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=TIMEOUT)
    try:
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = {spec: wire_bytes(rank, spec)
                   for spec in ("bf16", "fp16", "topk:ratio=0.05", "topk:ratio=0.5")}
        out["threads"] = gc.cpu_default_threads()
        out["warnings"] = [str(w.message) for w in caught if "all-gathered" in str(w.message)]
        if rank == 0:
            queue.put(out)
    finally:
        dist.destroy_process_group()


def test_16_bit_codecs_send_16_bits_over_gloo_and_threads_follow_the_hook():
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(wire_worker, args=(4, os.path.join(tmp, "init"), queue), nprocs=4)
    out = queue.get()
    n = sum(int(np.prod(s)) for s in SHAPES)
    for spec in ("bf16", "fp16"):
        sent, dense = out[spec]
        assert dense == 2 * 3 * 4 * n // 4  # DDP's float32 ring allreduce
        # Half of it, plus frame headers (bf16: two phases of frames; fp16: one element).
        assert dense / 2 <= sent <= dense / 2 + 2 * 4 * (gc.header_bytes + 32), (spec, out)
    assert out["topk:ratio=0.05"][0] < out["bf16"][0]
    assert out["threads"] == 1
    # Top-k at half the elements, all-gathered over 4 ranks, sends more than dense: one
    # warning that says so, and none for the ratio that saves.
    assert out["topk:ratio=0.5"][0] > out["topk:ratio=0.5"][1]
    assert len(out["warnings"]) == 1 and "topk:ratio=0.5" in out["warnings"][0], out["warnings"]
    assert "smaller one" in out["warnings"][0]


def test_the_finiteness_check_sees_every_non_finite_value():
    """The hook's scan (min and max of the bucket) finds a NaN or an infinity anywhere, in
    every dtype a bucket can have, and passes finite and empty buckets."""
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.linspace(-3.0e4, 3.0e4, 1001).to(dtype)
        assert gct._all_finite(x), dtype
        assert gct._all_finite(x[:0]), dtype
        for bad in (float("nan"), float("inf"), -float("inf")):
            for at in (0, 500, 1000):
                y = x.clone()
                y[at] = bad
                assert not gct._all_finite(y), (dtype, bad, at)
