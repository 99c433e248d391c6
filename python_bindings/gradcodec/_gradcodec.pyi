# SPDX-License-Identifier: Apache-2.0
"""Type stubs of the native module gradcodec._gradcodec (re-exported by gradcodec)."""

import enum
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import numpy.typing as npt

# An array the library reads or writes in place: a numpy array or any object with
# __dlpack__ (torch.Tensor, ...), float32/float16/bfloat16, C-contiguous, never copied.
# Host memory, or CUDA memory when backend_available("cuda") (every array of one call on
# the same device; CUDA calls run on torch's current stream of that device).
ArrayLike = Any
# Frame bytes: a uint8 numpy array or tensor (a CUDA tensor too, where CUDA calls are
# allowed), bytes, bytearray or memoryview.
BytesLike = Union[npt.NDArray[np.uint8], bytes, bytearray, memoryview, Any]
# A dtype: "f32"/"f16"/"bf16", "float32"/..., numpy.float32, numpy.dtype, torch.float32.
DTypeLike = Any
SpecLike = Union[str, "Codec"]
_Out = TypeVar("_Out")

__version__: str
header_bytes: int
format_version: int

class StatusCode(enum.IntEnum):
    ok = 0
    invalid_argument = 1
    invalid_spec = 2
    output_too_small = 3
    workspace_too_small = 4
    corrupt_frame = 5
    unsupported_version = 6
    shape_mismatch = 7
    nonfinite_input = 8
    backend_unavailable = 9
    device_error = 10
    comm_error = 11
    internal_error = 12

class Codec:
    """A codec and its parameters, from a spec string such as 'qsgd:levels=7,bucket=512'.
    Keyword arguments add parameters: Codec('topk', ratio=0.05)."""

    def __init__(self, spec: SpecLike, **params: Any) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def id(self) -> int: ...
    @property
    def spec(self) -> str:
        """The canonical spec string."""
    @property
    def params(self) -> Dict[str, Any]: ...
    @property
    def traits(self) -> Dict[str, bool]: ...
    @property
    def collectives(self) -> Dict[str, bool]: ...
    @property
    def info(self) -> Dict[str, Any]: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def encode_bound(self, n: int, dtype: DTypeLike = "f32", rows: int = 0) -> int: ...
    def bounds(self, n: int = 0) -> Dict[str, Any]:
        """Error bounds for n elements (0: any size) and whether error feedback is safe."""
    def workspace_size(self, n: int, operation: str = "encode", dtype: DTypeLike = "f32",
                       rows: int = 0, backend: str = "auto") -> int: ...
    def encode(self, input: ArrayLike, *, seed: int = 0, step: int = 0, tensor_id: int = 0,
               backend: str = "auto", rows: Optional[int] = None, threads: int = 0,
               out: Optional[Any] = None) -> Any:
        """Encodes input into a frame: a new numpy uint8 array (a torch.uint8 tensor on the
        input's device for a CUDA input), or out[:size] with out (on the input's device)."""
    def encode_with_feedback(self, grad: ArrayLike, residual: ArrayLike, *, seed: int = 0,
                             step: int = 0, tensor_id: int = 0, backend: str = "auto",
                             rows: Optional[int] = None, threads: int = 0,
                             out: Optional[Any] = None) -> Any:
        """p = grad + residual; frame = encode(p); residual = p - decode(frame) in place.
        grad, residual and out share one device (host or CUDA)."""
    def decode(self, frame: BytesLike, out: Optional[_Out] = None, *,
               shape: Union[int, Sequence[int], None] = None, dtype: DTypeLike = None,
               backend: str = "auto", threads: int = 0) -> Any: ...
    def decode_accumulate(self, frame: BytesLike, acc: ArrayLike, alpha: float = 1.0, *,
                          backend: str = "auto", threads: int = 0) -> None: ...
    def peek(self, frame: BytesLike) -> FrameInfo:
        """Same as gradcodec.peek (a CUDA frame's header is copied to the host)."""
    @staticmethod
    def from_frame(frame: BytesLike) -> Codec: ...

class FrameInfo:
    """A frame header (docs/format.md)."""

    version: int
    flags: int
    n: int
    payload_bytes: int
    count: int
    group: int
    level: int
    mode: int
    param: float
    @property
    def codec(self) -> str: ...
    @property
    def codec_id(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def nonfinite(self) -> bool: ...
    @property
    def index64(self) -> bool: ...
    @property
    def frame_bytes(self) -> int: ...
    @property
    def spec(self) -> Codec: ...
    def as_dict(self) -> Dict[str, Any]: ...

def encode(spec: SpecLike, input: ArrayLike, *, seed: int = 0, step: int = 0,
           tensor_id: int = 0, backend: str = "auto", rows: Optional[int] = None,
           threads: int = 0, out: Optional[Any] = None) -> Any:
    """Codec(spec).encode(input, ...): numpy uint8 for host input, a torch.uint8 tensor on
    the input's device for CUDA input (a view of its encode_bound-sized allocation)."""
def encode_with_feedback(spec: SpecLike, grad: ArrayLike, residual: ArrayLike, *,
                         seed: int = 0, step: int = 0, tensor_id: int = 0,
                         backend: str = "auto", rows: Optional[int] = None, threads: int = 0,
                         out: Optional[Any] = None) -> Any: ...
def encode_bound(spec: SpecLike, n: int, dtype: DTypeLike = "f32", rows: int = 0) -> int: ...
def decode(frame: BytesLike, out: Optional[_Out] = None, *,
           shape: Union[int, Sequence[int], None] = None, dtype: DTypeLike = None,
           backend: str = "auto", threads: int = 0) -> Any:
    """Decodes a whole frame into out, or into a new array on the frame's device: numpy for
    a host frame, a torch tensor for a CUDA frame (where dtype may also be bf16)."""
def decode_accumulate(frame: BytesLike, acc: ArrayLike, alpha: float = 1.0, *,
                      backend: str = "auto", threads: int = 0) -> None:
    """acc += alpha * decode(frame), in place."""
def peek(frame: BytesLike) -> FrameInfo:
    """Reads and checks a frame's header; a CUDA frame's 48 header bytes are copied to the
    host first (torch, on its device's current stream: it waits for the frame's writer)."""
def decode_expected(expected: FrameInfo, frame: BytesLike, out: ArrayLike, verdict: ArrayLike,
                    *, backend: str = "auto", threads: int = 0) -> None:
    """Decodes frame into out when its header equals `expected` but for the non-finite flag
    (threshold, dgc: and the count); the outcome goes into `verdict` (16 uint8 on the
    frame's device), and out is written only when it is good. No wait on CUDA."""
def decode_accumulate_expected(expected: FrameInfo, frame: BytesLike, acc: ArrayLike,
                               verdict: ArrayLike, alpha: float = 1.0, *,
                               backend: str = "auto", threads: int = 0) -> None:
    """acc += alpha * decode(frame) under the checks of decode_expected."""
def check_verdicts(verdicts: BytesLike) -> None:
    """Raises gradcodec.Error for the first bad verdict of a host uint8 array of 16-byte
    verdicts, naming its index."""
def sign_majority_vote(frames: Sequence[BytesLike], out: Optional[_Out] = None,
                       alpha: float = 1.0, *, shape: Union[int, Sequence[int], None] = None,
                       dtype: DTypeLike = None) -> Any:
    """signSGD majority vote of 'sign' frames; host memory only (frames and out)."""
def codecs() -> List[Dict[str, Any]]: ...
def minifloat_codes(fmt: str, x: Any, rounding: str = "nearest",
                    uniforms: Any = None) -> bytes: ...
def minifloat_values(fmt: str, codes: Any) -> bytes: ...
def backend_available(name: str) -> bool: ...
def backend_unavailable_reason(name: str) -> str: ...
def backends() -> List[str]: ...
def cpu_isa() -> str: ...
def cpu_isa_best() -> str: ...
def cpu_isa_supported(name: str) -> bool: ...
def set_cpu_isa(name: str) -> None: ...
def cpu_default_threads() -> int: ...
def set_cpu_default_threads(threads: int) -> None: ...

# --- PowerSGD phases (float32 host arrays, modified in place; CUDA memory is refused:
# the library's phase and state API has no CUDA version) ------------------------------

def powersgd_compresses(spec: SpecLike, rows: int, cols: int) -> bool: ...
def powersgd_rank(spec: SpecLike, rows: int, cols: int) -> int: ...
def powersgd_init_q(spec: SpecLike, rows: int, cols: int, q: ArrayLike, *, seed: int = 0,
                    tensor_id: int = 0) -> None: ...
def powersgd_compute_p(spec: SpecLike, grad: ArrayLike, residual: ArrayLike, q: ArrayLike,
                       p: ArrayLike, *, rows: Optional[int] = None) -> None: ...
def powersgd_compute_q(spec: SpecLike, p: ArrayLike, residual: ArrayLike, rows: int,
                       cols: int, q: ArrayLike) -> None: ...
def powersgd_finish(spec: SpecLike, p: ArrayLike, q: ArrayLike, world_size: int,
                    residual: ArrayLike, out: ArrayLike, *, error_feedback: bool = True,
                    rows: Optional[int] = None) -> None: ...
def powersgd_orthogonalize(a: ArrayLike, rows: int, r: int, eps: float = 1e-8) -> None: ...
def powersgd_orthogonalize_batch(a: ArrayLike, matrices: Sequence[Tuple[int, int, int]],
                                 eps: float = 1e-8) -> None: ...
def powersgd_project_q(spec: SpecLike, p: ArrayLike, residual: ArrayLike, rows: int,
                       cols: int, q: ArrayLike) -> None: ...
def powersgd_state_bytes(rows: int, cols: int, rank: int) -> int: ...
def powersgd_save_state(q: ArrayLike, residual: ArrayLike, rows: int, cols: int, rank: int,
                        step: int = 0) -> npt.NDArray[np.uint8]: ...
def powersgd_peek_state(state: BytesLike) -> Dict[str, int]: ...
def powersgd_load_state(state: BytesLike, rows: int, cols: int, rank: int, q: ArrayLike,
                        residual: ArrayLike) -> Dict[str, int]: ...

# The outer synchronizer (docs/outer.md).
class Communicator:
    rank: int
    size: int
    @staticmethod
    def from_transport(transport: Any) -> "Communicator": ...
    @staticmethod
    def threads(size: int) -> List["Communicator"]: ...
    @staticmethod
    def mpi(wait_poll: float = 1e-4) -> "Communicator": ...
    @staticmethod
    def mpi_built() -> bool: ...

class OuterSync:
    def __init__(self, comm: Communicator, *, spec: Optional[str] = None,
                 strategy: Optional[str] = None, error_feedback: Optional[bool] = None,
                 sync_every: int = 1, fragments: int = 1, delay: int = 0, mix: float = 0.5,
                 lr: float = 1.0, momentum: float = 0.0, nesterov: bool = False,
                 participants: int = 0, seed: int = 0,
                 tensors: Sequence[Tuple[int, int, int]] = (), threads: int = 0) -> None: ...
    def init(self, params: ArrayLike) -> None: ...
    def step(self, params: ArrayLike) -> bool: ...
    due: bool
    def settle(self) -> None: ...
    def save(self) -> bytes: ...
    def load(self, state: BytesLike) -> None: ...
    global_params: npt.NDArray[np.float32]
    steps: int
    rounds: int
    pending: int
    bytes_sent: int
    bytes_received: int
    collectives: int
    last_sync_bytes: int
    sync_seconds: float
    exposed_seconds: float

def outer_fragment_due(sync_every: int, fragments: int, step: int) -> int: ...

# The planner (docs/planner.md).
def calibrate(comm: Communicator, specs: Sequence[Any], threads: int = 1, small: int = 65536,
              large: int = 4194304, seconds: float = 0.02, link_small: int = 4096,
              link_large: int = 4194304, repeats: int = 5, in_call: int = 4194304,
              in_call_segment: int = 1048576, in_call_repeats: int = 2) -> str: ...
def measure_codec_costs(specs: Sequence[Any], threads: int = 1, small: int = 65536,
                        large: int = 4194304, seconds: float = 0.02) -> str: ...
class DriftTracker:
    """Measured against predicted time per planned bucket, agreed across ranks."""
    def __init__(self, ewma: float = 0.2, limit: float = 1.25) -> None: ...
    def observe(self, key: int, row: Dict[str, Any], seconds: float) -> None: ...
    def restore(self, key: int, row: Dict[str, Any], ratio: float, seconds: float) -> None: ...
    def ratio(self, key: int) -> Optional[float]: ...
    def seconds(self, key: int) -> Optional[float]: ...
    @property
    def replans(self) -> int: ...
    def agree(self, comm: Communicator, profile: str) -> Tuple[List[int], str]: ...
def plan(profile: str, elements: int, ranks: int, accept: Sequence[Any],
         segments: Sequence[int] = (0,), margin: float = 0.05, try_pipelining: bool = False,
         transport_allreduce: bool = False, error_feedback: Optional[bool] = None,
         exclude: Sequence[Tuple[str, str]] = ()) -> Dict[str, Any]: ...
