#pragma once

#include <string>

#include "compiler/exprog/parser.h"
#include "gtest/gtest.h"

namespace einsummable::exprog::testing {

// The program a test writes inline; a parse error fails the test and yields an empty program.
inline Program parse_or_fail(const std::string& text) {
    absl::StatusOr<Program> program = parse_program(text);
    EXPECT_TRUE(program.ok()) << program.status();
    return program.ok() ? *program : Program{};
}

// Paper example 1: two GPUs each hold one atom; both need the aggregate.
inline constexpr const char* kPaperTwoGpus = R"(
GPUS: 0, 1
IN: A @ 0
IN: B @ 1
OUT: A+B @ 0, 1
A @ 0 -> 1; B @ 1 -> 0
A+B @ 0
A+B @ 1
)";

} // namespace einsummable::exprog::testing
