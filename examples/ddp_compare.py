# SPDX-License-Identifier: Apache-2.0
"""The comparison harness of the DDP examples: one training task, run by W gloo ranks
with the same budget uncompressed, through PyTorch's own communication hooks and through
gradcodec's hook with each codec, and a table of quality, bytes and time.

A run is named by a string:

- ``fp32``: DistributedDataParallel's own float32 allreduce (the baseline);
- ``torch:fp16``, ``torch:bf16``, ``torch:powersgd:rank=R``: ``torch.distributed``'s
  ``fp16_compress_hook``, ``bf16_compress_hook`` and ``powerSGD_hook`` (rank R, its
  defaults otherwise), each in a process group of its own so that one that fails (gloo
  cannot sum bfloat16 in PyTorch 1.13) is reported and does not stop the others;
- ``outer/KEY=VALUE/.../SPEC``: no DDP; each rank trains its own copy and
  ``gradcodec.torch.OuterSync`` synchronises it (docs/outer.md) with Δ encoded by SPEC
  (``dense``: uncompressed). Keys: ``H`` (sync_every), ``P`` (fragments), ``tau``
  (delay), ``lr``, ``momentum``, ``nesterov``, ``mix``, ``K`` (participants), ``steps``
  (this run's budget and learning-rate schedule instead of the task's), ``switch``
  (switch_interval; ``none`` leaves the interpreter's), ``transport`` (``torch``, the
  default: the process group; ``mpi``: ``gradcodec.Communicator.mpi()``, the collectives
  in C++, for a job started by mpirun, e.g. under scripts/shaped-network); the
  defaults: outer Nesterov SGD with lr 1 and momentum 0.5 (``outer/H=50/minmax:bits=4``);
- anything else: a gradcodec spec through ``gradcodec.torch.hook`` with the hook's
  defaults; ``SPEC@key=value,...`` sets ``HookState`` options (``qsgd@error_feedback=1``).

A task (examples/ddp_digits.py, examples/ddp_chars.py) gives the model, the optimizer,
its batches and its evaluation; every run starts from the same initial model and sees
the same batches. Bytes are what a rank sends over the network per step as the
collectives' usual algorithms send them (ring allreduce 2(W-1)/W of the buffer, all-gather
(W-1) times this rank's part; docs/python.md, "Counters"), so every row is comparable.
"""

import datetime
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

BASELINE = "fp32"


COMPUTE = "compute"  # no communication at all: each rank trains its own copy
_OUTER_KEYS = {"H": "sync_every", "P": "fragments", "tau": "delay", "lr": "lr",
               "momentum": "momentum", "nesterov": "nesterov", "mix": "mix",
               "K": "participants", "steps": "steps", "switch": "switch_interval",
               "transport": "transport", "poll": "wait_poll"}
# Outer Nesterov SGD; lr 1 and momentum 0.5 trained best on examples/outer_chars.py at H=50
# (DiLoCo's 0.7 and 0.9: +6.4 % against +2.7 %, docs/outer.md).
_OUTER_DEFAULTS = {"lr": 1.0, "momentum": 0.5, "nesterov": True}


def parse_run(name: str):
    """(kind, spec, options) of a run name: kind "fp32", "compute", "torch" or
    "gradcodec"."""
    if name in (BASELINE, COMPUTE):
        return name, None, {}
    if name.startswith("torch:"):
        return "torch", name[len("torch:"):], {}
    if name.startswith("outer/"):
        *keys, spec = name.split("/")[1:]
        options = dict(_OUTER_DEFAULTS)
        for item in keys:
            key, _, value = item.partition("=")
            options[_OUTER_KEYS[key]] = _literal(value)
        return "outer", None if spec == "dense" else spec, options
    spec, _, opts = name.partition("@")
    options: Dict[str, Any] = {}
    for item in filter(None, opts.split(",")):
        key, _, value = item.partition("=")
        options[key] = _literal(value)
    return "gradcodec", spec, options


def _literal(value: str):
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(value.lower(), value)


def warmup_then_linear_decay(peak: float, total: int, warm_share: float = 0.05):
    """The learning rate of both tasks: linear warm-up over warm_share of the steps, then
    linear decay to 0."""
    warm = max(1, int(total * warm_share))

    def schedule(step: int) -> float:
        if step < warm:
            return peak * (step + 1) / warm
        return peak * max(0.0, 1.0 - (step - warm) / max(1, total - warm))

    return schedule


def _ring_allreduce_bytes(nbytes: int, world: int) -> float:
    return 2.0 * (world - 1) / world * nbytes


_TORCH_POWERSGD_WARMUP = 2  # start_powerSGD_iter: plain allreduce before it


def _torch_hook(ddp, model, what: str):
    """Registers one of torch.distributed's hooks; returns the float32 elements it
    allreduces in a step (after PowerSGD's warm-up), computed from the model's shapes as
    the hook's code decides (the hooks do not count their bytes)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    n = sum(p.numel() for p in model.parameters())
    if what in ("fp16", "bf16"):
        hook = default_hooks.fp16_compress_hook if what == "fp16" else \
            default_hooks.bf16_compress_hook
        ddp.register_comm_hook(None, hook)
        return n / 2
    if what.startswith("powersgd"):
        rank = int(what.partition("rank=")[2] or 1)
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                   start_powerSGD_iter=_TORCH_POWERSGD_WARMUP)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        elements = 0
        for p in model.parameters():
            rows = p.shape[0] if p.dim() > 1 else 0
            cols = p.numel() // rows if rows else 0
            r = min(rank, rows, cols)
            # torch's _should_compress with min_compression_rate 2
            if rows and (rows + cols) * r * state.min_compression_rate < rows * cols:
                elements += (rows + cols) * r
            else:
                elements += p.numel()
        return elements
    raise ValueError(f"unknown torch hook {what!r}")


def train_one(task, name: str, rank: int, world: int, data, target: Optional[float] = None,
              eval_every: int = 0) -> Dict[str, Any]:
    """One run on an initialised process group; rank 0's results. With eval_every, the
    model every rank agrees on (DDP's, or θ_global) is evaluated every eval_every steps,
    and the training time (evaluations excluded) at which its metric first reaches
    `target` is reported as time_to_target."""
    import copy

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import gradcodec.torch as gct

    kind, spec, options = parse_run(name)
    if "steps" in options:  # a budget of its own (time to the baseline's quality)
        import dataclasses

        if not hasattr(task, "steps_total"):
            raise ValueError(f"{name}: steps= needs a task with a steps_total budget")
        task = dataclasses.replace(task, steps_total=options.pop("steps"))
    model = task.model()
    ddp = model if kind in (COMPUTE, "outer") else nn.parallel.DistributedDataParallel(model)
    n_params = sum(p.numel() for p in model.parameters())
    dense_step = _ring_allreduce_bytes(4 * n_params, world)
    state = None
    # What a torch hook (or DDP's own) allreduces per step.
    torch_elements = 0.0 if kind == COMPUTE else float(n_params)
    outer = None
    if kind == "outer":
        transport = options.pop("transport", "torch")
        poll = {"wait_poll": options.pop("wait_poll")} if "wait_poll" in options else {}
        if transport == "mpi":
            import gradcodec

            comm = gradcodec.Communicator.mpi(**poll)
            if comm.size != world:  # MPI_Init outside mpirun makes a world of one
                raise ValueError(f"{name}: transport=mpi needs a job of {world} ranks "
                                 f"started by mpirun (MPI's world has {comm.size})")
            options["communicator"] = comm
        elif transport != "torch":
            raise ValueError(f"{name}: transport is torch or mpi, not {transport}")
        outer = gct.OuterSync(model, spec=spec, seed=task.seed, threads=1, **options)
    elif kind == "gradcodec":
        state = gct.HookState(spec=spec, seed=task.seed, **options)
        ddp.register_comm_hook(state, gct.hook)
    elif kind == "torch":
        torch_elements = _torch_hook(ddp, model, spec)
    opt, schedule = task.optimizer(ddp.parameters(), world)
    if options.get("momentum"):  # the hook's momentum correction replaces the optimizer's
        for group in opt.param_groups:
            group["momentum"] = 0.0
    steps = task.steps(world)
    failure = None
    last_bytes = 0.0
    step_bytes: List[float] = []  # what the hook or the outer loop sent in each step
    dist.barrier()
    start = time.perf_counter()
    done = 0
    step_seconds = []
    metric, higher_better = task.metric
    evaluated_s = 0.0  # evaluation time, excluded from time_to_target
    time_to_target = None
    shadow = copy.deepcopy(model) if outer is not None and eval_every else None
    sync_totals: List[tuple] = []  # after each step: (exposed, sync) seconds so far

    def reached() -> bool:
        if shadow is not None:
            outer.load_global(shadow)
        value = task.evaluate(shadow if shadow is not None else model, data)[metric]
        return value >= target if higher_better else value <= target
    try:
        for step in range(steps):
            began = time.perf_counter()
            for group in opt.param_groups:
                group["lr"] = schedule(step)
            opt.zero_grad()
            loss = task.loss(ddp, task.batch(data, step, rank, world))
            loss.backward()
            opt.step()
            if outer is not None:
                outer.step()
                sync_totals.append((outer.exposed_seconds, outer.sync_seconds))
            done += 1
            step_seconds.append(time.perf_counter() - began)
            counter = state if state is not None else outer
            if counter is not None:
                step_bytes.append(counter.bytes_sent - last_bytes)
                last_bytes = counter.bytes_sent
            if not math.isfinite(float(loss)):
                failure = f"loss not finite at step {step}"
                break
            if eval_every and target is not None and time_to_target is None and \
                    done % eval_every == 0:
                began = time.perf_counter()
                if reached():
                    time_to_target = began - start - evaluated_s
                # Evaluations take unequal times on the ranks: realigned here, a rank's
                # next sync does not wait for another's evaluation.
                dist.barrier()
                evaluated_s += time.perf_counter() - began
    except RuntimeError as e:
        # The hook's non-finite decision (the same on every rank; DDP re-raises it as a
        # RuntimeError), or a torch hook that gloo refuses.
        if kind != "torch" and "NonFiniteGradient" not in str(e):
            raise
        failure = f"step {done}: {str(e).splitlines()[0][:200]}"
    exposed = critical = None
    if outer is not None:
        outer.settle()
        sync_totals.append((outer.exposed_seconds, outer.sync_seconds))
        # A rank ahead of the others waits at a sync for them: their pace, not the
        # network. What a sync cost the job is the wait of the last rank to reach it, the
        # least wait over the ranks; summed over the syncs, against the least sync time.
        totals = torch.tensor(sync_totals, dtype=torch.float64)
        mine = torch.diff(totals, dim=0, prepend=torch.zeros(1, 2, dtype=torch.float64))
        every = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(every, mine)
        exposed = [(float(e[:, 0].sum()), float(e[:, 1].sum())) for e in every]
        least = torch.stack(every).min(dim=0).values.sum(dim=0)
        critical = (float(least[0]), float(least[1]))
        # A run ends where it would stop: on θ_global (the last inner steps not synced
        # yet are a rank's own).
        outer.load_global()
    seconds = time.perf_counter() - start
    quality = task.evaluate(model, data) if failure is None else {}
    if outer is not None:
        sent = float(outer.bytes_sent)
        steady = sent / max(done, 1)  # syncs every H steps: the mean is the steady rate
    elif state is not None:
        sent = float(state.bytes_sent)
        # A typical step: the median, since a data-dependent codec's bytes follow the
        # gradient's magnitude through the run (threshold sends less as training settles).
        steady = statistics.median(step_bytes or [0.0])
    else:
        steady = _ring_allreduce_bytes(4 * torch_elements, world)
        warm = min(done, _TORCH_POWERSGD_WARMUP) if spec and spec.startswith("powersgd") else 0
        sent = warm * dense_step + (done - warm) * steady
    return {
        "quality": quality,
        "failure": failure,
        "steps": done,
        "bytes_per_step": sent / max(done, 1),
        "steady_bytes_per_step": steady,
        "dense_bytes_per_step": dense_step,
        "seconds": seconds,
        # The median step after the first few (DDP rebuilds its buckets after the first).
        "step_seconds": statistics.median(step_seconds[3:] or step_seconds or [0.0]),
        "params": n_params,
        "error_feedback": None if state is None else state.error_feedback,
        "peak_sync_bytes": outer.peak_sync_bytes if outer is not None else None,
        "seconds_training": seconds - evaluated_s,
        "time_to_target": time_to_target,
        "eval_every": eval_every,
        "exposed_sync": exposed,
        "exposed_critical": critical,
    }


def _worker(rank: int, world: int, init_method: str, task, names: List[str], queue,
            eval_every: int = 0) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # A rank that fails leaves the others in a collective: bound the wait.
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    data = task.data()
    target = None  # the baseline's final metric, for the runs after it
    try:
        for name in names:
            stats = train_one(task, name, rank, world, data, target, eval_every)
            if name == BASELINE and stats["failure"] is None:
                target = stats["quality"][task.metric[0]]
            if rank == 0:
                queue.put((name, stats))
    finally:
        dist.destroy_process_group()


def _spawn(task, names: List[str], world: int) -> Dict[str, Dict[str, Any]]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as tmp:
        init = "file://" + os.path.join(tmp, "init")
        mp.spawn(_worker, args=(world, init, task, names, queue), nprocs=world, join=True)
    results = {}
    while not queue.empty():
        name, stats = queue.get()
        results[name] = stats
    return results


def compare(task, names: List[str], world: int = 4, verbose: bool = True
            ) -> Dict[str, Dict[str, Any]]:
    """Runs the baseline and every named run; returns {name: stats} (rank 0's)."""
    names = [BASELINE] + [n for n in names if n != BASELINE]
    ours = [n for n in names if parse_run(n)[0] != "torch"]
    results = _spawn(task, ours, world)
    for name in names:
        if parse_run(name)[0] != "torch":
            continue
        try:
            results.update(_spawn(task, [name], world))
        except Exception as e:  # a crashed rank (gloo aborts): report it, go on
            results[name] = {"failure": str(e).strip().splitlines()[-1][:160], "quality": {},
                             "steps": 0}
    ordered = {n: results[n] for n in names if n in results}
    if verbose:
        print_table(task, ordered, world)
    return ordered


def _interface_towards(address: str):
    """The local interface with an IPv4 address in address's /24: inside a rank's network
    namespace gloo must bind to it, not to what the host name resolves to."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                         text=True).stdout
    prefix = address.rsplit(".", 1)[0] + "."
    for line in out.splitlines():
        fields = line.split()  # "2: eth0    inet 10.78.0.1/24 brd ..."
        if len(fields) > 3 and fields[3].startswith(prefix):
            return fields[1]
    return None


class _Collect:
    def __init__(self) -> None:
        self.results: Dict[str, Dict[str, Any]] = {}

    def put(self, item) -> None:
        self.results[item[0]] = item[1]


def compare_launched(task, names: List[str], master: str, verbose: bool = True,
                     eval_every: int = 0):
    """One rank of a job that mpirun started (scripts/shaped-network runs every rank in a
    network namespace of its own): rank and world size from Open MPI's environment, gloo
    over TCP to `master`, rank 0's address. Every run in this one process group, in
    order; rank 0 prints the table."""
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    interface = _interface_towards(master)
    if interface is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    collect = _Collect()
    names = [BASELINE] + [n for n in names if n != BASELINE]
    _worker(rank, world, f"tcp://{master}:29517", task, names, collect, eval_every)
    if rank == 0 and verbose:
        print_table(task, collect.results, world)
    return collect.results


def run(task, args) -> Dict[str, Dict[str, Any]]:
    """What the examples' main() does with the shared options; the results (rank 0's,
    empty on the other ranks of a launched job)."""
    if args.launched:
        return compare_launched(task, args.codecs, args.launched, eval_every=args.eval_every)
    return compare(task, args.codecs, world=args.world_size)


def add_arguments(parser, task, default_runs: List[str]) -> None:
    """The command-line options every task shares."""
    parser.add_argument("--codecs", nargs="+", default=default_runs, metavar="RUN",
                        help="gradcodec specs (SPEC[@option=value,...]) or torch:fp16, "
                             "torch:bf16, torch:powersgd:rank=R")
    parser.add_argument("--world-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=task.lr)
    parser.add_argument("--weight-decay", type=float, default=task.weight_decay)
    parser.add_argument("--batch", type=int, default=task.batch_size, help="per rank")
    parser.add_argument("--width", type=int, default=task.width)
    parser.add_argument("--seed", type=int, default=task.seed)
    parser.add_argument("--eval-every", type=int, default=0, metavar="STEPS",
                        help="with --launched: evaluate every STEPS steps and report the "
                             "training time to reach the baseline's final quality")
    parser.add_argument("--launched", metavar="MASTER",
                        help="run as one rank of an mpirun job (scripts/shaped-network), "
                             "rank 0 at address MASTER, instead of spawning the ranks")


def print_table(task, results: Dict[str, Dict[str, Any]], world: int) -> None:
    metric, higher_better = task.metric
    base = results.get(BASELINE, {}).get("quality", {}).get(metric)
    print(f"\n{task.describe(world)}")
    print(f"{'run':<40} {metric:>10} {'vs fp32':>8} {'EF':>3} {'bytes/step':>11} "
          f"{'smaller':>8} {'time':>7} {'s/step':>8}")
    for name, r in results.items():
        label = {BASELINE: "DDP fp32 allreduce", COMPUTE: "compute alone (no communication)"
                 }.get(name, name)
        if r.get("failure"):
            print(f"{label:<40} {'failed: ' + r['failure']}")
            continue
        value = r["quality"][metric]
        if base is None or name in (BASELINE, COMPUTE):
            delta = ""
        elif higher_better:
            delta = f"{100 * (value - base):+.1f}"
        else:
            delta = f"{100 * (value - base) / base:+.1f}%"
        shown = f"{100 * value:9.1f}%" if higher_better else f"{value:10.3f}"
        ef = {None: "", True: "on", False: "off"}[r["error_feedback"]]
        per_step = r["bytes_per_step"]
        ratio = r["dense_bytes_per_step"] / per_step if per_step and per_step == per_step \
            else float("nan")
        peak = r.get("peak_sync_bytes")
        extra = f"  peak sync {peak} B" if peak else ""
        if r.get("exposed_sync"):
            extra += "  exposed/sync s by rank " + " ".join(
                f"{e:.2f}/{t:.2f}" for e, t in r["exposed_sync"])
            e, t = r["exposed_critical"]
            extra += f", last to arrive {e:.3f}/{t:.3f} ({100 * e / max(t, 1e-9):.0f} %)"
        if r.get("eval_every"):
            if name == BASELINE:  # its own final quality: reached at the end
                extra += f"  to target {r['seconds_training']:.1f}s"
            elif r.get("time_to_target") is not None:
                extra += f"  to target {r['time_to_target']:.1f}s"
            else:
                extra += "  target not reached"
        print(f"{label:<40} {shown} {delta:>8} {ef:>3} {per_step:11.0f} {ratio:7.1f}x "
              f"{r['seconds']:6.1f}s {r['step_seconds']:8.4f}" + extra)
    sys.stdout.flush()
