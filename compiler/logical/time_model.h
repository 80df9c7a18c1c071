#pragma once

#include "compiler/exprog/topology.h"
#include "compiler/ir/dtype.h"

namespace einsummable::logical {

// The peak FLOP/s a kernel of `dtype` gets on `device`, and the topology key that gives it
// (for errors naming it). FP64 gets half the FP32 rate (no topology gives FP64 rates; as on
// A100/H100). A peak of 0 means the topology does not give it. Shared by the whole-plan
// simulator and the pricing of candidates by time, so that both pick the same peak.
struct PeakFlops {
    double flops_per_s = 0.0;
    const char* key = "peak_f32";
};
PeakFlops peak_flops(const exprog::DeviceModel& device, ir::DType dtype);

} // namespace einsummable::logical
