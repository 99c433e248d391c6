# SPDX-License-Identifier: Apache-2.0
"""PyTorch DistributedDataParallel communication hook running gradcodec codecs.

::

    import gradcodec.torch as gct
    state = gct.HookState(spec="topk:ratio=0.01")          # error feedback on by default
    ddp_model.register_comm_hook(state, gct.hook)

Every rank must build the HookState with the same spec, seed and strategy. The gradient
written back into each bucket is the mean over ranks, bit-identical on every rank.

Strategies (``strategy=None`` picks the first that applies):

- ``"dense"`` for fp16/bf16 (the bucket is divided by the world size, cast, summed with
  one allreduce and decoded) and for randomk (every rank draws the same indices from the
  shared (seed, step, tensor_id), so only the k values are allreduced);
- ``"powersgd"`` for powersgd: per matrix of the bucket (first dimension x the rest) the
  library's phases around two allreduces (all P's, then all Q's of the bucket, each one
  collective); tensors PowerSGD would not compress (1-D, small) ride dense in the P
  allreduce and are averaged exactly;
- ``"vote"`` for sign with scale=none: the frames are all-gathered and combined by the
  signSGD majority vote (the result is the vote, -1/0/+1 per element, not a mean);
- ``"allgather"`` for every other codec (and any codec on request): each rank encodes its
  bucket into one frame, the frames are all-gathered (sizes first for the variable-size
  codecs threshold and powersgd; buffers padded to the largest frame, never empty) and
  every rank decode-accumulates them in rank order with alpha = 1/world_size.

Error feedback (on by default) keeps one float32 residual per DDP bucket, keyed by the
bucket index *and* its layout (element count, dtype, parameter shapes): when DDP rebuilds
its buckets (it does after the first iteration) or the model changes, a bucket whose layout
differs starts again from a zero residual (and, for PowerSGD, the shared-seed Q) instead of
adding a residual that belongs to other parameters. Residuals are per rank: save every
rank's ``state_dict()``.

Randomness is keyed by (seed, step, tensor_id) with step = the number of finished
iterations (advanced after the last bucket of each backward) and tensor_id = the bucket
index, the same on every rank.

Devices: CUDA buckets on an NCCL process group run on the GPU when gradcodec has its CUDA
backend (``backend="auto"`` or ``"cuda"``): residuals, frames and decoding stay on the
bucket's device, on torch's current stream; for the ``powersgd`` strategy that is the
library's PowerSGD phases on CUDA tensors, with P, Q and the residual on the GPU. CUDA
buckets on other process groups are copied to the host for encoding and decoding, and
frames and dense values travel on the bucket's device.
CPU buckets (gloo) run on the CPU. The collectives of one bucket are issued in the hook's
own thread, in bucket order; only the last one is asynchronous.
"""

from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from . import _gradcodec as _gc

__all__ = ["HookState", "hook", "STRATEGIES", "default_strategy"]

STRATEGIES = ("allgather", "dense", "powersgd", "vote")

# Codecs whose frame size depends on the data (encode_bound is only an upper bound).
_VARIABLE_SIZE = ("threshold", "powersgd")
_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_STATE_VERSION = 1


def default_strategy(codec: _gc.Codec) -> str:
    """The strategy HookState uses for a codec when none is given."""
    if codec.name in ("fp16", "bf16", "randomk"):
        return "dense"
    if codec.name == "powersgd":
        return "powersgd"
    if codec.name == "sign" and codec.params["scale"] == "none":
        return "vote"
    return "allgather"


def _check_strategy(codec: _gc.Codec, strategy: str) -> None:
    allowed = {
        "allgather": True,
        "dense": codec.name in ("fp16", "bf16", "randomk"),
        "powersgd": codec.name == "powersgd",
        "vote": codec.name == "sign",
    }
    if strategy not in allowed:
        raise ValueError(f"unknown strategy {strategy!r} (one of {', '.join(STRATEGIES)})")
    if not allowed[strategy]:
        raise ValueError(f"strategy {strategy!r} does not apply to codec {codec.name!r}")


class _Matrix:
    """One PowerSGD-compressed parameter of a bucket and its slices of the flat buffers."""

    __slots__ = ("offset", "rows", "cols", "rank", "p_off", "q_off", "m_off", "tensor_id")

    def __init__(self, offset, rows, cols, rank, p_off, q_off, m_off, tensor_id):
        self.offset, self.rows, self.cols, self.rank = offset, rows, cols, rank
        self.p_off, self.q_off, self.m_off, self.tensor_id = p_off, q_off, m_off, tensor_id


class _Bucket:
    """Per-bucket state: the layout it belongs to, the residual and PowerSGD buffers."""

    def __init__(self, layout: Tuple) -> None:
        self.layout = layout
        self.residual: Optional[torch.Tensor] = None  # f32, n elements (codec strategies)
        self.send: Optional[torch.Tensor] = None  # uint8 frame buffer, reused every step
        # The header every rank's frame of this bucket must have (from this rank's first
        # frame): decodes check against it instead of reading each frame's header first.
        self.expected: Optional[Any] = None
        # PowerSGD: flat Q and M (residual) of the compressed matrices, P of the matrices
        # followed by the dense tensors; the plan maps parameters onto them.
        self.q: Optional[torch.Tensor] = None
        self.m: Optional[torch.Tensor] = None
        self.p: Optional[torch.Tensor] = None
        self.matrices: List[_Matrix] = []
        self.dense: List[Tuple[int, int, int]] = []  # (bucket offset, numel, offset in p)


def _backend_of(pg: Optional[Any], device_type: str) -> str:
    """The collective backend that serves tensors of a device type: "nccl", "gloo", ...
    (a group made with e.g. backend="cpu:gloo,cuda:nccl" names one per device type)."""
    name = str(dist.get_backend(pg)).lower()
    for part in name.split(","):
        dev, sep, backend = part.partition(":")
        if sep and dev.strip() == device_type:
            return backend.strip()
    return name


def _layout(bucket: Any) -> Tuple:
    buf = bucket.buffer()
    shapes = tuple(tuple(int(d) for d in p.shape) for p in bucket.parameters())
    return (int(buf.numel()), str(buf.dtype), shapes)


class HookState:
    """State of the gradcodec DDP communication hook (pass it to register_comm_hook).

    Args:
        spec: codec spec string or gradcodec.Codec (docs/codecs.md), the same on all ranks.
        process_group: the group to reduce over (None: the default group).
        error_feedback: keep a per-bucket residual (p = g + e; send C(p); e = p - D(C(p))).
        seed: the shared seed of every random decision, the same on all ranks.
        strategy: "allgather", "dense", "powersgd" or "vote"; None picks by codec (see the
            module documentation).
        backend: gradcodec backend for encode/decode: "auto" (CUDA for CUDA buckets on an
            NCCL group when the CUDA backend is available, else the CPU), "cuda" (the same,
            but an error where the CUDA path cannot be taken), "reference" or "cpu" (host
            only: CUDA buckets are copied to the host).
    """

    def __init__(
        self,
        spec: Any = "topk:ratio=0.01",
        process_group: Optional[Any] = None,
        error_feedback: bool = True,
        seed: int = 0,
        strategy: Optional[str] = None,
        backend: str = "auto",
    ) -> None:
        self.codec = spec if isinstance(spec, _gc.Codec) else _gc.Codec(spec)
        self.process_group = process_group
        self.error_feedback = bool(error_feedback)
        self.seed = int(seed)
        self.strategy = default_strategy(self.codec) if strategy is None else strategy
        _check_strategy(self.codec, self.strategy)
        self.backend = backend
        self.step = 0
        self.bytes_sent = 0  # bytes this rank contributed to the hook's collectives
        self.dense_bytes = 0  # bytes an uncompressed float32 allreduce would have sent
        self._buckets: Dict[int, _Bucket] = {}

    # --- checkpointing ---------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """Residuals, PowerSGD Q (and its residual M), the step counter and the settings.
        Residuals are per rank: every rank saves and loads its own."""
        buckets = {}
        for index, b in self._buckets.items():
            entry: Dict[str, Any] = {"layout": b.layout}
            for name in ("residual", "q", "m"):
                t = getattr(b, name)
                entry[name] = None if t is None else t.clone()
            buckets[index] = entry
        return {
            "version": _STATE_VERSION,
            "spec": self.codec.spec,
            "seed": self.seed,
            "strategy": self.strategy,
            "error_feedback": self.error_feedback,
            "step": self.step,
            "bytes_sent": self.bytes_sent,
            "dense_bytes": self.dense_bytes,
            "buckets": buckets,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restores a state_dict() saved with the same spec, seed and strategy. A bucket
        whose layout differs from the saved one when the hook next sees it starts afresh."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unsupported HookState version {state.get('version')!r}")
        for key, mine in (("spec", self.codec.spec), ("seed", self.seed),
                          ("strategy", self.strategy)):
            if state[key] != mine:
                raise ValueError(f"saved hook state has {key}={state[key]!r}, this one {mine!r}")
        self.error_feedback = bool(state["error_feedback"])
        self.step = int(state["step"])
        self.bytes_sent = int(state.get("bytes_sent", 0))
        self.dense_bytes = int(state.get("dense_bytes", 0))
        self._buckets = {}
        for index, entry in state["buckets"].items():
            b = _Bucket(tuple(entry["layout"]))
            for name in ("residual", "q", "m"):
                t = entry[name]
                setattr(b, name, None if t is None else t.detach().to("cpu", torch.float32).clone())
            self._buckets[int(index)] = b

    def reset(self) -> None:
        """Forgets every residual and PowerSGD Q; the step counter is kept."""
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

    def _encode(self, x: torch.Tensor, b: _Bucket, step: int, index: int) -> torch.Tensor:
        # x is on the device the codec runs on: the bucket's GPU, or the host.
        n = x.numel()
        bound = self.codec.encode_bound(n, _DTYPES[x.dtype])
        if b.send is None or b.send.numel() < bound or b.send.device != x.device:
            b.send = torch.zeros(bound, dtype=torch.uint8, device=x.device)
        kw = dict(seed=self.seed, step=step, tensor_id=index, backend=self.backend, out=b.send)
        if self.error_feedback:
            if b.residual is None or b.residual.numel() != n:
                b.residual = torch.zeros(n, dtype=torch.float32, device=x.device)
            elif b.residual.device != x.device:  # loaded from a state_dict, or moved
                b.residual = b.residual.to(x.device)
            return self.codec.encode_with_feedback(x, b.residual, **kw)
        return self.codec.encode(x, **kw)

    def _run(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buf = bucket.buffer()
        if buf.dtype not in _DTYPES:
            raise TypeError(f"gradcodec hooks take float32/float16/bfloat16 gradients, "
                            f"not {buf.dtype}")
        index = int(bucket.index())
        step = self.step
        if bucket.is_last():
            self.step += 1
        b = self._bucket_state(index, _layout(bucket))
        world = dist.get_world_size(self.process_group)
        device = buf.device
        x = buf.detach()
        if not self._on_device(device) and device.type != "cpu":
            x = x.to("cpu")
        self.dense_bytes += 4 * x.numel()
        if self.strategy == "powersgd":
            work, finish = self._powersgd(bucket, b, x, index, world, device)
        elif self.strategy == "dense":
            work, finish = self._dense(b, x, step, index, world, device)
        else:
            work, finish = self._allgather(b, x, step, index, world, device)

        def write_back(result: torch.Tensor) -> torch.Tensor:
            buf.copy_(result)
            return buf

        def done(fut: torch.futures.Future) -> torch.Tensor:
            fut.value()  # raises if the collective failed
            return write_back(finish())

        return work.get_future().then(done)

    def _allgather(self, b, x, step, index, world, device):
        n = x.numel()
        frame = self._encode(x, b, step, index)
        size = int(frame.numel())
        if b.expected is None:
            b.expected = _gc.peek(frame)  # one header copy per bucket, on the first step
        expected = b.expected
        pg = self.process_group
        if self.codec.name in _VARIABLE_SIZE:
            mine = torch.tensor([size], dtype=torch.int64, device=device)
            gathered = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(gathered, mine, group=pg)
            sizes = [int(s.item()) for s in gathered]
        else:
            sizes = [size] * world
        length = max(sizes)
        send = b.send[:length]
        send[size:].zero_()  # the padding of a frame shorter than the longest
        self.bytes_sent += length
        send = send.to(device)  # a no-op on the CUDA path and for CPU buckets
        recv = [torch.empty(length, dtype=torch.uint8, device=device) for _ in range(world)]
        work = dist.all_gather(recv, send, group=pg, async_op=True)
        vote = self.strategy == "vote"
        backend = self.backend
        where = x.device  # where the codec runs: the GPU on the CUDA path, else the host

        def finish() -> torch.Tensor:
            if vote:  # the majority vote runs on the host
                frames = [r.to("cpu")[:s] for r, s in zip(recv, sizes)]
                return _gc.sign_majority_vote(frames, torch.empty(n, dtype=torch.float32))
            frames = [r.to(where)[:s] for r, s in zip(recv, sizes)]
            if where.type == "cuda":
                # The callback runs on another stream than the one recv was allocated on:
                # keep torch's allocator from reusing recv before the decodes have read it.
                stream = torch.cuda.current_stream(where)
                for r in recv:
                    r.record_stream(stream)
            acc = torch.zeros(n, dtype=torch.float32, device=where)
            alpha = 1.0 / world
            # Each decode checks its frame against the expected header where the frame is
            # and leaves a verdict there: one look at all of them at the end, instead of a
            # host wait for each frame's header on the GPU.
            verdicts = torch.empty((len(frames), 16), dtype=torch.uint8, device=where)
            for f, verdict in zip(frames, verdicts):
                _gc.decode_accumulate_expected(expected, f, acc, verdict, alpha, backend=backend)
            _gc.check_verdicts(verdicts.cpu())
            return acc

        return work, finish

    def _dense(self, b, x, step, index, world, device):
        n = x.numel()
        pg = self.process_group
        backend = self.backend
        if self.codec.name == "randomk":
            # Same indices on every rank: sum the k values in place in the frame.
            frame = self._encode(x, b, step, index)
            count = _gc.peek(frame).count
            values = frame[_gc.header_bytes + 16:]
            wire = x.dtype
        else:
            # fp16/bf16: divide first so the 16-bit sum cannot overflow where the mean fits.
            # No peek: the count is n, and a CUDA frame's header would cost a host wait.
            frame = self._encode(x.to(torch.float32) / world, b, step, index)
            count = n
            values = frame[_gc.header_bytes:]
            wire = torch.float16 if self.codec.name == "fp16" else torch.bfloat16
        width = 4 if wire == torch.float32 else 2
        values = values[: count * width].view(wire)
        sent = values
        if wire == torch.bfloat16 and _backend_of(pg, device.type) == "gloo":
            sent = values.to(torch.float32)  # gloo cannot sum bfloat16: sum the exact widening
        else:
            sent = values.to(device)  # the same tensor when the frame is on the bucket's device
        self.bytes_sent += sent.numel() * sent.element_size()
        work = dist.all_reduce(sent, group=pg, async_op=True)

        def finish() -> torch.Tensor:
            if sent is not values:
                values.copy_(sent.to(values.device))  # rounds a float32 sum to the wire dtype
            acc = torch.zeros(n, dtype=torch.float32, device=x.device)
            if self.codec.name == "randomk":
                _gc.decode_accumulate(frame, acc, 1.0 / world, backend=backend)
            else:
                _gc.decode(frame, acc, backend=backend)
            return acc

        return work, finish

    def _plan_powersgd(self, bucket: Any, b: _Bucket, index: int, where: torch.device) -> None:
        # where: the device the phases run on (the bucket's GPU, or the host).
        codec = self.codec
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
                    # Distinct shared-seed starts for the matrices of one bucket.
                    tid = (index << 16) | position
                    b.matrices.append(_Matrix(offset, rows, cols, r, p_total, q_total, m_total,
                                              tid))
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
        b.p = torch.zeros(p_total, dtype=torch.float32, device=where)
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
                                    seed=self.seed, tensor_id=mat.tensor_id)

    def _powersgd(self, bucket, b, x, index, world, device):
        codec = self.codec
        pg = self.process_group
        if b.p is None or b.p.device != x.device:
            self._plan_powersgd(bucket, b, index, x.device)
        n = x.numel()
        p, q, m = b.p, b.q, b.m
        for mat in b.matrices:
            size = mat.rows * mat.cols
            _gc.powersgd_compute_p(codec, x[mat.offset:mat.offset + size],
                                   m[mat.m_off:mat.m_off + size],
                                   q[mat.q_off:mat.q_off + mat.cols * mat.rank],
                                   p[mat.p_off:mat.p_off + mat.rows * mat.rank], rows=mat.rows)
        for off, numel, poff in b.dense:
            p[poff:poff + numel].copy_(x[off:off + numel])

        def reduce(t: torch.Tensor, async_op: bool):
            self.bytes_sent += 4 * t.numel()
            if t.device == device:  # host buckets, or the phases on the bucket's GPU
                return dist.all_reduce(t, group=pg, async_op=async_op), t
            on_device = t.to(device)
            return dist.all_reduce(on_device, group=pg, async_op=async_op), on_device

        def copy_back(t: torch.Tensor, reduced: torch.Tensor) -> None:
            if reduced is not t:
                t.copy_(reduced.to("cpu"))

        ef = self.error_feedback
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

        def finish() -> torch.Tensor:
            if b.matrices:
                copy_back(q, q_red)
            else:
                copy_back(p, p_red)
            out = torch.empty(n, dtype=torch.float32, device=p.device)
            for mat in b.matrices:
                size = mat.rows * mat.cols
                _gc.powersgd_finish(codec, p[mat.p_off:mat.p_off + mat.rows * mat.rank],
                                    q[mat.q_off:mat.q_off + mat.cols * mat.rank], world,
                                    m[mat.m_off:mat.m_off + size],
                                    out[mat.offset:mat.offset + size], error_feedback=ef,
                                    rows=mat.rows)
            for off, numel, poff in b.dense:
                torch.div(p[poff:poff + numel], world, out=out[off:off + numel])
            return out

        return work, finish


# The annotations are the exact objects DDP's register_comm_hook checks for.
def hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook: ``ddp_model.register_comm_hook(state, hook)``."""
    return state._run(bucket)
