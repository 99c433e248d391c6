// SPDX-License-Identifier: Apache-2.0
//! @file
//! drift_tracker and scale_for_drift (comm/drift.hpp).
#include "gradcodec/comm/drift.hpp"

#include <algorithm>
#include <cmath>

namespace gradcodec::comm {

namespace {

constexpr double factor_floor = 1e-3, factor_ceiling = 1e3;

//! One gathered observation: a bucket's key and this rank's running ratio.
struct observation {
  std::uint64_t key;
  double ratio;
};

}  // namespace

status scale_for_drift(cost_profile& profile, const candidate& c, double ratio) {
  if (!(std::isfinite(ratio) && ratio > 0))
    return {status_code::invalid_argument, "scale_for_drift: ratio must be finite and > 0"};
  if (c.uncompressed) {
    profile.link.allreduce.bytes_per_s /= ratio;
    return {};
  }
  auto it = std::find_if(profile.compute.codecs.begin(), profile.compute.codecs.end(),
                         [&](const codec_costs& k) { return k.spec == c.spec; });
  if (it == profile.compute.codecs.end())
    return {status_code::invalid_argument,
            "scale_for_drift: the profile has no costs for " + to_string(c.spec)};
  auto f = std::find_if(it->in_call.begin(), it->in_call.end(), [&](const in_call_factor& k) {
    return k.how == c.how && k.pipeline == c.pipeline;
  });
  if (f == it->in_call.end()) f = it->in_call.insert(it->in_call.end(), {c.how, c.pipeline, 1, 0});
  f->compute = std::clamp(f->compute * ratio, factor_floor, factor_ceiling);
  return {};
}

void drift_tracker::observe(std::uint64_t key, const plan_row& row, double seconds) {
  if (!(row.predicted.total_s > 0) || !std::isfinite(seconds)) return;
  const double r = seconds / row.predicted.total_s;
  auto it = entries_.find(key);
  if (it == entries_.end() || !(it->second.config == row.config)) {
    entries_[key] = {row.config, r, seconds};
    return;
  }
  entry& e = it->second;
  e.ratio = (1 - opt_.ewma) * e.ratio + opt_.ewma * r;
  e.seconds = (1 - opt_.ewma) * e.seconds + opt_.ewma * seconds;
}

void drift_tracker::restore(std::uint64_t key, const plan_row& row, double ratio, double seconds) {
  entries_[key] = {row.config, ratio, seconds};
}

std::optional<double> drift_tracker::ratio(std::uint64_t key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? std::nullopt : std::optional<double>(it->second.ratio);
}

std::optional<double> drift_tracker::seconds(std::uint64_t key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? std::nullopt : std::optional<double>(it->second.seconds);
}

result<std::vector<std::uint64_t>> drift_tracker::agree(communicator& comm, cost_profile& profile) {
  if (!(opt_.ewma > 0 && opt_.ewma <= 1) || !(opt_.limit > 1) || !std::isfinite(opt_.limit))
    return status{status_code::invalid_argument,
                  "drift_tracker: ewma must be in (0, 1] and limit a finite number > 1"};
  const auto w = static_cast<std::size_t>(comm.size());
  std::vector<observation> mine;
  for (const auto& [key, e] : entries_) mine.push_back({key, e.ratio});
  std::uint64_t count = mine.size();
  std::vector<std::uint64_t> counts(w);
  if (status s = comm.allgather(&count, sizeof count, counts.data()); !s.ok()) return s;
  std::vector<std::uint64_t> sizes(w);
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < w; ++r) total += counts[r];
  for (std::size_t r = 0; r < w; ++r) sizes[r] = counts[r] * sizeof(observation);
  std::vector<observation> all(total);
  if (total > 0)  // the same on every rank
    if (status s =
            comm.allgatherv(mine.data(), mine.size() * sizeof(observation), all.data(), sizes);
        !s.ok())
      return s;
  // Sorted by key, then ratio: each key's ratios lie together, in an order every rank shares.
  std::sort(all.begin(), all.end(), [](const observation& a, const observation& b) {
    return a.key != b.key ? a.key < b.key : a.ratio < b.ratio;
  });
  std::vector<std::uint64_t> drifted;
  for (std::size_t at = 0; at < all.size();) {
    std::size_t end = at;
    while (end < all.size() && all[end].key == all[at].key) ++end;
    const std::uint64_t key = all[at].key;
    const double median = all[at + (end - at) / 2].ratio;
    const bool everyone = end - at == w;  // a rank that has not timed it yet: wait
    at = end;
    if (!everyone || std::abs(std::log(median)) <= std::log(opt_.limit)) continue;
    // Every rank that timed the bucket holds its row (the plans are the same everywhere).
    if (status s = scale_for_drift(profile, entries_.at(key).config, median); !s.ok()) return s;
    entries_.erase(key);
    drifted.push_back(key);
    ++replans_;
  }
  return drifted;
}

}  // namespace gradcodec::comm
