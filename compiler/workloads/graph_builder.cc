#include "compiler/workloads/graph_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace einsummable::workloads {

bool checked_multiply(int64_t a, int64_t b, int64_t* product) {
    return !__builtin_mul_overflow(a, b, product);
}

absl::Status GraphBuilder::check_size(const std::string& name, ir::DType dtype,
                                      const std::vector<ir::Dim>& dims) const {
    int64_t bytes = ir::dtype_size(dtype);
    for (const ir::Dim& dim : dims) {
        if (dim.size <= 0) {
            return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' dimension '",
                                                           dim.name, "' has size ", dim.size,
                                                           "; sizes must be positive"));
        }
        if (!checked_multiply(bytes, dim.size, &bytes)) {
            return absl::InvalidArgumentError(
                absl::StrCat("tensor '", name, "' is too large: its size in bytes overflows int64 ",
                             "at dimension '", dim.name, "' (", dim.size, ")"));
        }
    }
    return absl::OkStatus();
}

ir::TensorId GraphBuilder::input(std::string name, ir::DType dtype, std::vector<ir::Dim> dims) {
    if (!ok()) {
        return kNoTensor;
    }
    if (absl::Status status = check_size(name, dtype, dims); !status.ok()) {
        fail(std::move(status));
        return kNoTensor;
    }
    absl::StatusOr<ir::TensorId> id = graph_.add_input(std::move(name), dtype, std::move(dims));
    if (!id.ok()) {
        fail(id.status());
        return kNoTensor;
    }
    return *id;
}

ir::TensorId GraphBuilder::weight(std::string name, ir::DType dtype, std::vector<ir::Dim> dims) {
    const ir::TensorId id = input(std::move(name), dtype, std::move(dims));
    if (id != kNoTensor) {
        fail(graph_.mark_weight(id));
    }
    return id;
}

ir::TensorId GraphBuilder::op(std::string name, absl::string_view kind,
                              const ir::Attributes& attributes, std::vector<ir::TensorId> inputs) {
    if (!ok()) {
        return kNoTensor;
    }
    absl::StatusOr<ir::TensorId> id = graph_.add(std::move(name), kind, attributes, inputs);
    if (!id.ok()) {
        fail(id.status());
        return kNoTensor;
    }
    const ir::GraphTensor& tensor = graph_.tensor(*id);
    if (absl::Status status = check_size(tensor.name, tensor.type.dtype, tensor.type.dims);
        !status.ok()) {
        fail(std::move(status));
        return kNoTensor;
    }
    return *id;
}

ir::TensorId GraphBuilder::einsum(std::string name, absl::string_view equation,
                                  std::vector<ir::TensorId> inputs, absl::string_view join) {
    ir::Attributes attributes = {{"equation", std::string(equation)}};
    if (!join.empty()) {
        attributes.set("join", std::string(join));
    }
    return op(std::move(name), "einsum", attributes, std::move(inputs));
}

void GraphBuilder::save(ir::TensorId tensor) {
    if (!ok()) {
        return;
    }
    if (absl::Status status = graph_.save(tensor); !status.ok()) {
        fail(std::move(status));
    }
}

void GraphBuilder::fail(absl::Status status) {
    if (ok() && !status.ok()) {
        status_ = std::move(status);
    }
}

absl::StatusOr<ir::Graph> GraphBuilder::finish() && {
    if (ok()) {
        fail(graph_.validate());
    }
    if (!ok()) {
        return absl::Status(status_.code(), absl::StrCat(workload_, ": ", status_.message()));
    }
    return std::move(graph_);
}

} // namespace einsummable::workloads
