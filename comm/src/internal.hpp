// SPDX-License-Identifier: Apache-2.0
//! @file
//! Internals of the strategy layer: workspace buffers, the per-call run record, block
//! headers and failure propagation, chunking, derived contexts, the pipeline driver, and
//! the deterministic dense reduction. docs/comm.md is the written form of all of this.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "element_ops.hpp"
#include "gradcodec/blocks/bytes.hpp"
#include "gradcodec/comm/allreduce.hpp"
#include "gradcodec/expected_decode.hpp"
#include "gradcodec/powersgd.hpp"

namespace gradcodec::comm::detail {

// --- memory ------------------------------------------------------------------------------

//! A 64-byte aligned buffer in a communicator's memory that only grows; new bytes are
//! zero, old contents are not kept. It is remade when asked for in another memory.
class buffer {
 public:
  //! Throws std::bad_alloc when the memory has no room, as host allocation does.
  std::byte* reserve(std::size_t bytes, memory_ops& m);
  [[nodiscard]] std::byte* data() const noexcept { return p_.get(); }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  void release() noexcept {
    p_.reset();
    size_ = 0;
  }
  template <class T>
  T* as(std::size_t count, memory_ops& m) {
    return reinterpret_cast<T*>(reserve(count * sizeof(T), m));
  }

 private:
  memory_ops::block p_;
  std::size_t size_ = 0;
  memory_space space_ = memory_space::host;
  int device_ = -1;
};

//! One decode of a received frame into `out`: plain, or accumulating with r.alpha.
struct frame_decode {
  const_bytes frame;
  tensor_view out;
  bool accumulate;
};

//! Buffers of one in-flight segment of the pipeline.
struct slot {
  buffer send, recv, server_send, server_recv, frame;
  buffer headers;  // header exchanges of variable-size frames (the communicator's memory)
  std::vector<std::uint64_t> send_sizes, recv_sizes, server_sizes;
  std::vector<std::uint64_t> offsets, lengths;  // where the received frames are
  std::vector<std::uint64_t> announced;         // frame bytes this rank sends per destination
  std::vector<std::uint64_t> frame_bytes;       // variable size: frame bytes of each received block
  std::vector<frame_header> expected;           // device memory: the received frames' headers
  request req;
};

}  // namespace gradcodec::comm::detail

namespace gradcodec::comm {

//! The arrays of a device-resident state (allreduce_state::device).
struct device_arrays {
  memory_ops::block worker, server, q;
  state_lengths n;
  int device = -1;
  memory_ops::host_copy_fn download = nullptr;
};

struct workspace::impl {
  detail::buffer scratch;  // codec workspace (exec_options::workspace)
  detail::buffer accum;    // f32 accumulator of the chunk or segment being reduced
  detail::buffer prescaled;
  detail::buffer node;  // hierarchical: the node's sum, then the result
  detail::buffer flat;  // allreduce_tensors: the packed bucket
  detail::buffer dense_send, dense_recv;
  detail::buffer values;        // powersgd: P and the dense tensors
  detail::buffer words;         // the agreement's fields (the world's memory)
  detail::buffer node_word;     // the hierarchy's outcome word (the node's memory)
  detail::buffer staged;        // a leader's node sum in the inter-node memory, when it differs
  detail::buffer verdicts;      // device decodes: one frame_verdict per frame
  std::vector<std::byte> host;  // host copies: block headers, vote frames and result
  std::vector<detail::slot> slots;
  std::vector<const_bytes> frames;        // majority vote: the received frames
  std::vector<tensor_slot> pieces;        // segments of the tensor cover (powersgd)
  std::vector<powersgd_matrix> matrices;  // powersgd: the P factors to orthogonalise
  std::vector<tensor_slot> bucket_slots;  // allreduce_tensors
  std::vector<std::uint64_t> sizes_a, sizes_b, lengths;
  std::vector<detail::frame_decode> decodes;  // the received frames a stage decodes
  std::vector<frame_header> decode_headers;   // ... and their headers, on device memory

  //! The buffers of a hierarchy's node level when its memory differs from the leaders'.
  std::unique_ptr<impl> node_side;
  impl& node_level() {
    if (!node_side) node_side = std::make_unique<impl>();
    return *node_side;
  }

  [[nodiscard]] std::size_t bytes() const noexcept;
};

}  // namespace gradcodec::comm

namespace gradcodec::comm::detail {

// --- element access ----------------------------------------------------------------------

inline float load(const_tensor_view v, std::uint64_t i) { return load_value(v.data, v.type, i); }
inline void store(tensor_view v, std::uint64_t i, float x) { store_value(v.data, v.type, i, x); }

inline const_tensor_view slice(const_tensor_view v, std::uint64_t begin, std::uint64_t n,
                               std::uint64_t rows = 0) {
  return {static_cast<const std::byte*>(v.data) + begin * dtype_size(v.type), n, v.type, rows};
}
inline tensor_view slice(tensor_view v, std::uint64_t begin, std::uint64_t n,
                         std::uint64_t rows = 0) {
  return {static_cast<std::byte*>(v.data) + begin * dtype_size(v.type), n, v.type, rows};
}
inline tensor_view f32_view(float* p, std::uint64_t n, std::uint64_t rows = 0) {
  return {p, n, dtype::f32, rows};
}

using blocks::get;
using blocks::put;

// --- hashing and derived contexts ----------------------------------------------------------

std::uint64_t splitmix64(std::uint64_t x) noexcept;
//! FNV-1a 64 of a byte string.
std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) noexcept;

enum : std::uint64_t {
  role_worker = 1,
  role_server = 2,
  role_tensor = 3,
  shared_rank = ~std::uint64_t{0}
};

//! The context of one frame: tensor_id = h(h(h(h(id ^ role) ^ segment) ^ chunk) ^ rank),
//! h = splitmix64. Seed and step are the caller's.
context derive(const context& ctx, std::uint64_t role, std::uint64_t segment, std::uint64_t chunk,
               std::uint64_t rank) noexcept;

// --- chunking ---------------------------------------------------------------------------

struct range {
  std::uint64_t begin = 0, len = 0;
};

//! Chunk c of W over `len` elements in whole units: U = ceil(len/unit) units, chunk c gets
//! U/W units plus one if c < U mod W, in order; the last non-empty chunk ends at len.
range chunk_of(std::uint64_t len, std::uint64_t unit, int world, int c) noexcept;

//! Elements per codec bucket for bucketed codecs, else 1: chunk and segment boundaries
//! fall on multiples of it.
std::uint64_t unit_of(const codec_spec& spec) noexcept;

// --- the run of one call ------------------------------------------------------------------

//! One segment of the flat buffer: elements [offset, offset + len), a rows x cols matrix
//! when rows > 0 (PowerSGD).
struct segment {
  std::uint64_t offset = 0, len = 0, rows = 0;
};

struct run {
  communicator& comm;
  const allreduce_config& cfg;
  strategy how;
  context ctx;
  const_tensor_view in;
  tensor_view out;
  allreduce_state& st;
  workspace::impl& ws;
  phase_times* times;
  memory_ops& mem;  // where the communicator's buffers live (and in, out and the state)
  int world = 1, me = 0;
  int reported_rank = 0;  // the rank error words name (the world rank in a hierarchy)
  int mean_over = 1;      // W for the mean, 1 for the sum
  float alpha = 1.0f;     // 1 / mean_over: weight of each rank's contribution in accumulations
  float divisor = 1.0f;   // dense casts: inputs are divided by this before encoding
  bool error_feedback = true;
  std::uint64_t unit = 1, seg_len = 0, segments = 0;
  std::span<const tensor_slot> pieces{};  // when set, segment i is pieces[i]
  // The state's arrays, wherever they live (set once the state is ready).
  float* worker_residual = nullptr;
  float* server_residual = nullptr;
  float* q = nullptr;

  status local{};            // the first failure on this rank
  std::uint64_t poison = 0;  // error word of the lowest failing rank seen (0 = none)

  [[nodiscard]] bool failed() const noexcept { return poison != 0; }
  //! Records a failure on this rank; it travels in the next block headers.
  void fail(const status& s);
  //! Records an error word received from another rank.
  void note(std::uint64_t word) noexcept;
  [[nodiscard]] segment seg(std::uint64_t i) const noexcept;
  [[nodiscard]] exec_options exec(std::span<std::byte> scratch) const noexcept {
    return {mem.codec_backend(cfg.where), scratch, mem.stream(), cfg.threads};
  }
  //! The status the call returns once the collectives are done.
  [[nodiscard]] status outcome() const;
};

//! The largest rank an error word can name (read_block rejects words beyond it as garbage).
inline constexpr std::uint64_t max_rank = (std::uint64_t{1} << 31) - 1;
//! The error word of a failure: bit 63, the failing rank (bits 8..62), the status code.
std::uint64_t error_word(int rank, status_code code) noexcept;
//! comm_error naming the failing rank and its code (success for word 0).
status failure_status(std::uint64_t word);

//! Codec scratch for one operation, or a failure recorded on the run.
std::span<std::byte> codec_scratch(run& r, const codec_spec& spec, const_tensor_view shape,
                                   operation op);

//! Whether a frame starts 16-byte aligned (the CUDA kernels need it); a failure on the
//! run otherwise.
bool frame_aligned(run& r, const void* frame);

//! Encodes `in` into dst, with error feedback on `residual` when it has data (the worker's
//! or the server's residual). The frame's bytes; 0 with the failure recorded on the run.
std::uint64_t encode_frame(run& r, const context& fctx, const_tensor_view in, tensor_view residual,
                           mutable_bytes dst);

//! The context of a frame of this run (randomk frames share it across ranks).
context frame_context(const run& r, std::uint64_t role, std::uint64_t segment, std::uint64_t chunk);

// --- block headers ------------------------------------------------------------------------

//! Every block on the wire starts with 16 bytes: the sender's error word (0 = fine) and
//! the frame's length in bytes (the block may be padded beyond it).
inline constexpr std::uint64_t block_header = 16;
//! Frames travel padded to a multiple of 16 bytes so that each starts 16-byte aligned in
//! a receive buffer (the CUDA kernels require it; device allocations give 256).
inline constexpr std::uint64_t frame_align = 16;
constexpr std::uint64_t padded(std::uint64_t bytes) {
  return (bytes + frame_align - 1) / frame_align * frame_align;
}
inline status put_block(run& r, std::byte* at, std::uint64_t word, std::uint64_t bytes) {
  return r.mem.put_words(at, word, bytes);
}
//! Reads a block header (in host memory), noting an error word; returns the frame length
//! (0 on error or when it exceeds the block's capacity).
std::uint64_t read_block(run& r, const std::byte* at, std::uint64_t capacity);
//! Copies to the host the headers of the blocks at base + offsets[i], then reads them
//! into lengths[i] (capacities[i] each; one capacity for all when it has one entry).
//! With `frames`, the copy also takes the frame header behind each block header (the
//! block's frame starts there) and peeks it into (*frames)[i], in the same wait: what
//! decode_frames needs to decode on a device without waiting for each header.
status read_blocks(run& r, const std::byte* base, std::span<const std::uint64_t> offsets,
                   std::span<const std::uint64_t> capacities, std::vector<std::uint64_t>& lengths,
                   std::vector<frame_header>* frames = nullptr);

//! The frame headers read_blocks should collect: on device memory only (a host decode
//! reads each header in place). Clears the slot's headers of an earlier call either way.
inline std::vector<frame_header>* device_headers(const run& r, slot& s) {
  s.expected.clear();
  return r.mem.space() == memory_space::host ? nullptr : &s.expected;
}

//! Runs the decodes in order, recording the first failing frame's failure on the run.
//! With `headers` (one per decode, from read_blocks on device memory) each frame is
//! decoded against its header (decode_expected) without a wait, and the verdicts come
//! back in one copy at the end; without, decode reads each frame's header itself. An
//! error only when that copy failed (the memory or its stream is broken).
status decode_frames(run& r, std::span<const frame_decode> jobs,
                     std::span<const frame_header> headers);

// --- timed collectives -----------------------------------------------------------------------

class timer {
 public:
  explicit timer(phase_times* t, double phase_times::*field) : t_(t), field_(field) {
    if (t_) start_ = std::chrono::steady_clock::now();
  }
  ~timer() {
    if (t_)
      t_->*field_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  timer(const timer&) = delete;
  timer& operator=(const timer&) = delete;

 private:
  phase_times* t_;
  double phase_times::*field_;
  std::chrono::steady_clock::time_point start_{};
};

void count_traffic(run& r, std::uint64_t sent, std::uint64_t received);
status wait(run& r, request& req);

// --- the pipeline driver ------------------------------------------------------------------

//! A strategy as stages over segments: stage 0 starts a segment and posts its first
//! exchange; stage k (1..exchanges-1) waits for exchange k-1 and posts exchange k; the
//! last stage waits for the last exchange and finishes the segment. A stage returns an
//! error only when the communicator failed (everything stops); other failures are
//! recorded on the run and the stages keep exchanging so no rank is left waiting.
class program {
 public:
  virtual ~program() = default;
  [[nodiscard]] virtual int exchanges() const noexcept = 0;
  virtual status stage(run& r, int k, std::uint64_t seg, slot& s) = 0;
};

//! Runs every segment through every stage: one segment at a time, or (cfg.pipeline)
//! staggered so stage k of segment i runs right after stage k-1 of segment i+1 posted
//! (ascending k within a time step, so an encode overlaps the previous transfer).
status drive(run& r, program& p);

// --- deterministic dense reduction ------------------------------------------------------------

//! Reduces n f32 values over r.comm in place: a reduce-scatter (alltoallv) into W chunks,
//! the owner accumulating acc = fma(alpha_i, v_s, acc) from +0.0 over sources s = 0..W-1
//! in order (alpha_i = alpha_lo for i < split, else alpha_hi), then an allgatherv of the
//! chunks. Bit-identical on every rank whatever the transport.
status dense_reduce(run& r, float* values, std::uint64_t n, std::uint64_t split, float alpha_lo,
                    float alpha_hi);

//! The same reduction of `src` (any dtype, converted to f32) over r.comm, leaving the f32
//! result in dst on rank `root` only (a reduce-scatter, then every chunk to the root).
status dense_reduce_to_root(run& r, const_tensor_view src, float* dst, float alpha, int root);

// --- strategies ----------------------------------------------------------------------------

status run_allgather(run& r);
status run_two_phase(run& r);  // also the dense strategy of fp16/bf16
status run_randomk_dense(run& r);
status run_majority_vote(run& r);
status run_powersgd_dense(run& r);
//! Floats of Q the dense PowerSGD strategy keeps for these segments.
std::uint64_t powersgd_q_size(const codec_spec& spec, std::span<const tensor_slot> pieces);

//! The fingerprint check of docs/comm.md: one allreduce(max) of F fields and their
//! complements; on disagreement every rank gets the same comm_error.
struct agreement {
  std::uint64_t fields[18] = {};
  std::uint64_t local_failure = ~std::uint64_t{0};  // (rank << 16) | reason, or all ones
};
//! The allreduce runs through `staging` in the communicator's memory `mem`.
status agree(communicator& c, memory_ops& mem, buffer& staging, const agreement& a,
             phase_times* times);

//! Reason codes a rank reports in the agreement when its own checks fail.
enum class local_reason : std::uint16_t {
  invalid_spec = 1,
  unsupported_strategy = 2,
  bad_views = 3,
  bad_tensors = 4,
  state_mismatch = 5,
  bad_hierarchy = 6,
  nonfinite_on_device = 7,
};
std::string_view reason_text(local_reason r) noexcept;

//! The configuration hash stored in the state (docs/comm.md, "State format").
std::uint64_t config_fingerprint(const allreduce_config& cfg, strategy how, std::uint64_t n,
                                 std::uint64_t rows, state_role role) noexcept;

//! Floats of each state array a run needs.
struct state_sizes {
  std::uint64_t worker = 0, server = 0, q = 0;
};
state_sizes expected_sizes(const run& r, state_role role);

//! Sizes a fresh state for a run (residuals zero, q not ready).
void init_state(run& r, state_role role, std::uint64_t fingerprint);
//! Whether an initialized state belongs to this run.
bool state_matches(const run& r, state_role role, std::uint64_t fingerprint);
//! Moves the state's arrays into the run's memory when they are elsewhere, and points
//! the run at them.
status place_state(run& r);

}  // namespace gradcodec::comm::detail
