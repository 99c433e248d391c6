# SPDX-License-Identifier: Apache-2.0
"""The byte transport the library's communicator runs over inside a torch job: the five
blocking collectives of ``gradcodec._gradcodec.Communicator.from_transport`` on one
torch.distributed process group. Every buffer is a NumPy view of the library's memory,
valid during the call only; results are written into it in place.

Only exact collectives move the library's bytes (all-gather, all-to-all, broadcast, and
integer or max/min reductions): the engine never relies on the transport's floating-point
sums, so every rank computes the same bytes whatever the backend's algorithm. On an NCCL
group the host buffers are staged through the group's CUDA device."""

from typing import Any, List, Optional

import numpy as np
import torch
import torch.distributed as dist

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def global_rank(group: Optional[Any], rank: int) -> int:
    if group is None:
        return rank
    if hasattr(dist, "get_global_rank"):  # torch >= 2.0
        return dist.get_global_rank(group, rank)
    return dist.distributed_c10d._get_global_rank(group, rank)  # torch 1.13


class TorchTransport:
    """rank, size and the collectives over ``group`` (None: the default group).

    ``wire_bytes`` counts what this rank puts on the network as the collectives' usual
    algorithms do: an all-gather (W-1) times the block (padded to the longest), an
    all-to-all the blocks for other ranks, a ring allreduce 2(W-1)/W of the buffer, a
    broadcast the buffer on the root."""

    def __init__(self, group: Optional[Any] = None):
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        backend = dist.get_backend(group)
        self.device = (torch.device("cuda", torch.cuda.current_device())
                       if backend == "nccl" else torch.device("cpu"))
        self.wire_bytes = 0

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(a)
        return t if self.device.type == "cpu" else t.to(self.device)

    def _back(self, t: torch.Tensor, a: np.ndarray) -> None:
        if self.device.type != "cpu":
            a[...] = t.cpu().numpy()

    def allgatherv(self, send: np.ndarray, recv: np.ndarray, sizes: List[int]) -> None:
        # torch's all-gather wants equal sizes: every block padded to the longest.
        longest = max(sizes)
        if longest == 0:
            return
        block = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        block[: send.size] = self._tensor(send)
        blocks = [torch.empty(longest, dtype=torch.uint8, device=self.device)
                  for _ in range(self.size)]
        dist.all_gather(blocks, block, group=self.group)
        self.wire_bytes += (self.size - 1) * longest
        at = 0
        for b, s in zip(blocks, sizes):
            recv[at: at + s] = b[:s].cpu().numpy()
            at += s

    def alltoallv(self, send: np.ndarray, send_sizes: List[int], recv: np.ndarray,
                  recv_sizes: List[int]) -> None:
        out = torch.empty(int(recv.size), dtype=torch.uint8, device=self.device)
        dist.all_to_all_single(out, self._tensor(send), output_split_sizes=list(recv_sizes),
                               input_split_sizes=list(send_sizes), group=self.group)
        self.wire_bytes += sum(send_sizes) - send_sizes[self.rank]
        recv[...] = out.cpu().numpy()

    def allreduce(self, buf: np.ndarray, op: str) -> None:
        t = self._tensor(buf)
        dist.all_reduce(t, op=_OPS[op], group=self.group)
        self.wire_bytes += 2 * (self.size - 1) * buf.nbytes // self.size
        self._back(t, buf)

    def broadcast(self, buf: np.ndarray, root: int) -> None:
        if buf.size == 0:
            return
        t = self._tensor(buf)
        dist.broadcast(t, src=global_rank(self.group, root), group=self.group)
        if self.rank == root:
            self.wire_bytes += buf.nbytes
        self._back(t, buf)

    def barrier(self) -> None:
        dist.barrier(group=self.group)
