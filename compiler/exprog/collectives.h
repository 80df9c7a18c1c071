#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/program.h"
#include "compiler/exprog/topology.h"

namespace einsummable::exprog {

// Preambles of the standard collectives, for benchmarks and tests: `gpus` GPUs, each GPU's
// buffer declared as `atoms_per_gpu` atoms so chunked schedules are expressible. Atom X<g>_<c>
// is chunk c of GPU g. `total_bytes` is N of docs/workloads.md "Lower bounds":
//   all_gather      GPU g holds N/p as chunks; every chunk is needed at every GPU.
//   reduce_scatter  GPU g holds N as chunks; the sum over g of chunk set s is needed at GPU s
//                   (chunks are assigned to GPUs round-robin).
//   all_reduce      GPU g holds N as chunks; the sum over g of every chunk at every GPU.
//   all_to_all      GPU g holds N as chunks; chunk c of every GPU is needed at GPU c mod p.
enum class Collective { all_gather, reduce_scatter, all_reduce, all_to_all };

absl::string_view collective_name(Collective collective);
absl::StatusOr<Collective> parse_collective(absl::string_view name);

Program collective_preamble(Collective collective, int gpus, double total_bytes, int atoms_per_gpu);

// The lower bound on a non-blocking switch of per-GPU bandwidth B (per direction):
// (p-1)/p·N/B for all-gather, reduce-scatter and all-to-all; 2(p-1)/p·N/B for all-reduce.
double collective_lower_bound(Collective collective, int gpus, double total_bytes,
                              double bandwidth);

// The same on a topology's first `gpus` GPUs (docs/workloads.md "Lower bounds"): the larger of
//   - the formula above with B = the most one GPU can move per direction (a switch's link
//     bandwidth; on a links topology the GPU's links, plus the shared bridge if it has an
//     unlinked peer), and
//   - max over every cut (S, rest) of the bytes that must cross from S to the rest over the
//     cut's capacity: on a switch B·min(|S|, |rest|); on links the links across it, one way,
//     plus the bridge if an unlinked pair straddles it. The bytes: all-gather |S|·N/p (each
//     chunk crosses once, then is relayed); reduce-scatter |rest|·N/p and all-reduce N (the S
//     part of each sum crosses once, already summed); all-to-all |S|·|rest|·N/p (distinct data).
// The cuts are enumerated, so beyond 20 GPUs only the first term is used. On a switch the cut
// term never exceeds the formula; on dgx-v100 it dominates all-to-all. 0 for fewer than 2.
double collective_lower_bound(Collective collective, int gpus, double total_bytes,
                              const Topology& topology);

// The "ordered progressive star" of a reduce-scatter or all-reduce (bench/README.md): the
// preamble with one atom per GPU and chunk (`gpus` atoms per GPU, chunk c summed at GPU c), and
// actions in which every GPU sends its parts one at a time, in Latin-square order (in step s
// GPU g sends to g + s mod p, so every GPU receives one part per step), each cut into `chunks`
// chunks sent in turn (ORDER, one chain per GPU); each root adds every part to its running sum
// as it arrives (2-part aggregations, local actions), and for all-reduce then sends its sum to
// the others in the same order. The preamble alone (no actions) for the other collectives or
// fewer than 2 GPUs.
Program ordered_star_program(Collective collective, int gpus, double total_bytes, int chunks);

} // namespace einsummable::exprog
