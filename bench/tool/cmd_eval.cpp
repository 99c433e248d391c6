// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec eval: size, error and speed of codecs on an array or the built-in data set.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <iostream>
#include <vector>

#include "codec_calls.hpp"
#include "commands.hpp"
#include "dataset.hpp"
#include "error.hpp"
#include "input.hpp"
#include "text.hpp"

namespace gradcodec::tool {
namespace {

constexpr std::array eval_options{
    option_spec{
        "input", "FILE",
        "evaluate on this array (.npy, or raw with --dtype) instead of the built-in data set",
        false, false},
    option_spec{"dtype", "D", "read --input as raw little-endian values: f32 (or f16), shape [n]",
                false, false},
    option_spec{"codecs", "LIST", "codec specs separated by ',' or 'all' (the default); repeatable",
                false, true},
    backend_option,
    option_spec{"seed", "S", "context seed (default 0); step 0, tensor id = tensor index", false,
                false},
    option_spec{"repeat", "N", "timed passes per codec, speeds from the median (default 3)", false,
                false},
};

//! "tau" of the threshold variant in `all`: the value at rank floor(0.99 m) (ascending,
//! from 0) of the m finite |x| of the data, so about 1% of the elements are kept.
float threshold_tau(const std::vector<tensor_item>& data) {
  std::vector<float> mags;
  for (const auto& t : data)
    for (std::uint64_t i = 0; i < t.values.size(); ++i) {
      const float a = std::fabs(t.values.at(i));
      if (std::isfinite(a)) mags.push_back(a);
    }
  if (mags.empty()) return 0.0f;
  const auto rank = static_cast<std::size_t>(0.99 * static_cast<double>(mags.size()));
  std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(rank), mags.end());
  return mags[rank];
}

//! `all`: every codec with its defaults, each followed by its meaningful variants.
std::vector<std::string> all_specs(float tau) {
  codec_spec thr = make_spec(codec_id::threshold);
  thr.tau = tau;
  const std::vector<std::pair<codec_id, std::vector<std::string>>> variants{
      {codec_id::topk, {"topk:ratio=0.001"}},
      {codec_id::dgc, {"dgc:ratio=0.01"}},
      {codec_id::randomk, {"randomk:ratio=0.01,unbiased=1"}},
      {codec_id::threshold, {to_string(thr)}},
      {codec_id::qsgd, {"qsgd:levels=127"}},
      {codec_id::terngrad, {"terngrad:clip=2.5"}},
      {codec_id::minmax, {"minmax:bits=8", "minmax:bits=2"}},
      {codec_id::sign, {"sign:scale=mean", "sign:scale=l2"}},
      {codec_id::mxfp8, {"mxfp8:fmt=e5m2", "mxfp8:rotate=1"}},
      {codec_id::mxfp6, {"mxfp6:fmt=e2m3"}},
      {codec_id::mxfp4, {"mxfp4:rotate=1", "mxfp4:rotate=1,rounding=stochastic"}},
      {codec_id::nvfp4, {"nvfp4:rotate=1"}},
      {codec_id::fp8row, {"fp8row:fmt=e5m2"}},
  };
  std::vector<std::string> out;
  for (const auto& c : all_codecs()) {
    out.push_back(to_string(make_spec(c.id)));
    for (const auto& [id, more] : variants)
      if (id == c.id) out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

//! Splits "--codecs" values into spec strings. Specs hold commas themselves
//! ("qsgd:levels=7,bucket=512"), so a piece of the form key=value continues the previous
//! spec, while a piece starting with a codec name (or "all") starts a new one.
std::vector<std::string> split_codecs(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    std::size_t start = 0;
    for (;;) {
      const auto comma = v.find(',', start);
      const std::string piece =
          v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (piece.empty()) usage_fail("--codecs: empty entry in '" + v + "'");
      const auto eq = piece.find('=');
      const bool continues = eq != std::string::npos && piece.find(':') == std::string::npos;
      if (continues) {
        if (out.empty() || out.back() == "all")
          usage_fail("--codecs: '" + piece + "' does not follow a codec name");
        out.back() += (out.back().find(':') == std::string::npos ? ":" : ",") + piece;
      } else {
        out.push_back(piece);
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

struct outcome {
  std::uint64_t frame_bytes = 0;
  double rel_error = 0;
  double encode_s = 0;  //!< median pass time
  double decode_s = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string layer_error(const tensor_item& t, std::size_t l, const std::string& what,
                        const status& st) {
  return "tensor " + std::to_string(l) + " (" + t.name + "): " + describe(what, st);
}

//! One codec over every tensor, `repeat` timed passes of encode and of decode (buffers
//! and workspace allocated before the timed calls). Throws tool::error on failure.
outcome evaluate(const codec_spec& spec, const std::vector<tensor_item>& data, std::uint64_t seed,
                 const exec_options& opt, std::uint64_t repeat) {
  using clock = std::chrono::steady_clock;
  const std::size_t count = data.size();
  std::vector<std::vector<std::byte>> frames(count);
  std::vector<std::size_t> sizes(count);
  std::size_t ws_bytes = 0;
  std::uint64_t max_n = 0;
  for (std::size_t l = 0; l < count; ++l) {
    const const_tensor_view v = data[l].values.view();
    frames[l].resize(encode_bound(spec, v.n, v.type, v.rows));
    auto ws = workspace_size(spec, {nullptr, v.n, v.type, v.rows}, operation::encode, opt);
    if (!ws) fail(layer_error(data[l], l, "workspace query", ws.error()));
    ws_bytes = std::max(ws_bytes, ws.value());
    max_n = std::max(max_n, v.n);
  }
  std::vector<std::byte> workspace(ws_bytes);
  std::vector<float> decoded(max_n);
  std::vector<double> enc_times, dec_times;
  outcome res;
  double err2 = 0, ref2 = 0;
  for (std::uint64_t r = 0; r < repeat; ++r) {
    exec_options o = opt;
    o.workspace = workspace;
    double t_enc = 0;
    for (std::size_t l = 0; l < count; ++l) {
      const context ctx{seed, 0, l};
      const auto t0 = clock::now();
      auto written = encode(spec, ctx, data[l].values.view(), frames[l], o);
      t_enc += std::chrono::duration<double>(clock::now() - t0).count();
      if (!written) fail(layer_error(data[l], l, "encode", written.error()));
      sizes[l] = written.value();
    }
    enc_times.push_back(t_enc);
    if (r == 0) {
      // Decode scratch comes from each frame's own spec, as a receiver would query it.
      for (std::size_t l = 0; l < count; ++l) {
        auto h = peek({frames[l].data(), sizes[l]});
        if (!h) fail(layer_error(data[l], l, "peek", h.error()));
        const tensor_view shape{nullptr, h.value().n, dtype::f32,
                                decode_rows(h.value(), data[l].values.rows())};
        auto ws = workspace_size(spec_of(h.value()), shape, operation::decode, opt);
        if (!ws) fail(layer_error(data[l], l, "workspace query", ws.error()));
        ws_bytes = std::max(ws_bytes, ws.value());
      }
      if (ws_bytes > workspace.size()) workspace.resize(ws_bytes);
      o.workspace = workspace;
    }
    double t_dec = 0;
    for (std::size_t l = 0; l < count; ++l) {
      const array& x = data[l].values;
      const const_bytes frame{frames[l].data(), sizes[l]};
      auto h = peek(frame);
      if (!h) fail(layer_error(data[l], l, "peek", h.error()));
      const tensor_view out{decoded.data(), x.size(), dtype::f32, decode_rows(h.value(), x.rows())};
      const auto t0 = clock::now();
      const status st = decode(frame, out, o);
      t_dec += std::chrono::duration<double>(clock::now() - t0).count();
      if (!st.ok()) fail(layer_error(data[l], l, "decode", st));
      if (r == 0) {
        for (std::uint64_t i = 0; i < x.size(); ++i) {
          const double xi = x.at(i);
          const double d = static_cast<double>(decoded[i]) - xi;
          err2 += d * d;
          ref2 += xi * xi;
        }
        res.frame_bytes += sizes[l];
      }
    }
    dec_times.push_back(t_dec);
  }
  res.rel_error = ref2 > 0 ? std::sqrt(err2) / std::sqrt(ref2) : (err2 > 0 ? INFINITY : 0.0);
  res.encode_s = median(enc_times);
  res.decode_s = median(dec_times);
  return res;
}

std::string speed(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? strprintf("%.3f", static_cast<double>(bytes) / seconds * 1e-9) : "-";
}

}  // namespace

const command_spec eval_spec{
    "eval",
    "Encodes and decodes data with each codec: bits, ratio, error and speed.",
    "",
    "For each codec, encodes and decodes every tensor of the data and prints a table: the\n"
    "codec spec, bits per element (frames with headers), compression ratio against the\n"
    "input dtype, relative L2 error ||x^ - x|| / ||x|| over all tensors, and encode and\n"
    "decode speed (input bytes / median pass time, GB/s).",
    "data: --input FILE (one tensor, tensor id 0, rows = shape[0] when ndim >= 2), or the\n"
    "built-in gradient-like set: 36 layers of a small CNN and a transformer block (about 5.9\n"
    "million f32 values, Gaussian and Student-t(3) at per-layer scales, fixed seed), each a\n"
    "separate tensor (tensor id = layer index, rows = shape[0]).\n"
    "'all' = every codec with its defaults plus variants; its threshold variant uses the\n"
    "0.99 quantile of |x| of the data as tau (keeps about 1% of the elements).\n\n"
    "examples:\n"
    "  gradcodec eval\n"
    "  gradcodec eval --input grads.npy --codecs topk:ratio=0.01,qsgd:levels=7,bucket=512,fp16\n",
    eval_options,
    0};

int run_eval(const parsed_args& args) {
  const std::uint64_t seed = args.get_u64("seed", 0);
  const std::uint64_t repeat = args.get_u64("repeat", 3);
  if (repeat < 1) usage_fail("--repeat: must be at least 1");
  std::vector<std::string> names =
      split_codecs(args.has("codecs") ? args.all("codecs") : std::vector<std::string>{"all"});
  bool wants_all = false;
  for (const auto& n : names) {
    if (n == "all")
      wants_all = true;
    else
      spec_from_text("--codecs", n);  // usage errors before any work
  }
  if (args.has("dtype") && !args.has("input")) usage_fail("--dtype needs --input");
  const exec_options opt = exec_from_args(args);

  std::vector<tensor_item> data;
  std::string data_desc;
  if (const auto path = args.get("input")) {
    data.push_back({*path, load_input(*path, args.get("dtype"))});
    const array& a = data[0].values;
    data_desc = *path + " " + shape_string(a.shape) + " " + std::string(dtype_name(a.type));
  } else {
    data = builtin_dataset();
    data_desc = "built-in gradient-like set, " + std::to_string(data.size()) + " tensors";
  }
  std::uint64_t total_n = 0, input_bytes = 0;
  for (const auto& t : data) {
    total_n += t.values.size();
    input_bytes += t.values.size() * dtype_size(t.values.type);
  }

  std::vector<codec_spec> specs;
  const float tau = wants_all ? threshold_tau(data) : 0.0f;
  for (const auto& n : names) {
    if (n != "all") {
      specs.push_back(spec_from_text("--codecs", n));
      continue;
    }
    for (const auto& s : all_specs(tau)) specs.push_back(spec_from_text("--codecs", s));
  }

  std::cout << "data: " << data_desc << ", " << total_n << " elements, " << input_bytes
            << " bytes\n"
            << "backend: " << backend_name(opt.where) << ", seed " << seed << ", " << repeat
            << " timed pass" << (repeat > 1 ? "es" : "") << " (median)\n\n";
  std::size_t w = 5;
  for (const auto& s : specs) w = std::max(w, to_string(s).size());
  std::cout << pad("codec", w) << pad("bits/elem", 11, true) << pad("ratio", 9, true)
            << pad("rel_l2_err", 12, true) << pad("enc_GB/s", 10, true) << pad("dec_GB/s", 10, true)
            << "\n"
            << std::flush;

  std::size_t failed = 0;
  for (const auto& spec : specs) {
    const std::string name = to_string(spec);
    try {
      const outcome r = evaluate(spec, data, seed, opt, repeat);
      std::cout << pad(name, w) << pad(bits_per_element(r.frame_bytes, total_n), 11, true)
                << pad(compression_ratio(input_bytes, r.frame_bytes), 9, true)
                << pad(strprintf("%.3e", r.rel_error), 12, true)
                << pad(speed(input_bytes, r.encode_s), 10, true)
                << pad(speed(input_bytes, r.decode_s), 10, true) << "\n"
                << std::flush;
    } catch (const error& e) {
      ++failed;
      std::cout << pad(name, w) << "  error: " << e.what() << "\n" << std::flush;
    }
  }
  if (failed > 0)
    fail(std::to_string(failed) + " of " + std::to_string(specs.size()) +
         " codecs failed (see the table)");
  return 0;
}

}  // namespace gradcodec::tool
