# SPDX-License-Identifier: Apache-2.0
"""The block-scaled element formats and scales against ml_dtypes, an implementation that
shares no code with gradcodec (docs/codecs.md "Block-scaled codecs").

Runs in the formats virtual environment (scripts/install-deps: NumPy 2 and ml-dtypes),
which imports the same nanobind module as Debian's Python.

- every code of every format decodes to ml_dtypes' value;
- dense sweeps of every binade (and every tie between neighbours) round to nearest even
  as ml_dtypes does, saturating where ml_dtypes overflows;
- stochastic rounding lands on ml_dtypes' two neighbours and is unbiased;
- whole mxfp8/mxfp6/mxfp4/mxint8, nvfp4 and fp8row frames decode to what NumPy and
  ml_dtypes compute from the documented scale rules (E8M0 scales via float8_e8m0fnu).

torchao's MX reference needs a current PyTorch, which CI's Debian torch 1.13 is not: it
runs in test_torchao_mx.py under scripts/test-current-torch.
"""
from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

import gradcodec as gc

FORMATS = {
    # fmt: (ml_dtypes type or None for int8, bits, largest value)
    "e4m3": (ml_dtypes.float8_e4m3fn, 8, 448.0),
    "e5m2": (ml_dtypes.float8_e5m2, 8, 57344.0),
    "e3m2": (ml_dtypes.float6_e3m2fn, 6, 28.0),
    "e2m3": (ml_dtypes.float6_e2m3fn, 6, 7.5),
    "e2m1": (ml_dtypes.float4_e2m1fn, 4, 6.0),
    "int8": (None, 8, 127 / 64),
}
EMAX = {"e4m3": 8, "e5m2": 15, "e3m2": 4, "e2m3": 2, "e2m1": 2, "int8": 0}


def codes_of(fmt, x, rounding="nearest", uniforms=None):
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = None if uniforms is None else np.ascontiguousarray(uniforms, dtype=np.float32)
    return np.frombuffer(gc.minifloat_codes(fmt, x, rounding, u), dtype=np.uint32)


def values_of(fmt, codes):
    codes = np.ascontiguousarray(codes, dtype=np.uint32)
    return np.frombuffer(gc.minifloat_values(fmt, codes.view(np.uint8)), dtype=np.float32)


def reference_values(fmt, codes):
    """ml_dtypes' value of each code (int8: two's complement times 2^-6)."""
    t, bits, _ = FORMATS[fmt]
    if t is None:
        return codes.astype(np.uint8).view(np.int8).astype(np.float32) / 64
    # ml_dtypes' sub-byte types hold one value per byte, in the low bits.
    return codes.astype(np.uint8).view(t).astype(np.float32)


def finite_grid(fmt):
    """Every finite non-negative value of the format, ascending."""
    _, bits, _ = FORMATS[fmt]
    v = reference_values(fmt, np.arange(2 ** (bits - 1), dtype=np.uint32))
    return np.unique(v[np.isfinite(v)])


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_code_decodes_to_ml_dtypes_value(fmt):
    _, bits, _ = FORMATS[fmt]
    codes = np.arange(2 ** bits, dtype=np.uint32)
    ours, want = values_of(fmt, codes), reference_values(fmt, codes)
    assert np.array_equal(np.isnan(ours), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(ours[ok].view(np.uint32), want[ok].view(np.uint32)), fmt


def binade_sweep(fmt):
    """Dense points in every binade from below the smallest subnormal to past the
    overflow threshold, the exact midpoints between neighbours and their f32 neighbours."""
    grid = finite_grid(fmt)
    lo = np.log2(grid[1]) - 3
    hi = np.log2(grid[-1]) + 2
    dense = np.concatenate([
        np.linspace(2.0 ** e, 2.0 ** (e + 1), 2048, endpoint=False, dtype=np.float64)
        for e in range(int(np.floor(lo)), int(np.ceil(hi)))
    ]).astype(np.float32)
    mids = ((grid[:-1].astype(np.float64) + grid[1:]) / 2).astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.float32(0)), mids,
                           np.nextafter(mids, np.float32(np.inf))])
    x = np.concatenate([dense, near, grid, [0.0]]).astype(np.float32)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("fmt", FORMATS)
def test_nearest_even_equals_ml_dtypes_and_saturates(fmt):
    t, _, largest = FORMATS[fmt]
    x = binade_sweep(fmt)
    ours = values_of(fmt, codes_of(fmt, x))
    if t is None:  # int8: k * 2^-6 rounded to nearest even, |k| <= 127
        want = np.clip(np.round(x.astype(np.float64) * 64), -127, 127) / 64
    else:
        want = x.astype(t).astype(np.float64)
    finite = np.isfinite(want) & (np.abs(want) <= largest)
    assert np.array_equal(ours[finite], want[finite].astype(np.float32)), fmt
    # Where ml_dtypes overflows (Inf for e5m2, NaN for the formats without Inf), gradcodec
    # keeps the largest value with the input's sign.
    over = ~finite
    assert np.array_equal(ours[over], np.sign(x[over]) * np.float32(largest))
    # -0.0 and values rounding to zero encode as +0 (code 0).
    assert codes_of(fmt, np.array([-0.0, -1e-30], np.float32)).tolist() == [0, 0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_stochastic_rounding_lands_on_the_two_neighbours_without_bias(fmt):
    rng = np.random.default_rng(7)
    grid = finite_grid(fmt)
    x = rng.uniform(-grid[-1], grid[-1], 4096).astype(np.float32)
    mag = np.abs(x)
    below = grid[np.searchsorted(grid, mag, side="right") - 1]
    above = grid[np.minimum(np.searchsorted(grid, mag, side="left"), len(grid) - 1)]
    for u in (0.0, 0.5, 1 - 2.0 ** -24):
        ours = np.abs(values_of(fmt, codes_of(fmt, x, "stochastic", np.full_like(x, u))))
        assert np.all((ours == below) | (ours == above)), (fmt, u)
    # u = 0 rounds every inexact magnitude up, u -> 1 down (P(up) = fraction).
    up = np.abs(values_of(fmt, codes_of(fmt, x, "stochastic", np.zeros_like(x))))
    assert np.array_equal(up, above)
    # Unbiased: the mean over a grid of uniforms is the value itself.
    xs = x[:64]
    us = (np.arange(4096, dtype=np.float64) / 4096).astype(np.float32)
    mean = np.mean([values_of(fmt, codes_of(fmt, xs, "stochastic", np.full_like(xs, u)))
                    for u in us], axis=0)
    step = np.maximum(above[:64] - below[:64], 1e-30)
    assert np.all(np.abs(mean - xs) <= step / 1024 + 1e-7 * np.abs(xs)), fmt


def frame_parts(frame):
    """(header fields, payload) of a gradcodec frame."""
    h = gc.peek(frame)
    return h, np.frombuffer(bytes(frame)[gc.header_bytes:], dtype=np.uint8)


def align16(x):
    return (x + 15) & ~15


def unpack_codes(payload, at, n, bits):
    stream = np.unpackbits(payload[at:at + (n * bits + 7) // 8], bitorder="little")
    w = stream[: n * bits].reshape(n, bits).astype(np.uint32)
    return (w << np.arange(bits, dtype=np.uint32)).sum(axis=1).astype(np.uint32)


def quantize(fmt, r):
    """ml_dtypes' nearest-even conversion with gradcodec's saturation (clip first: equal
    to rounding and then saturating, since the largest value is representable)."""
    t, _, largest = FORMATS[fmt]
    r = np.clip(r.astype(np.float32), -largest, largest)
    if t is None:
        return (np.round(r.astype(np.float64) * 64) / 64).astype(np.float32)
    return r.astype(t).astype(np.float32)


MX = [("mxfp8", "e4m3"), ("mxfp8", "e5m2"), ("mxfp6", "e3m2"), ("mxfp6", "e2m3"),
      ("mxfp4", "e2m1"), ("mxint8", "int8")]


def sample(n, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-12, 12, n))).astype(np.float32)
    x[5] = 0.0
    x[64:96] = 0.0  # an all-zero block
    return x


@pytest.mark.parametrize("codec,fmt", MX)
def test_mx_frames_equal_the_ocp_rule_with_ml_dtypes(codec, fmt):
    n, block = 1000, 32
    x = sample(n, 3)
    spec = f"{codec}:block={block}" + (f",fmt={fmt}" if codec in ("mxfp8", "mxfp6") else "")
    frame = gc.encode(spec, x)
    h, payload = frame_parts(frame)
    blocks = -(-n // block)
    scales = payload[:blocks]
    want = np.empty(n, np.float32)
    for b in range(blocks):
        v = x[b * block:(b + 1) * block]
        amax = np.max(np.abs(v))
        e = int(np.floor(np.log2(amax))) if amax >= 2.0 ** -126 else -127
        code = min(max(e - EMAX[fmt] + 127, 0), 254)
        assert scales[b] == code, (b, amax)
        scale = np.float32(np.array([code], np.uint8).view(ml_dtypes.float8_e8m0fnu)[0])
        assert scale == np.float32(2.0 ** (code - 127))
        want[b * block:(b + 1) * block] = quantize(fmt, v / scale) * scale
    assert np.array_equal(gc.decode(frame), want)
    bits = FORMATS[fmt][1]
    codes = unpack_codes(payload, align16(blocks), n, bits)
    assert np.array_equal(values_of(fmt, codes), quantize(fmt, x / np.repeat(
        np.array([2.0 ** (int(c) - 127) for c in scales], np.float32), block)[:n]))


def test_nvfp4_frame_equals_the_documented_rule():
    n = 1000
    x = sample(n, 4)
    frame = gc.encode("nvfp4", x)
    _, payload = frame_parts(frame)
    g = np.float32(struct.unpack("<f", payload[:4].tobytes())[0])
    assert g == np.float32(np.max(np.abs(x)) / np.float32(2688))
    blocks = -(-n // 16)
    want = np.empty(n, np.float32)
    for b in range(blocks):
        v = x[b * 16:(b + 1) * 16]
        s = np.float32(np.float32(np.max(np.abs(v)) / np.float32(6)) / g)
        s8 = np.array([min(s, 448)], np.float32).astype(ml_dtypes.float8_e4m3fn)
        assert payload[16 + b] == s8.view(np.uint8)[0]
        d = np.float32(np.float32(s8.astype(np.float32)[0]) * g)
        e = np.float32(min(np.float32(1) / d, np.float32(2.0 ** 126))) if d > 0 else None
        want[b * 16:(b + 1) * 16] = 0 if e is None else quantize("e2m1", v * e) * d
    assert np.array_equal(gc.decode(frame), want)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8row_frame_equals_the_documented_rule(fmt):
    rows, cols = 8, 125
    x = sample(rows * cols, 5)
    x[3 * cols:4 * cols] = 0  # an all-zero row: the capped multiplier
    # Row 4: w * t = 200 exactly, a tie that rounds to 192; dividing by amax / 448 instead
    # rounds to 200.00002 and 208 (e4m3).
    x[4 * cols:5 * cols] = np.float32(0.5)
    x[4 * cols:4 * cols + 2] = [np.float32("2.1981685"), np.float32("0.98132527")]
    frame = gc.encode(f"fp8row:fmt={fmt}", x.reshape(rows, cols))
    h, payload = frame_parts(frame)
    assert h.group == cols
    scales = payload[:4 * rows].view(np.float32)
    largest = np.float32(FORMATS[fmt][2])
    with np.errstate(divide="ignore"):
        for r in range(rows):
            t = np.float32(largest / np.max(np.abs(x[r * cols:(r + 1) * cols])))
            assert scales[r] == min(t, np.float32(2.0 ** 126))
    want = np.concatenate([
        quantize(fmt, x[r * cols:(r + 1) * cols] * scales[r]) * (np.float32(1) / scales[r])
        for r in range(rows)])
    assert np.array_equal(gc.decode(frame), want)


# Factor of the unrotated error the rotated error stays below. Outliers cost the E8M0
# formats most (a power-of-two scale set by the outlier), and rotation recovers it; the
# f32 and E4M3 scales already fit the block, and rotating shorter pieces (fp8row's 100 =
# 64 + 32 + 4) gains nothing.
@pytest.mark.parametrize("spec,factor", [("mxfp4:rotate=1,rounding=stochastic", 0.75),
                                         ("mxfp8:rotate=1", 0.8), ("nvfp4:rotate=1", 1.5),
                                         ("fp8row:rotate=1,block=100", 2.0)])
def test_rotation_is_orthogonal_and_decodes_without_the_context(spec, factor):
    # Gaussian with rare outliers, the data rotation is for. (On data spanning many
    # decades inside one block, rotation costs precision: it mixes small values with large
    # ones, where plain floating-point elements keep each value's own relative precision.)
    rng = np.random.default_rng(6)
    x = rng.standard_normal(4096).astype(np.float32)
    x[rng.choice(4096, 40, replace=False)] *= 20
    frame = gc.encode(spec, x, seed=11, step=3, tensor_id=2)
    y = gc.decode(frame)  # the key material travels in the frame
    plain = gc.decode(gc.encode(spec.replace("rotate=1", "rotate=0"), x, seed=11, step=3,
                                tensor_id=2))
    err_rot = np.linalg.norm(y - x) / np.linalg.norm(x)
    err_plain = np.linalg.norm(plain - x) / np.linalg.norm(x)
    assert err_rot < factor * err_plain, (err_rot, err_plain)
    # Another seed flips other signs: other bytes, similar error.
    other = gc.encode(spec, x, seed=12, step=3, tensor_id=2)
    assert bytes(other) != bytes(frame)
