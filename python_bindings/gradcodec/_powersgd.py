# SPDX-License-Identifier: Apache-2.0
"""PowerSGDState: one matrix's PowerSGD state (Q, residual, step) and its phases."""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from . import _gradcodec as _gc


class PowerSGDState:
    """The state of PowerSGD for one ``rows x cols`` matrix, as numpy float32 arrays.

    One step with ``W`` ranks (the caller runs the two allreduces; ``p`` and ``q`` are
    modified in place, so an allreduce can write straight into them, e.g. through
    ``torch.from_numpy``)::

        p = state.compute_p(grad)     # residual += grad; p = M q           -> allreduce-sum p
        q = state.compute_q()         # orthonormalise p; q = M^T p         -> allreduce-sum q
        out = state.finish(world_size=W)  # q /= W; out = p q^T; residual = M - out

    ``q`` keeps the mean for the next step's warm start; it starts from the shared-seed
    initial Q, identical on every rank for the same ``seed`` and ``tensor_id``. ``save()``
    and ``load()`` use the library's checkpoint format (docs/format.md).

    Host memory only (the state is numpy arrays): a CUDA ``grad`` raises
    :class:`gradcodec.Error` (copy it with ``.cpu()``, or call the ``powersgd_*`` phase
    functions with CUDA tensors of your own, which run on the GPU).
    """

    def __init__(
        self,
        spec: Union[str, _gc.Codec],
        rows: int,
        cols: int,
        *,
        seed: int = 0,
        tensor_id: int = 0,
        error_feedback: bool = True,
    ) -> None:
        self.codec = spec if isinstance(spec, _gc.Codec) else _gc.Codec(spec)
        if self.codec.name != "powersgd":
            raise ValueError(f"PowerSGDState needs a powersgd spec, got {self.codec.spec!r}")
        self.rows = int(rows)
        self.cols = int(cols)
        self.rank = _gc.powersgd_rank(self.codec, self.rows, self.cols)
        self.seed = int(seed)
        self.tensor_id = int(tensor_id)
        self.error_feedback = bool(error_feedback)
        self.step = 0
        self.q = np.empty((self.cols, self.rank), dtype=np.float32)
        self.p = np.zeros((self.rows, self.rank), dtype=np.float32)
        self.residual = np.zeros((self.rows, self.cols), dtype=np.float32)
        self.reset()

    @property
    def compresses(self) -> bool:
        """Whether the matrix is worth compressing at this rank (else send it dense)."""
        return _gc.powersgd_compresses(self.codec, self.rows, self.cols)

    def reset(self) -> None:
        """Back to the shared-seed Q, a zero residual and step 0."""
        _gc.powersgd_init_q(self.codec, self.rows, self.cols, self.q, seed=self.seed,
                            tensor_id=self.tensor_id)
        self.p.fill(0)
        self.residual.fill(0)
        self.step = 0

    def compute_p(self, grad: Any) -> np.ndarray:
        """Phase 1: residual += grad; p = M q. Returns ``p`` (rows x r) to allreduce-sum."""
        _gc.powersgd_compute_p(self.codec, grad, self.residual, self.q, self.p, rows=self.rows)
        return self.p

    def compute_q(self, p_sum: Optional[Any] = None) -> np.ndarray:
        """Phase 2: orthonormalises the summed p, then q = M^T p. Returns ``q`` to
        allreduce-sum. ``p_sum``: the summed p when it was not reduced into ``p`` in place."""
        if p_sum is not None:
            self.p[...] = np.asarray(p_sum, dtype=np.float32).reshape(self.p.shape)
        _gc.powersgd_compute_q(self.codec, self.p, self.residual, self.rows, self.cols, self.q)
        return self.q

    def finish(
        self,
        q_sum: Optional[Any] = None,
        *,
        world_size: int = 1,
        out: Optional[Any] = None,
    ) -> Any:
        """Phase 3: q = q_sum / world_size; out = p q^T; residual = M - out (zero without
        error feedback); advances ``step``. Returns ``out`` (a new float32 rows x cols
        array when None; any float dtype otherwise)."""
        if q_sum is not None:
            self.q[...] = np.asarray(q_sum, dtype=np.float32).reshape(self.q.shape)
        if out is None:
            out = np.empty((self.rows, self.cols), dtype=np.float32)
        _gc.powersgd_finish(self.codec, self.p, self.q, int(world_size), self.residual, out,
                            error_feedback=self.error_feedback, rows=self.rows)
        self.step += 1
        return out

    def save(self) -> np.ndarray:
        """The state (Q, residual, step) in the library's checkpoint format (numpy uint8)."""
        return _gc.powersgd_save_state(self.q, self.residual, self.rows, self.cols, self.rank,
                                       self.step)

    def load(self, data: Any) -> None:
        """Restores a state saved by :meth:`save` for the same shape and rank; a corrupt or
        mismatched state raises :class:`gradcodec.Error` and leaves this state unchanged."""
        info = _gc.powersgd_load_state(data, self.rows, self.cols, self.rank, self.q,
                                       self.residual)
        self.step = int(info["step"])

    def __repr__(self) -> str:
        return (f"PowerSGDState({self.codec.spec!r}, rows={self.rows}, cols={self.cols}, "
                f"rank={self.rank}, step={self.step})")
