#pragma once

#include <cstdint>
#include <set>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/graph.h"

namespace einsummable::ir {

// Dynamic batching runs several requests as one execution, each one or more whole packed
// sequences, concatenated along dimension 0 of every batched input. That is sound only if every
// operator computes the rows of request k from the rows of request k alone.
//
// The tensors of `graph` whose dimension 0 runs over packed requests: `batched_inputs` (graph
// inputs holding the requests end to end along dimension 0) and every output of an operator
// that reads one. `request_ends` are the exclusive ends of the requests along dimension 0:
// strictly increasing, the last one dimension 0's size.
//
// An operator reading a batched tensor passes if one of its shardable indices — or all those as
// long as the rows together (attention's queries and keys) — cut exactly at the request ends
// (every other index whole), is a valid request whose spec has one function spec per request
// (attention leaves out the pairs of a query block and another sequence's keys, so the caller
// makes the request ends sequence ends), reading rows [start_k, end_k) of every batched input
// and writing rows [start_k, end_k) of every output: nothing is read or aggregated across
// requests. An operator that carries `sequence_ends` (ops/sequence_ends.h: RoPE, attention)
// must also have every request end among them, since it counts positions from the start of a
// sequence and request k's rows would otherwise take positions from an earlier request.
//
// InvalidArgument naming the operator (its name and kind) and why its rows mix (e.g. a
// contraction over tokens, softmax over tokens, scores of every token against every token), or
// naming a batched tensor whose dimension 0 is not request_ends.back(), or when the ends or the
// batched inputs are not valid. For examples see tests/unit/ir/batch_rows_test.cc.
absl::StatusOr<std::set<TensorId>> batched_tensors(const Graph& graph,
                                                   const std::set<TensorId>& batched_inputs,
                                                   absl::Span<const int64_t> request_ends);

} // namespace einsummable::ir
