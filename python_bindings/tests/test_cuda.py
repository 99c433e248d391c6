# SPDX-License-Identifier: Apache-2.0
"""CUDA tensors through the bindings: every codec on a CUDA tensor against the same codec on
the CPU backend (the CUDA backend writes the same bytes by design), frames on the device,
decode / decode_accumulate / error feedback, streams, graph capture and the errors of
mixed host/device calls.

Every test skips, with the reason, without a CUDA device in torch or without the library's
CUDA backend. GRADCODEC_REQUIRE_CUDA=1 (scripts/gpu-check) turns that skip into a failure,
so a GPU machine cannot pass these tests by skipping them."""

import inspect
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradcodec as gc  # noqa: E402
from test_bindings import SPECS as host_specs  # noqa: E402


def _missing():
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no CUDA device, or a CPU-only PyTorch)"
    if not gc.backend_available("cuda"):
        return ("gradcodec has no usable CUDA backend (built with GRADCODEC_CUDA=OFF or "
                "without nvcc, or the library sees no device)")
    return None


_MISSING = _missing()
if _MISSING is not None and os.environ.get("GRADCODEC_REQUIRE_CUDA") == "1":
    raise RuntimeError(f"GRADCODEC_REQUIRE_CUDA=1 but {_MISSING}")
# Every test skips with the reason (a module-level skip would collect no test at all,
# which pytest reports as a failure).
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))

# The host tests' codec list (test_bindings.py, on sys.path as pytest's rootdir-relative
# import puts this directory there), plus a capped threshold, whose CUDA path differs.
SPECS = host_specs + ["threshold:tau=0.5,cap=64"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SIZES = [0, 1, 1000, 65539]
CTX = dict(seed=3, step=1, tensor_id=2)
DEV = torch.device("cuda", 0)


def grad(n, dtype=torch.float32, seed=0):
    x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return torch.from_numpy(x).to(dtype)


def host_bytes(frame):
    """A frame's bytes as numpy, wherever it lives."""
    if isinstance(frame, torch.Tensor):
        return frame.cpu().numpy()
    return np.asarray(frame)


def bits(t):
    """The exact bits of a float tensor or array (equality that sees -0.0 and NaNs)."""
    a = t.detach().cpu() if isinstance(t, torch.Tensor) else torch.from_numpy(np.asarray(t))
    if a.dtype == torch.float32:
        return a.view(torch.int32).numpy()
    return a.view(torch.int16).numpy()


def expect_error(code, fn, *args, **kwargs):
    with pytest.raises(gc.Error) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, str(info.value)
    return info.value


# --- every codec: CUDA against the CPU backend ------------------------------------------


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("spec", SPECS)
def test_every_codec_matches_the_cpu_backend(spec, dtype, n):
    codec = gc.Codec(spec)
    x = grad(n, dtype)
    xd = x.to(DEV)
    want = codec.encode(x, backend="cpu", **CTX)  # numpy, host
    frame = codec.encode(xd, **CTX)
    # The frame is a torch.uint8 tensor on the input's device, exactly frame_bytes long.
    assert isinstance(frame, torch.Tensor) and frame.dtype == torch.uint8
    assert frame.device == xd.device and frame.dim() == 1 and frame.is_contiguous()
    assert np.array_equal(host_bytes(frame), want), "frame bytes differ from the CPU backend"
    info = gc.peek(frame)  # header copied from the device
    assert info.as_dict() == gc.peek(want).as_dict()
    assert info.frame_bytes == frame.numel()
    assert gc.Codec.from_frame(frame) == gc.Codec.from_frame(want)
    # Decoding: a new tensor on the frame's device, dtype as for host frames.
    y = gc.decode(frame)
    y_host = gc.decode(want)
    assert isinstance(y, torch.Tensor) and y.device == xd.device
    assert y.dtype == {np.float32: torch.float32, np.float16: torch.float16}[y_host.dtype.type]
    assert np.array_equal(bits(y), bits(y_host)), "decoded values differ from the CPU backend"
    # A host-made frame copied to the device decodes the same; out= in the input's dtype.
    out = torch.full((n,), 7.0, dtype=dtype, device=DEV)
    assert gc.decode(torch.from_numpy(want).to(DEV), out) is out
    want_out = torch.full((n,), 7.0, dtype=dtype)
    gc.decode(want, want_out, backend="cpu")
    assert np.array_equal(bits(out), bits(want_out))
    # decode_accumulate: fma(alpha, v, acc) per element, as on the host.
    acc = grad(n, torch.float32, seed=9)
    acc_d = acc.to(DEV)
    gc.decode_accumulate(frame, acc_d, 0.3)
    gc.decode_accumulate(want, acc, 0.3, backend="cpu")
    assert np.array_equal(bits(acc_d), bits(acc))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("spec", SPECS)
def test_error_feedback_matches_the_cpu_backend(spec, dtype):
    codec = gc.Codec(spec)
    n = 4099
    res = grad(n, torch.float32, seed=5) * 0.1
    res_d = res.to(DEV)
    for step in range(3):  # the residual carries over between steps
        g = grad(n, dtype, seed=step)
        want = codec.encode_with_feedback(g, res, backend="cpu", seed=1, step=step)
        frame = codec.encode_with_feedback(g.to(DEV), res_d, seed=1, step=step)
        assert frame.is_cuda
        assert np.array_equal(host_bytes(frame), want), f"step {step}: frame differs"
        assert np.array_equal(bits(res_d), bits(res)), f"step {step}: residual differs"


def test_matrix_rows_for_powersgd():
    m = grad(64 * 48).reshape(64, 48)
    frame = gc.encode("powersgd:rank=2", m.to(DEV))
    assert gc.peek(frame).count == 64  # rows from shape[0], as on the host
    assert np.array_equal(host_bytes(frame), gc.encode("powersgd:rank=2", m, backend="cpu"))
    frame = gc.encode("powersgd:rank=2", m.to(DEV), rows=48)
    assert np.array_equal(host_bytes(frame),
                          gc.encode("powersgd:rank=2", m, rows=48, backend="cpu"))


# --- frames and outputs on the device -------------------------------------------------


def test_encode_into_a_device_buffer_returns_a_view():
    x = grad(5000).to(DEV)
    buf = torch.zeros(1 << 16, dtype=torch.uint8, device=DEV)
    view = gc.encode("qsgd", x, out=buf, **CTX)
    assert isinstance(view, torch.Tensor) and view.data_ptr() == buf.data_ptr()
    assert view.numel() == gc.peek(view).frame_bytes
    assert np.array_equal(host_bytes(view), gc.encode("qsgd", x.cpu(), backend="cpu", **CTX))
    res = torch.zeros(5000, device=DEV)
    view = gc.encode_with_feedback("topk:ratio=0.01", x, res, out=buf)
    assert view.data_ptr() == buf.data_ptr() and gc.peek(view).count == 50
    expect_error(gc.StatusCode.output_too_small, gc.encode, "qsgd", x,
                 out=torch.zeros(100, dtype=torch.uint8, device=DEV))
    with pytest.raises(TypeError):
        gc.encode("qsgd", x, out=torch.zeros(4, 1 << 14, dtype=torch.uint8, device=DEV))
    # Frames start 16-byte aligned on the device (docs/cuda.md).
    expect_error(gc.StatusCode.invalid_argument, gc.encode, "qsgd", x, out=buf[4:])


def test_variable_size_frame_is_a_view_of_its_exact_size():
    x = grad(100_000).to(DEV)
    frame = gc.encode("threshold:tau=4", x)
    info = gc.peek(frame)
    assert frame.numel() == info.frame_bytes < gc.encode_bound("threshold:tau=4", x.numel())
    assert info.count == int((x.abs() >= 4).sum())
    assert int((gc.decode(frame) != 0).sum()) == info.count


def test_decode_output_shape_dtype_and_bfloat16():
    x = grad(600, torch.bfloat16).to(DEV)
    frame = gc.encode("bf16", x)
    y = gc.decode(frame)
    assert y.dtype == torch.float32 and y.shape == (600,)  # the host default
    z = gc.decode(frame, shape=(20, 30), dtype="bf16")  # torch has bfloat16: allowed here
    assert z.dtype == torch.bfloat16 and z.shape == (20, 30) and z.device == x.device
    assert torch.equal(z.flatten(), x)
    expect_error(gc.StatusCode.shape_mismatch, gc.decode, frame, shape=(7, 7))
    expect_error(gc.StatusCode.shape_mismatch, gc.decode, frame,
                 torch.zeros(599, device=DEV))


def test_corrupt_and_truncated_device_frames():
    x = grad(1000).to(DEV)
    frame = gc.encode("topk:ratio=0.05", x)
    bad = frame.clone()
    bad[20] ^= 1  # a header field: the checksum catches it
    expect_error(gc.StatusCode.corrupt_frame, gc.peek, bad)
    expect_error(gc.StatusCode.corrupt_frame, gc.decode, bad)
    expect_error(gc.StatusCode.corrupt_frame, gc.peek, frame[:40])
    expect_error(gc.StatusCode.corrupt_frame, gc.decode, frame[:-16].clone())
    # An index out of range in the payload: refused before the output is written.
    k = gc.peek(frame).count
    idx_off = 48 + ((4 * k + 15) // 16) * 16
    bad = frame.clone()
    bad[idx_off + 4 * (k - 1):idx_off + 4 * k] = torch.tensor(
        list(np.uint32(5000).tobytes()), dtype=torch.uint8)
    out = torch.full((1000,), 3.0, device=DEV)
    expect_error(gc.StatusCode.corrupt_frame, gc.decode, bad, out)
    assert bool((out == 3.0).all())


def test_nonfinite_is_flagged_and_error_policy_refused():
    x = grad(1000)
    x[10] = float("nan")
    frame = gc.encode("qsgd", x.to(DEV))
    assert gc.peek(frame).nonfinite
    assert np.array_equal(host_bytes(frame), gc.encode("qsgd", x, backend="cpu"))
    # nonfinite=error needs a host scan of the input: the CUDA backend refuses it.
    expect_error(gc.StatusCode.invalid_argument, gc.encode, "qsgd:nonfinite=error", x.to(DEV))


# --- mixed devices and host-only APIs -------------------------------------------------


def test_mixed_host_and_device_arrays_are_refused():
    x = grad(1000)
    xd = x.to(DEV)
    frame_h = gc.encode("qsgd", x)
    frame_d = gc.encode("qsgd", xd)
    cases = [
        (gc.encode, ("qsgd", xd), dict(out=np.zeros(4096, np.uint8))),
        (gc.encode, ("qsgd", x), dict(out=torch.zeros(4096, dtype=torch.uint8, device=DEV))),
        (gc.encode_with_feedback, ("qsgd", xd, torch.zeros(1000)), {}),
        (gc.encode_with_feedback, ("qsgd", x, torch.zeros(1000, device=DEV)), {}),
        (gc.decode, (frame_d, np.zeros(1000, np.float32)), {}),
        (gc.decode, (frame_h, torch.zeros(1000, device=DEV)), {}),
        (gc.decode_accumulate, (frame_d, torch.zeros(1000), 1.0), {}),
        (gc.decode_accumulate, (frame_h, torch.zeros(1000, device=DEV), 1.0), {}),
    ]
    for fn, args, kwargs in cases:
        err = expect_error(gc.StatusCode.invalid_argument, fn, *args, **kwargs)
        assert "same device" in str(err), str(err)
    # A host backend cannot take device memory; the CUDA backend cannot take host memory.
    expect_error(gc.StatusCode.invalid_argument, gc.encode, "qsgd", xd, backend="cpu")
    expect_error(gc.StatusCode.invalid_argument, gc.decode, frame_d, backend="reference")
    expect_error(gc.StatusCode.invalid_argument, gc.encode, "qsgd", x, backend="cuda")
    expect_error(gc.StatusCode.invalid_argument, gc.decode, frame_h, backend="cuda")


@pytest.mark.parametrize("rows,cols,rank", [(16, 12, 2), (96, 130, 4), (300, 257, 8)])
def test_powersgd_phases_on_cuda_equal_the_host(rows, cols, rank):
    """Two warm-started steps of every phase on CUDA tensors (torch's current stream)
    against the same phases on the host: equal bits (no NaN in these inputs)."""
    spec = gc.Codec(f"powersgd:rank={rank}")
    r = gc.powersgd_rank(spec, rows, cols)
    hq, hp = torch.empty(cols * r), torch.empty(rows * r)
    hres = grad(rows * cols, seed=9) * 0.1
    dq, dp, dres = hq.to(DEV), hp.to(DEV), hres.to(DEV)
    gc.powersgd_init_q(spec, rows, cols, hq, seed=4, tensor_id=1)
    gc.powersgd_init_q(spec, rows, cols, dq, seed=4, tensor_id=1)
    assert np.array_equal(bits(dq.cpu()), bits(hq))
    for step in range(2):
        g = grad(rows * cols, dtype=torch.bfloat16, seed=20 + step).reshape(rows, cols)
        gc.powersgd_compute_p(spec, g, hres, hq, hp)
        gc.powersgd_compute_p(spec, g.to(DEV), dres, dq, dp)
        assert np.array_equal(bits(dp.cpu()), bits(hp))
        assert np.array_equal(bits(dres.cpu()), bits(hres))
        gc.powersgd_compute_q(spec, hp, hres, rows, cols, hq)
        gc.powersgd_compute_q(spec, dp, dres, rows, cols, dq)
        assert np.array_equal(bits(dp.cpu()), bits(hp))
        assert np.array_equal(bits(dq.cpu()), bits(hq))
        hout = torch.empty(rows, cols, dtype=torch.bfloat16)
        dout = torch.empty(rows, cols, dtype=torch.bfloat16, device=DEV)
        gc.powersgd_finish(spec, hp, hq, 2, hres, hout)
        gc.powersgd_finish(spec, dp, dq, 2, dres, dout)
        assert np.array_equal(bits(dq.cpu()), bits(hq))
        assert np.array_equal(bits(dres.cpu()), bits(hres))
        assert np.array_equal(bits(dout), bits(hout))


def test_powersgd_batch_orthogonalization_on_cuda_equals_the_host():
    """70 matrices in one CUDA tensor (two launches of up to 64) against the host batch."""
    layout, at = [], 0
    for t in range(70):
        rows, r = 1 + t * 37 % 300, 1 + t % 8
        layout.append((at, rows, r))
        at += rows * r
    host = grad(at, seed=31)
    dev = host.to(DEV)
    gc.powersgd_orthogonalize_batch(host, layout, 1e-8)
    gc.powersgd_orthogonalize_batch(dev, layout, 1e-8)
    assert np.array_equal(bits(dev.cpu()), bits(host))


def test_host_only_apis_refuse_device_memory_clearly():
    spec = gc.Codec("powersgd:rank=2")
    rows, cols = 16, 12
    q = torch.empty(cols * 2)
    gc.powersgd_init_q(spec, rows, cols, q)
    m, p = torch.zeros(rows * cols), torch.empty(rows * 2)
    g = grad(rows * cols).reshape(rows, cols)
    # The phases take CUDA tensors, but every array of a call on one device.
    err = expect_error(gc.StatusCode.invalid_argument, gc.powersgd_compute_p, spec, g.to(DEV),
                       m, q, p)
    assert "grad" in str(err)
    expect_error(gc.StatusCode.invalid_argument, gc.powersgd_compute_p, spec, g,
                 m.to(DEV), q, p)
    st = gc.PowerSGDState(spec, rows, cols)
    expect_error(gc.StatusCode.invalid_argument, st.compute_p, g.to(DEV))
    data = st.save()
    expect_error(gc.StatusCode.invalid_argument, gc.powersgd_peek_state,
                 torch.from_numpy(data).to(DEV))
    frames = [gc.encode("sign:bucket=64", grad(500, seed=s).to(DEV)) for s in range(3)]
    err = expect_error(gc.StatusCode.invalid_argument, gc.sign_majority_vote, frames)
    assert "host" in str(err)
    host_frames = [f.cpu() for f in frames]
    expect_error(gc.StatusCode.invalid_argument, gc.sign_majority_vote, host_frames,
                 torch.empty(500, device=DEV))
    assert gc.sign_majority_vote(host_frames).shape == (500,)


# --- streams and devices --------------------------------------------------------------


def test_work_is_ordered_on_the_current_stream():
    """The input is written by a kernel queued behind a long sleep on a side stream; an
    encode issued on that stream without synchronizing must see the new values, and a
    decode there must finish before the stream's later work reads its output."""
    n = 1 << 20
    src = grad(n, seed=1)
    want = gc.encode("qsgd:levels=7", src, backend="cpu", **CTX)
    x = torch.zeros(n, device=DEV)
    src_d = src.to(DEV)
    side = torch.cuda.Stream(device=DEV)
    side.wait_stream(torch.cuda.current_stream(DEV))
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time before the copy runs
        x.copy_(src_d)
        frame = gc.encode("qsgd:levels=7", x, **CTX)
        out = torch.empty(n, device=DEV)
        gc.decode(frame, out)
        doubled = out * 2  # queued on the side stream after the decode
    side.synchronize()
    assert np.array_equal(host_bytes(frame), want)
    assert np.array_equal(bits(doubled), bits(torch.from_numpy(gc.decode(want) * 2)))


def test_encode_is_captured_in_a_cuda_graph():
    """No host synchronization and nothing on the legacy stream: an encode (every codec but
    threshold) can be captured by torch.cuda.graph and replayed on new data."""
    n = 4097
    x = torch.zeros(n, device=DEV)
    kwargs = {}
    if "capture_error_mode" in inspect.signature(torch.cuda.graph).parameters:
        kwargs["capture_error_mode"] = "thread_local"  # the library's own capture test mode
    for spec in ("qsgd:levels=7", "topk:ratio=0.01", "fp16"):
        x.copy_(grad(n, seed=0).to(DEV))
        side = torch.cuda.Stream(device=DEV)
        side.wait_stream(torch.cuda.current_stream(DEV))
        with torch.cuda.stream(side):  # warm-up outside the capture, as torch advises
            gc.encode(spec, x, **CTX)
        torch.cuda.current_stream(DEV).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, **kwargs):
            frame = gc.encode(spec, x, **CTX)
        for seed in (1, 2):
            src = grad(n, seed=seed)
            x.copy_(src.to(DEV))
            graph.replay()
            torch.cuda.synchronize(DEV)
            assert np.array_equal(host_bytes(frame), gc.encode(spec, src, backend="cpu", **CTX)), \
                f"{spec}: replay with seed {seed}"


def test_decode_expected_on_cuda_waits_for_nothing_and_reports_through_verdicts():
    """Device verdicts: a good frame decodes as on the CPU, a damaged one writes nothing and
    says why in its verdict; check_verdicts on the host copy raises for it. Captured in a
    CUDA graph too."""
    n = 4097
    expected = gc.peek(gc.encode("topk:ratio=0.05", grad(n, seed=1).to(DEV)))
    good = gc.encode("topk:ratio=0.05", grad(n, seed=2).to(DEV))
    bad = good.clone()
    bad[9] ^= 1  # n, without its checksum
    acc = torch.ones(n, device=DEV)
    verdicts = torch.full((2, 16), 0xA5, dtype=torch.uint8, device=DEV)
    gc.decode_accumulate_expected(expected, good, acc, verdicts[0], 0.5)
    gc.decode_accumulate_expected(expected, bad, acc, verdicts[1], 0.5)
    want = torch.ones(n)
    gc.decode_accumulate(host_bytes(good), want, 0.5, backend="cpu")
    assert torch.equal(acc.cpu(), want)
    host = verdicts.cpu()
    assert int(host[0, 0]) == 0 and int(host[1, 0]) == 4  # ok; header_checksum
    err = expect_error(gc.StatusCode.corrupt_frame, gc.check_verdicts, host)
    assert "frame 1" in str(err)

    kwargs = {}
    if "capture_error_mode" in inspect.signature(torch.cuda.graph).parameters:
        kwargs["capture_error_mode"] = "thread_local"
    frame = good.clone()
    out = torch.zeros(n, device=DEV)
    verdict = torch.zeros(16, dtype=torch.uint8, device=DEV)
    side = torch.cuda.Stream(device=DEV)
    side.wait_stream(torch.cuda.current_stream(DEV))
    with torch.cuda.stream(side):  # warm-up outside the capture
        gc.decode_expected(expected, frame, out, verdict)
    torch.cuda.current_stream(DEV).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, **kwargs):
        gc.decode_expected(expected, frame, out, verdict)
    for seed in (3, 4):
        src = grad(n, seed=seed)
        frame.copy_(gc.encode("topk:ratio=0.05", src.to(DEV)))
        graph.replay()
        torch.cuda.synchronize(DEV)
        assert torch.equal(out.cpu(), torch.from_numpy(gc.decode(host_bytes(frame))))
        gc.check_verdicts(verdict.cpu())


def test_tensors_on_another_device_than_the_current_one():
    """The call runs on its tensors' device whatever torch's current device is (one GPU:
    the current device is that one; two or more: tensors on the last device)."""
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    x = grad(3001)
    xd = x.to(last)
    with torch.cuda.device(0):
        frame = gc.encode("topk:ratio=0.1", xd, **CTX)
        assert frame.device == last
        y = gc.decode(frame)
        assert y.device == last
        acc = torch.zeros(3001, device=last)
        gc.decode_accumulate(frame, acc, 0.5)
    want = gc.encode("topk:ratio=0.1", x, backend="cpu", **CTX)
    assert np.array_equal(host_bytes(frame), want)
    assert np.array_equal(bits(y), bits(gc.decode(want)))
    if torch.cuda.device_count() > 1:  # arrays on two devices in one call
        err = expect_error(gc.StatusCode.invalid_argument, gc.decode, frame,
                           torch.zeros(3001, device="cuda:0"))
        assert "same device" in str(err)


def test_many_calls_do_not_leak_device_memory():
    x = grad(1 << 16).to(DEV)
    res = torch.zeros(1 << 16, device=DEV)
    acc = torch.zeros(1 << 16, device=DEV)
    for _ in range(3):  # the caching allocator settles
        gc.decode_accumulate(gc.encode_with_feedback("topk:ratio=0.01", x, res), acc, 1.0)
    torch.cuda.synchronize(DEV)
    before = torch.cuda.memory_allocated(DEV)
    for _ in range(50):
        gc.decode_accumulate(gc.encode_with_feedback("topk:ratio=0.01", x, res), acc, 1.0)
    torch.cuda.synchronize(DEV)
    assert torch.cuda.memory_allocated(DEV) == before
