# SPDX-License-Identifier: Apache-2.0
"""gradcodec.torch.OuterSync over gloo and over the library's MPI communicator: the bytes
of the C++ engine (the same runs on the library's thread communicators), H = 1 dense
equals DDP, checkpoint and resume, and the
same error on every rank for a non-finite Δ and for a rank with another configuration."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from datetime import timedelta

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import gradcodec as gc  # noqa: E402
import gradcodec._gradcodec as ext  # noqa: E402
import gradcodec.torch as gct  # noqa: E402

WORLD = 4
TIMEOUT = timedelta(seconds=120)
SHAPES = [(12, 10), (10,), (8, 12), (8,), (30,)]
STEPS = 14
# (name, OuterSync arguments): variants and codecs whose bytes must match the C++ run.
CASES = [
    ("dense DiLoCo", dict(spec=None, sync_every=4, lr=0.7, momentum=0.9, nesterov=True)),
    ("minmax 4-bit, 2 fragments, delay 1",
     dict(spec="minmax:bits=4", sync_every=4, fragments=2, delay=1, momentum=0.5)),
    ("top-k with error feedback, two_phase", dict(spec="topk:ratio=0.1", sync_every=3)),
    ("top-k, allgather", dict(spec="topk:ratio=0.1", sync_every=3, strategy="allgather")),
    ("threshold (variable size)", dict(spec="threshold:tau=0.05", sync_every=3)),
    ("powersgd", dict(spec="powersgd:rank=2", sync_every=3)),
    ("randomk dense", dict(spec="randomk:ratio=0.2", sync_every=2)),
    ("participation 2 of 4", dict(spec="qsgd", sync_every=2, participants=2, seed=5)),
]


def targets(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randn(s, generator=g) for s in SHAPES]


def initial():
    g = torch.Generator().manual_seed(7)
    return [torch.randn(s, generator=g) for s in SHAPES]


def inner_step(params, rank, t):
    # SGD on ½‖θ − c_r‖² with a step-dependent term: ranks move apart between syncs.
    with torch.no_grad():
        for p, c in zip(params, targets(rank)):
            p -= 0.1 * (p - c + 0.01 * t)


def tensors_of(params):
    out, at = [], 0
    for p in params:
        out.append((at, p.numel(), p.shape[0] if p.dim() >= 2 else 0))
        at += p.numel()
    return out


def flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params]).numpy().copy()


def run_torch_case(rank, args, communicator=None):
    params = [p.clone() if rank == 0 else torch.zeros_like(p) for p in initial()]
    outer = gct.OuterSync(params, threads=1, communicator=communicator, **args)
    for t in range(STEPS):
        inner_step(params, rank, t)
        outer.step()
    return outer.state_dict()["engine"], flat(params), outer.library_bytes_sent


def run_thread_case(args):
    """The same run over the library's own thread communicators: the C++ engine alone."""
    comms = ext.Communicator.threads(WORLD)
    out = [None] * WORLD
    errors = []

    def body(comm):
        try:
            params = [p.clone() for p in initial()]
            x = flat(params)
            o = ext.OuterSync(comm, tensors=tensors_of(params), threads=1, **args)
            o.init(x)
            for t in range(STEPS):
                shaped = [torch.from_numpy(x[a:a + n]).view(p.shape)
                          for (a, n, _), p in zip(tensors_of(params), params)]
                inner_step(shaped, comm.rank, t)
                o.step(x)
            out[comm.rank] = (o.save(), x.copy(), o.bytes_sent)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=body, args=(c,)) for c in comms]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    return out


def bytes_worker(rank, world, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=TIMEOUT)
    try:
        put(out_dir, rank, {name: run_torch_case(rank, args) for name, args in CASES})
    finally:
        dist.destroy_process_group()


def spawn(worker):
    """Runs worker(rank, world, init_file, out_dir) on WORLD processes; each rank pickles
    its result to out_dir (a queue would block a rank whose result outgrows the pipe)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(WORLD, os.path.join(tmp, "init"), tmp), nprocs=WORLD)
        return collect(tmp)


def collect(out_dir):
    """{rank: what the rank put()} for every rank."""
    import pickle

    out = {}
    for rank in range(WORLD):
        with open(os.path.join(out_dir, f"{rank}.pkl"), "rb") as f:
            out[rank] = pickle.load(f)
    return out


def put(out_dir, rank, value):
    import pickle

    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(value, f)


def expect_the_cpp_engine(runs):
    """Every rank's (state, parameters, bytes) of every case equal the C++ engine's on the
    library's thread communicators, and θ_global is the same on every rank."""
    for name, args in CASES:
        reference = run_thread_case(args)
        for rank in range(WORLD):
            state, params, sent = runs[rank][name]
            ref_state, ref_params, ref_sent = reference[rank]
            assert state == ref_state, f"{name}: rank {rank}'s state differs from the C++ run"
            assert np.array_equal(params, ref_params), f"{name}: rank {rank}'s parameters"
            assert sent == ref_sent, name
        # The state's first 96 bytes hold counters, θ_global follows.
        globals_ = {bytes(runs[r][name][0][96: 96 + 4 * params.size]) for r in range(WORLD)}
        assert len(globals_) == 1, name


def test_outer_sync_over_gloo_moves_the_bytes_of_the_cpp_engine():
    expect_the_cpp_engine(spawn(bytes_worker))


def test_outer_sync_over_mpi_moves_the_bytes_of_the_cpp_engine():
    if not ext.Communicator.mpi_built():
        pytest.skip("the extension was built without MPI (none found at configure time)")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun on PATH (scripts/install-deps installs Open MPI)")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outer_mpi_worker.py")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(WORLD),
                        sys.executable, worker, tmp], check=True, timeout=240)
        runs = collect(tmp)
    expect_the_cpp_engine(runs)


def test_mpi_communicator_outside_mpirun_is_a_world_of_one_and_is_refused_beside_a_group():
    if not ext.Communicator.mpi_built():
        pytest.skip("the extension was built without MPI (none found at configure time)")
    # Run in a child: MPI is initialised once per process and finalized at its exit.
    code = ("import torch, gradcodec as gc, gradcodec.torch as gct\n"
            "c = gc.Communicator.mpi()\n"
            "assert (c.rank, c.size) == (0, 1), (c.rank, c.size)\n"
            "try:\n"
            "    gct.OuterSync([torch.zeros(3)], communicator=c, process_group=object())\n"
            "except ValueError as e:\n"
            "    assert 'not both' in str(e)\n"
            "else:\n"
            "    raise SystemExit('a communicator beside a process group was accepted')\n"
            "p = [torch.ones(3)]\n"
            "o = gct.OuterSync(p, communicator=c, sync_every=2)\n"
            "for _ in range(4):\n"
            "    o.step()\n"
            "assert o.rounds == 2 and o.bytes_sent == o.library_bytes_sent\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)


def behaviour_worker(rank, world, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=world, timeout=TIMEOUT)
    out = {}
    try:
        # H = 1, uncompressed, outer lr 1: synchronous data-parallel SGD (DDP).
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
        twin = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
        twin.load_state_dict(model.state_dict())
        ddp = torch.nn.parallel.DistributedDataParallel(twin)
        outer = gct.OuterSync(model, sync_every=1, threads=1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt_ddp = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(10):
            x, y = torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g)
            for m, o in ((model, opt), (ddp, opt_ddp)):
                o.zero_grad()
                torch.nn.functional.mse_loss(m(x), y).backward()
                o.step()
            outer.step()
        diff = max(float((a - b).abs().max()) for a, b in zip(model.parameters(), twin.parameters()))
        out["ddp_difference"] = diff
        del ddp

        # Checkpoint with a sync in flight, resumed into a new OuterSync: the same bytes.
        args = dict(spec="topk:ratio=0.1", sync_every=4, fragments=2, delay=2, momentum=0.9,
                    nesterov=True, threads=1)
        params = [p.clone() for p in initial()]
        whole = gct.OuterSync(params, **args)
        before, seen = sys.getswitchinterval(), set()
        for t in range(STEPS):
            inner_step(params, rank, t)
            whole.step()
            seen.add((whole._engine.in_flight, sys.getswitchinterval()))
        whole.settle()
        out["switch"] = (before, sorted(seen), sys.getswitchinterval())
        whole_state = whole.state_dict()["engine"]
        params = [p.clone() for p in initial()]
        first = gct.OuterSync(params, **args)
        for t in range(5):
            inner_step(params, rank, t)
            first.step()
        saved = first.state_dict()
        saved_params = [p.clone() for p in params]
        del first
        params = [p.clone() for p in saved_params]
        second = gct.OuterSync(params, **args)  # init broadcasts rank 0's, then load
        second.load_state_dict(saved)
        with torch.no_grad():
            for p, q in zip(params, saved_params):
                p.copy_(q)
        for t in range(5, STEPS):
            inner_step(params, rank, t)
            second.step()
        out["resumed"] = second.state_dict()["engine"] == whole_state
        second.settle()
        # Dropped with a sync in flight: the interval is restored too.
        params = [p.clone() for p in initial()]
        dropped = gct.OuterSync(params, **args)
        t = 0
        while not dropped._engine.in_flight:
            inner_step(params, rank, t)
            dropped.step()
            t += 1
        lowered = sys.getswitchinterval()
        del dropped
        out["dropped"] = (lowered, sys.getswitchinterval(), before)

        # A NaN in rank 2's parameters: every rank raises at the same step.
        params = [p.clone() for p in initial()]
        o = gct.OuterSync(params, spec="minmax:bits=4", sync_every=3, threads=1)
        raised = None
        for t in range(6):
            inner_step(params, rank, t)
            if rank == 2 and t == 4:
                with torch.no_grad():
                    params[0][0, 0] = float("nan")
            try:
                o.step()
            except gc.Error as e:
                raised = (t, int(e.code), str(e))
                break
        out["nonfinite"] = raised

        # Rank 1 asks for another outer learning rate: every rank fails alike, no hang.
        params = [p.clone() for p in initial()]
        try:
            gct.OuterSync(params, spec="qsgd", sync_every=2, lr=0.5 if rank == 1 else 0.7,
                          threads=1)
            out["config"] = None
        except gc.Error as e:
            out["config"] = (int(e.code), str(e))
        put(out_dir, rank, out)
    finally:
        dist.destroy_process_group()


def test_outer_sync_equals_ddp_resumes_and_fails_alike():
    runs = spawn(behaviour_worker)
    for rank, out in runs.items():
        # DDP sums in gloo's order and divides by W, the engine adds θ − θ_local in rank
        # order: equal up to float32 rounding of parameters of size ~1.
        assert out["ddp_difference"] < 1e-6, (rank, out["ddp_difference"])
        assert out["resumed"], rank
        # The switch interval is 1e-4 s exactly while a sync is in flight, and restored.
        before, seen, after = out["switch"]
        assert [flying for flying, _ in seen] == [False, True], (rank, seen)
        assert seen[0][1] == before and seen[1][1] == pytest.approx(1e-4), (rank, seen)
        assert after == before, rank
        lowered, restored, before = out["dropped"]
        assert lowered == pytest.approx(1e-4) and restored == before, (rank, out["dropped"])
    nonfinite = {out["nonfinite"] for out in runs.values()}
    assert len(nonfinite) == 1, nonfinite
    step, code, message = nonfinite.pop()
    assert step == 5 and code == int(gc.StatusCode.nonfinite_input) and "rank 2" in message
    config = {out["config"] for out in runs.values()}
    assert len(config) == 1, config
    code, message = config.pop()
    assert code == int(gc.StatusCode.comm_error) and "lr" in message, message


def test_outer_loop_on_the_char_transformer_keeps_the_order_and_the_bounds():
    """examples/outer_chars.py with a budget for CI (100 steps): DiLoCo at H = 10 with
    dense and with 4-bit Δ against DDP at equal tokens, and streaming with 2 fragments.
    The bounds hold the measured values with a margin (docs/outer.md, "Measured")."""
    import importlib.util
    import pathlib
    import sys

    examples = pathlib.Path(__file__).resolve().parents[2] / "examples"
    sys.path.insert(0, str(examples))
    spec = importlib.util.spec_from_file_location("ddp_chars", examples / "ddp_chars.py")
    chars = importlib.util.module_from_spec(spec)
    sys.modules["ddp_chars"] = chars
    spec.loader.exec_module(chars)
    compare = sys.modules["ddp_compare"]
    runs = ["outer/H=10/dense", "outer/H=10/minmax:bits=4", "outer/H=10/P=2/tau=1/minmax:bits=4"]
    results = compare.compare(chars.Chars(steps_total=100), runs, world=WORLD)
    base = results[compare.BASELINE]
    loss = "held-out loss"
    assert base["failure"] is None and base["quality"][loss] < 3.2, base
    for name in runs:
        r = results[name]
        assert r["failure"] is None, (name, r["failure"])
        assert np.isfinite(r["quality"][loss]), name
        assert r["quality"][loss] <= 1.06 * base["quality"][loss], (name, r["quality"])
    dense, four, streamed = (results[n] for n in runs)
    # H = 10: a tenth of DDP's ring allreduce per step for dense Δ (measured 9.4x),
    # 4-bit frames ~5x less again.
    assert dense["bytes_per_step"] < base["bytes_per_step"] / 9
    assert four["bytes_per_step"] < base["bytes_per_step"] / 40  # measured 50x
    # 4-bit Δ costs little against dense Δ.
    assert four["quality"][loss] <= 1.01 * dense["quality"][loss]
    # Two fragments: each sync about half the bytes.
    assert streamed["peak_sync_bytes"] < 0.6 * four["peak_sync_bytes"]
