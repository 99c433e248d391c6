// SPDX-License-Identifier: Apache-2.0
//! @file
//! MPI_Init for the commands that run under mpirun (bench --allreduce, calibrate), unless
//! the process already did, and MPI_Finalize at the end. Built only with MPI.
#pragma once

#include <mpi.h>

#include <string>

#include "error.hpp"

namespace gradcodec::tool {

class mpi_session {
 public:
  explicit mpi_session(const std::string& command) {
    int done = 0;
    MPI_Initialized(&done);
    if (done == 0) {
      if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) fail(command + ": MPI_Init failed");
      owned_ = true;
    }
  }
  ~mpi_session() {
    if (owned_) MPI_Finalize();
  }
  mpi_session(const mpi_session&) = delete;
  mpi_session& operator=(const mpi_session&) = delete;

 private:
  bool owned_ = false;
};

}  // namespace gradcodec::tool
