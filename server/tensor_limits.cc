#include "server/tensor_limits.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "server/model_store.h"

namespace einsummable::server {

absl::StatusOr<int64_t> checked_bytes(absl::string_view what, absl::Span<const int64_t> shape,
                                      ir::DType dtype) {
    int64_t bytes = ir::dtype_size(dtype);
    for (size_t dim_idx = 0; dim_idx < shape.size(); ++dim_idx) {
        if (shape[dim_idx] <= 0) {
            return absl::InvalidArgumentError(absl::StrCat(what, " dimension ", dim_idx, ": size ",
                                                           shape[dim_idx],
                                                           "; sizes must be positive"));
        }
        if (__builtin_mul_overflow(bytes, shape[dim_idx], &bytes)) {
            return absl::ResourceExhaustedError(
                absl::StrCat(what, " ", shape_string(shape), " would take more than 2^63 bytes"));
        }
    }
    return bytes;
}

absl::StatusOr<int64_t> input_bytes(const v1::TensorDesc& input,
                                    const graphdef::Bindings& bindings) {
    EINSUMMABLE_ASSIGN_OR_RETURN(
        ir::DType dtype,
        from_wire_dtype(input.dtype(), absl::StrCat("input tensor '", input.name(), "'")));
    std::vector<int64_t> shape;
    for (int dim_idx = 0; dim_idx < input.dims_size(); ++dim_idx) {
        const v1::Dimension& dim = input.dims(dim_idx);
        const std::string where =
            absl::StrCat("input tensor '", input.name(), "' dimension ", dim_idx, " ('",
                         dim.name().empty() ? dim.symbol() : dim.name(), "')");
        int64_t size = 0;
        if (dim.has_fixed()) {
            size = dim.fixed();
        } else if (dim.has_symbol()) {
            auto it = bindings.find(dim.symbol());
            if (it == bindings.end()) {
                return absl::InvalidArgumentError(
                    absl::StrCat(where, ": symbol '", dim.symbol(), "' is not bound"));
            }
            size = it->second;
        } else {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": no size (set `fixed` or `symbol`)"));
        }
        if (size <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": size ", size, "; sizes must be positive"));
        }
        if (size > kMaxDimensionSize) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ": size ", size, " is over the largest accepted, ", kMaxDimensionSize));
        }
        shape.push_back(size);
    }
    return checked_bytes(absl::StrCat("input tensor '", input.name(), "'"), shape, dtype);
}

absl::Status check_operator_devices(int64_t operators, int64_t devices, int64_t limit) {
    int64_t work = 0;
    if (__builtin_mul_overflow(operators, devices, &work) || work > limit) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the graph has ", operators, " operators and the compile is for ", devices,
                         " devices; operators x devices is over the ", limit,
                         " the server compiles (--max_operator_devices)"));
    }
    return absl::OkStatus();
}

} // namespace einsummable::server
