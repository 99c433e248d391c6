// SPDX-License-Identifier: Apache-2.0
//! @file
//! The one measuring harness of `gradcodec bench`: the four operations of one codec
//! (encode, decode, decode_accumulate, encode_ef) on one target, timed by a clock (steady
//! clock on the host, CUDA events on a GPU) over a memory (host or device buffers).
//!
//! A Clock has `timing time(std::uint64_t min_runs, Body body)`: one warm-up call of body
//! (which returns false on failure), then timed calls; 0 runs when a call fails.
//! A Memory has:
//!   static constexpr bool host;                  frames and outputs readable here
//!   std::uint64_t n() const;                     the input's element count
//!   const void* input() const;                   the f32 input, where the backend reads it
//!   std::span<const float> host_input() const;   the same values on the host
//!   void reserve(std::size_t workspace, std::size_t frame);
//!   std::span<std::byte> workspace(), frame();
//!   float* out(), acc(), residual();             n floats each
//!   void zero(float* p);                         sets n floats to 0, ordered with the calls
//!   result<frame_header> peek_frame(std::size_t bytes);   the encoded frame's header
//!   std::span<const float> decoded();            out() as the host sees it
#pragma once

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>

#include "bench_common.hpp"
#include "bench_model.hpp"
#include "bench_report.hpp"
#include "gradcodec/gradcodec.hpp"

namespace gradcodec::tool {

//! The median of a clock's timed calls.
struct timing {
  double median_s = 0;
  std::uint64_t runs = 0;
};

//! Where one codec is measured and how its rows are labelled.
struct measure_target {
  exec_options opt;     //!< backend, threads, stream; the harness adds the workspace
  std::string backend;  //!< the rows' backend column
  std::string isa;      //!< the rows' isa column ("-", an ISA name, "gpu0")
  int threads = 1;      //!< the rows' thr column
};

//! The row note of a failed call.
std::string note_of(const status& s, std::string_view backend);

//! --verify: the frame and decoded values a host backend produced, and one error-feedback
//! step from a zero residual on both backends, against the reference backend. "" when equal,
//! else what differs first.
std::string verify_against_reference(const codec_spec& spec, const context& ctx,
                                     const_tensor_view in, const_bytes frame,
                                     std::span<const float> decoded, const exec_options& opt);

//! Adds the rows of the four operations of `spec` on `t` to `st`.
template <class Clock, class Memory>
void measure_codec(run_state& st, Clock& clock, Memory& mem, const codec_spec& spec,
                   const measure_target& t) {
  const std::uint64_t n = mem.n();
  const std::uint64_t rows = spec.id == codec_id::powersgd ? powersgd_square_rows(n) : 0;
  const std::string name = to_string(spec);
  const auto base = [&](bench_op op) {
    record r;
    r.codec = name;
    r.backend = t.backend;
    r.isa = t.isa;
    r.threads = t.threads;
    r.n = n;
    r.op = std::string(bench_op_name(op));
    return r;
  };
  status failure;
  // Every codec runs on the CUDA backend, so there a missing one fails the run; a host
  // backend that lacks a codec gets a row note.
  const bool every_codec_runs = t.opt.where == backend::cuda;
  const auto noted = [&](bench_op op) {
    record r = base(op);
    if (every_codec_runs || failure.code() != status_code::backend_unavailable) ++st.failed;
    r.note = note_of(failure, t.backend);
    st.add(r);
  };
  const auto all_noted = [&] {
    for (const bench_op op :
         {bench_op::encode, bench_op::decode, bench_op::decode_accumulate, bench_op::encode_ef})
      noted(op);
  };

  exec_options opt = t.opt;
  const const_tensor_view in{mem.input(), n, dtype::f32, rows};
  std::size_t ws = 0;
  for (const operation op : {operation::encode, operation::encode_with_feedback, operation::decode,
                             operation::decode_accumulate}) {
    auto w = workspace_size(spec, in, op, opt);
    if (!w) {
      failure = w.error();
      return all_noted();
    }
    ws = std::max(ws, w.value());
  }
  mem.reserve(ws, encode_bound(spec, n, dtype::f32, rows));
  opt.workspace = mem.workspace();
  const context ctx{1, 0, 0};

  // Encode; every later operation reads its frame.
  std::size_t frame_bytes = 0;
  const timing te = clock.time(st.min_runs, [&] {
    auto w = encode(spec, ctx, in, mem.frame(), opt);
    if (!w) failure = w.error();
    if (w) frame_bytes = w.value();
    return w.ok();
  });
  if (te.runs == 0) return all_noted();
  const const_bytes frame{mem.frame().data(), frame_bytes};
  const auto h = mem.peek_frame(frame_bytes);
  if (!h) {
    failure = h.error();
    return all_noted();
  }
  const std::uint64_t kept = blocks::traits_of(spec.id).selects ? h.value().count : n;
  const tensor_view out{mem.out(), n, dtype::f32, rows};
  const tensor_view acc{mem.acc(), n, dtype::f32, rows};
  const tensor_view residual{mem.residual(), n, dtype::f32, rows};

  double err = 0;
  const auto finish = [&](bench_op op, const timing& tm, std::uint64_t bytes_of_frame) {
    if (tm.runs == 0) return noted(op);
    record r = base(op);
    r.median_s = tm.median_s;
    r.runs = tm.runs;
    r.bytes_per_element = bytes_per_element(spec.id, op, n, bytes_of_frame, kept);
    r.ratio = 4.0 * static_cast<double>(n) / static_cast<double>(bytes_of_frame);
    r.rel_error = err;
    st.add(r);
  };

  const timing td = clock.time(st.min_runs, [&] {
    const status s = decode(frame, out, opt);
    if (!s.ok()) failure = s;
    return s.ok();
  });
  if (td.runs > 0) {
    const std::span<const float> decoded = mem.decoded();
    err = rel_error(decoded.data(), mem.host_input());
    if constexpr (Memory::host) {
      if (st.verify && opt.where != backend::reference) {
        const std::string why = verify_against_reference(spec, ctx, in, frame, decoded, opt);
        if (why.empty()) {
          ++st.verified;
        } else {
          ++st.failed;
          std::cout << "verify: " << name << " on " << t.backend << " " << t.isa << ": " << why
                    << "\n";
        }
      }
    }
  }
  finish(bench_op::encode, te, frame_bytes);
  finish(bench_op::decode, td, frame_bytes);

  mem.zero(mem.acc());
  const timing ta = clock.time(st.min_runs, [&] {
    const status s = decode_accumulate(frame, acc, 1.0f, opt);
    if (!s.ok()) failure = s;
    return s.ok();
  });
  finish(bench_op::decode_accumulate, ta, frame_bytes);

  // The residual starts at zero and carries over between runs, as in training.
  mem.zero(mem.residual());
  frame_tally ef_frames;
  const timing tf = clock.time(st.min_runs, [&] {
    auto w = encode_with_feedback(spec, ctx, in, residual, mem.frame(), opt);
    if (!w) failure = w.error();
    if (w) ef_frames.add(w.value());
    return w.ok();
  });
  finish(bench_op::encode_ef, tf, ef_frames.mean());
}

}  // namespace gradcodec::tool
