// SPDX-License-Identifier: Apache-2.0
//! @file
//! The CPU backend's instruction-set variants. The variant is chosen once, at first use,
//! from CPUID (or the environment variable GRADCODEC_CPU_ISA=scalar|avx2|avx512), and can
//! be changed with set_cpu_isa(). Every variant produces identical bytes.
#pragma once

#include <cstdint>
#include <string_view>

#include "gradcodec/status.hpp"

namespace gradcodec {

enum class cpu_isa : std::uint8_t { scalar = 0, avx2 = 1, avx512 = 2 };

std::string_view cpu_isa_name(cpu_isa isa) noexcept;
result<cpu_isa> cpu_isa_from_name(std::string_view name);

//! Whether this build contains the variant and this CPU can run it.
bool cpu_isa_supported(cpu_isa isa) noexcept;
//! The best supported variant.
cpu_isa cpu_isa_best() noexcept;
//! The variant the CPU backend uses now.
cpu_isa cpu_isa_active() noexcept;
//! Selects a variant for the whole process (not for calls already running).
status set_cpu_isa(cpu_isa isa) noexcept;

//! Threads the CPU backend uses when exec_options::threads is 0. Default, read once:
//! GRADCODEC_CPU_THREADS, else OMP_NUM_THREADS, else the number of CPUs in the process's
//! affinity mask, else the hardware concurrency; so ranks that share a machine and were
//! each given a share of it (torchrun sets OMP_NUM_THREADS=1, taskset, cpusets) do not
//! oversubscribe it.
int cpu_default_threads() noexcept;
void set_cpu_default_threads(int threads) noexcept;

}  // namespace gradcodec
