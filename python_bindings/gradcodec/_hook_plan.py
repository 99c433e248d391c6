# SPDX-License-Identifier: Apache-2.0
"""How the DDP hook splits a bucket: segments that are compressed with the codec and
segments that travel dense, with the tensor ids that key their random numbers."""

import math
from typing import Any, List, Sequence, Tuple


class Segment:
    """A run of the bucket's flat buffer: one parameter (per-tensor selection) or several
    consecutive ones, compressed with the codec or sent dense."""

    __slots__ = ("offset", "numel", "rows", "compressed", "tensor_id")

    def __init__(self, offset: int, numel: int, rows: int, compressed: bool, tensor_id: int):
        self.offset, self.numel, self.rows = offset, numel, rows
        self.compressed, self.tensor_id = compressed, tensor_id

    def of(self, t):
        return t[self.offset:self.offset + self.numel]


def layout(bucket: Any) -> Tuple:
    """What a bucket's state belongs to: element count, dtype and parameter shapes."""
    buf = bucket.buffer()
    shapes = tuple(tuple(int(d) for d in p.shape) for p in bucket.parameters())
    return (int(buf.numel()), str(buf.dtype), shapes)


def tensor_id(bucket_index: int, position: int) -> int:
    """The tensor id of the parameter at `position` of bucket `bucket_index`."""
    return (bucket_index << 16) | position


def segments(shapes, index: int, *, per_tensor: bool, compress_1d: bool,
             min_numel: int) -> List[Segment]:
    """The bucket's segments in buffer order. A parameter is sent dense when it is 1-D
    (biases, norm scales) and compress_1d is off, or has fewer than min_numel elements.
    Without per_tensor, consecutive parameters of the same kind share one segment."""
    out: List[Segment] = []
    offset = 0
    for position, shape in enumerate(shapes):
        numel = math.prod(shape)
        if numel == 0:
            continue
        dense = (len(shape) <= 1 and not compress_1d) or numel < min_numel
        rows = int(shape[0]) if len(shape) >= 2 else 0
        last = out[-1] if out else None
        if not per_tensor and last is not None and last.compressed == (not dense) and \
                last.offset + last.numel == offset:
            last.numel += numel
            last.rows = 0
        else:
            out.append(Segment(offset, numel, rows, not dense, tensor_id(index, position)))
        offset += numel
    return out


def powersgd_tensors(shapes: Sequence[Sequence[int]]) -> List[Tuple[int, int, int]]:
    """(offset, numel, rows) of the parameters the hook's PowerSGD views as matrices (two
    or more dimensions), for the planner."""
    out, offset = [], 0
    for shape in shapes:
        numel = math.prod(shape)
        if len(shape) >= 2 and numel > 0:
            out.append((offset, numel, int(shape[0])))
        offset += numel
    return out
