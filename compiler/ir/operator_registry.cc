#include "compiler/ir/operator_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/ops/argmax.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/concat.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/ops/embedding.h"
#include "compiler/ir/ops/layernorm.h"
#include "compiler/ir/ops/merge_heads.h"
#include "compiler/ir/ops/rmsnorm.h"
#include "compiler/ir/ops/rope.h"
#include "compiler/ir/ops/softmax.h"
#include "compiler/ir/ops/split_heads.h"
#include "compiler/ir/ops/top_k.h"
#include "compiler/ir/ops/write_rows.h"

namespace einsummable::ir {

namespace {

// One line per operator class; the kind's name is the class's kKind.
constexpr OperatorKind kKinds[] = {
    OperatorKind::of<Einsum>(),     OperatorKind::of<Softmax>(),   OperatorKind::of<RmsNorm>(),
    OperatorKind::of<LayerNorm>(),  OperatorKind::of<Rope>(),      OperatorKind::of<SplitHeads>(),
    OperatorKind::of<MergeHeads>(), OperatorKind::of<Attention>(), OperatorKind::of<Concat>(),
    OperatorKind::of<Embedding>(),  OperatorKind::of<WriteRows>(), OperatorKind::of<ArgMax>(),
    OperatorKind::of<TopK>(),
};

} // namespace

absl::Span<const OperatorKind> operator_kinds() {
    return kKinds;
}

absl::StatusOr<OperatorPtr> make_operator(absl::string_view kind, const Attributes& attributes,
                                          std::vector<TensorType> inputs) {
    for (const OperatorKind& candidate : kKinds) {
        if (candidate.name == kind) {
            for (size_t idx = 0; !candidate.takes_integers && idx < inputs.size(); ++idx) {
                if (is_integer(inputs[idx].dtype)) {
                    return operand_error(
                        "input", static_cast<int>(idx), inputs[idx],
                        absl::StrCat(kind, " computes on floating-point values and takes no ",
                                     dtype_name(inputs[idx].dtype),
                                     " tensor (integer tensors are token ids and indices, read "
                                     "by embedding)"));
                }
            }
            return candidate.make(attributes, std::move(inputs));
        }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown operator '", kind, "' (known: ",
                     absl::StrJoin(kKinds, ", ",
                                   [](std::string* out, const OperatorKind& k) {
                                       absl::StrAppend(out, k.name);
                                   }),
                     ")"));
}

} // namespace einsummable::ir
