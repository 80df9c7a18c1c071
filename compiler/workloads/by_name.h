#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"

namespace einsummable::workloads {

// Builds a workload from its name (for command lines, benches and tests):
//   ffn                                   ffn() with its defaults (f32)
//   ffn:tokens=T,d_model=D,d_ff=F         any subset of the overrides
//   matmul:N  matmul:MxKxN                one (N x N) · (N x N), or (M x K) · (K x N) (f32)
//   llama-block:tokens=T                  one sequence of T tokens (f16)
//   llama-block:seqs=SxL                  S packed sequences of L tokens
//   llama-stack:blocks=B,tokens=T         B chained blocks (also seqs=SxL)
//   chain:A .. chain:E                    the matrix chains (f16)
// Any form may add ",dtype=f32|f16|bf16"; the llama forms also take d_model, heads_q, heads_kv,
// d_head and d_ff overrides. Numbers are decimal and positive; at most 1048576 sequences and
// 1024 blocks. A bad name gives InvalidArgument naming the problem and listing these forms.
absl::StatusOr<ir::Graph> by_name(absl::string_view spec);

// The reference workloads of WORKLOADS.md, as by_name names: the five LLaMA token workloads
// (1K, 8K and 128K tokens in one sequence, 8 and 128 sequences of 1K), chains A to E, and ffn.
std::vector<std::string> reference_names();

} // namespace einsummable::workloads
