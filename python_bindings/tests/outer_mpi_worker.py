# SPDX-License-Identifier: Apache-2.0
"""One rank of ``mpirun -np 4 python3 outer_mpi_worker.py OUT_DIR`` (test_outer.py): the
cases of test_outer.py through gradcodec.torch.OuterSync over gradcodec.Communicator.mpi(),
each rank's results pickled to OUT_DIR/<rank>.pkl; then it exits with a sync in flight."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import gradcodec as gc  # noqa: E402
import gradcodec.torch as gct  # noqa: E402
from test_outer import CASES, initial, inner_step, put, run_torch_case  # noqa: E402


def main(out_dir: str) -> "gct.OuterSync":
    torch.set_num_threads(1)
    results, rank = {}, 0
    for name, args in CASES:
        comm = gc.Communicator.mpi()  # one per OuterSync: a delayed sync owns its traffic
        rank = comm.rank
        results[name] = run_torch_case(rank, args, communicator=comm)
    put(out_dir, rank, results)
    # The process ends with a sync in flight: it must be settled before MPI is finalized
    # at exit (else MPI aborts the job and mpirun fails).
    params = [p.clone() for p in initial()]
    outer = gct.OuterSync(params, spec="minmax:bits=4", sync_every=4, fragments=2, delay=2,
                          threads=1, communicator=gc.Communicator.mpi())
    for t in range(6):
        inner_step(params, rank, t)
        if t == 5 and rank > 0:
            time.sleep(1.0)  # rank 0's last sync waits for the others while it exits
        outer.step()
    assert outer._engine.in_flight
    return outer  # alive until the interpreter's teardown, as a script's global would be


if __name__ == "__main__":
    in_flight = main(sys.argv[1])
