# SPDX-License-Identifier: Apache-2.0
"""One rank of ``mpirun -np 4 python3 outer_mpi_worker.py OUT_DIR`` (test_outer.py): the
cases of test_outer.py through gradcodec.torch.OuterSync over gradcodec.Communicator.mpi(),
each rank's results pickled to OUT_DIR/<rank>.pkl."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import gradcodec as gc  # noqa: E402
from test_outer import CASES, put, run_torch_case  # noqa: E402


def main(out_dir: str) -> None:
    torch.set_num_threads(1)
    results, rank = {}, 0
    for name, args in CASES:
        comm = gc.Communicator.mpi()  # one per OuterSync: a delayed sync owns its traffic
        rank = comm.rank
        results[name] = run_torch_case(rank, args, communicator=comm)
    put(out_dir, rank, results)


if __name__ == "__main__":
    main(sys.argv[1])
