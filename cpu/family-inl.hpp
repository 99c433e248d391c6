// SPDX-License-Identifier: Apache-2.0
//! @file
//! What every kernel family of one ISA variant is written against: the SIMD layer, the
//! pieces several families share, and the declarations of the table rows the families
//! define. Each family is its own translation unit per ISA (generated from
//! cpu/variant.cpp.in), so a change to one family recompiles only that family.

// The SIMD layer first: every kernel family is written against it.
#include "simd-inl.hpp"

// Shared by several kernel families.
#include "kernels/bitpack-inl.hpp"
#include "kernels/philox-inl.hpp"
#include "kernels/staged-inl.hpp"

#include "ops-inl.hpp"

//! Exact products of two 64-bit counts (strata bounds, sample sizes).
__extension__ typedef unsigned __int128 u128;

// Scalar element access (contract/scalar_values.hpp), for tails and scalar paths.
using detail::canonical_nan;
using detail::get_value;
using detail::load_value;
using detail::put_value;
using detail::store_value;
