# SPDX-License-Identifier: Apache-2.0
"""The gradcodec Python API: round trips, zero-copy behaviour, error paths, PowerSGD."""

import ast
import ctypes
import os
import pathlib
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

import gradcodec as gc

try:
    import torch
except ImportError:  # the torch-specific tests skip themselves
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch")

SPECS = [
    "topk:ratio=0.05",
    "dgc:ratio=0.02",
    "randomk:ratio=0.1",
    "randomk:ratio=0.1,unbiased=1",
    "threshold:tau=1.5",
    "qsgd:levels=7",
    "qsgd:levels=3,norm=max,rounding=nearest",
    "terngrad",
    "minmax:bits=4",
    "minmax:bits=2,rounding=stochastic",
    "onebit:bucket=64",
    "sign",
    "sign:scale=mean,bucket=100",
    "fp16",
    "bf16",
    "powersgd:rank=2",
]
FIXED_SIZE = [s for s in SPECS if not s.startswith(("threshold", "powersgd"))]


def grad(n=1000, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def expect_error(code, fn, *args, **kwargs):
    with pytest.raises(gc.Error) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, str(info.value)
    assert str(info.value)  # the library's message
    return info.value


# --- module, specs --------------------------------------------------------------------


def test_version_backends_and_codec_list():
    assert gc.__version__ == "0.4.0"
    assert gc.header_bytes == 48 and gc.format_version == 1
    assert "reference" in gc.backends()
    assert gc.backend_available("reference") and gc.backend_available("auto")
    for name in ("reference", "cpu", "cuda"):
        why = gc.backend_unavailable_reason(name)
        assert (why == "") == gc.backend_available(name), (name, why)
    expect_error(gc.StatusCode.invalid_argument, gc.backend_available, "tpu")
    names = [c["name"] for c in gc.codecs()]
    assert names == ["topk", "dgc", "randomk", "threshold", "qsgd", "terngrad", "minmax",
                     "onebit", "sign", "fp16", "bf16", "powersgd",
                     "mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4", "fp8row"]
    qsgd = gc.codecs()[4]
    assert qsgd["id"] == 5 and qsgd["unbiased"]
    assert {p["key"] for p in qsgd["params"]} >= {"levels", "bucket", "norm", "rounding"}
    assert gc.cpu_isa() in ("scalar", "avx2", "avx512")
    assert gc.cpu_isa_supported("scalar")
    assert gc.cpu_default_threads() >= 1


def test_every_codec_describes_its_header_fields_and_collectives():
    for c in gc.codecs():
        codec = gc.Codec(c["name"])
        assert codec.collectives == c["collectives"] and codec.collectives["allgather"]
        assert set(c["header"]) == {"count", "group", "level", "param"}
    assert gc.Codec("sign").collectives["majority_vote"]
    assert not gc.Codec("topk").collectives["dense"]
    assert gc.Codec("powersgd").info["header"]["count"] == "rows"


@needs_torch
def test_the_hook_strategy_follows_the_codec_descriptors():
    from gradcodec import torch as gct
    for c in gc.codecs():
        codec = gc.Codec(c["name"])
        gct._check_strategy(codec, gct.default_strategy(codec))  # the default is accepted
    assert gct.default_strategy(gc.Codec("sign:scale=none")) == "vote"
    assert gct.default_strategy(gc.Codec("randomk")) == "dense"
    assert gct.default_strategy(gc.Codec("powersgd")) == "powersgd"
    assert gct.default_strategy(gc.Codec("mxfp8")) == "two_phase"
    assert gct.default_strategy(gc.Codec("topk")) == "allgather"
    with pytest.raises(ValueError):
        gct._check_strategy(gc.Codec("topk"), "dense")


def test_codec_spec_strings_params_and_pickling():
    c = gc.Codec("qsgd:levels=7,bucket=256")
    assert c.name == "qsgd" and c.id == 5
    assert c.spec == str(c) == "qsgd:levels=7,bucket=256,norm=max,rounding=stochastic"
    assert repr(c) == f"Codec('{c.spec}')"
    assert c.params["levels"] == 7 and c.params["bucket"] == 256
    assert c.params["rounding"] == "stochastic"
    assert gc.Codec(c.spec) == c and hash(gc.Codec(c.spec)) == hash(c)
    assert gc.Codec(c) == c
    assert gc.Codec("qsgd", levels=7, bucket=256) == c
    assert gc.Codec("randomk", ratio=0.5, unbiased=True).params["unbiased"] is True
    assert gc.Codec("topk") != gc.Codec("topk:ratio=0.5")
    assert gc.Codec("topk") != "topk"
    assert pickle.loads(pickle.dumps(c)) == c
    assert c.info["name"] == "qsgd"
    assert gc.Codec("topk:ratio=0.25").params["ratio"] == 0.25


@pytest.mark.parametrize("text, needle", [
    ("nosuch", "unknown codec 'nosuch'"),
    ("topk:ration=0.1", "unknown key 'ration'"),
    ("topk:ratio=2", "ratio must be in (0, 1]"),
    ("qsgd:levels=0", "levels must be in 1..127"),
])
def test_bad_spec_raises_error_with_library_message(text, needle):
    err = expect_error(gc.StatusCode.invalid_spec, gc.Codec, text)
    assert needle in str(err)
    assert isinstance(err, ValueError) and isinstance(err, RuntimeError)
    expect_error(gc.StatusCode.invalid_spec, gc.encode, text, grad())
    with pytest.raises(TypeError):
        gc.encode(42, grad())


def test_error_is_picklable_and_constructible():
    e = gc.Error("frame is bad", gc.StatusCode.corrupt_frame)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is gc.Error and back.code == gc.StatusCode.corrupt_frame
    assert str(back) == "frame is bad"
    assert gc.Error("x").code == gc.StatusCode.internal_error
    assert int(gc.StatusCode.corrupt_frame) == 5


# --- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS)
def test_round_trip_every_codec(spec):
    codec = gc.Codec(spec)
    x = grad(1000)
    frame = codec.encode(x, seed=3, step=1, tensor_id=2)
    assert frame.dtype == np.uint8 and frame.ndim == 1
    bound = codec.encode_bound(x.size)
    assert len(frame) <= bound
    if spec in FIXED_SIZE:
        assert len(frame) == bound
    info = gc.peek(frame)
    assert isinstance(info, gc.FrameInfo)
    assert info.codec == codec.name and info.n == 1000 and info.dtype == "f32"
    assert info.frame_bytes == len(frame) and not info.nonfinite
    assert info.as_dict()["codec"] == codec.name and "FrameInfo(" in repr(info)
    assert gc.Codec.from_frame(frame).name == codec.name
    y = gc.decode(frame)
    assert y.dtype == np.float32 and y.shape == (1000,)
    assert np.all(np.isfinite(y))
    # The same context gives the same bytes; the reference backend agrees with the default.
    assert np.array_equal(codec.encode(x, seed=3, step=1, tensor_id=2), frame)
    assert np.array_equal(codec.encode(x, seed=3, step=1, tensor_id=2, backend="reference"),
                          frame)
    assert np.array_equal(gc.decode(frame, backend="reference"), y)
    # decode_accumulate: acc = fma(alpha, v, acc); alpha = 0.5 makes the product exact.
    acc = grad(1000, seed=9)
    want = acc + np.float32(0.5) * y
    gc.decode_accumulate(frame, acc, 0.5)
    assert np.array_equal(acc, want)
    # Module functions equal the methods.
    assert np.array_equal(gc.encode(spec, x, seed=3, step=1, tensor_id=2), frame)
    assert gc.encode_bound(spec, 1000) == bound


def test_exact_values_for_simple_codecs():
    x = grad(1000)
    assert np.array_equal(gc.decode(gc.encode("fp16", x)), x.astype(np.float16).astype(np.float32))
    y = gc.decode(gc.encode("topk:k=10", x))
    top = np.argsort(-np.abs(x), kind="stable")[:10]
    assert np.array_equal(np.flatnonzero(y), np.sort(top))
    assert np.array_equal(y[top], x[top])
    # Stochastic codecs depend on the step.
    a = gc.encode("qsgd", x, seed=1, step=0)
    b = gc.encode("qsgd", x, seed=1, step=1)
    assert not np.array_equal(a, b)


def test_float16_input_and_output_dtypes_and_shapes():
    x = grad(600, dtype=np.float16)
    frame = gc.encode("fp16", x)
    assert gc.peek(frame).dtype == "f16"
    y = gc.decode(frame)
    assert y.dtype == np.float16 and np.array_equal(y, x)
    z = gc.decode(frame, shape=(20, 30), dtype="f32")
    assert z.shape == (20, 30) and z.dtype == np.float32
    assert np.array_equal(z.ravel(), x.astype(np.float32))
    assert gc.decode(frame, dtype=np.float32).dtype == np.float32
    expect_error(gc.StatusCode.shape_mismatch, gc.decode, frame, shape=(7, 7))
    expect_error(gc.StatusCode.invalid_argument, gc.decode, frame, dtype="bf16")
    with pytest.raises(ValueError):
        gc.decode(frame, dtype="int8")


def test_decode_writes_into_out_without_copies():
    x = grad(1000)
    frame = gc.encode("minmax", x)
    out = np.full((10, 100), 7.0, dtype=np.float32)
    res = gc.decode(frame, out)
    assert res is out
    assert np.array_equal(out.ravel(), gc.decode(frame))
    buf = np.zeros(4096, dtype=np.uint8)
    view = gc.encode("minmax", x, out=buf)
    assert np.shares_memory(view, buf) and len(view) == len(frame)
    assert np.array_equal(view, frame)
    # Frames may be any bytes-like object.
    assert np.array_equal(gc.decode(bytes(frame)), gc.decode(frame))
    assert gc.peek(bytearray(frame)).n == 1000


def test_encode_with_feedback_updates_residual_in_place():
    g = grad(1000)
    e = grad(1000, seed=1) * np.float32(0.1)
    p = g + e
    residual = e.copy()
    frame = gc.encode_with_feedback("topk:ratio=0.05", g, residual, seed=1)
    assert np.array_equal(residual, p - gc.decode(frame))
    # The frame is the plain encode of p.
    assert np.array_equal(frame, gc.encode("topk:ratio=0.05", p, seed=1))
    r2 = e.copy()
    assert np.array_equal(gc.Codec("topk:ratio=0.05").encode_with_feedback(g, r2, seed=1), frame)
    assert np.array_equal(r2, residual)


def test_variable_size_frame_is_returned_at_its_size():
    x = grad(100_000)
    frame = gc.encode("threshold:tau=4", x)
    info = gc.peek(frame)
    assert len(frame) == info.frame_bytes < gc.encode_bound("threshold:tau=4", x.size) // 2
    assert frame.base is None or frame.base.nbytes == len(frame)  # not a view of the bound
    assert np.count_nonzero(gc.decode(frame)) == info.count == np.count_nonzero(np.abs(x) >= 4)


def test_majority_vote():
    frames = [gc.encode("sign:bucket=64", grad(500, seed=s)) for s in range(3)]
    votes = gc.sign_majority_vote(frames)
    signs = np.stack([np.where(grad(500, seed=s) < 0, -1, 1) for s in range(3)])
    assert np.array_equal(votes, np.sign(signs.sum(axis=0)).astype(np.float32))
    out = np.empty(500, dtype=np.float32)
    assert gc.sign_majority_vote(frames[:2], out, 0.5) is out
    assert set(np.unique(out)) <= {-0.5, 0.0, 0.5}
    expect_error(gc.StatusCode.invalid_argument, gc.sign_majority_vote, [])
    expect_error(gc.StatusCode.corrupt_frame, gc.sign_majority_vote,
                 [gc.encode("qsgd", grad(500))])


def test_nonfinite_is_flagged_or_refused():
    x = grad(1000)
    x[10] = np.nan
    assert gc.peek(gc.encode("qsgd", x)).nonfinite
    assert np.isnan(gc.decode(gc.encode("qsgd", x))[10])
    expect_error(gc.StatusCode.nonfinite_input, gc.encode, "qsgd:nonfinite=error", x)


# --- error paths ----------------------------------------------------------------------


def test_corrupt_and_truncated_frames():
    x = grad(1000)
    frame = gc.encode("topk:ratio=0.05", x)
    bad = frame.copy()
    bad[20] ^= 1  # payload_bytes field: the header checksum catches it
    expect_error(gc.StatusCode.corrupt_frame, gc.decode, bad)
    expect_error(gc.StatusCode.corrupt_frame, gc.peek, bad)
    expect_error(gc.StatusCode.corrupt_frame, gc.decode, frame[:-16])
    expect_error(gc.StatusCode.corrupt_frame, gc.peek, frame[:40])
    # An index out of range in the payload: rejected before anything is written.
    k = gc.peek(frame).count
    idx_off = 48 + ((4 * k + 15) // 16) * 16
    bad = frame.copy()
    bad[idx_off + 4 * (k - 1):idx_off + 4 * k] = np.frombuffer(
        np.uint32(5000).tobytes(), dtype=np.uint8)
    out = np.full(1000, 3.0, dtype=np.float32)
    err = expect_error(gc.StatusCode.corrupt_frame, gc.decode, bad, out)
    assert "index" in str(err)
    assert np.all(out == 3.0)
    bad = frame.copy()
    bad[4] = 9  # version
    expect_error(gc.StatusCode.unsupported_version, gc.decode, bad)


def test_decode_against_an_expected_header():
    """decode_expected equals decode for every frame of the codec (another count for
    threshold); a damaged frame leaves its verdict, raises, and writes nothing."""
    for spec in ("topk:ratio=0.05", "threshold:tau=1.5", "qsgd:levels=7", "fp16"):
        expected = gc.peek(gc.encode(spec, grad(1000, seed=1)))
        frame = gc.encode(spec, grad(1000, seed=2) * 1.5)
        want = gc.decode(frame)
        out = np.full(1000, 7.0, dtype=np.float32)
        verdict = np.full(16, 0xA5, dtype=np.uint8)
        gc.decode_expected(expected, frame, out, verdict)
        assert np.array_equal(out, want), spec
        assert not verdict[:4].any(), spec  # the code: ok
        acc = np.ones(1000, dtype=np.float32)
        gc.decode_accumulate_expected(expected, frame, acc, verdict, 0.5)
        assert np.array_equal(acc, np.ones(1000, dtype=np.float32) + np.float32(0.5) * want)

    expected = gc.peek(gc.encode("qsgd:levels=7", grad(1000, seed=1)))
    other = gc.encode("qsgd:levels=15", grad(1000, seed=2))
    out = np.full(1000, 7.0, dtype=np.float32)
    verdicts = np.zeros((2, 16), dtype=np.uint8)
    err = expect_error(gc.StatusCode.corrupt_frame, gc.decode_expected, expected, other, out,
                       verdicts[1])
    assert "'level'" in str(err)
    assert np.all(out == 7.0)
    assert verdicts[1, 0] == 5  # unexpected_field
    err = expect_error(gc.StatusCode.corrupt_frame, gc.check_verdicts, verdicts)
    assert "frame 1" in str(err)
    gc.check_verdicts(verdicts[:1])  # a good verdict raises nothing
    with pytest.raises(gc.Error):
        gc.decode_expected(expected, other, out, np.zeros(8, dtype=np.uint8))


def test_misaligned_array_is_refused():
    # numpy allows an f32 array at an odd byte offset; the library refuses it before reading
    x = np.frombuffer(bytearray(4 * 9), dtype=np.float32, offset=2, count=8)
    assert not x.flags.aligned
    err = expect_error(gc.StatusCode.invalid_argument, gc.encode, "fp16", x)
    assert "aligned" in str(err)


def test_wrong_shapes_dtypes_and_buffers():
    x = grad(1000)
    frame = gc.encode("qsgd", x)
    expect_error(gc.StatusCode.shape_mismatch, gc.decode, frame, np.zeros(999, np.float32))
    expect_error(gc.StatusCode.shape_mismatch, gc.decode_accumulate, frame,
                 np.zeros(1001, np.float32), 1.0)
    expect_error(gc.StatusCode.shape_mismatch, gc.encode_with_feedback, "qsgd", x,
                 np.zeros(999, np.float32))
    with pytest.raises(TypeError):
        gc.encode("qsgd", x.astype(np.float64))  # no implicit conversions
    with pytest.raises(TypeError):
        gc.decode(frame, np.zeros(1000, np.int32))
    with pytest.raises(TypeError):
        gc.decode(frame.view(np.int16))  # frames are bytes
    with pytest.raises(TypeError):
        gc.encode("qsgd", [1.0, 2.0])
    ro = np.zeros(1000, np.float32)
    ro.flags.writeable = False
    with pytest.raises(TypeError):
        gc.decode(frame, ro)
    err = expect_error(gc.StatusCode.invalid_argument, gc.encode, "qsgd",
                       grad(2000).reshape(40, 50)[:, ::2])
    assert "contiguous" in str(err)
    expect_error(gc.StatusCode.output_too_small, gc.encode, "qsgd", x,
                 out=np.zeros(100, np.uint8))
    with pytest.raises(TypeError):
        gc.encode("qsgd", x, out=np.zeros((10, 1000), np.uint8))  # out must be 1-D
    expect_error(gc.StatusCode.invalid_argument, gc.encode, "qsgd", x, backend="nosuch")
    expect_error(gc.StatusCode.invalid_argument, gc.Codec("qsgd").workspace_size, 10,
                 operation="compress")


# --- torch tensors through DLPack -----------------------------------------------------


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_torch_tensors_round_trip_without_copies(dtype):
    t = torch.from_numpy(grad(1000)).to(getattr(torch, dtype))
    frame = gc.encode("topk:ratio=0.1", t, seed=1)
    assert gc.peek(frame).dtype == {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    out = torch.zeros(1000, dtype=t.dtype)
    assert gc.decode(frame, out) is out
    kept = out != 0
    assert int(kept.sum()) == 100 and torch.equal(out[kept], t[kept])
    buf = torch.zeros(8192, dtype=torch.uint8)
    view = gc.encode("topk:ratio=0.1", t, seed=1, out=buf)
    assert isinstance(view, torch.Tensor) and view.data_ptr() == buf.data_ptr()
    assert np.array_equal(view.numpy(), frame)
    residual = torch.zeros(1000, dtype=torch.float32)
    gc.encode_with_feedback("topk:ratio=0.1", t, residual, seed=1)
    assert torch.equal(residual, torch.where(kept, torch.zeros(()), t.float()))
    acc = torch.zeros(1000)
    gc.decode_accumulate(frame, acc, 1.0)
    assert torch.equal(acc, out.float())


@needs_torch
def test_torch_matrix_rows_and_noncontiguous():
    m = torch.from_numpy(grad(64 * 48)).reshape(64, 48)
    frame = gc.encode("powersgd:rank=2", m)
    assert gc.peek(frame).count == 64  # rows from shape[0]
    assert gc.peek(gc.encode("powersgd:rank=2", m, rows=48)).count == 48
    expect_error(gc.StatusCode.invalid_argument, gc.encode, "topk", m.t())


@needs_torch
def test_cuda_tensors_need_the_cuda_backend():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    t = torch.zeros(100, device="cuda")
    if gc.backend_available("cuda"):
        frame = gc.encode("fp16", t)
        assert gc.peek(frame).n == 100
    else:
        expect_error(gc.StatusCode.backend_unavailable, gc.encode, "fp16", t)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class FakeCudaArray:
    """A DLPack producer that says its (host) memory is on cuda:0, so the device checks of
    the bindings can be reached without a GPU. Nothing may read or write its memory as
    device memory: only calls refused before that are made with it."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)
        self.shape = (ctypes.c_int64 * self.array.ndim)(*self.array.shape)
        self.managed = _DLManagedTensor()  # no deleter: this object owns everything
        t = self.managed.dl_tensor
        t.data = self.array.ctypes.data
        t.device = _DLDevice(2, 0)  # kDLCUDA
        t.ndim = self.array.ndim
        t.dtype = _DLDataType({"i": 0, "u": 1, "f": 2}[self.array.dtype.kind],
                              8 * self.array.dtype.itemsize, 1)
        t.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))

    def __dlpack__(self, **kwargs):
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def test_cuda_memory_is_refused_before_it_is_touched_where_it_cannot_work():
    """Host-only APIs (PowerSGD states, the majority vote) refuse CUDA memory with a message
    saying so; the PowerSGD phases take CUDA arrays only all on one device and only with the
    CUDA backend (without it, or with a host array that claims to be CUDA memory, they are
    refused before anything runs)."""
    x = grad(1000)
    frame = gc.encode("sign:bucket=64", x)
    spec = gc.Codec("powersgd:rank=2")
    q = np.zeros(24, np.float32)
    # A FakeCudaArray is host memory: the CUDA backend refuses it, its absence refuses all.
    code = (gc.StatusCode.invalid_argument if gc.backend_available("cuda")
            else gc.StatusCode.backend_unavailable)
    err = expect_error(code, gc.powersgd_compute_p, spec,
                       FakeCudaArray(grad(192).reshape(16, 12)), np.zeros(192, np.float32), q,
                       np.zeros(32, np.float32))
    assert "grad" in str(err)
    expect_error(code, gc.powersgd_init_q, spec, 16, 12, FakeCudaArray(q))
    expect_error(code, gc.powersgd_finish, spec, np.zeros(32, np.float32), q, 1,
                 np.zeros(192, np.float32), FakeCudaArray(np.zeros((16, 12), np.float32)))
    assert np.all(q == 0)
    state = gc.PowerSGDState(spec, 16, 12).save()
    expect_error(gc.StatusCode.invalid_argument, gc.powersgd_peek_state, FakeCudaArray(state))
    err = expect_error(gc.StatusCode.invalid_argument, gc.sign_majority_vote,
                       [FakeCudaArray(frame)])
    assert "cuda:0" in str(err) and "host" in str(err)
    expect_error(gc.StatusCode.invalid_argument, gc.sign_majority_vote, [frame],
                 FakeCudaArray(np.zeros(1000, np.float32)))
    if gc.backend_available("cuda"):
        return  # the rest would hand host memory to the CUDA backend
    for fn, args, kwargs in [
        (gc.encode, ("qsgd", FakeCudaArray(x)), {}),
        (gc.encode, ("qsgd", x), dict(out=FakeCudaArray(np.zeros(4096, np.uint8)))),
        (gc.encode_with_feedback, ("qsgd", x, FakeCudaArray(np.zeros(1000, np.float32))), {}),
        (gc.decode, (FakeCudaArray(frame),), {}),
        (gc.decode, (frame, FakeCudaArray(np.zeros(1000, np.float32))), {}),
        (gc.decode_accumulate, (FakeCudaArray(frame), np.zeros(1000, np.float32)), {}),
        (gc.peek, (FakeCudaArray(frame),), {}),
    ]:
        err = expect_error(gc.StatusCode.backend_unavailable, fn, *args, **kwargs)
        assert "CUDA" in str(err)


def test_host_arrays_never_import_torch():
    """numpy users need no PyTorch: torch is imported only when a CUDA array shows up."""
    code = "\n".join([
        "import sys, numpy as np, gradcodec as gc",
        "x = np.linspace(-1, 1, 1000, dtype=np.float32)",
        "for spec in ('topk:ratio=0.1', 'threshold:tau=0.5', 'qsgd', 'powersgd'):",
        "    f = gc.encode(spec, x)",
        "    gc.peek(f); gc.decode(f); gc.decode_accumulate(f, np.zeros_like(x))",
        "    gc.encode_with_feedback(spec, x, np.zeros_like(x), out=np.empty(1 << 16, np.uint8))",
        "st = gc.PowerSGDState('powersgd', 40, 25)",
        "st.compute_p(x.reshape(40, 25)); st.compute_q(); st.finish()",
        "assert 'torch' not in sys.modules, 'gradcodec imported torch'",
    ])
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


def test_bounds_state_when_error_feedback_is_safe():
    b = gc.Codec("qsgd:norm=l2").bounds()
    assert set(b) == {"unbiased", "variance", "max_relative", "max_absolute", "feedback_safe",
                      "residual_gain", "reason"}
    assert b["unbiased"] and not b["feedback_safe"] and b["variance"] == 512 / 196
    assert "l2 norm" in b["reason"]
    assert gc.Codec("qsgd").bounds()["feedback_safe"]  # the max norm, the default
    assert gc.Codec("topk:ratio=0.01").bounds(1000)["variance"] == 0.99
    assert gc.Codec("onebit:bucket=64").bounds()["residual_gain"] == 63
    for c in gc.codecs():
        assert gc.Codec(c["name"]).bounds()["reason"], c["name"]


@pytest.mark.parametrize("env, want", [({"OMP_NUM_THREADS": "3"}, 3),
                                       ({"GRADCODEC_CPU_THREADS": "2", "OMP_NUM_THREADS": "5"}, 2),
                                       ({}, 1)])
def test_default_threads_follow_what_the_process_was_given(env, want):
    """GRADCODEC_CPU_THREADS, else OMP_NUM_THREADS, else the affinity mask (one CPU here)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OMP_NUM_THREADS", "GRADCODEC_CPU_THREADS")}
    cmd = [sys.executable, "-c", "import gradcodec; print(gradcodec.cpu_default_threads())"]
    if not env:
        if not hasattr(os, "sched_setaffinity"):
            pytest.skip("no sched_setaffinity on this platform")
        cmd = ["taskset", "-c", "0"] + cmd
        if shutil.which("taskset") is None:
            pytest.skip("taskset (util-linux) is not installed")
    out = subprocess.run(cmd, check=True, env=dict(clean, **env), capture_output=True, text=True)
    assert int(out.stdout) == want


# --- PowerSGD -------------------------------------------------------------------------


def low_rank(rows, cols, rank, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, cols))).astype(
        np.float32)


def test_powersgd_state_single_rank_recovers_a_low_rank_matrix():
    m = low_rank(40, 30, 2)
    st = gc.PowerSGDState("powersgd:rank=2", 40, 30, seed=5, error_feedback=False)
    assert st.rank == 2 and st.compresses and st.q.shape == (30, 2)
    out = None
    for _ in range(3):  # warm-started power iteration converges on an exact rank 2
        st.compute_p(m)
        st.compute_q()
        out = st.finish(world_size=1)
    assert st.step == 3
    np.testing.assert_allclose(out, m, rtol=0, atol=1e-4 * np.abs(m).max())
    # Q starts from the shared seed: the same for the same (seed, tensor id).
    a = gc.PowerSGDState("powersgd:rank=2", 40, 30, seed=5, tensor_id=1)
    b = gc.PowerSGDState("powersgd:rank=2", 40, 30, seed=5, tensor_id=1)
    c = gc.PowerSGDState("powersgd:rank=2", 40, 30, seed=5, tensor_id=2)
    assert np.array_equal(a.q, b.q) and not np.array_equal(a.q, c.q)


def test_powersgd_error_feedback_keeps_the_rest():
    g = grad(40 * 30).reshape(40, 30)
    st = gc.PowerSGDState("powersgd:rank=1", 40, 30)
    st.compute_p(g)
    st.compute_q()
    out = st.finish(world_size=1)
    assert np.array_equal(st.residual, g - out)


def test_powersgd_save_load_round_trip_and_corruption():
    st = gc.PowerSGDState("powersgd:rank=2", 12, 8, seed=1)
    for s in range(2):
        st.compute_p(grad(96, seed=s).reshape(12, 8))
        st.compute_q()
        st.finish(world_size=1)
    data = st.save()
    assert data.dtype == np.uint8 and len(data) == gc.powersgd_state_bytes(12, 8, 2)
    assert gc.powersgd_peek_state(data) == {"rows": 12, "cols": 8, "rank": 2, "step": 2}
    other = gc.PowerSGDState("powersgd:rank=2", 12, 8, seed=99)
    other.load(data)
    assert other.step == 2
    assert np.array_equal(other.q, st.q) and np.array_equal(other.residual, st.residual)
    assert np.array_equal(other.save(), data)
    bad = data.copy()
    bad[60] ^= 0x40
    q_before = other.q.copy()
    expect_error(gc.StatusCode.corrupt_frame, other.load, bad)
    assert np.array_equal(other.q, q_before)
    expect_error(gc.StatusCode.corrupt_frame, other.load, data[:-4])
    wrong = gc.PowerSGDState("powersgd:rank=2", 8, 12)
    expect_error(gc.StatusCode.shape_mismatch, wrong.load, data)
    with pytest.raises(ValueError):
        gc.PowerSGDState("topk", 4, 4)


def test_powersgd_phase_functions_check_sizes():
    spec = gc.Codec("powersgd:rank=2")
    q = np.zeros(7, np.float32)
    expect_error(gc.StatusCode.shape_mismatch, gc.powersgd_init_q, spec, 4, 4, q)
    expect_error(gc.StatusCode.invalid_argument, gc.powersgd_init_q, "topk", 4, 4, q)
    p = np.zeros(8, np.float32)
    expect_error(gc.StatusCode.shape_mismatch, gc.powersgd_compute_p, spec,
                 np.zeros((4, 4), np.float32), np.zeros(16, np.float32), q, p)
    with pytest.raises(TypeError):
        gc.powersgd_orthogonalize(np.zeros(8, np.float64), 4, 2)
    a = np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32)
    gc.powersgd_orthogonalize(a, 10, 3, 0.0)
    np.testing.assert_allclose(a.T @ a, np.eye(3), atol=1e-5)
    assert gc.powersgd_rank(spec, 100, 1) == 1
    assert not gc.powersgd_compresses(spec, 100, 1)


def test_powersgd_batch_orthogonalization_and_projection_equal_compute_q():
    spec = gc.Codec("powersgd:rank=2")
    rng = np.random.default_rng(5)
    shapes = [(9, 7), (30, 20), (4, 11)]
    layout, at = [], 0
    for rows, _ in shapes:
        layout.append((at, rows, 2))
        at += rows * 2
    p_batch = rng.standard_normal(at).astype(np.float32)
    p_each = p_batch.copy()
    gc.powersgd_orthogonalize_batch(p_batch, layout, spec.params["eps"])
    for (off, rows, r), (_, cols) in zip(layout, shapes):
        m = rng.standard_normal(rows * cols).astype(np.float32)
        q_each = np.zeros(cols * r, np.float32)
        q_proj = np.zeros(cols * r, np.float32)
        gc.powersgd_compute_q(spec, p_each[off:off + rows * r], m, rows, cols, q_each)
        gc.powersgd_project_q(spec, p_batch[off:off + rows * r], m, rows, cols, q_proj)
        assert q_proj.tobytes() == q_each.tobytes()
    assert p_batch.tobytes() == p_each.tobytes()
    with pytest.raises(ValueError):
        gc.powersgd_orthogonalize_batch(p_batch, [(at - 1, 1, 2)])
    expect_error(gc.StatusCode.invalid_argument, gc.powersgd_orthogonalize_batch, p_batch,
                 [(0, 4, 2), (6, 4, 2)])  # overlapping


@needs_torch
def test_powersgd_phases_take_torch_tensors():
    spec = gc.Codec("powersgd:rank=2")
    rows, cols = 16, 12
    q = torch.empty(cols * 2)
    gc.powersgd_init_q(spec, rows, cols, q, seed=3)
    m = torch.zeros(rows * cols)
    p = torch.empty(rows * 2)
    g = torch.from_numpy(low_rank(rows, cols, 2))
    gc.powersgd_compute_p(spec, g, m, q, p)
    gc.powersgd_compute_q(spec, p, m, rows, cols, q)
    out = torch.empty(rows, cols, dtype=torch.bfloat16)
    gc.powersgd_finish(spec, p, q, 1, m, out)
    assert torch.isfinite(out.float()).all()


# --- the stubs ------------------------------------------------------------------------


def test_stubs_cover_the_extension():
    import gradcodec._gradcodec as ext

    stub = pathlib.Path(gc.__file__).with_name("_gradcodec.pyi")
    tree = ast.parse(stub.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.AnnAssign)
              for t in [n.target] if isinstance(t, ast.Name)}
    public = {n for n in dir(ext) if not n.startswith("_")} | {"__version__"}
    assert public <= names, sorted(public - names)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for cls in ("Codec", "FrameInfo"):
        members = {m.name for m in classes[cls].body if isinstance(m, ast.FunctionDef)}
        members |= {m.target.id for m in classes[cls].body if isinstance(m, ast.AnnAssign)}
        have = {n for n in dir(getattr(ext, cls)) if not n.startswith("_")}
        assert have <= members, (cls, sorted(have - members))
