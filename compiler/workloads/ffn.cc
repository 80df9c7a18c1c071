#include "compiler/workloads/ffn.h"

#include "compiler/workloads/graph_builder.h"

namespace einsummable::workloads {

absl::StatusOr<ir::Graph> ffn(int64_t tokens, int64_t d_model, int64_t d_ff, ir::DType dtype) {
    GraphBuilder b("ffn");
    const ir::Dim t{"tokens", tokens}, d{"d_model", d_model}, f{"d_ff", d_ff};
    const ir::TensorId x = b.input("x", dtype, {t, d});
    const ir::TensorId w1 = b.weight("w1", dtype, {d, f});
    const ir::TensorId w2 = b.weight("w2", dtype, {f, d});
    const ir::TensorId h = b.einsum("h", "ij,jk->ik", {x, w1});
    const ir::TensorId a = b.einsum("a", "ij->ij", {h}, "relu");
    const ir::TensorId y = b.einsum("y", "ij,jk->ik", {a, w2});
    b.save(y);
    return std::move(b).finish();
}

absl::StatusOr<ir::Graph> matmul(int64_t m, int64_t k, int64_t n, ir::DType dtype) {
    GraphBuilder builder("matmul");
    const ir::TensorId a = builder.input("a", dtype, {{"m", m}, {"k", k}});
    const ir::TensorId b = builder.input("b", dtype, {{"k", k}, {"n", n}});
    builder.save(builder.einsum("c", "ij,jk->ik", {a, b}));
    return std::move(builder).finish();
}

} // namespace einsummable::workloads
