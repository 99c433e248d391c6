# SPDX-License-Identifier: Apache-2.0
"""gradcodec: gradient-compression codecs for data-parallel training.

The codecs (top-k, DGC, random-k, threshold, QSGD, TernGrad, min-max, 1-bit SGD, signSGD
and scaled sign, PowerSGD, fp16/bf16) encode an array into a self-describing frame (a
numpy uint8 array) that decodes anywhere, bit-identically on every backend and rank::

    import numpy as np, gradcodec
    codec = gradcodec.Codec("qsgd:levels=7")
    grad = np.random.default_rng(0).standard_normal(10_000, dtype=np.float32)
    frame = codec.encode(grad, seed=1, step=0)        # numpy uint8, 48-byte header first
    back = gradcodec.decode(frame)                     # float32, same length
    residual = np.zeros_like(grad)
    frame = codec.encode_with_feedback(grad, residual, seed=1, step=1)  # residual updated

Arrays are numpy arrays or anything with ``__dlpack__`` (torch tensors, ...), float32,
float16 or bfloat16, C-contiguous; they are never copied. CUDA tensors run on the CUDA
backend when it is built in (frames are then torch.uint8 tensors on the same device, work
runs on torch's current stream; docs/python.md, "CUDA tensors"). Library errors raise
:class:`gradcodec.Error` (a ValueError and RuntimeError) with a ``code``.
``gradcodec.torch`` has the PyTorch DDP communication hook.
"""

from __future__ import annotations

from ._gradcodec import (
    Codec,
    Communicator,
    FrameInfo,
    StatusCode,
    __version__,
    backend_available,
    backend_unavailable_reason,
    backends,
    check_verdicts,
    codecs,
    cpu_default_threads,
    cpu_isa,
    cpu_isa_best,
    cpu_isa_supported,
    decode,
    decode_accumulate,
    decode_accumulate_expected,
    decode_expected,
    encode,
    encode_bound,
    encode_with_feedback,
    format_version,
    minifloat_codes,
    minifloat_values,
    header_bytes,
    peek,
    powersgd_compresses,
    powersgd_compute_p,
    powersgd_compute_q,
    powersgd_finish,
    powersgd_init_q,
    powersgd_load_state,
    powersgd_orthogonalize,
    powersgd_orthogonalize_batch,
    powersgd_project_q,
    powersgd_peek_state,
    powersgd_rank,
    powersgd_save_state,
    powersgd_state_bytes,
    set_cpu_default_threads,
    set_cpu_isa,
    sign_majority_vote,
)
from ._errors import Error
from ._powersgd import PowerSGDState

__all__ = [
    "Codec",
    "Communicator",
    "Error",
    "FrameInfo",
    "PowerSGDState",
    "StatusCode",
    "__version__",
    "backend_available",
    "backend_unavailable_reason",
    "backends",
    "check_verdicts",
    "codecs",
    "cpu_default_threads",
    "cpu_isa",
    "cpu_isa_best",
    "cpu_isa_supported",
    "decode",
    "decode_accumulate",
    "decode_accumulate_expected",
    "decode_expected",
    "encode",
    "encode_bound",
    "encode_with_feedback",
    "format_version",
    "minifloat_codes",
    "minifloat_values",
    "header_bytes",
    "peek",
    "powersgd_compresses",
    "powersgd_compute_p",
    "powersgd_compute_q",
    "powersgd_finish",
    "powersgd_init_q",
    "powersgd_load_state",
    "powersgd_orthogonalize",
    "powersgd_orthogonalize_batch",
    "powersgd_project_q",
    "powersgd_peek_state",
    "powersgd_rank",
    "powersgd_save_state",
    "powersgd_state_bytes",
    "set_cpu_default_threads",
    "set_cpu_isa",
    "sign_majority_vote",
]
