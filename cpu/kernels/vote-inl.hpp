// SPDX-License-Identifier: Apache-2.0
//! @file
//! signSGD majority vote (docs/codecs.md "Majority vote") over checked `sign` frames, byte
//! for byte as the scalar oracle in src/vote.cpp. Included inside an ISA namespace after
//! sign-inl.hpp.
//!
//! Elements go in words of 64, whose code bits are one 64-bit load per frame. The frames'
//! words are added into a bit-sliced counter: plane p holds bit p of each element's count
//! of negative signs, so one frame costs two logic operations per plane for 64 elements.
//! The counter has as many planes as the frame count needs (a template parameter, so the
//! planes stay in registers); more than 255 frames are counted 255 at a time and the
//! partial counts added into 32 planes. Two bit-sliced comparisons with the tie thresholds
//! then give the word's masks of positive and negative sums, and each 16 elements select
//! among the values encoded beforehand in the output's dtype (no conversion per element).
//! Threads take ranges of whole words: every output byte belongs to one task.

//! Planes of the counter: counts up to 2^32 - 1 frames (the scalar oracle counts in u32).
inline constexpr unsigned vote_max_planes = 32;

//! Frames counted in registers at a time: 8 planes.
inline constexpr std::size_t vote_block_frames = 255;

//! How far ahead of the word being counted each frame's codes are prefetched (into L2):
//! the frames are as many streams as there are voters, more than the hardware prefetchers
//! follow.
inline constexpr std::uint64_t vote_prefetch_bytes = 1024;

//! Elements per task: whole words.
inline constexpr std::uint64_t vote_grain = stream_grain;
static_assert(vote_grain % 64 == 0);

//! count < k and count == k for the 64 counts of the planes (k < 2^planes), from the top
//! plane down: lt gains the elements whose higher bits equal k's and whose bit p is 0
//! where k's is 1.
inline void vote_compare(const std::uint64_t* plane, unsigned planes, std::uint32_t k,
                         std::uint64_t& lt, std::uint64_t& eq) {
  lt = 0;
  eq = ~std::uint64_t{0};
  for (unsigned p = planes; p-- > 0;) {
    if ((k >> p) & 1u) {
      lt |= eq & ~plane[p];
      eq &= plane[p];
    } else {
      eq &= ~plane[p];
    }
  }
}

//! The code bits of elements [i, i + 64) (i a multiple of 64) of a stream of `bytes` bytes;
//! bits past the stream read 0.
inline std::uint64_t vote_word(const std::byte* codes, std::uint64_t bytes, std::uint64_t i) {
  const std::uint64_t at = i / 8;
  std::uint64_t w = 0;
  if (at + 8 <= bytes)
    std::memcpy(&w, codes + at, 8);  // a fixed size: loaded inline, not by a call
  else
    std::memcpy(&w, codes + at, bytes - at);
  return w;
}

//! Bits [lo, hi) of a word (lo < hi <= 64).
inline std::uint64_t vote_bits(unsigned lo, unsigned hi) {
  const std::uint64_t upto = hi == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << hi) - 1u;
  return upto & ~((std::uint64_t{1} << lo) - 1u);
}

//! pl = the counts of negative signs of the word at i over frames [f0, f1) (f1 - f0 < 2^P).
template <unsigned P>
GRADCODEC_VINLINE void vote_count(const detail::vote_call& c, std::size_t f0, std::size_t f1,
                                  std::uint64_t i, std::uint64_t (&pl)[P]) {
  for (unsigned p = 0; p < P; ++p) pl[p] = 0;
  for (std::size_t f = f0; f < f1; ++f) {
    std::uint64_t carry = vote_word(detail::vote_codes(c, f), c.layout.codes_bytes, i);
    for (unsigned p = 0; p < P; ++p) {
      const std::uint64_t next = pl[p] & carry;
      pl[p] ^= carry;
      carry = next;
    }
  }
}

//! The masks of positive and negative sums of the word at i: P planes count every frame,
//! or (P = 0) blocks of vote_block_frames frames are added into vote_max_planes planes.
template <unsigned P>
GRADCODEC_VINLINE void vote_masks(const detail::vote_call& c, std::uint64_t i, std::uint64_t& pos,
                                  std::uint64_t& neg) {
  const auto votes = static_cast<std::uint32_t>(c.frames.size());
  // sum = votes - 2 * neg: positive when neg < above, negative when neg > below, else 0.
  const std::uint32_t above = (votes + 1) / 2, below = votes / 2;
  std::uint64_t lt, eq, ignored;
  if constexpr (P > 0) {
    std::uint64_t pl[P];
    vote_count<P>(c, 0, votes, i, pl);
    vote_compare(pl, P, above, pos, ignored);
    vote_compare(pl, P, below, lt, eq);
  } else {
    std::uint64_t total[vote_max_planes] = {};
    const auto planes = static_cast<unsigned>(std::bit_width(votes));
    for (std::size_t f0 = 0; f0 < votes; f0 += vote_block_frames) {
      std::uint64_t pl[8];
      vote_count<8>(c, f0, std::min<std::size_t>(votes, f0 + vote_block_frames), i, pl);
      std::uint64_t carry = 0;  // total += pl, bit-sliced
      for (unsigned p = 0; p < planes; ++p) {
        const std::uint64_t a = total[p], b = p < 8 ? pl[p] : 0;
        total[p] = a ^ b ^ carry;
        carry = (a & b) | (carry & (a ^ b));
      }
    }
    vote_compare(total, planes, above, pos, ignored);
    vote_compare(total, planes, below, lt, eq);
  }
  neg = ~(lt | eq);
}

//! The elements of the word at i (of [i, end)) whose bucket is poisoned. It remembers the
//! last bucket looked at, [lo, hi), so a bucket spanning many words reads its scales once
//! and a word inside it costs no division.
struct vote_poison {
  std::uint64_t lo = 1, hi = 0;
  bool poisoned = false;
  std::uint64_t word(const detail::vote_call& c, std::uint64_t i, std::uint64_t end) {
    if (lo <= i && end <= hi) return poisoned ? vote_bits(0, static_cast<unsigned>(end - i)) : 0;
    std::uint64_t m = 0;
    for (std::uint64_t b = i / c.bucket; b * c.bucket < end; ++b) {
      lo = b * c.bucket;
      hi = std::min(c.n, lo + c.bucket);
      poisoned = detail::vote_poisoned(c, b);
      if (poisoned)
        m |= vote_bits(static_cast<unsigned>(std::max(lo, i) - i),
                       static_cast<unsigned>(std::min(hi, end) - i));
    }
    return m;
  }
};

//! The 16 values of elements j..j+15 of a word from its masks (q: poisoned elements).
struct vote_choice {
  vu16 pos, neg, tie, nan;
  GRADCODEC_VINLINE vu16 at(std::uint64_t p, std::uint64_t n, unsigned j) const {
    return vselectu(static_cast<mask16>(p >> j), pos,
                    vselectu(static_cast<mask16>(n >> j), neg, tie));
  }
  GRADCODEC_VINLINE vu16 at(std::uint64_t p, std::uint64_t n, std::uint64_t q, unsigned j) const {
    return vselectu(static_cast<mask16>(q >> j), nan, at(p, n, j));
  }
};

//! Stores lanes [0, cnt) of x at element i of out (Word-sized elements).
template <class Word, bool Stream>
GRADCODEC_VINLINE void vote_store(Word* out, std::uint64_t i, vu16 x, unsigned cnt) {
  if constexpr (sizeof(Word) == 4) {
    if (cnt < 16)
      vstore_n(reinterpret_cast<float*>(out + i), vfrombits(x), cnt);
    else if constexpr (Stream)
      vstream(reinterpret_cast<float*>(out + i), vfrombits(x));
    else
      vstore_u(out + i, x);
  } else if (cnt == 16) {
    vstore_u16(out + i, x);
  } else {
    alignas(64) std::uint16_t tmp[16];
    vstore_u16(tmp, x);
    std::memcpy(out + i, tmp, cnt * sizeof(Word));
  }
}

//! Votes elements [begin, end) (begin a multiple of 64) into out, Word the output's element
//! size; Stream: f32 output 64-byte aligned, full groups stored around the caches.
template <class Word, bool Stream, unsigned P>
inline void vote_task(const detail::vote_call& c, std::uint64_t begin, std::uint64_t end) {
  const auto value = [&](int k) {
    Word w;
    std::memcpy(&w, c.values[k], sizeof w);
    return vset1u(w);
  };
  const vote_choice ch{value(0), value(1), value(2), value(3)};
  Word* out = static_cast<Word*>(c.out.data);
  vote_poison poison;
  for (std::uint64_t i = begin; i < end; i += 64) {
    const std::uint64_t stop = std::min(end, i + 64);
    if (i % 512 == 0)  // a new cache line of every frame's codes
      for (std::size_t f = 0; f < c.frames.size(); ++f)
        __builtin_prefetch(detail::vote_codes(c, f) + i / 8 + vote_prefetch_bytes, 0, 1);
    std::uint64_t pos, neg;
    vote_masks<P>(c, i, pos, neg);
    const std::uint64_t q = poison.word(c, i, stop);
    if (stop - i == 64 && q == 0) {  // the usual word: straight-line code
      vote_store<Word, Stream>(out, i, ch.at(pos, neg, 0), 16);
      vote_store<Word, Stream>(out, i + 16, ch.at(pos, neg, 16), 16);
      vote_store<Word, Stream>(out, i + 32, ch.at(pos, neg, 32), 16);
      vote_store<Word, Stream>(out, i + 48, ch.at(pos, neg, 48), 16);
      continue;
    }
    for (unsigned j = 0; i + j < stop; j += 16)
      vote_store<Word, Stream>(out, i + j, ch.at(pos, neg, q, j),
                               static_cast<unsigned>(std::min<std::uint64_t>(16, stop - i - j)));
  }
  if constexpr (Stream) vstream_fence();
}

//! vote_task for the output and the frame count (P planes, or 0 for more than 255 frames).
template <unsigned P>
inline void vote_run_planes(const detail::vote_call& c) {
  const std::uint64_t tasks = blocks::ceil_div(c.n, vote_grain);
  const bool f32 = dtype_size(c.out.type) == 4;
  const bool stream = f32 && c.n * 4 >= stream_store_bytes &&
                      reinterpret_cast<std::uintptr_t>(c.out.data) % 64 == 0;
  parallel_for(threads_for(0, tasks), tasks, [&](std::uint64_t t) {
    const std::uint64_t b = t * vote_grain, e = std::min(c.n, b + vote_grain);
    if (!f32)
      vote_task<std::uint16_t, false, P>(c, b, e);
    else if (stream)
      vote_task<std::uint32_t, true, P>(c, b, e);
    else
      vote_task<std::uint32_t, false, P>(c, b, e);
  });
}

inline void vote_run(const detail::vote_call& c) {
  switch (std::bit_width(c.frames.size())) {
    case 1: vote_run_planes<1>(c); return;
    case 2: vote_run_planes<2>(c); return;
    case 3: vote_run_planes<3>(c); return;
    case 4: vote_run_planes<4>(c); return;
    case 5: vote_run_planes<5>(c); return;
    case 6: vote_run_planes<6>(c); return;
    case 7: vote_run_planes<7>(c); return;
    case 8: vote_run_planes<8>(c); return;
    default: vote_run_planes<0>(c); return;
  }
}

//! The vote kernel of this ISA. Not inline: cpu/isa.cpp calls it by name.
const detail::vote_kernels* vote_kernels() noexcept {
  static const detail::vote_kernels k{GRADCODEC_CPU_NAME, vote_run};
  return &k;
}
