#include "compiler/logical/time_model.h"

namespace einsummable::logical {

PeakFlops peak_flops(const exprog::DeviceModel& device, ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return {device.peak_f16, "peak_f16"};
    case ir::DType::bf16:
        return {device.peak_bf16, "peak_bf16"};
    case ir::DType::f32:
        return {device.peak_f32, "peak_f32"};
    case ir::DType::f64: // no topology gives FP64 rates; half the FP32 rate, as on A100/H100
        return {device.peak_f32 / 2.0, "peak_f32"};
    }
    return {0.0, "peak_f32"};
}

} // namespace einsummable::logical
