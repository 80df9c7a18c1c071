#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/program.h"
#include "compiler/exprog/topology.h"

namespace einsummable::exprog {

// Preambles of the standard collectives, for benchmarks and tests: `gpus` GPUs, each GPU's
// buffer declared as `atoms_per_gpu` atoms so chunked schedules are expressible. Atom X<g>_<c>
// is chunk c of GPU g. `total_bytes` is N of WORKLOADS.md "Lower bounds":
//   all_gather      GPU g holds N/p as chunks; every chunk is needed at every GPU.
//   reduce_scatter  GPU g holds N as chunks; the sum over g of chunk set s is needed at GPU s
//                   (chunks are assigned to GPUs round-robin).
//   all_reduce      GPU g holds N as chunks; the sum over g of every chunk at every GPU.
//   all_to_all      GPU g holds N as chunks; chunk c of every GPU is needed at GPU c mod p.
enum class Collective { all_gather, reduce_scatter, all_reduce, all_to_all };

absl::string_view collective_name(Collective collective);
absl::StatusOr<Collective> parse_collective(absl::string_view name);

Program collective_preamble(Collective collective, int gpus, double total_bytes, int atoms_per_gpu);

// The WORKLOADS.md lower bound on a non-blocking switch of per-GPU bandwidth B (per direction):
// (p-1)/p·N/B for all-gather, reduce-scatter and all-to-all; 2(p-1)/p·N/B for all-reduce.
double collective_lower_bound(Collective collective, int gpus, double total_bytes,
                              double bandwidth);

} // namespace einsummable::exprog
