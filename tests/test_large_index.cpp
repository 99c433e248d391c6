// SPDX-License-Identifier: Apache-2.0
// Element counts of 2^32 and more, where sparse frames switch to u64 indices (header flag
// index64) and every index computation must be 64-bit. The tensors live in anonymous
// MAP_NORESERVE mappings: pages never written read as zeros from the shared zero page, so a
// 2^32-element f16 tensor costs a few written pages of memory instead of 8 GiB.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/gradcodec.hpp"
#include "support/data.hpp"

namespace gc = gradcodec;

namespace {

//! 2^32 + 2^28 + 37: a sixteenth of the elements lie above 2^32.
constexpr std::uint64_t big_n = (std::uint64_t{1} << 32) + (std::uint64_t{1} << 28) + 37;

//! A zero-filled virtual buffer; only the pages written take memory.
class virtual_buffer {
 public:
  explicit virtual_buffer(std::uint64_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<std::uint16_t*>(p);
  }
  ~virtual_buffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  virtual_buffer(const virtual_buffer&) = delete;
  virtual_buffer& operator=(const virtual_buffer&) = delete;
  std::uint16_t* f16() const { return data_; }
  //! Indices of the nonzero f16 elements, found in the pages that were ever written.
  std::vector<std::uint64_t> nonzero_f16() const {
    const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> resident((bytes_ + page - 1) / page);
    std::vector<std::uint64_t> found;
    if (mincore(data_, bytes_, resident.data()) != 0) return found;
    for (std::uint64_t p = 0; p < resident.size(); ++p) {
      if ((resident[p] & 1) == 0) continue;
      for (std::uint64_t i = p * page / 2; i < std::min(bytes_, (p + 1) * page) / 2; ++i)
        if (data_[i] != 0) found.push_back(i);
    }
    return found;
  }

 private:
  std::uint64_t bytes_;
  std::uint16_t* data_ = nullptr;
};

//! Planted values: below 2^31, around 2^32 and in the last elements.
struct planted {
  std::uint64_t index;
  float value;
};
const planted kPlanted[] = {{5, 3.0f},
                            {(std::uint64_t{1} << 31) + 1, -2.5f},
                            {(std::uint64_t{1} << 32) - 1, 1.5f},
                            {std::uint64_t{1} << 32, -4.0f},
                            {big_n - 1, 2.0f}};

//! Encodes into a 1 MiB frame buffer: the bound of a threshold frame at this n is 40 GiB.
gc::result<std::vector<std::byte>> encode_big(const gc::codec_spec& spec, const std::uint16_t* x,
                                              gc::backend where) {
  const gc::const_tensor_view in{x, big_n, gc::dtype::f16, 0};
  gc::exec_options opt{where};
  auto need = gc::workspace_size(spec, in, gc::operation::encode, opt);
  if (!need) return need.error();
  // Left uninitialised: the codecs touch only the parts they use (threshold's candidate
  // regions hold about n / 4 bytes at this n, almost none of it written).
  const auto ws = std::make_unique_for_overwrite<std::byte[]>(need.value());
  std::vector<std::byte> out(std::size_t{1} << 20);
  opt.workspace = {ws.get(), need.value()};
  auto n = gc::encode(spec, {1, 2, 3}, in, out, opt);
  if (!n) return n.error();
  out.resize(n.value());
  return out;
}

std::vector<gc::backend> backends() {
  std::vector<gc::backend> b{gc::backend::reference};
  if (gc::backend_available(gc::backend::cpu)) b.push_back(gc::backend::cpu);
  return b;
}

class LargeIndex : public testing::Test {
 protected:
  void SetUp() override {
    if (in_.f16() == nullptr || out_.f16() == nullptr)
      GTEST_SKIP() << "the kernel refused two MAP_NORESERVE mappings of " << big_n * 2 << " bytes";
    for (const planted& p : kPlanted) in_.f16()[p.index] = gc::blocks::f32_to_f16(p.value);
  }
  virtual_buffer in_{big_n * 2}, out_{big_n * 2};
};

TEST_F(LargeIndex, ThresholdFramesCarryU64IndicesDecodeToTheirPlacesAndAreChecked) {
  // The planted values are the oracle: the reference would take a minute per pass over
  // 4.6e9 elements, so the encode runs on the fastest backend only.
  const gc::backend fast = backends().back();
  const auto spec = gc::parse_spec("threshold:tau=1").value();
  auto f = encode_big(spec, in_.f16(), fast);
  ASSERT_TRUE(f.ok()) << f.error().message();
  const gc::frame_header h = gc::peek(f.value()).value();
  EXPECT_EQ(h.n, big_n);
  EXPECT_NE(h.flags & gc::flag_index64, 0);
  ASSERT_EQ(h.count, std::size(kPlanted));
  // Payload: the values (f16), then the u64 indices.
  const auto l = gc::blocks::sparse_layout_of(h.count, 2, true);
  const std::byte* payload = f.value().data() + gc::header_bytes;
  for (std::size_t j = 0; j < std::size(kPlanted); ++j) {
    std::uint64_t i;
    std::uint16_t v;
    std::memcpy(&i, payload + l.index_offset + 8 * j, 8);
    std::memcpy(&v, payload + l.values_offset + 2 * j, 2);
    EXPECT_EQ(i, kPlanted[j].index) << j;
    EXPECT_EQ(gc::blocks::f16_to_f32(v), kPlanted[j].value) << j;
  }

  for (gc::backend where : backends()) {
    SCOPED_TRACE(static_cast<int>(where));
    // Decode-accumulate touches only the sent elements.
    ASSERT_TRUE(
        gc::test::decode_vec(f.value(), {out_.f16(), big_n, gc::dtype::f16, 0}, where, true, 0.5f)
            .ok());
    const std::vector<std::uint64_t> touched = out_.nonzero_f16();
    ASSERT_EQ(touched.size(), std::size(kPlanted));
    for (std::size_t j = 0; j < std::size(kPlanted); ++j) {
      EXPECT_EQ(touched[j], kPlanted[j].index);
      EXPECT_EQ(gc::blocks::f16_to_f32(out_.f16()[touched[j]]), 0.5f * kPlanted[j].value);
      out_.f16()[touched[j]] = 0;
    }

    // An index equal to n is refused before anything is written.
    std::vector<std::byte> bad = f.value();
    const std::uint64_t past_end = big_n;
    std::memcpy(bad.data() + gc::header_bytes + l.index_offset + 8 * (h.count - 1), &past_end, 8);
    const gc::status st =
        gc::test::decode_vec(bad, {out_.f16(), big_n, gc::dtype::f16, 0}, where, true);
    EXPECT_EQ(st.code(), gc::status_code::corrupt_frame) << st.message();
    EXPECT_TRUE(out_.nonzero_f16().empty()) << "written before the check";
  }
}

TEST_F(LargeIndex, RandomKPicksTheSameIndicesAboveTwoToThe32OnEveryBackend) {
  // Random-k reads only the k values it sends: cheap at any n.
  const auto spec = gc::parse_spec("randomk:k=4096").value();
  std::vector<std::byte> first;
  for (gc::backend where : backends()) {
    SCOPED_TRACE(static_cast<int>(where));
    auto f = encode_big(spec, in_.f16(), where);
    ASSERT_TRUE(f.ok()) << f.error().message();
    if (first.empty()) first = f.value();
    EXPECT_EQ(f.value(), first) << "backends disagree";
  }
  // Decoding 1.0 for every value marks the chosen elements: one in each of the k strata of
  // about n / k elements, so about k / 17 of them lie at or above 2^32.
  std::vector<std::byte> ones = first;
  const std::uint16_t one = gc::blocks::f32_to_f16(1.0f);
  const auto l = gc::blocks::randomk_layout_of(4096, 2);
  for (std::uint64_t j = 0; j < 4096; ++j)
    std::memcpy(ones.data() + gc::header_bytes + l.values_offset + 2 * j, &one, 2);
  for (gc::backend where : backends()) {
    SCOPED_TRACE(static_cast<int>(where));
    ASSERT_TRUE(
        gc::test::decode_vec(ones, {out_.f16(), big_n, gc::dtype::f16, 0}, where, true).ok());
    const std::vector<std::uint64_t> chosen = out_.nonzero_f16();
    ASSERT_EQ(chosen.size(), 4096u);
    std::uint64_t above = 0;
    for (std::uint64_t s = 0; s < 4096; ++s) {
      const std::uint64_t lo = s * big_n / 4096, hi = (s + 1) * big_n / 4096;  // < 2^45
      EXPECT_TRUE(chosen[s] >= lo && chosen[s] < hi) << "stratum " << s << ": " << chosen[s];
      EXPECT_EQ(out_.f16()[chosen[s]], one);
      above += chosen[s] >= (std::uint64_t{1} << 32) ? 1 : 0;
      out_.f16()[chosen[s]] = 0;
    }
    EXPECT_GT(above, 200u);
  }
}

}  // namespace
