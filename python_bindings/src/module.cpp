// SPDX-License-Identifier: Apache-2.0
//! @file
//! The extension module gradcodec._gradcodec; the package gradcodec re-exports it.
#include "common.hpp"

NB_MODULE(_gradcodec, m) {
  m.doc() =
      "gradcodec: gradient-compression codecs (native part; import gradcodec, not this module).";
  gradcodec::python::register_codec(m);
  gradcodec::python::register_powersgd(m);
  gradcodec::python::register_expected(m);
  gradcodec::python::register_communicator(m);
  gradcodec::python::register_outer(m);
  gradcodec::python::register_plan(m);
}
