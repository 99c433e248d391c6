// SPDX-License-Identifier: Apache-2.0
//! @file
//! CPUID detection and the choice of the CPU backend's instruction-set variant.
#include <atomic>
#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstdlib>
#include <string>
#include <thread>

#include "contract/backend.hpp"
#include "gradcodec/cpu.hpp"

namespace gradcodec {
namespace cpu {
namespace scalar {
const detail::backend_table* table() noexcept;
}  // namespace scalar
namespace avx2 {
const detail::backend_table* table() noexcept;
}  // namespace avx2
namespace avx512 {
const detail::backend_table* table() noexcept;
}  // namespace avx512
}  // namespace cpu

namespace {

// The variants this build contains (CMake option GRADCODEC_CPU_ISAS; all by default).
#ifndef GRADCODEC_CPU_HAVE_SCALAR
#define GRADCODEC_CPU_HAVE_SCALAR 0
#endif
#ifndef GRADCODEC_CPU_HAVE_AVX2
#define GRADCODEC_CPU_HAVE_AVX2 0
#endif
#ifndef GRADCODEC_CPU_HAVE_AVX512
#define GRADCODEC_CPU_HAVE_AVX512 0
#endif

//! A variant's table (its codecs, PowerSGD phase kernels and majority vote); null when the
//! build left it out.
const detail::backend_table* variant_of(cpu_isa isa) noexcept {
  switch (isa) {
#if GRADCODEC_CPU_HAVE_AVX512
    case cpu_isa::avx512: return cpu::avx512::table();
#endif
#if GRADCODEC_CPU_HAVE_AVX2
    case cpu_isa::avx2: return cpu::avx2::table();
#endif
#if GRADCODEC_CPU_HAVE_SCALAR
    case cpu_isa::scalar: return cpu::scalar::table();
#endif
    default: return nullptr;
  }
}

#if defined(__x86_64__) || defined(__i386__)
//! CPUID and XGETBV read directly: the OS must save the vector state, not only the CPU
//! support the instructions (and compilers disagree on __builtin_cpu_supports names).
struct x86_features {
  bool avx2 = false, avx512 = false;
};

x86_features detect() noexcept {
  x86_features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = (c >> 12) & 1u, f16c = (c >> 29) & 1u, osxsave = (c >> 27) & 1u,
             avx = (c >> 28) & 1u;
  if (!osxsave || !avx) return f;
  unsigned xcr_lo = 0, xcr_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr_lo), "=d"(xcr_hi) : "c"(0));
  const bool ymm_state = (xcr_lo & 0x6u) == 0x6u;
  const bool zmm_state = (xcr_lo & 0xE6u) == 0xE6u;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = (b >> 5) & 1u, bmi1 = (b >> 3) & 1u, bmi2 = (b >> 8) & 1u;
  const bool avx512f = (b >> 16) & 1u, avx512dq = (b >> 17) & 1u, avx512bw = (b >> 30) & 1u,
             avx512vl = (b >> 31) & 1u;
  f.avx2 = ymm_state && avx2 && fma && f16c && bmi1 && bmi2;
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  return f;
}

bool cpu_has(cpu_isa isa) noexcept {
  static const x86_features f = detect();
  switch (isa) {
    case cpu_isa::scalar: return true;
    case cpu_isa::avx2: return f.avx2;
    case cpu_isa::avx512: return f.avx512;
  }
  return false;
}
#else
bool cpu_has(cpu_isa isa) noexcept { return isa == cpu_isa::scalar; }
#endif

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

//! A positive integer environment variable, else 0.
int env_threads(const char* name) noexcept {
  const char* env = std::getenv(name);
  if (env == nullptr) return 0;
  const int t = std::atoi(env);
  return t > 0 ? t : 0;
}

//! What the process was given: GRADCODEC_CPU_THREADS, else OMP_NUM_THREADS (which
//! launchers such as torchrun set per rank), else the CPUs of its affinity mask (taskset,
//! cgroups' cpusets), else the hardware concurrency.
int initial_threads() noexcept {
  if (const int t = env_threads("GRADCODEC_CPU_THREADS"); t > 0) return t;
  if (const int t = env_threads("OMP_NUM_THREADS"); t > 0) return t;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int t = CPU_COUNT(&set);
    if (t > 0) return t;
  }
#endif
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
    case cpu_isa::scalar: return "scalar";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx512: return "avx512";
  }
  return "?";
}

result<cpu_isa> cpu_isa_from_name(std::string_view name) {
  for (cpu_isa isa : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512})
    if (cpu_isa_name(isa) == name) return isa;
  return status{status_code::invalid_argument,
                std::string("unknown CPU ISA '").append(name).append("' (scalar|avx2|avx512)")};
}

bool cpu_isa_supported(cpu_isa isa) noexcept { return variant_of(isa) != nullptr && cpu_has(isa); }

cpu_isa cpu_isa_best() noexcept {
  if (cpu_isa_supported(cpu_isa::avx512)) return cpu_isa::avx512;
  if (cpu_isa_supported(cpu_isa::avx2)) return cpu_isa::avx2;
  return cpu_isa::scalar;  // not supported either when the build left it out
}

cpu_isa cpu_isa_active() noexcept {
  return static_cast<cpu_isa>(active_slot().load(std::memory_order_relaxed));
}

status set_cpu_isa(cpu_isa isa) noexcept {
  if (!cpu_isa_supported(isa))
    return {status_code::backend_unavailable,
            std::string("CPU ISA ")
                .append(cpu_isa_name(isa))
                .append(" is not in this build or not supported by this CPU")};
  active_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
  return {};
}

int cpu_default_threads() noexcept { return threads_slot().load(std::memory_order_relaxed); }
void set_cpu_default_threads(int threads) noexcept {
  threads_slot().store(threads > 0 ? threads : initial_threads());
}

namespace detail {

// Null (no CPU backend) only when the build has no variant this CPU can run.
const backend_table* cpu_backend_table() noexcept {
  const cpu_isa isa = cpu_isa_active();
  return cpu_isa_supported(isa) ? variant_of(isa) : nullptr;
}

}  // namespace detail
}  // namespace gradcodec
