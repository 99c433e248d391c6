// SPDX-License-Identifier: Apache-2.0
//! @file
//! The shapes a compressed allreduce can take, and which codec can use which.
//! docs/comm.md describes each strategy step by step.
#pragma once

#include <cstdint>
#include <string_view>

#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"

namespace gradcodec::comm {

enum class strategy : std::uint8_t {
  automatic = 0,      //!< the codec's preferred strategy (preferred_strategy())
  allgather = 1,      //!< allgather the frames, every rank decode-accumulates all of them
  two_phase = 2,      //!< compressed reduce-scatter, re-compression, compressed allgather
  dense = 3,          //!< dense reduction of values (random-k values, PowerSGD P/Q, casts)
  majority_vote = 4,  //!< signSGD: allgather the sign frames, take the per-element vote
};

std::string_view strategy_name(strategy s) noexcept;
result<strategy> strategy_from_name(std::string_view name);

//! A set of strategies.
class strategy_set {
 public:
  constexpr strategy_set() noexcept = default;
  constexpr strategy_set& add(strategy s) noexcept {
    bits_ |= 1u << static_cast<unsigned>(s);
    return *this;
  }
  [[nodiscard]] constexpr bool contains(strategy s) const noexcept {
    return (bits_ >> static_cast<unsigned>(s)) & 1u;
  }
  [[nodiscard]] constexpr std::uint32_t bits() const noexcept { return bits_; }

 private:
  std::uint32_t bits_ = 0;
};

//! The strategies a codec supports (automatic is always accepted and resolves to
//! preferred_strategy()):
//!   every codec:                 allgather
//!   topk dgc threshold qsgd terngrad minmax onebit sign: two_phase
//!   randomk fp16 bf16 powersgd:  dense
//!   sign:                        majority_vote
strategy_set supported_strategies(codec_id id) noexcept;

//! two_phase for the codecs that have it, else dense, else allgather.
strategy preferred_strategy(codec_id id) noexcept;

//! automatic resolved, or invalid_argument naming the codec, the strategy and the ones
//! the codec supports.
result<strategy> resolve_strategy(codec_id id, strategy s);

}  // namespace gradcodec::comm
