# SPDX-License-Identifier: Apache-2.0
"""Local SGD, DiLoCo and Streaming DiLoCo for a torch model (``gradcodec.torch.OuterSync``):
the library's outer synchronizer (docs/outer.md) over a torch.distributed process group,
used instead of DDP's per-step allreduce. Every rank trains its own copy with its own
inner optimizer and calls ``step()`` after each inner step::

    outer = gct.OuterSync(model, spec="minmax:bits=4", sync_every=50,
                          lr=0.7, momentum=0.9, nesterov=True)
    for batch in data:
        loss(model, batch).backward(); inner.step(); inner.zero_grad()
        outer.step()

The engine is the C++ one (``gradcodec/comm/outer.hpp``) running over the process group
through :class:`gradcodec._torch_transport.TorchTransport`, or, in a job started by mpirun,
over ``communicator=gradcodec.Communicator.mpi()`` (the collectives in C++, no Python call
inside a sync), so a torch job moves and computes exactly the bytes a C++ job does, and
θ_global is bit-identical on every rank."""

import atexit
import sys
import weakref
from typing import Any, Dict, Iterable, List, Optional, Union

import numpy as np
import torch

from . import _gradcodec as _gc
from ._torch_transport import TorchTransport, global_rank

_STATE_VERSION = 1


class OuterSync:
    """The outer loop of ``params`` (a module or its parameters, float32, CPU).

    spec: the codec of the pseudo-gradient Δ = θ_global − θ_local (None: uncompressed,
    the exact rank-ordered f32 mean); sync_every (H), fragments (P, strided over the
    parameters, staggered), delay (τ: a sync overlaps the next τ inner steps and is
    applied late with ``mix``; its collectives run on a process group the constructor
    makes for them), lr, momentum, nesterov (the outer SGD), participants (K
    ranks drawn per sync, 0 = all), seed, strategy and error_feedback (the allreduce's;
    error feedback None follows the codec's bounds), process_group, threads (the
    library's CPU threads; default torch.get_num_threads()). communicator: the library's
    communicator to run over instead of the process group, e.g.
    ``gradcodec.Communicator.mpi()`` in a job started by mpirun, where a delayed sync's
    collectives then need neither the interpreter nor its lock (one communicator per
    OuterSync; bytes_sent is then the library's count). switch_interval: while a
    delayed sync is in flight, the interpreter's thread switch interval in seconds (the
    reduction's collectives are Python calls from the engine's thread, each waiting for
    the training thread to let go of the GIL: every 5 ms by default), restored when the
    sync lands; None leaves it alone.

    spec="auto": the codec and strategy of Δ are chosen by the planner (docs/planner.md)
    among ``candidates`` (the codecs you accept for Δ; the uncompressed mean and bf16 are
    always candidates) for a fragment's size, from ``profile`` (a ``gradcodec calibrate``
    file, its JSON text or a dict) or, without one, from a calibration over the process
    group at construction (the engine's own collectives and strategies); ``plan`` holds
    the chosen row and the reason.

    Construction is collective: every rank starts from rank 0's parameters."""

    def __init__(self, params: Union[torch.nn.Module, Iterable[torch.Tensor]], *,
                 spec: Optional[str] = None, sync_every: int = 1, fragments: int = 1,
                 delay: int = 0, mix: float = 0.5, lr: float = 1.0, momentum: float = 0.0,
                 nesterov: bool = False, participants: int = 0, seed: int = 0,
                 strategy: Optional[str] = None, error_feedback: Optional[bool] = None,
                 process_group: Optional[Any] = None, threads: Optional[int] = None,
                 candidates: Optional[List[Any]] = None, profile: Optional[Any] = None,
                 margin: float = 0.05, switch_interval: Optional[float] = 1e-4,
                 communicator: Optional[Any] = None):
        if switch_interval is not None and not switch_interval > 0:
            raise ValueError("OuterSync: switch_interval must be > 0 seconds or None")
        self._switch_interval = switch_interval
        self._saved_switch: Optional[float] = None  # the interval to restore after a sync
        if isinstance(params, torch.nn.Module):
            params = params.parameters()
        self.params: List[torch.Tensor] = [p for p in params]
        if not self.params:
            raise ValueError("OuterSync: no parameters")
        for p in self.params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError("OuterSync: parameters must be float32 tensors on the CPU "
                                 f"(got {p.dtype} on {p.device})")
        tensors, at = [], 0
        for p in self.params:
            tensors.append((at, p.numel(), p.shape[0] if p.dim() >= 2 else 0))
            at += p.numel()
        self._flat = np.empty(at, dtype=np.float32)
        self._flat_t = torch.from_numpy(self._flat)
        self.transport: Optional[TorchTransport] = None
        if communicator is not None:
            if process_group is not None:
                raise ValueError("OuterSync: give a process_group or a communicator, not both")
            if not isinstance(communicator, _gc.Communicator):
                raise TypeError("OuterSync: communicator must be a gradcodec.Communicator")
            self._comm = communicator
            # No Python runs in the sync: the interpreter's switch interval does not matter.
            self._switch_interval = None
        elif delay > 0:
            # The reduction of a delayed sync runs on the engine's thread while the caller
            # goes on: a group of its own keeps its collectives from interleaving with the
            # caller's (a loss all-reduce, another OuterSync, DDP) on the same group.
            import torch.distributed as dist

            ranks = None
            if process_group is not None:
                ranks = [global_rank(process_group, r)
                         for r in range(dist.get_world_size(process_group))]
            process_group = dist.new_group(ranks=ranks)
        if communicator is None:
            self.transport = TorchTransport(process_group)
            self._comm = _gc.Communicator.from_transport(self.transport)
        self.plan: Optional[Dict[str, Any]] = None
        threads = torch.get_num_threads() if threads is None else threads
        if spec == "auto":
            if strategy is not None:
                raise ValueError("OuterSync: spec='auto' chooses the strategy")
            # One fragment holds every tensor, PowerSGD's matrices with their shapes; a
            # fragment of several is predicted as one near-square matrix of its mean size.
            matrices = [t for t in tensors if t[2] > 0] if fragments == 1 else []
            spec, strategy = self._choose(candidates, profile, margin, threads,
                                          max(1, at // max(1, fragments)), matrices)
        elif candidates is not None or profile is not None:
            raise ValueError("OuterSync: candidates and profile apply to spec='auto' only")
        self._engine = _gc.OuterSync(
            self._comm, spec=spec, strategy=strategy, error_feedback=error_feedback,
            sync_every=sync_every, fragments=fragments, delay=delay, mix=mix, lr=lr,
            momentum=momentum, nesterov=nesterov, participants=participants, seed=seed,
            tensors=tensors, threads=threads)
        if communicator is not None:
            # A sync still in flight at exit is waited for before MPI is finalized: the
            # finalizer was registered when MPI was initialized, before this, and atexit
            # runs its functions last in, first out.
            atexit.register(_settle_at_exit, weakref.ref(self))
        self._tensors = tensors
        # The most bytes one sync handed to the transport (library_bytes_sent's measure).
        self.peak_sync_bytes = 0
        self._gather()
        self._engine.init(self._flat)
        self._scatter()

    def _choose(self, candidates, profile, margin, threads, elements, matrices):
        """(spec, strategy) of the planner's choice for a fragment of `elements`."""
        from . import _auto
        accept = [c.spec if isinstance(c, _gc.Codec) else str(c)
                  for c in (candidates or _auto.DEFAULT_CANDIDATES)]
        if profile is None:
            text = _gc.calibrate(self._comm, accept, threads=threads, in_call=elements,
                                 in_call_segment=0)
        else:
            text = _auto.load_profile(profile)
        planned = _gc.plan(text, elements, self._comm.size, accept, margin=margin,
                           tensors=matrices)
        row = planned["rows"][planned["chosen"]]
        self.plan = {"elements": elements, "row": row, "reason": planned["reason"],
                     "profile": text}
        if row["uncompressed"]:
            return None, None
        return row["spec"], row["strategy"]

    def _gather(self) -> None:
        with torch.no_grad():
            for p, (o, n, _) in zip(self.params, self._tensors):
                self._flat_t[o: o + n].copy_(p.reshape(-1))

    def _scatter(self) -> None:
        with torch.no_grad():
            for p, (o, n, _) in zip(self.params, self._tensors):
                p.copy_(self._flat_t[o: o + n].view_as(p))

    def step(self) -> bool:
        """After every inner step (collective). True when a sync changed the parameters.
        A non-finite Δ on any rank raises gradcodec.Error (nonfinite_input) on every rank
        at the same step, with nothing applied."""
        due = self._engine.due
        if due:
            self._gather()
        try:
            changed = self._engine.step(self._flat)
        finally:
            self._follow_flight()
        self.peak_sync_bytes = max(self.peak_sync_bytes, self._engine.last_sync_bytes)
        if changed:
            self._scatter()
        return changed

    def settle(self) -> None:
        """Waits for a sync in flight (delay > 0)."""
        try:
            self._engine.settle()
        finally:
            self._follow_flight()

    def __del__(self) -> None:
        saved = getattr(self, "_saved_switch", None)
        if saved is not None:  # dropped with a sync in flight
            sys.setswitchinterval(saved)

    def _follow_flight(self) -> None:
        """Shortens the interpreter's switch interval while a sync is in flight, restores
        it once none is."""
        flying = self._engine.in_flight
        if flying and self._switch_interval is not None and self._saved_switch is None:
            self._saved_switch = sys.getswitchinterval()
            sys.setswitchinterval(min(self._saved_switch, self._switch_interval))
        elif not flying and self._saved_switch is not None:
            sys.setswitchinterval(self._saved_switch)
            self._saved_switch = None

    def load_global(self, into: Optional[Union[torch.nn.Module, Iterable[torch.Tensor]]] = None
                    ) -> None:
        """Copies θ_global into the parameters, or into ``into`` (a copy of the model, or
        parameters of the same shapes in the same order), e.g. to evaluate the shared model
        without touching this rank's training."""
        if into is None:
            self._flat[...] = self._engine.global_params
            self._scatter()
            return
        if isinstance(into, torch.nn.Module):
            into = into.parameters()
        flat = torch.from_numpy(self._engine.global_params)
        with torch.no_grad():
            for p, (o, n, _) in zip(list(into), self._tensors):
                p.copy_(flat[o: o + n].view_as(p))

    def global_params(self) -> np.ndarray:
        """A copy of θ_global (flat, float32)."""
        return self._engine.global_params

    @property
    def steps(self) -> int:
        return self._engine.steps

    @property
    def rounds(self) -> int:
        return self._engine.rounds

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank put on the network so far (TorchTransport.wire_bytes; over a
        library communicator, library_bytes_sent)."""
        if self.transport is None:
            return self._engine.bytes_sent
        return self.transport.wire_bytes

    @property
    def library_bytes_sent(self) -> int:
        """Bytes the library handed to the transport (the C++ engine's count, the same in
        a C++ job; agreements included)."""
        return self._engine.bytes_sent

    @property
    def sync_seconds(self) -> float:
        """Wall seconds of the completed syncs (agreements and reductions)."""
        return self._engine.sync_seconds

    @property
    def exposed_seconds(self) -> float:
        """The part of sync_seconds that step() and settle() waited for: all of it with
        delay 0; with delay > 0 what the inner steps did not hide."""
        return self._engine.exposed_seconds

    @property
    def bytes_received(self) -> int:
        return self._engine.bytes_received

    def state_dict(self) -> Dict[str, Any]:
        """The engine's state (θ_global, outer momentum, residuals, counters, a settled
        sync in flight) as the library's checksummed bytes. The inner optimizer's and the
        model's own state are the caller's to save."""
        saved = self._engine.save()  # settles a sync in flight
        self._follow_flight()
        return {"version": _STATE_VERSION, "engine": saved}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"OuterSync: state version {state.get('version')}, "
                             f"expected {_STATE_VERSION}")
        self._engine.load(np.frombuffer(state["engine"], dtype=np.uint8))
        self._follow_flight()  # a loaded state has no sync in flight


def _settle_at_exit(ref: "weakref.ref[OuterSync]") -> None:
    outer = ref()
    if outer is not None and outer._engine.in_flight:
        outer.settle()
