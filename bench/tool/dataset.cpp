// SPDX-License-Identifier: Apache-2.0
//! @file
//! The built-in gradient-like data set.
#include "dataset.hpp"

#include <array>
#include <cmath>
#include <numbers>

#include "gradcodec/blocks/philox.hpp"

namespace gradcodec::tool {
namespace {

enum class dist { gaussian, student_t3 };

struct layer_def {
  const char* name;
  std::vector<std::uint64_t> shape;
  dist d;
  int scale_exp;        //!< values are drawn at scale 2^scale_exp
  double active = 1.0;  //!< fraction of rows (shape[0]) with nonzero gradient (embeddings)
};

// A ResNet-like stem and stages, then a transformer block with a token embedding whose
// gradient touches only a few rows, as a real embedding's does.
const std::vector<layer_def>& layers() {
  static const std::vector<layer_def> defs{
      {"conv1.weight", {64, 3, 7, 7}, dist::student_t3, -9},
      {"bn1.weight", {64}, dist::gaussian, -8},
      {"bn1.bias", {64}, dist::gaussian, -8},
      {"layer1.0.conv1.weight", {64, 64, 3, 3}, dist::student_t3, -10},
      {"layer1.0.conv2.weight", {64, 64, 3, 3}, dist::student_t3, -10},
      {"layer1.0.bn.bias", {64}, dist::gaussian, -9},
      {"layer2.0.conv1.weight", {128, 64, 3, 3}, dist::student_t3, -11},
      {"layer2.0.conv2.weight", {128, 128, 3, 3}, dist::student_t3, -11},
      {"layer2.0.downsample.weight", {128, 64, 1, 1}, dist::gaussian, -10},
      {"layer2.0.bn.bias", {128}, dist::gaussian, -9},
      {"layer3.0.conv1.weight", {256, 128, 3, 3}, dist::student_t3, -12},
      {"layer3.0.conv2.weight", {256, 256, 3, 3}, dist::gaussian, -12},
      {"layer3.0.bn.weight", {256}, dist::gaussian, -10},
      {"layer3.0.bn.bias", {256}, dist::gaussian, -10},
      {"layer4.0.conv1.weight", {512, 256, 3, 3}, dist::student_t3, -13},
      {"layer4.0.bn.bias", {512}, dist::gaussian, -11},
      {"fc.weight", {1000, 512}, dist::student_t3, -11},
      {"fc.bias", {1000}, dist::gaussian, -8},
      {"embed.weight", {8192, 256}, dist::gaussian, -7, 0.05},
      {"blocks.0.ln1.weight", {256}, dist::gaussian, -9},
      {"blocks.0.ln1.bias", {256}, dist::gaussian, -9},
      {"blocks.0.attn.qkv.weight", {768, 256}, dist::student_t3, -11},
      {"blocks.0.attn.qkv.bias", {768}, dist::gaussian, -10},
      {"blocks.0.attn.proj.weight", {256, 256}, dist::student_t3, -11},
      {"blocks.0.attn.proj.bias", {256}, dist::gaussian, -10},
      {"blocks.0.ln2.weight", {256}, dist::gaussian, -9},
      {"blocks.0.ln2.bias", {256}, dist::gaussian, -9},
      {"blocks.0.mlp.fc1.weight", {1024, 256}, dist::student_t3, -12},
      {"blocks.0.mlp.fc1.bias", {1024}, dist::gaussian, -10},
      {"blocks.0.mlp.fc2.weight", {256, 1024}, dist::gaussian, -12},
      {"blocks.0.mlp.fc2.bias", {256}, dist::gaussian, -10},
      {"head.weight", {10, 517}, dist::student_t3, -8},
      {"head.bias", {10}, dist::gaussian, -7},
      {"pos_embed", {1, 197, 256}, dist::gaussian, -12},
      {"cls_token", {1, 1, 256}, dist::gaussian, -10},
      {"temperature", {}, dist::gaussian, -6},
  };
  return defs;
}

constexpr std::uint64_t dataset_seed = 0x6772616463ull;  // "gradc"
constexpr auto value_stream = static_cast<blocks::rng_stream>(16);
constexpr auto row_stream = static_cast<blocks::rng_stream>(17);

//! Two standard normals from two 32-bit numbers (Box-Muller, in double).
std::array<double, 2> normals(std::uint32_t a, std::uint32_t b) {
  const double u1 = (static_cast<double>(a) + 1.0) * 0x1p-32;  // (0, 1]: log is finite
  const double u2 = static_cast<double>(b) * 0x1p-32;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double t = 2.0 * std::numbers::pi * u2;
  return {r * std::cos(t), r * std::sin(t)};
}

}  // namespace

std::vector<tensor_item> builtin_dataset() {
  std::vector<tensor_item> out;
  const auto& defs = layers();
  out.reserve(defs.size());
  for (std::size_t l = 0; l < defs.size(); ++l) {
    const layer_def& d = defs[l];
    tensor_item item{d.name, array::zeros(dtype::f32, d.shape)};
    const auto rng = blocks::counter_rng::make(dataset_seed, 0, l);
    const double scale = std::ldexp(1.0, d.scale_exp);
    const std::uint64_t n = item.values.size();
    const std::uint64_t rows = d.shape.empty() ? 1 : d.shape[0];
    const std::uint64_t row_len = rows > 0 ? n / rows : 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (d.active < 1.0) {
        const std::uint32_t pick = rng.at(row_stream, i / row_len);
        if (static_cast<double>(pick) * 0x1p-32 >= d.active) continue;  // an untouched row
      }
      // One Philox block (four 32-bit numbers) per element: four normals.
      const auto b = rng.block(value_stream, i);
      const auto z = normals(b.v[0], b.v[1]);
      double v = z[0];
      if (d.d == dist::student_t3) {
        const auto c = normals(b.v[2], b.v[3]);
        const double chi2 = z[1] * z[1] + c[0] * c[0] + c[1] * c[1];  // chi-square, 3 dof
        v = chi2 > 0.0 ? z[0] / std::sqrt(chi2 / 3.0) : 0.0;
      }
      item.values.f32[i] = static_cast<float>(v * scale);
    }
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace gradcodec::tool
