#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"

namespace einsummable::workloads {

// Builds an ir::Graph one call at a time and keeps the first error, so a workload reads as a
// straight list of operators: once a call fails, later calls do nothing and return kNoTensor,
// and finish() returns that error prefixed with the workload's name. Every tensor's size in bytes
// must fit in an int64 (workload parameters come from user strings; see by_name).
class GraphBuilder {
public:
    static constexpr ir::TensorId kNoTensor = -1;

    explicit GraphBuilder(std::string workload) : workload_(std::move(workload)) {}

    ir::TensorId input(std::string name, ir::DType dtype, std::vector<ir::Dim> dims);
    // An input holding model parameters (ir::GraphTensor::weight): a projection's matrix, a
    // norm's scale. Activations are plain inputs.
    ir::TensorId weight(std::string name, ir::DType dtype, std::vector<ir::Dim> dims);
    ir::TensorId op(std::string name, absl::string_view kind, const ir::Attributes& attributes,
                    std::vector<ir::TensorId> inputs);
    // einsum with `equation` and, when not empty, `join` ("ij,jk->ik" alone is a matmul).
    ir::TensorId einsum(std::string name, absl::string_view equation,
                        std::vector<ir::TensorId> inputs, absl::string_view join = "");
    void save(ir::TensorId tensor);
    // Records an error found by the caller (the first one wins).
    void fail(absl::Status status);

    bool ok() const { return status_.ok(); }
    const ir::Graph& graph() const { return graph_; }
    // The validated graph, or the first error.
    absl::StatusOr<ir::Graph> finish() &&;

private:
    absl::Status check_size(const std::string& name, ir::DType dtype,
                            const std::vector<ir::Dim>& dims) const;

    std::string workload_;
    ir::Graph graph_;
    absl::Status status_;
};

// Sets *product = a · b and returns true, or returns false when that overflows int64.
bool checked_multiply(int64_t a, int64_t b, int64_t* product);

} // namespace einsummable::workloads
