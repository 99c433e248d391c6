// SPDX-License-Identifier: Apache-2.0
//! @file
//! Communicator.mpi(): comm::mpi_communicator over MPI_COMM_WORLD for a Python process
//! launched by mpirun, so that the engine's collectives run in C++ with no Python call
//! (and no wait for the interpreter lock) inside a sync. Compiled without MPI, it reports
//! how the extension was built.
#include "communicator.hpp"

#if GRADCODEC_PYTHON_MPI
#include <chrono>
#include <cstdint>
#include <string>

#include "gradcodec/comm/mpi.hpp"
#endif

namespace gradcodec::python {

#if GRADCODEC_PYTHON_MPI
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// Registered with atexit only when this extension initialized MPI; a communicator
// dropped after it frees nothing (mpi_communicator checks MPI_Finalized).
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

status open_mpi_world(double wait_poll_s, std::unique_ptr<gcc::communicator>& out) {
  int initialized = 0, finalized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Finalized(&finalized);
  if (finalized) return {status_code::comm_error, "Communicator.mpi: MPI was finalized already"};
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return {status_code::comm_error, "Communicator.mpi: MPI_Init_thread failed"};
    nb::module_::import_("atexit").attr("register")(nb::cpp_function(&finalize_at_exit));
  } else {
    MPI_Query_thread(&provided);
  }
  // A delayed sync runs its collectives on the engine's thread, the others on the caller's.
  if (provided < MPI_THREAD_SERIALIZED)
    return {status_code::comm_error,
            std::string("Communicator.mpi: MPI provides ") + thread_level_name(provided) +
                "; the outer synchronizer's thread needs MPI_THREAD_SERIALIZED or more"};
  std::unique_ptr<gcc::mpi_communicator> world;
  if (auto st = gcc::mpi_communicator::create(MPI_COMM_WORLD, world); !st.ok()) return st;
  world->set_wait_poll(std::chrono::microseconds(static_cast<std::int64_t>(wait_poll_s * 1e6)));
  out = std::move(world);
  return {};
}

bool mpi_built() noexcept { return true; }

#else

status open_mpi_world(double, std::unique_ptr<gcc::communicator>&) {
  return {status_code::invalid_argument,
          "Communicator.mpi: this extension was built without MPI (none found when configured)"};
}

bool mpi_built() noexcept { return false; }

#endif

}  // namespace gradcodec::python
