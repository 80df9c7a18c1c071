#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/graph.h"

namespace einsummable::workloads {

// The matrix chains A–E (docs/workloads.md) with their fixed parenthesisations. Matrix M_i
// (1-based) is [dims[i-1], dims[i]], with dimensions named after the boundaries: M_i is
// [b{i-1}, b{i}]. Where the paper leaves the "neck" ambiguous, the project fixes
// dims[0] = dims[n] = end, dims[1] = dims[n-1] = neck, all others interior, and A and B start
// their alternation with the first value given. The lists (also in bench/WORKLOAD_DIMENSIONS.md):
//   A  9 matrices  10240, 16384, 6144, 16384, 6144, 16384, 6144, 16384, 6144, 10240
//   B  5 matrices  9216, 20480, 5120, 20480, 5120, 9216
//   C  3 matrices  10240, 12288, 32768, 2048
//   D  9 matrices  24576, 1536, 20480, 20480, 20480, 20480, 20480, 20480, 1536, 24576
//   E 13 matrices  49152, 1024, 20480 (ten times), 1024, 49152

// The boundary sizes of chain `name` ('A' .. 'E'): n + 1 values for n matrices.
absl::StatusOr<std::vector<int64_t>> chain_dims(char name);

// The parenthesisation of chain `name`, as the paper writes it:
//   A (M1 M2)(((M3 M4)((M5 M6)(M7 M8))) M9)     B (M1 M2)((M3 M4) M5)     C M1 (M2 M3)
//   D M1((M2(M3(M4(M5(M6(M7 M8))))))M9)         E M1((M2(M3(...(M11 M12)...)))M13)
// (E spelled out in full).
absl::StatusOr<std::string> chain_parenthesisation(char name);

// One product of a parenthesised chain: M_first..M_split times M_{split+1}..M_last.
struct ChainProduct {
    int first = 0;
    int split = 0;
    int last = 0;
    friend bool operator==(const ChainProduct&, const ChainProduct&) = default;
};

// Parses a parenthesisation such as "(M1 M2)((M3 M4) M5)". Operands are M1, M2, ... in order,
// each once; a group (parenthesised, or the whole text) holds one or two juxtaposed factors, so
// every product is explicit; spaces are ignored. Returns the products in evaluation order
// (each after the products it reads); the last one is the whole chain M1..Mn. n >= 2.
absl::StatusOr<std::vector<ChainProduct>> parse_parenthesisation(absl::string_view text);

// The chain graph for a parenthesisation and n + 1 boundary sizes: inputs M1..Mn (none a weight,
// so no index is a token: ir::IndexRole), one einsum ij,jk->ik per product, named
// "m{first}_{last}" after the matrices it covers (the root, "m1_{n}", is saved, [b0, b{n}]).
absl::StatusOr<ir::Graph> chain_from(absl::string_view parenthesisation,
                                     absl::Span<const int64_t> dims,
                                     ir::DType dtype = ir::DType::f16);

// chain_from(chain_parenthesisation(name), chain_dims(name), dtype).
absl::StatusOr<ir::Graph> chain(char name, ir::DType dtype = ir::DType::f16);

} // namespace einsummable::workloads
