// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec bench: median times of encode, decode, decode-accumulate and fused EF encode
//! for each codec x backend x ISA x threads x size, as effective GB/s by the bytes model
//! (bench_model.hpp) and as a share of a memcpy measured in the same run, beside baselines
//! (memcpy, a read-only sum, std::nth_element and binary-heap top-k, a two-pass min-max
//! quantizer).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench_allreduce.hpp"
#if GRADCODEC_TOOL_HAVE_CUDA
#include "bench_cuda.hpp"
#endif
#include "bench_common.hpp"
#include "bench_model.hpp"
#include "bench_report.hpp"
#include "codec_calls.hpp"
#include "commands.hpp"
#include "error.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array bench_options{
    option_spec{"sizes", "LIST",
                "element counts separated by ',' (N or 2^K; default 2^20,2^24,2^26)", false, false},
    option_spec{"codecs", "LIST",
                "codec specs separated by ',' (as in eval) or 'all' (default: every codec with its "
                "defaults); repeatable",
                false, true},
    option_spec{"backend", "LIST",
                "backends separated by ',': reference, cpu, auto (default cpu,reference; "
                "the reference is skipped above 2^24 unless named here), or cuda alone "
                "(device memory, CUDA-event timing)",
                false, false},
    option_spec{"gpu", "LIST",
                "with --backend cuda: GPU ordinals separated by ',' (default: every "
                "visible GPU)",
                false, false},
    option_spec{"isa", "LIST",
                "CPU ISAs separated by ',' (default: every supported one, scalar only up to 2^24)",
                false, false},
    option_spec{"threads", "LIST",
                "CPU backend thread counts separated by ',' (default 0 = library "
                "default)",
                false, false},
    option_spec{"repeat", "N", "timed runs at least (default 5; more for short operations)", false,
                false},
    option_spec{"json", "FILE", "also write every measurement as JSON to FILE", false, false},
    option_spec{"verify", "",
                "check every measured frame, decoded output and error-feedback step against the "
                "reference backend, bit for bit; a difference fails the run"},
    allreduce_flag,
    allreduce_strategies_option,
    allreduce_pipeline_option,
    allreduce_segment_option,
    allreduce_warmup_option,
};

using clock_type = std::chrono::steady_clock;

//! One warm-up call, then at least `min_runs` timed calls and more while they add up to
//! under 0.2 s (at most 100): the median of them. `body` returns false on failure.
struct timing {
  double median_s = 0;
  std::uint64_t runs = 0;
};
timing time_op(std::uint64_t min_runs, const std::function<bool()>& body) {
  timing t;
  if (!body()) return t;
  std::vector<double> times;
  double total = 0;
  while (times.size() < min_runs || (total < 0.2 && times.size() < 100)) {
    const auto t0 = clock_type::now();
    if (!body()) return t;
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
    times.push_back(s);
    total += s;
  }
  t.median_s = median(times);
  t.runs = times.size();
  return t;
}

//! Buffers of one size, fresh per size.
//! Allocates on 64-byte boundaries, as PyTorch's CPU allocator places tensors. A large
//! std::vector lies 16 bytes past a page boundary (glibc's mmap chunks), where the
//! quantizers' and sparse codecs' streaming stores for large decode outputs never run.
template <class T>
struct line_aligned_allocator {
  using value_type = T;
  line_aligned_allocator() = default;
  template <class U>
  line_aligned_allocator(const line_aligned_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64)) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  template <class U>
  bool operator==(const line_aligned_allocator<U>&) const noexcept {
    return true;
  }
};

struct buffers {
  std::vector<float, line_aligned_allocator<float>> x, out, acc, residual;
  std::vector<std::byte> frame, workspace;
};

struct target {
  backend where;
  std::string isa;  //!< "-" for the reference
  int threads;      //!< as requested (0 = library default)
};

volatile float g_sink = 0;  // keeps the read-only sum from being optimized away

//! memcpy, the read-only sum, two top-k selections and a two-pass 4-bit quantizer,
//! single-threaded, on the same data.
void run_baselines(run_state& st, buffers& b) {
  const std::uint64_t n = b.x.size();
  const double in_bytes = 4.0 * static_cast<double>(n);
  const auto base = [&](const std::string& codec, const std::string& op) {
    record r;
    r.codec = codec;
    r.backend = "baseline";
    r.isa = "-";
    r.threads = 1;
    r.n = n;
    r.op = op;
    r.ratio = 1.0;
    return r;
  };

  record cp = base("none", "memcpy");
  const timing tc = time_op(st.min_runs, [&] {
    std::memcpy(b.out.data(), b.x.data(), n * sizeof(float));
    return true;
  });
  cp.median_s = tc.median_s;
  cp.runs = tc.runs;
  cp.bytes_per_element = 8.0;
  st.memcpy_gbps = 8.0 * static_cast<double>(n) / tc.median_s * 1e-9;
  st.add(cp);

  record sum = base("none", "sum");
  const timing ts = time_op(st.min_runs, [&] {
    std::array<float, 16> part{};
    std::uint64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (std::size_t j = 0; j < 16; ++j) part[j] += b.x[i + j];
    float s = 0;
    for (; i < n; ++i) s += b.x[i];
    for (const float p : part) s += p;
    g_sink = s;
    return true;
  });
  sum.median_s = ts.median_s;
  sum.runs = ts.runs;
  sum.bytes_per_element = 4.0;
  st.add(sum);

  // Top-k by magnitude, k as topk's default ratio 0.01; output (index, value) pairs.
  const std::uint64_t k = std::max<std::uint64_t>(1, n / 100);
  std::vector<float> mags(n);
  std::vector<std::uint32_t> idx(k);
  std::vector<float> val(k);
  const auto topk_error = [&] {
    std::copy(b.x.begin(), b.x.end(), b.out.begin());
    for (std::uint64_t j = 0; j < k; ++j) b.out[idx[j]] = 0.0f;
    double e2 = 0, r2 = 0;  // error of keeping the selected: the dropped elements
    for (std::uint64_t i = 0; i < n; ++i) {
      e2 += static_cast<double>(b.out[i]) * b.out[i];
      r2 += static_cast<double>(b.x[i]) * b.x[i];
    }
    return r2 > 0 ? std::sqrt(e2 / r2) : 0.0;
  };
  const std::string topk_spec = "topk:ratio=0.01";
  const double topk_bpe = 4.0 + 8.0 * static_cast<double>(k) / static_cast<double>(n);

  record ne = base(topk_spec, "nth_element_topk");
  const timing tn = time_op(st.min_runs, [&] {
    for (std::uint64_t i = 0; i < n; ++i) mags[i] = std::fabs(b.x[i]);
    std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(n - k), mags.end());
    const float thr = mags[n - k];
    std::uint64_t m = 0;
    for (std::uint64_t i = 0; i < n && m < k; ++i)
      if (std::fabs(b.x[i]) > thr) {
        idx[m] = static_cast<std::uint32_t>(i);
        val[m++] = b.x[i];
      }
    for (std::uint64_t i = 0; i < n && m < k; ++i)
      if (std::fabs(b.x[i]) == thr) {
        idx[m] = static_cast<std::uint32_t>(i);
        val[m++] = b.x[i];
      }
    return true;
  });
  ne.median_s = tn.median_s;
  ne.runs = tn.runs;
  ne.bytes_per_element = topk_bpe;
  ne.ratio = in_bytes / (8.0 * static_cast<double>(k));
  ne.rel_error = topk_error();
  st.add(ne);

  // BytePS: a min-heap of the k largest magnitudes, the top replaced only when strictly greater.
  record hp = base(topk_spec, "heap_topk");
  std::vector<std::pair<float, std::uint32_t>> heap;
  heap.reserve(k);
  const auto greater = [](const auto& a, const auto& c) { return a.first > c.first; };
  const timing th = time_op(st.min_runs, [&] {
    heap.clear();
    for (std::uint64_t i = 0; i < k; ++i)
      heap.emplace_back(std::fabs(b.x[i]), static_cast<std::uint32_t>(i));
    std::make_heap(heap.begin(), heap.end(), greater);
    for (std::uint64_t i = k; i < n; ++i) {
      const float a = std::fabs(b.x[i]);
      if (a > heap.front().first) {
        std::pop_heap(heap.begin(), heap.end(), greater);
        heap.back() = {a, static_cast<std::uint32_t>(i)};
        std::push_heap(heap.begin(), heap.end(), greater);
      }
    }
    for (std::uint64_t j = 0; j < k; ++j) {
      idx[j] = heap[j].second;
      val[j] = b.x[heap[j].second];
    }
    return true;
  });
  hp.median_s = th.median_s;
  hp.runs = th.runs;
  hp.bytes_per_element = topk_bpe;
  hp.ratio = ne.ratio;
  hp.rel_error = topk_error();
  st.add(hp);

  // CGX: per bucket of 512, one pass for min/max, one to quantize to 4 bits (nearest).
  constexpr std::uint64_t bucket = 512;
  const std::uint64_t buckets = (n + bucket - 1) / bucket;
  std::vector<float> lo(buckets), hi(buckets);
  std::vector<std::uint8_t> packed((n + 1) / 2);
  record mm = base("minmax:bits=4,bucket=512", "cgx_minmax4");
  const timing tm = time_op(st.min_runs, [&] {
    for (std::uint64_t g = 0; g < buckets; ++g) {
      const std::uint64_t e = std::min(n, (g + 1) * bucket);
      float mn = b.x[g * bucket], mx = mn;
      for (std::uint64_t i = g * bucket + 1; i < e; ++i) {
        mn = std::min(mn, b.x[i]);
        mx = std::max(mx, b.x[i]);
      }
      lo[g] = mn;
      hi[g] = mx;
    }
    std::fill(packed.begin(), packed.end(), std::uint8_t{0});
    for (std::uint64_t g = 0; g < buckets; ++g) {
      const std::uint64_t e = std::min(n, (g + 1) * bucket);
      const float range = hi[g] - lo[g];
      const float inv = range > 0 ? 15.0f / range : 0.0f;
      for (std::uint64_t i = g * bucket; i < e; ++i) {
        const auto q = static_cast<std::uint8_t>((b.x[i] - lo[g]) * inv + 0.5f);
        packed[i / 2] |= static_cast<std::uint8_t>(q << (4 * (i % 2)));
      }
    }
    return true;
  });
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t g = i / bucket;
    const float q = static_cast<float>((packed[i / 2] >> (4 * (i % 2))) & 15);
    b.out[i] = lo[g] + q * ((hi[g] - lo[g]) / 15.0f);
  }
  const double mm_bytes = static_cast<double>(packed.size() + 8 * buckets);
  mm.median_s = tm.median_s;
  mm.runs = tm.runs;
  mm.bytes_per_element = 4.0 + mm_bytes / static_cast<double>(n);
  mm.ratio = in_bytes / mm_bytes;
  mm.rel_error = rel_error(b.out.data(), b.x);
  st.add(mm);
}

std::string note_of(const status& s, const target& t) {
  if (s.code() == status_code::backend_unavailable)
    return "not implemented on backend " + std::string(backend_name(t.where));
  return "error: " + std::string(status_code_name(s.code())) + ": " + s.message();
}

//! The first byte where two byte ranges differ, as a message ("" when equal).
std::string first_difference(const char* what, std::span<const std::byte> a,
                             std::span<const std::byte> b) {
  if (a.size() != b.size())
    return strprintf("%s: %zu bytes against the reference's %zu", what, a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return strprintf("%s: byte %zu differs from the reference's", what, i);
  return {};
}

std::span<const std::byte> bytes_of(std::span<const float> v) { return std::as_bytes(v); }

//! --verify: the frame and decoded values the measured backend produced, and one error-
//! feedback step from a zero residual on both backends, against the reference backend.
std::string verify_against_reference(const codec_spec& spec, const context& ctx,
                                     const_tensor_view in, const_bytes frame,
                                     std::span<const float> decoded, const exec_options& opt) {
  const std::uint64_t n = in.n;
  // Each call with a workspace of the size it asks for.
  std::vector<std::byte> ref_ws, ws;
  const auto with_workspace = [&](exec_options o, operation op,
                                  std::vector<std::byte>& w) -> result<exec_options> {
    auto need = workspace_size(spec, in, op, o);
    if (!need) return need.error();
    w.assign(need.value(), std::byte{0});
    o.workspace = w;
    return o;
  };
  auto ref =
      with_workspace(exec_options{backend::reference}, operation::encode_with_feedback, ref_ws);
  auto mine = with_workspace(opt, operation::encode_with_feedback, ws);
  if (!ref || !mine) return "workspace: " + std::string((ref ? mine : ref).error().message());
  const std::uint64_t bound = encode_bound(spec, n, dtype::f32, in.rows);
  std::vector<std::byte> want(bound);
  auto w = encode(spec, ctx, in, want, ref.value());
  if (!w) return "reference encode: " + std::string(w.error().message());
  want.resize(w.value());
  if (auto d = first_difference("frame", frame, want); !d.empty()) return d;
  std::vector<float> ref_out(n);
  if (status s = decode(frame, {ref_out.data(), n, dtype::f32, in.rows}, ref.value()); !s.ok())
    return "reference decode: " + std::string(s.message());
  if (auto d = first_difference("decoded values", bytes_of(decoded), bytes_of(ref_out)); !d.empty())
    return d;
  // One error-feedback step each, from a zero residual.
  std::vector<float> res(n, 0.0f), ref_res(n, 0.0f);
  std::vector<std::byte> ef(bound), ref_ef(bound);
  auto e =
      encode_with_feedback(spec, ctx, in, {res.data(), n, dtype::f32, in.rows}, ef, mine.value());
  auto r = encode_with_feedback(spec, ctx, in, {ref_res.data(), n, dtype::f32, in.rows}, ref_ef,
                                ref.value());
  if (!e || !r) return "error feedback: " + std::string((e ? r : e).error().message());
  if (auto d = first_difference("error-feedback frame", std::span(ef).first(e.value()),
                                std::span(ref_ef).first(r.value()));
      !d.empty())
    return d;
  return first_difference("residual", bytes_of(res), bytes_of(ref_res));
}

//! The four operations of one codec on one target; rows for each.
void run_codec(run_state& st, buffers& b, const codec_spec& spec, const target& t) {
  const std::uint64_t n = b.x.size();
  const std::uint64_t rows = spec.id == codec_id::powersgd ? powersgd_square_rows(n) : 0;
  const int shown_threads =
      t.where == backend::reference ? 1 : (t.threads > 0 ? t.threads : cpu_default_threads());
  const std::string name = to_string(spec);
  const auto base = [&](bench_op op) {
    record r;
    r.codec = name;
    r.backend = std::string(backend_name(t.where));
    r.isa = t.isa;
    r.threads = shown_threads;
    r.n = n;
    r.op = std::string(bench_op_name(op));
    return r;
  };
  const auto all_note = [&](const std::string& note) {
    for (const bench_op op :
         {bench_op::encode, bench_op::decode, bench_op::decode_accumulate, bench_op::encode_ef}) {
      record r = base(op);
      r.note = note;
      st.add(r);
    }
  };

  exec_options opt;
  opt.where = t.where;
  opt.threads = t.threads;
  const const_tensor_view in{b.x.data(), n, dtype::f32, rows};
  std::size_t ws = 0;
  for (const operation op : {operation::encode, operation::encode_with_feedback, operation::decode,
                             operation::decode_accumulate}) {
    auto w = workspace_size(spec, in, op, opt);
    if (!w) {
      if (w.error().code() != status_code::backend_unavailable) ++st.failed;
      all_note(note_of(w.error(), t));
      return;
    }
    ws = std::max(ws, w.value());
  }
  if (b.workspace.size() < ws) b.workspace.assign(ws, std::byte{0});
  opt.workspace = b.workspace;
  const std::uint64_t bound = encode_bound(spec, n, dtype::f32, rows);
  if (b.frame.size() < bound) b.frame.assign(bound, std::byte{0});
  const context ctx{1, 0, 0};

  // Encode; every later operation reads its frame.
  std::size_t frame_bytes = 0;
  status failure;
  const timing te = time_op(st.min_runs, [&] {
    auto w = encode(spec, ctx, in, b.frame, opt);
    if (!w) {
      failure = w.error();
      return false;
    }
    frame_bytes = w.value();
    return true;
  });
  if (te.runs == 0) {
    if (failure.code() != status_code::backend_unavailable) ++st.failed;
    all_note(note_of(failure, t));
    return;
  }
  const const_bytes frame{b.frame.data(), frame_bytes};
  auto h = peek(frame);
  if (!h) {
    ++st.failed;
    all_note(note_of(h.error(), t));
    return;
  }
  const std::uint64_t kept = blocks::traits_of(spec.id).selects ? h.value().count : n;
  const tensor_view out{b.out.data(), n, dtype::f32, rows};
  const tensor_view acc{b.acc.data(), n, dtype::f32, rows};
  const tensor_view residual{b.residual.data(), n, dtype::f32, rows};

  const auto finish = [&](bench_op op, const timing& tm, double err, std::uint64_t bytes_of_frame) {
    record r = base(op);
    if (tm.runs == 0) {
      if (failure.code() != status_code::backend_unavailable) ++st.failed;
      r.note = note_of(failure, t);
    } else {
      r.median_s = tm.median_s;
      r.runs = tm.runs;
      r.bytes_per_element = bytes_per_element(spec.id, op, n, bytes_of_frame, kept);
      r.ratio = 4.0 * static_cast<double>(n) / static_cast<double>(bytes_of_frame);
      r.rel_error = err;
    }
    st.add(r);
  };

  const timing td = time_op(st.min_runs, [&] {
    const status s = decode(frame, out, opt);
    if (!s.ok()) failure = s;
    return s.ok();
  });
  const double err = td.runs > 0 ? rel_error(b.out.data(), b.x) : 0.0;
  if (st.verify && t.where != backend::reference && td.runs > 0) {
    const std::string why = verify_against_reference(spec, ctx, in, frame,
                                                     std::span<const float>(b.out.data(), n), opt);
    if (why.empty()) {
      ++st.verified;
    } else {
      ++st.failed;
      std::cout << "verify: " << name << " on " << backend_name(t.where) << " " << t.isa << ": "
                << why << "\n";
    }
  }
  finish(bench_op::encode, te, err, frame_bytes);
  finish(bench_op::decode, td, err, frame_bytes);

  std::fill(b.acc.begin(), b.acc.end(), 0.0f);
  const timing ta = time_op(st.min_runs, [&] {
    const status s = decode_accumulate(frame, acc, 1.0f, opt);
    if (!s.ok()) failure = s;
    return s.ok();
  });
  finish(bench_op::decode_accumulate, ta, err, frame_bytes);

  // The residual starts at zero and carries over between runs, as in training.
  std::fill(b.residual.begin(), b.residual.end(), 0.0f);
  frame_tally ef_frames;
  const timing tf = time_op(st.min_runs, [&] {
    auto w = encode_with_feedback(spec, ctx, in, residual, b.frame, opt);
    if (!w) failure = w.error();
    if (w) ef_frames.add(w.value());
    return w.ok();
  });
  finish(bench_op::encode_ef, tf, err, ef_frames.mean());
}

std::vector<backend> backends_from(const parsed_args& args, bool& reference_named) {
  std::vector<backend> out;
  reference_named = false;
  if (!args.has("backend")) {
    if (backend_available(backend::cpu)) out.push_back(backend::cpu);
    out.push_back(backend::reference);
    return out;
  }
  for (const auto& name : split_list("--backend", *args.get("backend"))) {
    auto b = backend_from_name(name);
    if (!b) usage_fail(std::string("--backend: ") + b.error().message());
    if (b.value() == backend::cuda) continue;  // run_bench handles cuda on its own
    if (!backend_available(b.value()))
      fail("backend '" + name +
           "' is not available: " + std::string(backend_unavailable_reason(b.value())));
    if (b.value() == backend::reference) reference_named = true;
    if (std::find(out.begin(), out.end(), b.value()) == out.end()) out.push_back(b.value());
  }
  return out;
}

std::vector<cpu_isa> isas_from(const parsed_args& args) {
  std::vector<cpu_isa> out;
  if (!args.has("isa")) {
    for (const cpu_isa i : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512})
      if (cpu_isa_supported(i)) out.push_back(i);
    return out;
  }
  for (const auto& name : split_list("--isa", *args.get("isa"))) {
    auto i = cpu_isa_from_name(name);
    if (!i) usage_fail(std::string("--isa: ") + i.error().message());
    if (!cpu_isa_supported(i.value()))
      fail("--isa: '" + name + "' is not supported by this build or CPU");
    if (std::find(out.begin(), out.end(), i.value()) == out.end()) out.push_back(i.value());
  }
  return out;
}

//! --backend cuda: device buffers and CUDA-event timing (bench_cuda.cpp).
int run_bench_gpu(const parsed_args& args, const std::vector<std::uint64_t>& sizes,
                  const std::vector<codec_spec>& specs, std::uint64_t min_runs,
                  const std::optional<std::string>& json) {
  if (split_list("--backend", *args.get("backend")).size() != 1)
    usage_fail("--backend cuda runs on its own (device memory, CUDA-event timing)");
  if (args.has("isa") || args.has("threads")) usage_fail("--isa and --threads are CPU options");
#if GRADCODEC_TOOL_HAVE_CUDA
  if (!backend_available(backend::cuda)) fail("--backend cuda: no CUDA device is visible");
  cuda_bench_request req{sizes, specs, {}};
  if (args.has("gpu"))
    for (const auto& g : split_list("--gpu", *args.get("gpu")))
      req.gpus.push_back(static_cast<int>(parse_u64("--gpu", g)));
  run_state st;
  st.min_runs = std::max<std::uint64_t>(min_runs, 20);
  for (const auto& s : specs) st.out.width = std::max(st.out.width, to_string(s).size() + 2);
  std::cout << "gradcodec bench --backend cuda: f32 gradient-like data in device memory, median of "
            << st.min_runs << " CUDA-event timings after a warm-up, L2 flushed before each;\n"
            << "%memcpy against a device-to-device copy of the same size in this run\n";
  run_bench_cuda(req, st);
  finish_run(st, json);
  return 0;
#else
  static_cast<void>(sizes);
  static_cast<void>(specs);
  static_cast<void>(min_runs);
  static_cast<void>(json);
  fail("backend 'cuda' is not available: this gradcodec was built without CUDA");
#endif
}

}  // namespace

const command_spec bench_spec{
    "bench",
    "",
    "Benchmarks codecs on gradient-like f32 data: for each size, codec, backend, CPU ISA and\n"
    "thread count, the median time of encode, decode, decode_accumulate and fused\n"
    "error-feedback encode (encode_ef); effective GB/s by the bytes model of\n"
    "docs/performance.md; that as a % of a memcpy measured in the same run; compression\n"
    "ratio (f32 bytes / frame bytes; for encode_ef the mean frame of its runs: the\n"
    "residual carries over between runs, so threshold's frames grow); relative L2 error\n"
    "of decode.",
    "Baselines, single-threaded, on the same data: memcpy and a read-only sum (the roofline),\n"
    "std::nth_element and binary-heap (BytePS) top-k at ratio 0.01, and a two-pass min-max\n"
    "4-bit quantizer with buckets of 512 (CGX). Each time is the median of at least --repeat\n"
    "runs after a warm-up (more runs, up to 100, while they total under 0.2 s).\n"
    "A codec a backend does not implement gets a row note, not a failure; other failures\n"
    "are noted in their row and make the exit status 1.\n\n"
    "With --allreduce (under mpirun) it times compressed allreduce over MPI instead, beside\n"
    "dense MPI_Allreduce in fp32 and bf16; docs/tool.md describes its defaults, table and\n"
    "JSON.\n\n"
    "examples:\n"
    "  gradcodec bench\n"
    "  gradcodec bench --sizes 2^20 --codecs topk:ratio=0.01,minmax:bits=4 --json out.json\n"
    "  mpirun -np 4 gradcodec bench --allreduce --sizes 2^24 --json allreduce.json\n",
    bench_options,
    0};

int run_bench(const parsed_args& args) {
  if (args.has("verify") && args.has("allreduce"))
    usage_fail("--verify checks codec calls; the allreduce strategies are checked by the tests");
  if (args.has("allreduce")) return run_bench_allreduce(args);
  std::vector<std::uint64_t> sizes;
  for (const auto& s : split_list("--sizes", args.get("sizes").value_or("2^20,2^24,2^26")))
    sizes.push_back(parse_size(s));
  const std::uint64_t min_runs = args.get_u64("repeat", 5);
  if (min_runs < 5) usage_fail("--repeat: must be at least 5");
  std::vector<codec_spec> specs;
  const std::vector<std::string> names =
      split_codecs(args.has("codecs") ? args.all("codecs") : std::vector<std::string>{"all"});
  for (const auto& n : names) {
    if (n != "all") {
      specs.push_back(spec_from_text("--codecs", n));
      continue;
    }
    for (const auto& c : all_codecs()) specs.push_back(make_spec(c.id));
  }
  std::vector<int> threads;
  for (const auto& t : split_list("--threads", args.get("threads").value_or("0"))) {
    const std::uint64_t v = parse_u64("--threads", t);
    if (v > 1024) usage_fail("--threads: '" + t + "' is above 1024");
    threads.push_back(static_cast<int>(v));
  }
  const auto json = args.get("json");
  if (args.has("backend")) {
    const auto named = split_list("--backend", *args.get("backend"));
    if (std::find(named.begin(), named.end(), "cuda") != named.end()) {
      if (args.has("verify"))
        usage_fail(
            "--verify: the CUDA backend is checked against the reference by "
            "scripts/gpu-check's tests");
      return run_bench_gpu(args, sizes, specs, min_runs, json);
    }
  }
  if (args.has("gpu")) usage_fail("--gpu: only with --backend cuda");
  bool reference_named = false;
  const std::vector<backend> backends = backends_from(args, reference_named);
  const std::vector<cpu_isa> isas = isas_from(args);

  std::vector<target> targets;
  for (const backend b : backends) {
    if (b == backend::reference) {
      targets.push_back({b, "-", 0});
      continue;
    }
    for (const cpu_isa i : isas)
      for (const int t : threads) targets.push_back({b, std::string(cpu_isa_name(i)), t});
  }

  const cpu_isa initial_isa = cpu_isa_active();
  std::cout << "gradcodec bench: f32 gradient-like data, median of >= " << min_runs
            << " runs after a warm-up; GB/s by the bytes model (docs/performance.md);\n"
            << "%memcpy against the memcpy of the same size in this run. Library default "
               "threads: "
            << cpu_default_threads() << "\n";
  constexpr std::uint64_t slow_limit = std::uint64_t{1} << 24;
  run_state st;
  st.min_runs = min_runs;
  st.verify = args.has("verify");
  for (const auto& s : specs) st.out.width = std::max(st.out.width, to_string(s).size() + 2);
  for (const std::uint64_t n : sizes) {
    std::cout << "\nn = " << size_name(n) << " (" << n << " elements, "
              << strprintf("%.1f", 4.0 * static_cast<double>(n) / (1 << 20)) << " MiB)\n";
    buffers b;
    b.x.resize(n);
    fill_gradient(b.x);
    b.out.assign(n, 0.0f);
    b.acc.assign(n, 0.0f);
    b.residual.assign(n, 0.0f);
    st.out.header();
    run_baselines(st, b);
    bool skipped_reference = false, skipped_scalar = false;
    for (const auto& t : targets) {
      if (t.where == backend::reference && n > slow_limit && !reference_named) {
        skipped_reference = true;
        continue;
      }
      if (t.isa == "scalar" && n > slow_limit && !args.has("isa")) {
        skipped_scalar = true;
        continue;
      }
      if (t.where != backend::reference) {
        auto i = cpu_isa_from_name(t.isa);
        if (!i || !set_cpu_isa(i.value()).ok()) fail("cannot select CPU ISA '" + t.isa + "'");
      }
      for (const auto& spec : specs) run_codec(st, b, spec, t);
    }
    if (skipped_reference)
      std::cout << "(reference backend skipped above 2^24: slow; name it in --backend to "
                   "include it)\n";
    if (skipped_scalar)
      std::cout << "(scalar CPU ISA skipped above 2^24: slow; name it in --isa to include it)\n";
  }
  static_cast<void>(set_cpu_isa(initial_isa));
  if (st.verify)
    std::cout << "\nverify: " << st.verified
              << " measured configurations equal the reference backend bit for bit\n";
  finish_run(st, json);
  return 0;
}

}  // namespace gradcodec::tool
