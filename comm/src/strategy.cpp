// SPDX-License-Identifier: Apache-2.0
//! @file
//! Strategy names, and the strategies of a codec from its descriptor's collective support.
#include "gradcodec/comm/strategy.hpp"

#include <string>

namespace gradcodec::comm {

std::string_view strategy_name(strategy s) noexcept {
  switch (s) {
    case strategy::automatic: return "auto";
    case strategy::allgather: return "allgather";
    case strategy::two_phase: return "two_phase";
    case strategy::dense: return "dense";
    case strategy::majority_vote: return "majority_vote";
  }
  return "?";
}

result<strategy> strategy_from_name(std::string_view name) {
  for (strategy s : {strategy::automatic, strategy::allgather, strategy::two_phase, strategy::dense,
                     strategy::majority_vote})
    if (strategy_name(s) == name) return s;
  return status{status_code::invalid_argument,
                std::string("unknown strategy '")
                    .append(name)
                    .append("' (auto|allgather|two_phase|dense|majority_vote)")};
}

strategy_set supported_strategies(codec_id id) noexcept {
  strategy_set s;
  s.add(strategy::allgather);
  const collective_support c = info(id).collectives;
  if (c.two_phase) s.add(strategy::two_phase);
  if (c.dense) s.add(strategy::dense);
  if (c.majority_vote) s.add(strategy::majority_vote);
  return s;
}

strategy preferred_strategy(codec_id id) noexcept {
  const strategy_set s = supported_strategies(id);
  if (s.contains(strategy::two_phase)) return strategy::two_phase;
  if (s.contains(strategy::dense)) return strategy::dense;
  return strategy::allgather;
}

result<strategy> resolve_strategy(codec_id id, strategy s) {
  const auto raw = static_cast<int>(id);
  if (raw < 1 || raw > codec_count)
    return status{status_code::invalid_argument, "invalid codec id"};
  if (s == strategy::automatic) return preferred_strategy(id);
  const strategy_set have = supported_strategies(id);
  if (have.contains(s)) return s;
  std::string known;
  for (strategy t :
       {strategy::allgather, strategy::two_phase, strategy::dense, strategy::majority_vote})
    if (have.contains(t)) known.append(known.empty() ? "" : ", ").append(strategy_name(t));
  return status{status_code::invalid_argument, std::string("codec ")
                                                   .append(codec_name(id))
                                                   .append(" does not support strategy ")
                                                   .append(strategy_name(s))
                                                   .append(" (it supports: ")
                                                   .append(known)
                                                   .append(")")};
}

}  // namespace gradcodec::comm
