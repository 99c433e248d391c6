# SPDX-License-Identifier: Apache-2.0
"""PyTorch DistributedDataParallel communication hook running gradcodec codecs.

::

    import gradcodec.torch as gct
    state = gct.HookState(spec="topk:ratio=0.01")
    ddp_model.register_comm_hook(state, gct.hook)

Every rank must build the HookState with the same arguments. The gradient written back
into each bucket is the mean over ranks, bit-identical on every rank. docs/python.md, "The
DDP communication hook", defines every option; in short:

- **Error feedback** follows the codec's bounds (``gradcodec.Codec.bounds``): on where it
  keeps the residual bounded, off where it would amplify the codec's error (QSGD with the
  L2 norm, TernGrad, unbiased random-k, unscaled sign). ``error_feedback=True`` on such a
  codec warns once with the reason.
- **Per-tensor selection** (by default for every codec but the sparsifiers, which
  measured better selecting over the bucket): each parameter of a bucket is its own
  frame, with its own k, its own scale buckets and tensor id, so parameters with small
  gradients are not starved by larger ones; then **1-D parameters** (biases, norm scales)
  and parameters with fewer than ``min_numel`` elements travel dense (float32, averaged
  exactly).
- **Warm-up**: the first ``warmup_steps`` steps dense (``warmup="dense"``) or, for the
  sparsifiers, with DGC's exponential ramp of the kept fraction (``warmup="ramp"``).
- **Momentum correction** (``momentum=m``, DGC): the hook keeps the momentum
  u = m·u + g and compresses u (with error feedback; sparsifiers also zero u where it was
  sent); the optimizer must then run without momentum.
- **Non-finite gradients**: a bucket in which any rank's gradient holds NaN or Inf is not
  reduced; every rank makes the same decision (``nonfinite="raise"``: every rank raises
  :class:`NonFiniteGradient`; ``"skip"``: the bucket's gradient is zero; ``"propagate"``:
  it is NaN, for loss scalers), and no error-feedback state absorbs the bad step.
- **Threads**: the library's CPU threads follow ``torch.get_num_threads()`` (or
  ``threads``), so ranks that share a machine do not oversubscribe it.

Strategies (``strategy=None`` picks by codec): ``allgather`` (every codec: frames
all-gathered, decode-accumulated in rank order), ``dense`` (fp16/bf16 casts and random-k:
the 16-bit or k values are summed; bf16 over gloo, which cannot sum bfloat16, reduces in
two phases so that only 16-bit values travel), ``two_phase`` (fixed-size codecs: chunks
all-to-all, reduced and re-encoded by their owner, all-gathered), ``powersgd`` and
``vote`` (unscaled sign: the majority vote).

The collectives of a bucket are issued from the hook's thread in bucket order (DDP calls
the hook in bucket order on every rank); the last one is asynchronous and the decoding
runs in its completion callback. CUDA buckets on an NCCL process group run on the GPU when
gradcodec has its CUDA backend; other CUDA buckets are copied to the host for the codec.
"""

import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _auto
from . import _gradcodec as _gc
from . import _hook_plan as _plan
from ._errors import Error
from ._outer import OuterSync

__all__ = ["HookState", "hook", "NonFiniteGradient", "OuterSync", "STRATEGIES", "default_strategy"]

STRATEGIES = ("allgather", "dense", "two_phase", "powersgd", "vote")
NONFINITE = ("raise", "skip", "propagate")
WARMUP = ("dense", "ramp")

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_PREAMBLE = 16  # bytes before a rank's frames in an all-gather: byte 0 = non-finite flag
_STATE_VERSION = 2
_warned: set = set()


class NonFiniteGradient(Error):
    """A bucket's gradient held NaN or Inf on some rank (raised on every rank)."""


def default_strategy(codec: _gc.Codec) -> str:
    """The strategy HookState uses for a codec when none is given."""
    traits, collectives = codec.traits, codec.collectives
    if traits["matrix"]:
        return "powersgd"
    if collectives["dense"]:
        return "dense"
    if collectives["majority_vote"] and codec.params.get("scale") == "none":
        return "vote"
    if traits["block_scaled"]:
        # Reduce-scatter, f32 sum, requantize, all-gather: the bytes of two quantized
        # passes whatever the world size, the path FP8 collectives take elsewhere.
        return "two_phase"
    return "allgather"


def _check_strategy(codec: _gc.Codec, strategy: str) -> None:
    traits, collectives = codec.traits, codec.collectives
    allowed = {
        "allgather": True,
        # The frames' values summed as they are (casts; random-k's shared indices).
        "dense": collectives["dense"] and not traits["matrix"],
        # Fixed-size frames (the chunks' sizes are known), and a mean to re-encode.
        "two_phase": not traits["size_from_data"] and not traits["matrix"]
        and default_strategy(codec) != "vote",
        "powersgd": traits["matrix"],
        "vote": collectives["majority_vote"],
    }
    if strategy not in allowed:
        raise ValueError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")
    if not allowed[strategy]:
        raise ValueError(f"strategy {strategy!r} does not apply to codec {codec.name!r}")


def _all_finite(x: torch.Tensor) -> bool:
    """Whether every value of x is finite: its min and max are (NaN propagates into both).
    One reduction without a mask tensor: 16x faster than isfinite(x).all() on a CPU."""
    if x.numel() == 0:
        return True
    if x.dtype == torch.float16 and x.device.type == "cpu":  # no CPU aminmax for half
        return bool(torch.isfinite(x).all())
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def _strategy_allowed(codec: _gc.Codec, strategy: str) -> bool:
    try:
        _check_strategy(codec, strategy)
    except ValueError:
        return False
    return True


def _backend_of(pg: Optional[Any], device_type: str) -> str:
    """The collective backend that serves tensors of a device type: "nccl", "gloo", ...
    (a group made with e.g. backend="cpu:gloo,cuda:nccl" names one per device type)."""
    name = str(dist.get_backend(pg)).lower()
    for part in name.split(","):
        dev, sep, backend = part.partition(":")
        if sep and dev.strip() == device_type:
            return backend.strip()
    return name


def _align(n: int) -> int:
    return (n + 15) & ~15


def _allgather_wire(nbytes: int, world: int) -> int:
    return (world - 1) * nbytes


def _allreduce_wire(nbytes: int, world: int) -> int:
    return 2 * (world - 1) * nbytes // world


class _Bucket:
    """Per-bucket state: the layout it belongs to, residuals, momentum, buffers."""

    def __init__(self, layout: Tuple) -> None:
        self.layout = layout
        self.residual: Optional[torch.Tensor] = None  # f32, n (worker error feedback)
        self.server: Optional[torch.Tensor] = None  # f32, this rank's chunk (two_phase)
        self.momentum: Optional[torch.Tensor] = None  # f32, n (momentum correction)
        self.send: Optional[torch.Tensor] = None  # uint8 message buffer, reused every step
        self.segments: Optional[List[_plan.Segment]] = None
        # The header every rank's frame of a segment must have, per codec spec (from this
        # rank's first frame): decodes check against it instead of reading headers first.
        self.expected: Dict[Tuple[str, int], Any] = {}
        # PowerSGD: flat Q and M (residual) of the compressed matrices, P of the matrices
        # followed by the dense tensors; the plan maps parameters onto them.
        self.q: Optional[torch.Tensor] = None
        self.m: Optional[torch.Tensor] = None
        self.p: Optional[torch.Tensor] = None
        self.matrices: List[Any] = []
        self.dense: List[Tuple[int, int, int]] = []  # (bucket offset, numel, offset in p)


class HookState:
    """State of the gradcodec DDP communication hook (pass it to register_comm_hook).

    Args:
        spec: codec spec string or gradcodec.Codec (docs/codecs.md), the same on all ranks;
            or "auto": per bucket, the configuration the planner predicts fastest among
            ``candidates`` and dense (docs/planner.md). The first hook call then calibrates
            over the process group (collective, a few seconds) unless ``profile`` is given.
        candidates: with spec="auto", the codecs you accept for fidelity (spec strings or
            Codecs; default ``gradcodec._auto.DEFAULT_CANDIDATES``). The float32 mean and
            bf16 are always candidates.
        profile: with spec="auto", a profile from ``gradcodec calibrate`` (a path, its JSON
            text or a dict) instead of calibrating.
        margin: with spec="auto", how much faster a codec must be predicted than dense.
        replan_every: with spec="auto", every this many steps the ranks agree on how far
            each bucket's measured call time drifted from its prediction and plan the
            drifted buckets again (0: never).
        process_group: the group to reduce over (None: the default group).
        error_feedback: None (default): on when the codec's bounds keep the residual
            bounded (``Codec.bounds().feedback_safe``), else off; True/False force it
            (True on an unsafe codec warns once).
        seed: the shared seed of every random decision, the same on all ranks.
        strategy: "allgather", "dense", "two_phase", "powersgd" or "vote"; None picks by
            codec (see the module documentation).
        backend: gradcodec backend for encode/decode: "auto" (CUDA for CUDA buckets on an
            NCCL group when the CUDA backend is available, else the CPU), "cuda" (the same,
            but an error where the CUDA path cannot be taken), "reference" or "cpu".
        per_tensor: one frame per parameter of the bucket (selection and scales per
            tensor); False compresses runs of consecutive parameters as one. None: False
            for the sparsifiers (topk, dgc, randomk, threshold select over the bucket, which
            trained better in the convergence suite), True for the other codecs.
        compress_1d: compress 1-D parameters too. None: not per_tensor (per-tensor frames
            send biases and norm scales dense; bucket-wide frames compress them).
        min_numel: parameters with fewer elements travel dense.
        warmup_steps: the first steps run dense ("dense") or with a ramp ("ramp").
        warmup: "dense", or "ramp" for the sparsifiers (kept fraction
            ratio^((t+1)/(warmup_steps+1)) at step t, DGC's schedule); others run dense.
        momentum: momentum correction (DGC): the hook keeps u = momentum·u + g per rank and
            compresses u; use the optimizer without momentum. 0 disables it.
        nonfinite: "raise", "skip" or "propagate": what every rank does with a bucket in
            which some rank's gradient is not finite.
        threads: CPU threads of the library's calls (None: torch.get_num_threads()).
    """

    def __init__(
        self,
        spec: Any = "topk:ratio=0.01",
        process_group: Optional[Any] = None,
        error_feedback: Optional[bool] = None,
        seed: int = 0,
        strategy: Optional[str] = None,
        backend: str = "auto",
        *,
        per_tensor: Optional[bool] = None,
        compress_1d: Optional[bool] = None,
        min_numel: int = 0,
        warmup_steps: int = 0,
        warmup: str = "dense",
        momentum: float = 0.0,
        nonfinite: str = "raise",
        threads: Optional[int] = None,
        candidates: Optional[List[Any]] = None,
        profile: Optional[Any] = None,
        margin: float = 0.05,
        replan_every: int = 100,
    ) -> None:
        self._auto: Optional[_auto.Planner] = None
        self._options = dict(process_group=process_group, error_feedback=error_feedback,
                             seed=seed, backend=backend, min_numel=min_numel,
                             nonfinite=nonfinite, threads=threads, momentum=momentum)
        if isinstance(spec, str) and spec == "auto":
            if strategy is not None or per_tensor is not None or warmup_steps:
                raise ValueError("spec='auto' chooses the strategy per bucket: strategy, "
                                 "per_tensor and warm-up do not apply")
            self._auto = _auto.Planner(candidates or _auto.DEFAULT_CANDIDATES, margin,
                                       profile, threads or 1, replan_every)
            self._subs: Dict[Tuple[str, str], "HookState"] = {}
            spec = "bf16"  # what the settings below describe until a bucket is planned
        elif candidates is not None or profile is not None:
            raise ValueError("candidates and profile apply to spec='auto' only")
        self.codec = spec if isinstance(spec, _gc.Codec) else _gc.Codec(spec)
        self.traits = self.codec.traits  # read per bucket and step: asked once
        self.process_group = process_group
        self.bounds = self.codec.bounds()
        self.error_feedback = self.bounds["feedback_safe"] if error_feedback is None \
            else bool(error_feedback)
        if self.error_feedback and not self.bounds["feedback_safe"] and \
                self.codec.spec not in _warned:
            _warned.add(self.codec.spec)
            warnings.warn(f"gradcodec: error feedback with {self.codec.spec} can amplify the "
                          f"codec's error: {self.bounds['reason']}", stacklevel=2)
        self.seed = int(seed)
        self.strategy = default_strategy(self.codec) if strategy is None else strategy
        _check_strategy(self.codec, self.strategy)
        self.backend = backend
        self.per_tensor = not self.traits["selects"] if per_tensor is None \
            else bool(per_tensor)
        self.compress_1d = (not self.per_tensor) if compress_1d is None else bool(compress_1d)
        self.min_numel = int(min_numel)
        if warmup not in WARMUP:
            raise ValueError(f"warmup must be one of {WARMUP}, not {warmup!r}")
        if int(warmup_steps) < 0:
            raise ValueError("warmup_steps must be >= 0")
        self.warmup_steps = int(warmup_steps)
        self.warmup = warmup
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError("momentum must be in [0, 1)")
        self.momentum = float(momentum)
        if nonfinite not in NONFINITE:
            raise ValueError(f"nonfinite must be one of {NONFINITE}, not {nonfinite!r}")
        self.nonfinite = nonfinite
        self.threads = threads
        self.step = 0
        self.bytes_sent = 0  # bytes this rank sent on the wire (docs/python.md, "Counters")
        self.dense_bytes = 0  # what DDP's float32 ring allreduce of the same buckets sends
        self.skipped = 0  # buckets not reduced because a gradient was not finite
        self._buckets: Dict[int, _Bucket] = {}
        self._specs: Dict[float, _gc.Codec] = {}
        self._always_dense = False  # the auto state's "uncompressed" choice

    # --- spec="auto" -------------------------------------------------------------------

    def plan_report(self) -> List[Dict[str, Any]]:
        """With spec="auto": per planned bucket, what was chosen and why (the predicted
        time, the planner's reason, the next alternatives)."""
        if self._auto is None:
            raise ValueError("plan_report() is for HookState(spec='auto')")
        return self._auto.report()

    def _sub_state(self, key: Tuple[str, str]) -> "HookState":
        sub = self._subs.get(key)
        if sub is None:
            spec, strategy = key
            if strategy == "uncompressed":
                sub = HookState("bf16", **self._options)
                sub._always_dense = True
            else:
                sub = HookState(spec, strategy=strategy, **self._options)
            self._subs[key] = sub
        return sub

    def _run_auto(self, bucket: dist.GradBucket) -> torch.futures.Future:
        start = time.perf_counter()
        world = dist.get_world_size(self.process_group)
        index, numel = int(bucket.index()), bucket.buffer().numel()
        auto = self._auto
        auto.calibrate(self.process_group, numel)
        if bucket.is_last() and auto.replan_every and self.step > 0 and \
                self.step % auto.replan_every == 0:
            auto.replan(self.process_group)
        plan = auto.choose(index, numel, world, _strategy_allowed,
                           lambda: _plan.layout(bucket)[2])
        sub = self._sub_state((plan["row"]["spec"], plan["strategy"]))
        sub.step = self.step
        if bucket.is_last():
            self.step += 1
        fut = sub._run(bucket)

        def count(f: torch.futures.Future) -> torch.Tensor:
            auto.observe(index, numel, time.perf_counter() - start)
            subs = self._subs.values()
            self.bytes_sent = sum(s.bytes_sent for s in subs)
            self.dense_bytes = sum(s.dense_bytes for s in subs)
            self.skipped = sum(s.skipped for s in subs)
            return f.value()

        return fut.then(count)

    # --- checkpointing ---------------------------------------------------------------

    _TENSORS = ("residual", "server", "momentum", "q", "m")

    def state_dict(self) -> Dict[str, Any]:
        """Residuals, momentum, PowerSGD Q and M, the step counter and the settings.
        Residuals and momentum are per rank: every rank saves and loads its own. With
        spec="auto": the profile, the plans and each chosen configuration's state."""
        if self._auto is not None:
            return {
                "version": _STATE_VERSION, "spec": "auto", "step": self.step,
                "profile": self._auto.profile,
                "plans": [(k, p) for k, p in self._auto.plans.items()],
                "replans": self._auto.replans,
                "drift": self._auto.drift_state(),
                "subs": [(k, sub.state_dict()) for k, sub in self._subs.items()],
            }
        buckets = {}
        for index, b in self._buckets.items():
            entry: Dict[str, Any] = {"layout": b.layout}
            for name in self._TENSORS:
                t = getattr(b, name)
                entry[name] = None if t is None else t.clone()
            buckets[index] = entry
        return {
            "version": _STATE_VERSION,
            "spec": self.codec.spec,
            "seed": self.seed,
            "strategy": self.strategy,
            "error_feedback": self.error_feedback,
            "momentum": self.momentum,
            "step": self.step,
            "bytes_sent": self.bytes_sent,
            "dense_bytes": self.dense_bytes,
            "skipped": self.skipped,
            "buckets": buckets,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a state_dict() saved with the same spec, seed, strategy and momentum. A
        bucket whose layout differs from the saved one when the hook next sees it starts
        afresh."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported HookState version {state.get('version')!r}")
        if (self._auto is not None) != (state.get("spec") == "auto"):
            raise ValueError(f"saved hook state has spec={state.get('spec')!r}, this one "
                             f"{'auto' if self._auto is not None else self.codec.spec!r}")
        if self._auto is not None:
            self.step = int(state["step"])
            self._auto.profile = state["profile"]
            self._auto.plans = {tuple(k): p for k, p in state["plans"]}
            self._auto.replans = int(state["replans"])
            self._auto.restore_drift(state.get("drift", ()))  # before 0.4.0: none saved
            self._subs = {}
            for key, sub_state in state["subs"]:
                self._sub_state(tuple(key)).load_state_dict(sub_state)
            return
        for key, mine in (("spec", self.codec.spec), ("seed", self.seed),
                          ("strategy", self.strategy), ("momentum", self.momentum)):
            if state[key] != mine:
                raise ValueError(f"saved hook state has {key}={state[key]!r}, this one {mine!r}")
        self.error_feedback = bool(state["error_feedback"])
        self.step = int(state["step"])
        self.bytes_sent = int(state["bytes_sent"])
        self.dense_bytes = int(state["dense_bytes"])
        self.skipped = int(state["skipped"])
        self._buckets = {}
        for index, entry in state["buckets"].items():
            b = _Bucket(tuple(entry["layout"]))
            for name in self._TENSORS:
                t = entry[name]
                setattr(b, name, None if t is None else t.detach().to("cpu", torch.float32).clone())
            self._buckets[int(index)] = b

    def reset(self) -> None:
        """Forgets every residual, momentum and PowerSGD Q; the step counter is kept."""
        self._buckets = {}

    # --- the hook ----------------------------------------------------------------------

    def _bucket_state(self, index: int, layout: Tuple) -> _Bucket:
        b = self._buckets.get(index)
        if b is None or b.layout != layout:
            b = _Bucket(layout)  # new, or DDP rebuilt its buckets: start afresh
            self._buckets[index] = b
        return b

    def _on_device(self, device: torch.device) -> bool:
        """Whether a bucket on `device` is encoded and decoded there (the CUDA path)."""
        nccl = device.type == "cuda" and _backend_of(self.process_group, "cuda") == "nccl"
        # nonfinite=error needs a host scan of the gradient, which the CUDA backend refuses.
        host_scan = self.codec.params.get("nonfinite") == "error"
        if self.backend == "cuda":
            if not nccl:
                raise ValueError(f"backend='cuda' needs CUDA buckets on an NCCL process group "
                                 f"(this bucket is on {device})")
            if host_scan:
                raise ValueError("backend='cuda' cannot check nonfinite=error (the check scans "
                                 "on the host): use backend='auto' or nonfinite=propagate")
            return True
        return nccl and self.backend == "auto" and not host_scan and _gc.backend_available("cuda")

    def _codec_at(self, step: int) -> Tuple[_gc.Codec, bool]:
        """The codec of this step and whether the step runs dense (warm-up)."""
        if self._always_dense:
            return self.codec, True
        if step >= self.warmup_steps:
            return self.codec, False
        # The ramp needs a kept fraction: top-k, DGC and random-k without an absolute k.
        if self.warmup == "dense" or "ratio" not in self.codec.params or \
                self.codec.params.get("k", 0) > 0:
            return self.codec, True
        base = float(self.codec.params["ratio"])
        ratio = base ** ((step + 1) / (self.warmup_steps + 1))
        codec = self._specs.get(ratio)
        if codec is None:
            codec = self._specs[ratio] = _gc.Codec(self.codec.name,
                                                   **dict(self.codec.params, ratio=ratio))
        return codec, False

    def _run(self, bucket: dist.GradBucket) -> torch.futures.Future:
        if self._auto is not None:
            return self._run_auto(bucket)
        buf = bucket.buffer()
        if buf.dtype not in _DTYPES:
            raise TypeError(f"gradcodec hooks take float32/float16/bfloat16 gradients, "
                            f"not {buf.dtype}")
        threads = self.threads if self.threads is not None else torch.get_num_threads()
        if _gc.cpu_default_threads() != threads:
            _gc.set_cpu_default_threads(threads)  # also for the PowerSGD phases and the vote
        index = int(bucket.index())
        step = self.step
        if bucket.is_last():
            self.step += 1
        b = self._bucket_state(index, _plan.layout(bucket))
        world = dist.get_world_size(self.process_group)
        device = buf.device
        x = buf.detach()
        if not self._on_device(device) and device.type != "cpu":
            x = x.to("cpu")
        self.dense_bytes += _allreduce_wire(4 * x.numel(), world)
        bad = not _all_finite(x)
        codec, dense = self._codec_at(step)
        ctx = _Step(self, b, codec, step, index, world, device, bad)
        if dense:
            work, finish = _dense_f32(ctx, x)
        elif self.strategy == "powersgd":
            work, finish = _powersgd(ctx, bucket, x)
        elif self.strategy == "dense":
            if codec.name == "bf16" and _backend_of(self.process_group, device.type) == "gloo":
                work, finish = _two_phase(ctx, x)  # gloo cannot sum bfloat16
            else:
                work, finish = _dense(ctx, x)
        elif self.strategy == "two_phase":
            work, finish = _two_phase(ctx, x)
        else:
            work, finish = _allgather(ctx, x)

        def done(fut: torch.futures.Future) -> torch.Tensor:
            fut.value()  # raises if the collective failed
            result, bad = finish()
            if bad:
                result = ctx.settle(result, bad)
            else:
                ctx.commit(result)
            buf.copy_(result)
            return buf

        return work.get_future().then(done)


class _Step:
    """What one bucket's collectives share: settings, context, the non-finite decision."""

    def __init__(self, state: HookState, b: _Bucket, codec: _gc.Codec, step: int, index: int,
                 world: int, device: torch.device, bad: bool) -> None:
        self.state, self.b, self.codec, self.step, self.index = state, b, codec, step, index
        self.world, self.device, self.bad = world, device, bad
        self.pg = state.process_group
        self.backend = state.backend
        self.ef = state.error_feedback and not bad  # a bad gradient must not enter a residual
        # Callables that give this step's error-feedback contributions back to their
        # residuals when the bucket is not reduced (non-finite somewhere).
        self.undo: List[Callable[[], None]] = []
        # Momentum correction: this step's u, kept only when the bucket is reduced.
        self.new_momentum: Optional[torch.Tensor] = None
        self.segs: List[_plan.Segment] = []  # the strategy's segments of the bucket

    def buffer(self, name: str, n: int, where: torch.device) -> torch.Tensor:
        """The bucket's float32 state `name` ("residual", "server", "momentum") of n
        elements on `where`: zeros when new or of another size."""
        t = getattr(self.b, name)
        if t is None or t.numel() != n:
            t = torch.zeros(n, dtype=torch.float32, device=where)
        elif t.device != where:  # loaded from a state_dict, or moved
            t = t.to(where)
        setattr(self.b, name, t)
        return t

    def feedback(self, seg: _plan.Segment, n: int, where: torch.device):
        """The worker residual's slice of a segment under error feedback, else None."""
        return seg.of(self.buffer("residual", n, where)) if self.ef else None

    def compress_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the codec compresses: the gradient, zeros in place of a bad one (the same
        dtype, so every rank's frames have the same header), or with momentum correction
        the local momentum u = m·u + g of the compressed segments (float32)."""
        m = self.state.momentum
        if self.bad:
            return torch.zeros(x.shape, dtype=torch.float32 if m else x.dtype,
                               device=x.device)
        if m == 0.0:
            return x
        v = self.buffer("momentum", x.numel(), x.device).clone()
        for s in self.segs:
            if s.compressed:
                s.of(v).mul_(m).add_(s.of(x))
        self.new_momentum = v
        return v

    def mask_momentum(self) -> None:
        """DGC's factor masking: zero the momentum where the sparsifier sent it (there the
        residual is exactly zero after the encode)."""
        u, e = self.new_momentum, self.b.residual
        if u is None or not self.ef or not self.state.traits["selects"]:
            return
        for s in self.segs:
            if s.compressed:
                s.of(u).masked_fill_(s.of(e) == 0, 0.0)

    def commit(self, result: torch.Tensor) -> None:
        """The bucket was reduced: keep this step's momentum; the segments that travel
        dense get theirs after the mean, u = m·u + mean(g), sent on in place of the mean
        (the same on every rank)."""
        m = self.state.momentum
        if m == 0.0:
            return
        if self.new_momentum is not None:
            self.b.momentum = self.new_momentum
        u = self.buffer("momentum", result.numel(), result.device)
        for s in self.segs:
            if not s.compressed:
                s.of(u).mul_(m).add_(s.of(result))
                s.of(result).copy_(s.of(u))

    def encode(self, codec, x: torch.Tensor, res: Optional[torch.Tensor], out: torch.Tensor,
               tensor_id: int, rows: int = 0) -> torch.Tensor:
        kw = dict(seed=self.state.seed, step=self.step, tensor_id=tensor_id,
                  backend=self.backend)
        if rows and codec.traits["by_rows"]:  # the bucket's codec (they differ under "auto")
            kw["rows"] = rows
        if res is not None:
            frame = codec.encode_with_feedback(x, res, out=out, **kw)
            backend = self.backend
            # Gives the encoded part back to the residual: e + decode(frame) = p.
            self.undo.append(lambda: _gc.decode_accumulate(frame, res, 1.0, backend=backend))
            return frame
        return codec.encode(x, out=out, **kw)

    def expected(self, codec, seg_id: int, frame: torch.Tensor):
        key = (codec.spec, seg_id)
        e = self.b.expected.get(key)
        if e is None:
            e = self.b.expected[key] = _gc.peek(frame)  # one header copy per segment
        return e

    def settle(self, result: torch.Tensor, bad) -> torch.Tensor:
        """The bucket is not reduced: every rank takes the same decision. bad: the ranks
        whose gradient was not finite, or their number."""
        for give_back in self.undo:
            give_back()
        self.state.skipped += 1
        if self.state.nonfinite == "raise":
            who = f"{bad} of {self.world} ranks" if isinstance(bad, int) else \
                f"rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))}"
            raise NonFiniteGradient(
                f"gradcodec hook: the gradient of bucket {self.index} at step {self.step} is "
                f"not finite (NaN or Inf) on {who}; every rank stops here "
                f"(HookState(nonfinite='skip') zeroes such buckets, 'propagate' passes NaN "
                f"on, e.g. to a loss scaler)", _gc.StatusCode.nonfinite_input)
        fill = 0.0 if self.state.nonfinite == "skip" else float("nan")
        return torch.full_like(result, fill)


def _bad_ranks(flags) -> List[int]:
    return [r for r, f in enumerate(flags) if f]


def _dense_f32(ctx: _Step, x: torch.Tensor):
    """Warm-up: the float32 mean, as DDP's own allreduce (one more element: the count of
    ranks whose gradient is not finite)."""
    n = x.numel()
    wire = torch.empty(n + 1, dtype=torch.float32, device=ctx.device)
    if ctx.bad:
        wire[:n].zero_()
    else:
        wire[:n].copy_(x)
    wire[n] = 1.0 if ctx.bad else 0.0
    ctx.state.bytes_sent += _allreduce_wire(4 * (n + 1), ctx.world)
    ctx.segs = [_plan.Segment(0, n, 0, False, 0)]
    work = dist.all_reduce(wire, group=ctx.pg, async_op=True)

    def finish():
        return wire[:n].div_(ctx.world), int(wire[n].item())

    return work, finish


def _segments(ctx: _Step) -> List[_plan.Segment]:
    """The bucket's segments under allgather, vote and random-k's dense strategy (cached:
    the layout and the settings do not change). The vote and random-k's summed values
    compress every parameter: a vote of some and a mean of others differ, and dense
    values would need a collective of their own."""
    b, st = ctx.b, ctx.state
    if b.segments is None:
        everything = st.strategy in ("vote", "dense")
        b.segments = _plan.segments(b.layout[2], ctx.index, per_tensor=st.per_tensor,
                                    compress_1d=st.compress_1d or everything,
                                    min_numel=0 if everything else st.min_numel)
    return b.segments


def _warn_if_larger_than_dense(codec: _gc.Codec, world: int, length: int, n: int) -> None:
    """All-gathered frames grow with the world: each rank receives every other rank's, so a
    top-k frame saves about 1/(world·ratio) of a float32 ring allreduce, and a ratio that
    saves 3.6x on 4 ranks sends more than dense on 15. Warns once per spec and world."""
    key = (codec.spec, world)
    if _allgather_wire(length, world) <= _allreduce_wire(4 * n, world) or key in _warned:
        return
    _warned.add(key)
    hint = {"threshold": "; a larger tau keeps fewer elements"}.get(
        codec.name, "; all-gathered, a ratio saves about 1/(world*ratio): choose a smaller one"
        if codec.traits["selects"] else "")
    warnings.warn(f"gradcodec: {codec.spec} all-gathered over {world} ranks sends "
                  f"{_allgather_wire(length, world)} bytes for a bucket that a float32 "
                  f"allreduce sends in {_allreduce_wire(4 * n, world)}{hint}", stacklevel=2)


def _allgather(ctx: _Step, x: torch.Tensor):
    """Each rank's frames (and dense values) in one message, all-gathered; every rank
    decode-accumulates them in rank order."""
    codec, world = ctx.codec, ctx.world
    b, segs = ctx.b, _segments(ctx)
    ctx.segs = segs
    n = x.numel()
    src = ctx.compress_input(x)
    dtype = _DTYPES[src.dtype]
    by_rows = codec.traits["by_rows"]
    bounds = [_align(codec.encode_bound(s.numel, dtype, s.rows if by_rows else 0))
              if s.compressed else _align(4 * s.numel) for s in segs]
    capacity = _PREAMBLE + sum(bounds)
    if b.send is None or b.send.numel() < capacity or b.send.device != x.device:
        b.send = torch.zeros(capacity, dtype=torch.uint8, device=x.device)
    send = b.send
    send[:_PREAMBLE].zero_()
    send[0] = 1 if ctx.bad else 0
    sizes, offset, frames = [], _PREAMBLE, []
    for s, bound in zip(segs, bounds):
        out = send[offset:offset + bound]
        if s.compressed:
            f = ctx.encode(codec, s.of(src), ctx.feedback(s, n, x.device), out, s.tensor_id,
                           s.rows)
            size = int(f.numel())
            frames.append(f)
        else:
            out[:4 * s.numel].view(torch.float32).copy_(s.of(x) if not ctx.bad else 0.0)
            size = 4 * s.numel
            frames.append(None)
        sizes.append(size)
        offset += _align(size)
    ctx.mask_momentum()
    pg = ctx.pg
    if ctx.state.traits["size_from_data"]:  # the ranks' frames differ in size
        mine = torch.tensor(sizes, dtype=torch.int64, device=ctx.device)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine, group=pg)
        all_sizes = [[int(v) for v in g.tolist()] for g in gathered]
    else:
        all_sizes = [sizes] * world
    lengths = [_PREAMBLE + sum(_align(v) for v in sz) for sz in all_sizes]
    length = max(lengths)
    if length > send.numel():  # another rank's frames are larger than this one's bound
        grown = torch.zeros(length, dtype=torch.uint8, device=x.device)
        grown[:offset].copy_(send[:offset])
        send = b.send = grown
    msg = send[:length]
    msg[offset:].zero_()  # padding up to the longest message
    ctx.state.bytes_sent += _allgather_wire(length, world)
    _warn_if_larger_than_dense(codec, world, length, n)
    msg = msg.to(ctx.device)  # a no-op on the CUDA path and for CPU buckets
    recv = [torch.empty(length, dtype=torch.uint8, device=ctx.device) for _ in range(world)]
    work = dist.all_gather(recv, msg, group=pg, async_op=True)
    vote = ctx.state.strategy == "vote"
    backend = ctx.backend
    where = x.device  # where the codec runs: the GPU on the CUDA path, else the host
    expected = [ctx.expected(codec, i, f) if f is not None else None
                for i, f in enumerate(frames)]

    def finish():
        msgs = [r.to(where) for r in recv]
        if where.type == "cuda":
            # The callback runs on another stream than the one recv was allocated on:
            # keep torch's allocator from reusing recv before the decodes have read it.
            stream = torch.cuda.current_stream(where)
            for r in recv:
                r.record_stream(stream)
        flags = [int(m[0].item()) for m in msgs]
        acc = torch.zeros(n, dtype=torch.float32, device=where)
        verdicts = torch.empty((world * len(segs), 16), dtype=torch.uint8, device=where)
        v = 0
        offsets = [_PREAMBLE] * world
        for i, s in enumerate(segs):
            parts = []
            for r in range(world):
                size = all_sizes[r][i]
                parts.append(msgs[r][offsets[r]:offsets[r] + size])
                offsets[r] += _align(size)
            if vote:
                host = [p.to("cpu") for p in parts]
                s.of(acc).copy_(torch.from_numpy(_gc.sign_majority_vote(host)).to(where))
            elif s.compressed:
                for p in parts:
                    # Each decode checks its frame against the expected header where the
                    # frame is and leaves a verdict there: one look at all of them at the
                    # end, instead of a host wait for each frame's header on the GPU.
                    _gc.decode_accumulate_expected(expected[i], p, s.of(acc), verdicts[v],
                                                   1.0 / world, backend=backend)
                    v += 1
            else:
                total = s.of(acc)
                for p in parts:  # the exact float32 mean, in rank order
                    total.add_(p.view(torch.float32))
                total.div_(world)
        _gc.check_verdicts(verdicts[:v].cpu())
        return acc, _bad_ranks(flags)

    return work, finish


def _dense(ctx: _Step, x: torch.Tensor):
    """fp16/bf16: the 16-bit values summed by one allreduce; randomk: the k values of each
    segment (every rank draws the same indices). One more element counts the ranks whose
    gradient is not finite."""
    codec, world = ctx.codec, ctx.world
    n = x.numel()
    randomk = codec.name == "randomk"
    if randomk:
        segs = ctx.segs = _segments(ctx)
        src = ctx.compress_input(x)
        wire_dtype = torch.float32 if src.dtype == torch.float32 else x.dtype
    else:
        # Divide first so the 16-bit sum cannot overflow where the mean fits.
        segs = ctx.segs = [_plan.Segment(0, n, 0, True, ctx.index)]
        src = ctx.compress_input(x).to(torch.float32) / world
        wire_dtype = torch.float16 if codec.name == "fp16" else torch.bfloat16
    width = torch.empty((), dtype=wire_dtype).element_size()
    bounds = [codec.encode_bound(s.numel, _DTYPES[src.dtype]) for s in segs]
    frames = []
    for s, bound in zip(segs, bounds):
        out = torch.empty(bound, dtype=torch.uint8, device=x.device)
        frames.append(ctx.encode(codec, s.of(src), ctx.feedback(s, n, x.device), out,
                                 s.tensor_id))
    ctx.mask_momentum()
    start = _gc.header_bytes + (16 if randomk else 0)
    counts = [_gc.peek(f).count if randomk else s.numel for f, s in zip(frames, segs)]
    total = sum(counts)
    wire = torch.empty(total + 1, dtype=wire_dtype, device=x.device)
    pos = 0
    for f, c in zip(frames, counts):
        wire[pos:pos + c].copy_(f[start:start + c * width].view(wire_dtype))
        pos += c
    wire[total] = 1.0 if ctx.bad else 0.0
    sent = wire.to(ctx.device)  # the same tensor when the codec runs on the bucket's device
    ctx.state.bytes_sent += _allreduce_wire(sent.numel() * width, world)
    work = dist.all_reduce(sent, group=ctx.pg, async_op=True)
    backend = ctx.backend

    def finish():
        summed = sent.to(x.device)
        bad = int(summed[total].item())
        acc = torch.zeros(n, dtype=torch.float32, device=x.device)
        if bad:  # the frames stay as encoded: settle() gives them back to the residual
            return acc, bad
        pos = 0
        for f, c, s in zip(frames, counts, segs):
            f[start:start + c * width].view(wire_dtype).copy_(summed[pos:pos + c])
            pos += c
            if randomk:
                _gc.decode_accumulate(f, s.of(acc), 1.0 / world, backend=backend)
            else:
                _gc.decode(f, s.of(acc), backend=backend)
        return acc, 0

    return work, finish


def _two_phase(ctx: _Step, x: torch.Tensor):
    """Chunk c of every rank goes to rank c (all-to-all), which decode-accumulates them in
    rank order, re-encodes the mean (with its own residual under error feedback) and
    all-gathers it: the bytes of a ring allreduce of the codec's frames."""
    codec, world = ctx.codec, ctx.world
    n = x.numel()
    me = dist.get_rank(ctx.pg)
    lo = [c * n // world for c in range(world + 1)]
    segs = [_plan.Segment(lo[c], lo[c + 1] - lo[c], 0, True, (ctx.index << 16) | c)
            for c in range(world)]
    ctx.segs = segs
    src = ctx.compress_input(x)
    dtype = _DTYPES[src.dtype]
    lengths = [_PREAMBLE + _align(codec.encode_bound(s.numel, dtype)) for s in segs]
    send = torch.zeros(sum(lengths), dtype=torch.uint8, device=x.device)
    offset = 0
    for s, length in zip(segs, lengths):
        send[offset] = 1 if ctx.bad else 0
        ctx.encode(codec, s.of(src), ctx.feedback(s, n, x.device),
                   send[offset + _PREAMBLE:offset + length], s.tensor_id)
        offset += length
    ctx.mask_momentum()
    mine = lengths[me]
    recv = torch.empty(mine * world, dtype=torch.uint8, device=x.device)
    ctx.state.bytes_sent += sum(lengths) - mine
    dist.all_to_all_single(recv, send, output_split_sizes=[mine] * world,
                           input_split_sizes=lengths, group=ctx.pg)
    chunk = segs[me]
    acc = torch.zeros(chunk.numel, dtype=torch.float32, device=x.device)
    bad_in = []
    for r in range(world):
        m = recv[r * mine:(r + 1) * mine]
        bad_in.append(int(m[0].item()))
        f = m[_PREAMBLE:]
        _gc.decode_accumulate(f[:_gc.peek(f).frame_bytes], acc, 1.0 / world,
                              backend=ctx.backend)
    # The owner's re-encode: its own residual for its chunk under error feedback.
    longest = max(lengths)
    out = torch.zeros(longest, dtype=torch.uint8, device=x.device)
    out[0] = min(255, sum(bad_in))
    server = ctx.buffer("server", chunk.numel, x.device) if ctx.ef else None
    ctx.encode(codec, acc, server, out[_PREAMBLE:], (ctx.index << 16) | 0x8000 | me)
    ctx.state.bytes_sent += _allgather_wire(longest, world)
    recv2 = [torch.empty(longest, dtype=torch.uint8, device=x.device) for _ in range(world)]
    work = dist.all_gather(recv2, out, group=ctx.pg, async_op=True)
    backend = ctx.backend

    def finish():
        result = torch.empty(n, dtype=torch.float32, device=x.device)
        bad = max(int(m[0].item()) for m in recv2)  # every owner saw every rank's flag
        if bad:
            return result, bad
        for c, m in enumerate(recv2):
            f = m[_PREAMBLE:]
            _gc.decode(f[:_gc.peek(f).frame_bytes], segs[c].of(result), backend=backend)
        return result, 0

    return work, finish


def _plan_powersgd(ctx: _Step, bucket: Any, where: torch.device) -> None:
    # where: the device the phases run on (the bucket's GPU, or the host).
    codec, b, index = ctx.state.codec, ctx.b, ctx.index
    b.matrices, b.dense = [], []
    p_total = q_total = m_total = 0
    offset = 0
    dense: List[Tuple[int, int]] = []
    for position, param in enumerate(bucket.parameters()):
        numel = int(param.numel())
        if param.dim() >= 2 and numel > 0:
            rows = int(param.shape[0])
            cols = numel // rows
            if _gc.powersgd_compresses(codec, rows, cols):
                r = _gc.powersgd_rank(codec, rows, cols)
                b.matrices.append(_Matrix(offset, rows, cols, r, p_total, q_total, m_total,
                                          _plan.tensor_id(index, position)))
                p_total += rows * r
                q_total += cols * r
                m_total += rows * cols
                offset += numel
                continue
        dense.append((offset, numel))
        offset += numel
    if offset != bucket.buffer().numel():
        raise RuntimeError("gradcodec: the bucket's parameters do not tile its buffer")
    for off, numel in dense:
        b.dense.append((off, numel, p_total))
        p_total += numel
    b.p = torch.zeros(p_total + 1, dtype=torch.float32, device=where)  # + the non-finite count
    loaded = b.q is not None and b.q.numel() == q_total and b.m is not None and \
        b.m.numel() == m_total
    if loaded:  # from a state_dict, on the host
        b.q, b.m = b.q.to(where), b.m.to(where)
    else:
        b.q = torch.empty(q_total, dtype=torch.float32, device=where)
        b.m = torch.zeros(m_total, dtype=torch.float32, device=where)
        for mat in b.matrices:
            _gc.powersgd_init_q(codec, mat.rows, mat.cols,
                                b.q[mat.q_off:mat.q_off + mat.cols * mat.rank],
                                seed=ctx.state.seed, tensor_id=mat.tensor_id)


class _Matrix:
    """One PowerSGD-compressed parameter of a bucket and its slices of the flat buffers."""

    __slots__ = ("offset", "rows", "cols", "rank", "p_off", "q_off", "m_off", "tensor_id")

    def __init__(self, offset, rows, cols, rank, p_off, q_off, m_off, tensor_id):
        self.offset, self.rows, self.cols, self.rank = offset, rows, cols, rank
        self.p_off, self.q_off, self.m_off, self.tensor_id = p_off, q_off, m_off, tensor_id


def _powersgd(ctx: _Step, bucket: Any, x: torch.Tensor):
    """The library's PowerSGD phases per matrix of the bucket around two allreduces (all
    P's, then all Q's); tensors PowerSGD does not compress ride dense in the P allreduce."""
    codec, b, world, device = ctx.state.codec, ctx.b, ctx.world, ctx.device
    pg = ctx.pg
    if b.p is None or b.p.device != x.device:
        _plan_powersgd(ctx, bucket, x.device)
    n = x.numel()
    p, q, m = b.p, b.q, b.m
    segs = [_plan.Segment(mat.offset, mat.rows * mat.cols, mat.rows, True, mat.tensor_id)
            for mat in b.matrices] + \
        [_plan.Segment(off, numel, 0, False, 0) for off, numel, _ in b.dense]
    ctx.segs = segs
    src = ctx.compress_input(x)
    for mat in b.matrices:
        size = mat.rows * mat.cols
        _gc.powersgd_compute_p(codec, src[mat.offset:mat.offset + size],
                               m[mat.m_off:mat.m_off + size],
                               q[mat.q_off:mat.q_off + mat.cols * mat.rank],
                               p[mat.p_off:mat.p_off + mat.rows * mat.rank], rows=mat.rows)
    for off, numel, poff in b.dense:
        p[poff:poff + numel].copy_(x[off:off + numel] if not ctx.bad else 0.0)
    flag = p.numel() - 1
    p[flag] = 1.0 if ctx.bad else 0.0

    def reduce(t: torch.Tensor, async_op: bool):
        ctx.state.bytes_sent += _allreduce_wire(4 * t.numel(), world)
        if t.device == device:  # host buckets, or the phases on the bucket's GPU
            return dist.all_reduce(t, group=pg, async_op=async_op), t
        on_device = t.to(device)
        return dist.all_reduce(on_device, group=pg, async_op=async_op), on_device

    def copy_back(t: torch.Tensor, reduced: torch.Tensor) -> None:
        if reduced is not t:
            t.copy_(reduced.to("cpu"))

    ef = ctx.state.error_feedback
    if b.matrices:
        _, p_red = reduce(p, False)
        copy_back(p, p_red)
        # Every P at once (one launch per 64 layers on a GPU), then Q = M^T P each:
        # the bits of powersgd_compute_q per layer.
        _gc.powersgd_orthogonalize_batch(
            p, [(mat.p_off, mat.rows, mat.rank) for mat in b.matrices], codec.params["eps"])
        for mat in b.matrices:
            size = mat.rows * mat.cols
            _gc.powersgd_project_q(codec, p[mat.p_off:mat.p_off + mat.rows * mat.rank],
                                   m[mat.m_off:mat.m_off + size], mat.rows, mat.cols,
                                   q[mat.q_off:mat.q_off + mat.cols * mat.rank])
        work, q_red = reduce(q, True)
    else:
        work, p_red = reduce(p, True)
        q_red = q

    def finish():
        if b.matrices:
            copy_back(q, q_red)
        else:
            copy_back(p, p_red)
        bad = int(p[flag].item())
        out = torch.empty(n, dtype=torch.float32, device=p.device)
        if bad:
            # Not reduced: M keeps g + e (nothing is lost) and Q the mean for the warm start.
            q.div_(world)
            return out, bad
        for mat in b.matrices:
            size = mat.rows * mat.cols
            _gc.powersgd_finish(codec, p[mat.p_off:mat.p_off + mat.rows * mat.rank],
                                q[mat.q_off:mat.q_off + mat.cols * mat.rank], world,
                                m[mat.m_off:mat.m_off + size],
                                out[mat.offset:mat.offset + size], error_feedback=ef,
                                rows=mat.rows)
        for off, numel, poff in b.dense:
            torch.div(p[poff:poff + numel], world, out=out[off:off + numel])
        return out, 0

    return work, finish


# The annotations are the exact objects DDP's register_comm_hook checks for.
def hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: ``ddp_model.register_comm_hook(state, hook)``."""
    return state._run(bucket)
