#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/program.h"

namespace einsummable::exprog {

// Reads an exchange program (grammar and meaning in docs/exprog.md). Header lines (GPUS,
// PARTITIONS, IN, OUT, ORDER) and actions may come in any order; declarations are checked once
// the whole text is read (check_declarations), so an ORDER may name labels defined below it.
// An action may carry a label (`c0: A @ 0 -> 1`) and a chunk (`A+B[1/4] @ 0`, chunk 1 of 4;
// `[0/1]` is the whole block and reads as no chunk); `ORDER: a < b < c, d < e` reads as the
// pairs (a, b), (b, c), (d, e). Every error is InvalidArgument with a message
// "line L column C: ..." naming what was expected and what was found; the first error in the
// text wins. Never crashes, whatever the input.
absl::StatusOr<Program> parse_program(absl::string_view text);

// The canonical text of a program: the GPUS line, the PARTITIONS line, one IN per line (with
// its size written so that it reads back to the same double), one OUT per line, a blank line,
// one action per line (Action::to_string: label and chunk included, a whole chunk omitted),
// then the ORDER lines, each list in the program's order. Consecutive ORDER pairs that chain
// ((a, b) then (b, c)) print as one chain `ORDER: a < b < c`; each chain on its own line. For
// every valid program p, parse_program(print_program(p)) == p, and printing is idempotent.
std::string print_program(const Program& program);

// The declaration rules parse_program enforces, for a program built in code: GPUs listed once
// and non-negative; partition names unique identifiers; explicit members declared and listed
// once; 1 <= size <= number of GPUs; IN at a declared GPU, at most once per (atom, GPU) and with
// one size per atom; every atom of an OUT or action declared by some IN; every site declared and
// listed at most once per list; no empty aggregate or hop; only the last hop multicasts; labels
// are identifiers other than the header keywords and unique in the program; a chunk has
// 1 <= count <= Chunk::kMaxCount and 0 <= index < count; every ORDER label names an action and
// no pair orders an action after itself. Errors name the element's location when it has one.
absl::Status check_declarations(const Program& program);

} // namespace einsummable::exprog
