// SPDX-License-Identifier: Apache-2.0
//! @file
//! CPUID detection and the choice of the CPU backend's instruction-set variant.
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "../src/backend.hpp"
#include "gradcodec/cpu.hpp"

namespace gradcodec {
namespace cpu {
namespace scalar {
const detail::backend_table* table() noexcept;
}
namespace avx2 {
const detail::backend_table* table() noexcept;
}
namespace avx512 {
const detail::backend_table* table() noexcept;
}
}  // namespace cpu

namespace {

bool cpu_has(cpu_isa isa) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case cpu_isa::scalar:
      return true;
    case cpu_isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c");
    case cpu_isa::avx512:
      return cpu_has(cpu_isa::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return isa == cpu_isa::scalar;
#endif
}

cpu_isa initial_isa() noexcept {
  if (const char* env = std::getenv("GRADCODEC_CPU_ISA"); env != nullptr && *env != '\0') {
    auto want = cpu_isa_from_name(env);
    if (want.ok() && cpu_isa_supported(want.value())) return want.value();
  }
  return cpu_isa_best();
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(initial_isa())};
  return slot;
}

int initial_threads() noexcept {
  if (const char* env = std::getenv("GRADCODEC_CPU_THREADS"); env != nullptr) {
    const int t = std::atoi(env);
    if (t > 0) return t;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

std::atomic<int>& threads_slot() {
  static std::atomic<int> slot{initial_threads()};
  return slot;
}

}  // namespace

std::string_view cpu_isa_name(cpu_isa isa) noexcept {
  switch (isa) {
    case cpu_isa::scalar:
      return "scalar";
    case cpu_isa::avx2:
      return "avx2";
    case cpu_isa::avx512:
      return "avx512";
  }
  return "?";
}

result<cpu_isa> cpu_isa_from_name(std::string_view name) {
  for (cpu_isa isa : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512})
    if (cpu_isa_name(isa) == name) return isa;
  return status{status_code::invalid_argument,
                std::string("unknown CPU ISA '").append(name).append("' (scalar|avx2|avx512)")};
}

bool cpu_isa_supported(cpu_isa isa) noexcept { return cpu_has(isa); }

cpu_isa cpu_isa_best() noexcept {
  if (cpu_has(cpu_isa::avx512)) return cpu_isa::avx512;
  if (cpu_has(cpu_isa::avx2)) return cpu_isa::avx2;
  return cpu_isa::scalar;
}

cpu_isa cpu_isa_active() noexcept {
  return static_cast<cpu_isa>(active_slot().load(std::memory_order_relaxed));
}

status set_cpu_isa(cpu_isa isa) noexcept {
  if (!cpu_isa_supported(isa))
    return {status_code::backend_unavailable, std::string("CPU ISA ")
                                                  .append(cpu_isa_name(isa))
                                                  .append(" is not supported on this machine")};
  active_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
  return {};
}

int cpu_default_threads() noexcept { return threads_slot().load(std::memory_order_relaxed); }
void set_cpu_default_threads(int threads) noexcept {
  threads_slot().store(threads > 0 ? threads : initial_threads());
}

namespace detail {

const backend_table* cpu_backend_table() noexcept {
  switch (cpu_isa_active()) {
    case cpu_isa::avx512:
      return cpu::avx512::table();
    case cpu_isa::avx2:
      return cpu::avx2::table();
    case cpu_isa::scalar:
      break;
  }
  return cpu::scalar::table();
}

}  // namespace detail
}  // namespace gradcodec
