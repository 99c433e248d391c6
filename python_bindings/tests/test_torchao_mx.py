# SPDX-License-Identifier: Apache-2.0
"""mxfp8 (E4M3, E5M2), mxfp6 (E3M2, E2M3) and mxfp4 frames against torchao's MX reference
(`torchao.prototype.mx_formats.mx_tensor.to_mx`, FLOOR scaling, the OCP v1.0 rule), an
implementation that shares no code with gradcodec.

Needs a current PyTorch and torchao: scripts/test-current-torch installs both and runs this
file; under Debian's torch 1.13 (ctest, CI) it is skipped.

Where the two differ by design, the data avoids it and the docstrings say so:
- torchao clamps the divisor 2^(s - 127) to 2^-126 (a workaround for Triton's subnormals,
  its comments say), so a block whose E8M0 code is 0 (amax below 2^(emax - 126)) divides by
  2^-126 where OCP and gradcodec use 2^-127; the data keeps every block above that;
- torchao keeps the sign of a zero element (code S.000...), gradcodec sends +0 (docs/codecs.md);
  values are compared with ==, where -0 equals +0.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
from torchao.prototype.mx_formats import constants, kernels  # noqa: E402
from torchao.prototype.mx_formats.config import ScaleCalculationMode  # noqa: E402

import gradcodec as gc  # noqa: E402

BLOCK = 32
HEADER = 48


def torchao_values(fmt, data_lp):
    """torchao's element values (before the block scale), by torchao's own decoders."""
    if fmt in ("e4m3", "e5m2"):
        return data_lp.to(torch.float32)
    if fmt == "e2m3":
        return kernels.f6_e2m3_unpacked_to_f32(data_lp)
    if fmt == "e3m2":
        return kernels.f6_e3m2_unpacked_to_f32(data_lp)
    return kernels.f4_unpacked_to_f32(kernels.unpack_uint4(data_lp.view(torch.uint8)))


CASES = {
    # spec: (torchao element dtype, fmt)
    "mxfp8": (torch.float8_e4m3fn, "e4m3"),
    "mxfp8:fmt=e5m2": (torch.float8_e5m2, "e5m2"),
    "mxfp6": (constants.DTYPE_FP6_E3M2, "e3m2"),
    "mxfp6:fmt=e2m3": (constants.DTYPE_FP6_E2M3, "e2m3"),
    "mxfp4": (torch.float4_e2m1fn_x2, "e2m1"),
}


def sample(blocks, seed):
    """Gaussian blocks at scales 2^-90 .. 2^90, a block of zeros, a block of exact element
    values, and elements on ties between neighbours (scaled by the block's power of two)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(blocks * BLOCK).astype(np.float32)
    x *= np.repeat(np.exp2(rng.integers(-90, 91, blocks)).astype(np.float32), BLOCK)
    x[:BLOCK] = 0.0
    x[BLOCK:2 * BLOCK] = np.float32(1.5) * np.arange(-16, 16, dtype=np.float32)
    ties = rng.integers(0, blocks * BLOCK, blocks * 4)
    x[ties] = np.float32(1.0625) * np.sign(x[ties]) * np.exp2(np.floor(np.log2(np.abs(x[ties]) + 1e-30)))
    return x


@pytest.mark.parametrize("spec", list(CASES))
def test_frames_equal_torchao_to_mx(spec):
    elem_dtype, fmt = CASES[spec]
    blocks = 256
    x = sample(blocks, 7)
    scale_e8m0, data_lp = mx_tensor.to_mx(torch.from_numpy(x.copy()), elem_dtype, BLOCK,
                                          ScaleCalculationMode.FLOOR)
    theirs_scales = scale_e8m0.view(torch.uint8).numpy()
    # Block 0 is zeros (code 0 in both, values 0 either way); the others avoid torchao's
    # 2^-126 clamp (docstring).
    assert theirs_scales[1:].min() > 0

    frame = np.frombuffer(gc.encode(spec, x), dtype=np.uint8)
    ours_scales = frame[HEADER:HEADER + blocks]
    assert np.array_equal(ours_scales, theirs_scales)

    scale = torch.from_numpy(np.exp2(theirs_scales.astype(np.float64) - 127).astype(np.float32))
    theirs = (torchao_values(fmt, data_lp).reshape(blocks, BLOCK) * scale[:, None]).reshape(-1)
    ours = gc.decode(frame.tobytes())
    diff = np.flatnonzero(ours != theirs.numpy())
    assert diff.size == 0, (spec, diff[:5], ours[diff[:5]], theirs.numpy()[diff[:5]], x[diff[:5]])


def test_nan_blocks_get_the_nan_scale_in_both():
    x = sample(8, 3)
    x[5 * BLOCK + 7] = np.nan
    scale_e8m0, _ = mx_tensor.to_mx(torch.from_numpy(x.copy()), torch.float8_e4m3fn, BLOCK,
                                    ScaleCalculationMode.FLOOR)
    frame = np.frombuffer(gc.encode("mxfp8", x), dtype=np.uint8)
    assert frame[HEADER + 5] == 0xFF
    assert np.array_equal(frame[HEADER:HEADER + 8], scale_e8m0.view(torch.uint8).numpy())
