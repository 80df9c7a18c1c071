#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/ops/layernorm.h"
#include "compiler/ir/ops/merge_heads.h"
#include "compiler/ir/ops/rmsnorm.h"
#include "compiler/ir/ops/rope.h"
#include "compiler/ir/ops/softmax.h"
#include "compiler/ir/ops/split_heads.h"

namespace einsummable::kernels::cpu {

// The per-operator f32 kernels behind run_f32 (kernels.h), one file per theme:
// einsum_f32.cc, rowwise_f32.cc (softmax, norms, rope, head layouts), attention_f32.cc.
// run_f32 has already checked the block counts, that no pointer is null where a block holds
// elements, and that every box has its operand's rank and lies inside its operand's type. Each
// kernel checks the shape relations it relies on and reports a mismatch through block_error.

// InvalidArgument "<op.describe()>: <message>".
absl::Status block_error(const ir::Operator& op, absl::string_view message);

absl::Status run_einsum_f32(const ir::Einsum& op, const ir::FunctionSpec& function,
                            absl::Span<const float* const> inputs, float* output);
absl::Status run_softmax_f32(const ir::Softmax& op, const ir::FunctionSpec& function,
                             const float* input, float* output);
absl::Status run_rmsnorm_f32(const ir::RmsNorm& op, const ir::FunctionSpec& function,
                             absl::Span<const float* const> inputs, float* output);
absl::Status run_layernorm_f32(const ir::LayerNorm& op, const ir::FunctionSpec& function,
                               absl::Span<const float* const> inputs, float* output);
absl::Status run_rope_f32(const ir::Rope& op, const ir::FunctionSpec& function, const float* input,
                          float* output);
// split_heads and merge_heads: row-major [..., h·d] and [..., h, d] hold the same sequence of
// values, so both are one copy.
absl::Status run_heads_layout_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                                  const float* input, float* output);
absl::Status run_attention_f32(const ir::Attention& op, const ir::FunctionSpec& function,
                               absl::Span<const float* const> inputs, float* output);

} // namespace einsummable::kernels::cpu
