// TEMPORARY bootstrap file: replaced by the real PowerSGD phases before commit.
#include "gradcodec/powersgd.hpp"
namespace gradcodec {
bool powersgd_compresses(const codec_spec& spec, std::uint64_t rows, std::uint64_t cols) noexcept {
  if (rows <= 1 || cols <= 1) return false;
  const double r = powersgd_rank(spec, rows, cols);
  return static_cast<double>(rows) * static_cast<double>(cols) > spec.min_rate * (static_cast<double>(rows + cols)) * r;
}
std::uint32_t powersgd_rank(const codec_spec& spec, std::uint64_t rows, std::uint64_t cols) noexcept {
  std::uint64_t r = spec.rank;
  if (rows < r) r = rows;
  if (cols < r) r = cols;
  return static_cast<std::uint32_t>(r);
}
}  // namespace gradcodec
