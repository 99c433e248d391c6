// SPDX-License-Identifier: Apache-2.0
// The header-only blocks stand on the format header alone (gradcodec/format.hpp): every
// block compiles here without the spec parser or the frame API, which bring <string>, so
// a fused kernel outside the library pulls in none of them. The blocks come first, before
// anything else could include <string>.
#include "gradcodec/blocks/bitstream.hpp"
#include "gradcodec/blocks/block_scaled.hpp"
#include "gradcodec/blocks/bytes.hpp"
#include "gradcodec/blocks/canonical_sum.hpp"
#include "gradcodec/blocks/codec_traits.hpp"
#include "gradcodec/blocks/config.hpp"
#include "gradcodec/blocks/expected_header.hpp"
#include "gradcodec/blocks/float16.hpp"
#include "gradcodec/blocks/fmath.hpp"
#include "gradcodec/blocks/header.hpp"
#include "gradcodec/blocks/layout.hpp"
#include "gradcodec/blocks/minifloat.hpp"
#include "gradcodec/blocks/pairwise.hpp"
#include "gradcodec/blocks/philox.hpp"
#include "gradcodec/blocks/powersgd.hpp"
#include "gradcodec/blocks/quant.hpp"
#include "gradcodec/blocks/radix_select.hpp"
#include "gradcodec/blocks/randomk.hpp"
#include "gradcodec/blocks/sign.hpp"
#include "gradcodec/blocks/sparse.hpp"

// libstdc++'s guard of <string>; other standard libraries are not checked.
#if defined(_GLIBCXX_STRING)
constexpr bool blocks_pulled_string = true;
#else
constexpr bool blocks_pulled_string = false;
#endif

#include <gtest/gtest.h>

TEST(BlocksAlone, NeedOnlyTheFormatHeader) {
  EXPECT_FALSE(blocks_pulled_string)
      << "a block includes spec.hpp, frame.hpp or <string>: include gradcodec/format.hpp";
}
