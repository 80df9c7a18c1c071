#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "compiler/exprog/program.h"

namespace einsummable::exprog::testing {

// The seed of a randomised test: EINSUMMABLE_TEST_SEED when set, else `fallback`. Printed, so a
// failure can be replayed.
uint64_t test_seed(uint64_t fallback, const std::string& test_name);

// A random program that satisfies every declaration rule (check_declarations): random GPU ids,
// partitions by members and by size, atoms with random sizes (odd byte counts, whole units,
// fractions) and copies, OUTs, actions with multicasts and relays, labels on most actions,
// chunks (whole, counts up to 8, and large counts up to Chunk::kMaxCount) and ORDER pairs
// between labelled actions (chains, repeats). Identifiers include the header keywords and unit
// names, which the grammar must keep apart from headers and units (labels avoid the keywords).
// The programs are not meant to be valid (semantics.h): an action may never fire.
Program random_program(std::mt19937_64& rng);

} // namespace einsummable::exprog::testing
