#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/candidate.h"
#include "compiler/support/cancellation.h"

namespace einsummable::logical {

// How optimize() chooses: the dynamic programme, its greedy and random comparisons, or one of
// the hand-written baselines of compiler/logical/baselines.h (a fixed rule per operator).
enum class Planner { dp, greedy, random, data_parallel, megatron, ulysses, row_sharded };
// Every planner, in the order above.
const std::vector<Planner>& all_planners();
// "dp", "greedy", "random", "data-parallel", "megatron", "ulysses", "row-sharded".
absl::string_view planner_name(Planner planner);
// The planner of that name; InvalidArgument listing every name otherwise.
absl::StatusOr<Planner> parse_planner(absl::string_view name);

// What the pipeline's `dp` planner minimises (docs/planner.md, "Objectives"):
//   bytes  — the paper's dynamic programme over bytes moved (logical::optimize; the paper's
//            reproduction and the goldens);
//   time   — the dynamic programme over predicted time on the machine's topology
//            (logical::optimize_by_time, compiler/logical/time_dp.h); the default;
//   search — a local search over whole-plan simulated time (logical::optimize_for_time, through
//            pipeline::optimize_for_time) from the time programme's plan, the bytes plan, greedy's
//            and the baselines'; never slower than the fastest of them, and much slower to plan.
// Only dp plans by objective: the other planners give their own plan whatever the objective
// (planned_objective).
enum class Objective { bytes, time, search };
// Every objective, in the order above.
const std::vector<Objective>& all_objectives();
// "bytes", "time", "search".
absl::string_view objective_name(Objective objective);
// The objective of that name; "cost", the bytes objective's name before the time programme
// existed, is an alias of bytes (old clients send it). InvalidArgument listing the names
// otherwise.
absl::StatusOr<Objective> parse_objective(absl::string_view name);
// The objective `planner` plans by when `asked` is: `asked` for dp; bytes for every other
// planner, whose plan is its own rule's (logical::optimize with that planner) whatever the
// objective. The pipeline plans, and the daemon keys plans, by it.
Objective planned_objective(Planner planner, Objective asked);

// Which of attention's splits a planner may choose: any; none along the keys (no log-sum-exp
// partial results; queries may still be cut inside a sequence, each block then reading every key
// it needs); only blocks of whole sequences over their own keys (no cut inside a sequence); or, for
// the context-parallel experiments, only splits along the keys that partial results combine (key
// blocks not cut where the queries are).
enum class AttentionSplits { any, no_key_blocks, whole_sequences, key_blocks };
absl::string_view attention_splits_name(AttentionSplits splits);

struct PlannerOptions {
    int64_t devices = 1;
    Planner planner = Planner::dp;
    uint64_t seed = 0; // for Planner::random
    // Polled once per operator while enumerating and choosing (and per plan by the time
    // objective); once set, optimize() returns Cancelled. Null: never. Not owned: it must outlive
    // the call; make_plan() leaves it out of the plan it returns. Changes no decision.
    const support::Cancellation* cancellation = nullptr;
    // Graph inputs whose blocks already live on the devices (a model's resident weights,
    // compiler/physical/resident_layout.h), with that tiling (canonical). A candidate reading one
    // in another tiling pays its repartition like an input produced by an operator
    // (add_pinned_repartition); other graph inputs are free to lay out. Part of the plan key,
    // through the layout's fingerprint.
    std::map<ir::TensorId, ir::Tiling> pinned;
    // Graph inputs no operator may replicate (keep_unreplicated): a plan whose weights, copied
    // to every device, do not fit in device memory is planned again with them here
    // (runtime::Plan::compile, docs/runtime.md "Device memory"). Empty: any candidate goes. The
    // daemon keys plans by the device memory that leads to it.
    std::set<ir::TensorId> unreplicated;
    // Only candidates whose join aggregates no output (keep_unaggregated): every output box is
    // written by one function spec, so no operator sums partial results in an order that
    // depends on the plan (which depends on the batch size). With kernels that compute a row
    // the same whatever block holds it, a request batched with others along `tokens` then gets
    // the bits it gets alone (tests/unit/logical/batch_invariant_test.cc). Operators that
    // cannot avoid aggregating on `devices` run on fewer. The hand-written baselines keep their
    // one candidate per operator, whatever it aggregates. Part of the plan key.
    bool batch_invariant = false;
    // Which of attention's splits the searching planners (dp, greedy, random) may choose
    // (keep_attention_splits); baselines keep their rule. The daemon plans with any,
    // so this is no part of the plan key; the context-parallel experiments compare the others.
    AttentionSplits attention_splits = AttentionSplits::any;
};

// The decomposition chosen for one operator and what it costs given its producers' choices.
struct OperatorPlan {
    ir::NodeId node = 0;
    Candidate choice;
    ir::JoinAggSpec spec; // the chosen join-agg spec
    Cost cost;            // join + aggregation + repartition of its inputs
    std::string strategy; // "data parallel", "column tensor parallel", ...
    // Micro-batches (micro_batches.h): per function spec of `spec`, the group it runs in — one
    // device runs each group's function specs, one after another — and its place among them.
    // Empty when every function spec is a group of its own (micro-batch 0): `spec` is then the
    // choice's, and the cost, the strategy and the choice describe the groups either way.
    std::vector<int> groups;
    std::vector<int> micro_batch;
};

// The number of groups of function specs of `op`: one device each.
int group_count(const OperatorPlan& op);

// Which objective made a plan, and what it predicted of it: what explain and the plan records
// say beside the plan.
struct PlanObjective {
    Objective objective = Objective::bytes;
    // time: the time programme's predicted seconds (TimePlanReport); search: the plan's
    // simulated seconds (TimeSearchReport). 0 when not known (bytes; a restored plan).
    double predicted_s = 0.0;
    // time and search: where the plan came from ("time dp", "dp + 2 changes"); empty otherwise.
    std::string origin;
};

// One join-agg spec per operator (paper section 4), with the cost breakdown and the named
// strategy the plan matches where one fits.
struct LogicalPlan {
    PlannerOptions options;
    std::vector<OperatorPlan> operators; // indexed by NodeId
    Cost total;
    std::string strategy;
    // Set by the pipeline (pipeline::plan_by_objective) and by a restored record that names it;
    // unset for a plan a planner made directly (logical::optimize, make_plan), which explain
    // prints as it always did.
    std::optional<PlanObjective> objective;
    // The micro-batches asked of every operator with a token index (micro_batches.h): their
    // relative sizes, in order ({3, 1}: the first three quarters of each block's rows, then the
    // last quarter). Empty: none.
    std::vector<int> micro_batches;
};

// Candidates for every node, indexed by NodeId. Cancelled once `cancellation` (polled per node;
// null: never) is set.
using GraphCandidates = std::vector<std::vector<Candidate>>;
absl::StatusOr<GraphCandidates>
enumerate_graph(const ir::Graph& graph, int64_t devices,
                const support::Cancellation* cancellation = nullptr);

// Adds to every candidate that reads a pinned input (PlannerOptions::pinned) the repartition of
// that input from its pinned tiling, in each slot that reads it, to Candidate::local: the
// producer of a pinned input is fixed, so the cost is the candidate's own. optimize(), the time
// objective and restore_plan apply it to the candidates they build.
void add_pinned_repartition(const ir::Graph& graph,
                            const std::map<ir::TensorId, ir::Tiling>& pinned,
                            GraphCandidates& candidates);

// The bytes a candidate of `node` holds beyond one copy of the inputs in `unreplicated`: per
// slot reading one, the input's bytes × (function specs / distinct blocks read − 1). Each
// function spec reads one block of every input and runs on its own device, so a block read by m
// function specs is held m times (every block of an einsum's input is read equally often).
double replicated_bytes(const ir::Graph& graph, ir::NodeId node, const Candidate& candidate,
                        const std::set<ir::TensorId>& unreplicated);

// Keeps, per node, the candidates that replicate no input of `unreplicated`
// (replicated_bytes == 0), or, where every candidate does, those that replicate the fewest
// bytes. Nodes reading none are left alone. optimize() and the time objective apply it after
// add_pinned_repartition.
void keep_unreplicated(const ir::Graph& graph, const std::set<ir::TensorId>& unreplicated,
                       GraphCandidates& candidates);

// Keeps, per node, the candidates that aggregate nothing (!aggregates(candidate)); where every
// candidate does, replaces the node's candidates by the non-aggregating ones of the largest
// device count below `devices` that has some (enumerate_candidates; one device always has the
// whole spec, which aggregates nothing). The replacements are enumerated afresh, so
// optimize() and the time objective apply it first, before add_pinned_repartition and
// keep_unreplicated (which then choose among what is left).
void keep_unaggregated(const ir::Graph& graph, int64_t devices, GraphCandidates& candidates);

// Keeps, per attention node, the candidates `allowed` admits; where none is left, those of the
// largest device count below `devices` that has some (as keep_unaggregated).
void keep_attention_splits(const ir::Graph& graph, int64_t devices, AttentionSplits allowed,
                           GraphCandidates& candidates);

// Keeps, per node that updates a pinned input in place (ir::in_place_input: a
// resident state), the candidates reading it in its pinned tiling, so that each function
// writes a block the layout holds; where none is left, those of the largest device count below
// `devices` that has some (as keep_unaggregated). optimize(), the baselines and the time
// objective apply it to the candidates they build.
void keep_state_tilings(const ir::Graph& graph, int64_t devices,
                        const std::map<ir::TensorId, ir::Tiling>& pinned,
                        GraphCandidates& candidates);

// The cost of choosing candidates[n][choice[n]] for every node n: local costs plus, for every
// input produced by another node, repartition against that node's chosen output tiling (graph
// inputs are materialised straight into the blocks needed and cost nothing, except pinned ones,
// whose repartition add_pinned_repartition put in the candidates' local costs).
Cost evaluate_choice(const ir::Graph& graph, const GraphCandidates& candidates,
                     const std::vector<int>& choice);

// Builds the plan for a choice: per-operator costs, totals and strategy names. The plan's
// options are `options` without the cancellation (a plan outlives its compile).
LogicalPlan make_plan(const ir::Graph& graph, const PlannerOptions& options,
                      const GraphCandidates& candidates, const std::vector<int>& choice);

// "tokens/8 d_model/1" style split of one operator: every shardable index with its count.
std::string split_string(const ir::Operator& op, const Candidate& candidate);

// One line per operator (name, kind, split, join, agg, repart, strategy), then totals; all
// costs in elements, totals also in bytes. A plan whose objective is set says so on a line of
// its own after the header ("objective: time, predicted 1.234 ms, from time dp"; JSON:
// "objective": {"name", "predicted_s", "origin"}).
std::string explain_text(const ir::Graph& graph, const LogicalPlan& plan);
std::string explain_json(const ir::Graph& graph, const LogicalPlan& plan);

} // namespace einsummable::logical
