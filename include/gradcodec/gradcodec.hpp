// SPDX-License-Identifier: Apache-2.0
//! @file
//! Umbrella header of the gradcodec public API.
#pragma once

#include "gradcodec/bounds.hpp"
#include "gradcodec/codec.hpp"
#include "gradcodec/context.hpp"
#include "gradcodec/cpu.hpp"
#include "gradcodec/dtype.hpp"
#include "gradcodec/expected_decode.hpp"
#include "gradcodec/frame.hpp"
#include "gradcodec/powersgd.hpp"
#include "gradcodec/spec.hpp"
#include "gradcodec/status.hpp"
#include "gradcodec/version.hpp"
#include "gradcodec/views.hpp"
#include "gradcodec/vote.hpp"
