// SPDX-License-Identifier: Apache-2.0
//! @file
//! gradcodec._gradcodec.Communicator: a comm::communicator over a Python transport object
//! (gradcodec.torch's transport over a torch.distributed process group), or W thread
//! communicators of one process for tests. The outer synchronizer and the calibration run
//! over it.
#pragma once

#include <memory>

#include "common.hpp"
#include "gradcodec/comm/communicator.hpp"

namespace gradcodec::python {

namespace gcc = gradcodec::comm;

//! What Python holds: a communicator (Python transport or thread communicator).
struct communicator_handle {
  std::unique_ptr<gcc::communicator> comm;
};

//! Runs an engine call without the GIL (the transport takes it back for each collective);
//! its status is raised once the GIL is held again.
template <class F>
status without_gil(F&& call) {
  nb::gil_scoped_release nogil;
  return call();
}

//! A communicator over MPI_COMM_WORLD (a duplicate of it, one per call), initializing MPI
//! with MPI_THREAD_MULTIPLE when the process has not (and finalizing it at interpreter
//! exit); an error when the extension was built without MPI. wait_poll_s > 0: waits test
//! and sleep that long between tests instead of spinning (mpi_communicator::set_wait_poll).
status open_mpi_world(double wait_poll_s, std::unique_ptr<gcc::communicator>& out);
//! Whether the extension was built with MPI (Communicator.mpi() can work).
bool mpi_built() noexcept;

}  // namespace gradcodec::python
