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

} // namespace einsummable::exprog::testing
