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
//   chain:A,scale=S                       chain A with every boundary size divided by S
//                                         (rounded up)
// Any form may add ",dtype=f32|f16|bf16"; the llama forms also take d_model, heads_q, heads_kv,
// d_head and d_ff overrides. Numbers are decimal and positive; at most 1048576 sequences and
// 1024 blocks. A bad name gives InvalidArgument naming the problem and listing these forms.
absl::StatusOr<ir::Graph> by_name(absl::string_view spec);

// The reference workloads (docs/workloads.md), as by_name names: the five LLaMA token workloads
// (1K, 8K and 128K tokens in one sequence, 8 and 128 sequences of 1K), chains A to E, and ffn.
std::vector<std::string> reference_names();

// The small version of a reference workload (`--scale small`), same structure and dtype, for
// running on a CPU in seconds: LLaMA blocks with d_model 64, 8 query and 2 kv heads of 8,
// d_ff 224 and tokens / 64 (sequence lengths / 64: 1024 -> 16); chains with every size / 64;
// the FFN with tokens 256, d_model 64, d_ff 256 (/ 16). InvalidArgument for other names.
absl::StatusOr<std::string> small_name(absl::string_view name);

} // namespace einsummable::workloads
