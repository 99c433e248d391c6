// The README's C++ example, compiled and run by the consumer test.
#include <gradcodec/gradcodec.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<float> grad(4096);
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(i % 17) - 8.0f;

  auto spec = gradcodec::parse_spec("bf16");
  if (!spec) return std::fprintf(stderr, "%s\n", spec.error().message()), 1;
  std::vector<std::byte> frame(gradcodec::encode_bound(spec.value(), grad.size()));
  auto written = gradcodec::encode(spec.value(), {.seed = 1, .step = 0}, gradcodec::view(grad), frame);
  if (!written) return std::fprintf(stderr, "%s\n", written.error().message()), 1;

  std::vector<float> out(grad.size());
  auto st = gradcodec::decode({frame.data(), written.value()}, gradcodec::view(out));
  if (!st) return std::fprintf(stderr, "%s\n", st.message()), 1;
  std::printf("consumer ok: %zu bytes, out[5] = %g\n", written.value(), static_cast<double>(out[5]));
  return out[5] == grad[5] ? 0 : 1;
}
