#include "compiler/logical/candidate.h"

#include "compiler/support/status_macros.h"

namespace einsummable::logical {

int index_of_or_add(std::vector<Candidate>& list, const Candidate& candidate) {
    for (size_t idx = 0; idx < list.size(); ++idx) {
        if (list[idx].request == candidate.request) {
            return static_cast<int>(idx);
        }
    }
    list.push_back(candidate);
    return static_cast<int>(list.size()) - 1;
}

bool aggregates(const Candidate& candidate) {
    for (const ir::Tiling& tiling : candidate.output_tilings) {
        if (static_cast<int64_t>(tiling.size()) != candidate.functions) {
            return true;
        }
    }
    return false;
}

bool is_contiguous(const ir::Box& block, const ir::Box& whole) {
    int dim = 0;
    while (dim < block.rank() && block[dim].size() == 1) {
        ++dim;
    }
    for (++dim; dim < block.rank(); ++dim) { // after the first dimension of extent > 1
        if (block[dim] != whole[dim]) {
            return false;
        }
    }
    return true;
}

namespace {

double strided_bytes(const ir::Operator& op, const ir::JoinAggSpec& spec) {
    double bytes = 0.0;
    for (const ir::FunctionSpec& function : spec.functions) {
        for (int input_idx = 0; input_idx < op.num_inputs(); ++input_idx) {
            const ir::TensorType& type = op.input_types()[input_idx];
            if (!is_contiguous(function.inputs[input_idx], type.box())) {
                bytes += static_cast<double>(function.inputs[input_idx].volume() *
                                             ir::dtype_size(type.dtype));
            }
        }
        for (int output_idx = 0; output_idx < op.num_outputs(); ++output_idx) {
            const ir::TensorType& type = op.output_types()[output_idx];
            if (!is_contiguous(function.outputs[output_idx], type.box())) {
                bytes += static_cast<double>(function.outputs[output_idx].volume() *
                                             ir::dtype_size(type.dtype));
            }
        }
    }
    return bytes;
}

} // namespace

absl::StatusOr<Candidate> make_candidate(const ir::Operator& op, ir::IntervalRequest request) {
    EINSUMMABLE_ASSIGN_OR_RETURN(ir::JoinAggSpec spec, op.spec(request));
    Candidate candidate;
    for (const std::vector<ir::Interval>& intervals : request) {
        candidate.counts.push_back(static_cast<int64_t>(intervals.size()));
    }
    candidate.request = std::move(request);
    candidate.functions = static_cast<int64_t>(spec.functions.size());
    for (int input_idx = 0; input_idx < op.num_inputs(); ++input_idx) {
        candidate.input_blocks.push_back(canonical_tiling(spec.input_blocks(input_idx)));
    }
    for (int output_idx = 0; output_idx < op.num_outputs(); ++output_idx) {
        candidate.output_tilings.push_back(canonical_tiling(spec.output_tiling(output_idx)));
    }
    candidate.local = join_cost(op, spec);
    candidate.local += aggregation_cost(op, spec);
    candidate.strided_bytes = strided_bytes(op, spec);
    return candidate;
}

absl::StatusOr<std::vector<Candidate>> enumerate_candidates(const ir::Operator& op,
                                                            int64_t devices) {
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    std::vector<std::vector<int64_t>> assignments;
    for (int64_t target = devices; target >= 1 && assignments.empty(); --target) {
        assignments = ir::interval_count_assignments(indices, target);
    }
    std::vector<Candidate> candidates;
    candidates.reserve(assignments.size());
    for (const std::vector<int64_t>& counts : assignments) {
        EINSUMMABLE_ASSIGN_OR_RETURN(ir::IntervalRequest request,
                                     ir::make_request(indices, counts));
        EINSUMMABLE_ASSIGN_OR_RETURN(Candidate candidate,
                                     make_candidate(op, op.refine_request(request)));
        candidates.push_back(std::move(candidate));
    }
    return candidates;
}

} // namespace einsummable::logical
