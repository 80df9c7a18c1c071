#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir::testing {

// A random, valid operator of one kind with random whole inputs.
struct RandomCase {
    OperatorPtr op;
    std::vector<HostTensor> inputs;
    std::string description; // the operator and its input types, for failure messages
};

// One random case of `kind` (any name in operator_kinds()); fails the test for a kind with no
// generator, so every new operator must join the property suite.
RandomCase random_case(absl::string_view kind, std::mt19937_64& rng);
// Whether random_case has a generator for `kind` (tests/unit/kernels/operator_kinds_test.cc
// checks every registered kind).
bool has_random_case(absl::string_view kind);

// A random request every index allows: a random number of intervals, cut at random allowed
// positions (not only near-equal ones).
IntervalRequest random_request(const std::vector<ShardableIndex>& indices, std::mt19937_64& rng);

// Seed for the property tests: EINSUMMABLE_TEST_SEED when set, otherwise a fixed default, so
// runs are deterministic and a failure can be replayed.
uint64_t test_seed();

} // namespace einsummable::ir::testing
