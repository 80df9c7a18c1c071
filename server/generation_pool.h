#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/cache_steps.h"
#include "einsummable/v1/service.pb.h"
#include "runtime/plan.h"
#include "server/model.h"
#include "server/sampling.h"

namespace einsummable::server {

class Engine;

// What Generate reads and writes of a model: its token-ids input and its logits output.
struct GenerationInterface {
    std::string ids; // the one non-weight input: i32 or i64 [batch symbol]
    v1::DType ids_dtype = v1::I32;
    std::string logits; // the saved [batch symbol, vocab] output ("logits" among several)
};

// One generation as Generate asks for it (checked by the caller).
struct GenerationRequest {
    std::vector<int64_t> prompt;
    int32_t max_tokens = 1;
    SamplingParams params;
    std::vector<int64_t> stop_ids;
};

// The reply for token `token`, the `index`-th of a generation of `req`, `seconds` after its
// start: finish_reason "stop" when it is one of req.stop_ids, else "length" at req.max_tokens
// or when `full` (no room for another), else none.
v1::GenerateResponse token_response(const GenerationRequest& req, int64_t token, int32_t index,
                                    double seconds, bool full = false);

// Gets each token as it is chosen (GenerateResponse: id, index, seconds, finish_reason on the
// last); false when the client is gone.
using TokenSink = std::function<bool(const v1::GenerateResponse&)>;

// A model's generations on key/value caches resident on the devices (docs/generation.md "The
// loop on caches"). The pool runs up to `slots` generations at once, each of up to `capacity`
// tokens, their keys and values in every attention layer's pool of pages (page_size tokens
// each, pages() of them): the model's prefill and decode graphs (ir::cache_step_graph) compiled
// against one resident layout — the decode plan's, which lays out the model's weights and the
// caches, written in place by the plans (docs/runtime.md "Resident state"). One thread steps the
// pool: it admits waiting generations in order while a slot is free and the pages of the head's
// prompt and max_tokens are (a generation never runs out of pages mid-way), runs each one's
// prefill (its prompt padded to the model's token bucket, or a power of two without buckets; its
// keys written into its pages), and then runs decode steps of all the active generations at
// once — 2^k rows covering them, a plan per such count, each row's keys read through the step's
// page table — continuous batching: a generation joins between steps and leaves as soon as it
// finishes or its client goes away, freeing its slot and pages. The decode plans are compiled
// with the pool; a prefill plan on its first prompt length. Every step plan ends in an argmax of
// the logits (ir::add_greedy_choice) and a top_k of them (ir::add_top_k_choice): greedy
// generations read their tokens from the argmax, top-k sampling (top_k up to Options::top_k) from
// the pairs, and a step's whole rows of logits leave the devices only for a generation sampling
// from more tokens than that. Thread-safe.
class GenerationPool {
public:
    // From the engine's settings (EngineSettings::generation_slots, generation_capacity).
    struct Options {
        int64_t slots = 0;        // generations at once
        int64_t capacity = 0;     // tokens per generation: prompt and generated; whole pages
        int64_t page_size = 16;   // tokens per page
        int64_t cache_tokens = 0; // tokens of every generation together; 0: slots × capacity
        // Prefill plans kept, one per (prompts, padded length): past it the least recently used
        // is dropped (compiled again when its shape comes back), so their arenas stay bounded.
        int64_t prefill_plans = 16;
        // The k of the step plans' top_k (at most the vocabulary): a generation sampling with
        // top_k in [1, k] reads k (logit, id) pairs per step, not its row of logits. 0: none.
        int64_t top_k = 64;
        // Pages generations may reserve: cache_tokens (or slots × capacity) in whole pages.
        int64_t pages() const {
            const int64_t tokens = cache_tokens > 0 ? cache_tokens : slots * capacity;
            return page_size > 0 ? (tokens + page_size - 1) / page_size : 0;
        }
    };

    // The pool of `model` with the request's `options` (its CompileOptions over the model's).
    // Unimplemented when the model cannot generate on caches (no batching, other symbols, or
    // ir::cache_step_graph's reason: Generate then recomputes instead); FailedPrecondition
    // naming a weight not uploaded; the compile's errors (ResourceExhausted when the caches do
    // not fit the devices).
    static absl::StatusOr<std::unique_ptr<GenerationPool>>
    create(Engine& engine, std::shared_ptr<const Model> model, GenerationInterface interface,
           const v1::CompileOptions& options, Options pool);
    // Ends every generation (Unavailable) and stops the stepping thread.
    ~GenerationPool();

    // One generation, from its prompt to its last token: waits for a free slot and its pages
    // (behind the generations that came first), then emits each token. A generation ends with
    // finish_reason "length" at max_tokens or when it is full (prompt and tokens: capacity).
    // InvalidArgument for a prompt longer than the capacity, or one whose pages (prompt and
    // max_tokens) are more than the pool holds;
    // Cancelled when `emit` returns false or `cancelled` (null: never) fails (its status);
    // request errors (an id outside the vocabulary, named by position) end this generation
    // alone.
    absl::Status generate(const GenerationRequest& req,
                          const std::function<absl::Status()>& cancelled, const TokenSink& emit);

    uint64_t model_id() const { return model_->id(); }
    int64_t slots() const { return pool_.slots; }
    int64_t capacity() const { return pool_.capacity; }
    int64_t slots_in_use() const;
    int64_t page_size() const { return pool_.page_size; }
    int64_t pages() const { return pool_.pages(); }
    // Pages reserved by the generations running now.
    int64_t pages_in_use() const;
    // The padded prompt lengths the pool has made prefill plans for, ascending: the model's token
    // buckets where it has them (the prompt's own length above the largest), else powers of two.
    std::vector<int64_t> prefill_lengths() const;
    // The most prompts one prefill step has run so far (admitted in one round, batched).
    int64_t largest_prefill_batch() const { return largest_prefill_batch_.load(); }
    // Tokens sampled from the step's top_k pairs, and from whole rows of logits, so far.
    int64_t tokens_sampled_from_pairs() const { return sampled_from_pairs_.load(); }
    int64_t tokens_sampled_from_rows() const { return sampled_from_rows_.load(); }
    // Prefill plans held now (at most Options::prefill_plans).
    int64_t prefill_plans() const { return prefill_plan_count_.load(); }
    // Whether the pool's layout is the model's (its weights on the devices once for Execute and
    // Generate), not a copy of its own.
    bool shares_weights() const { return shares_weights_; }
    // Device bytes the pool's plans hold, per device (their arenas; the resident memory apart).
    std::vector<int64_t> device_bytes() const;
    // The resident memory its plans read: the weights and the caches (the model's own when the
    // pool shares the model's layout).
    const std::shared_ptr<runtime::ResidentWeights>& resident() const {
        return decode_->resident();
    }

private:
    struct Sequence;
    GenerationPool(Engine& engine, std::shared_ptr<const Model> model,
                   GenerationInterface interface, v1::CompileOptions options, Options pool);
    absl::Status start();
    // The plan of a decode or prefill step at `tokens` tokens over `ends` (compiled against the
    // first decode plan's resident layout, except that plan itself, which defines it).
    // `layout`: the first decode plan pins it instead of defining one. FailedPrecondition when
    // a cache is not a state of the plan (the layout holds no such cache).
    absl::StatusOr<std::unique_ptr<runtime::Plan>>
    compile(bool decode, int64_t tokens, std::vector<int64_t> ends,
            std::shared_ptr<runtime::ResidentWeights> layout = nullptr);
    // `weights` into the pool's layout when its generation is not theirs.
    absl::Status write_weights(const WeightSnapshot& weights);
    // The stepping thread's loop.
    void run();
    // The model's weights written again into the resident memory when an upload changed them
    // since the pool loaded them; on failure the `admitted` generations end with the error.
    void refresh_weights(const std::vector<std::shared_ptr<Sequence>>& admitted);
    // The prefill of just-admitted sequences, in one step: each one's first token, or its error
    // (when the group's step fails, each prompt again alone, so that one prompt's error ends
    // only its generation).
    void prefill(const std::vector<Sequence*>& group);
    // One decode step of every active sequence.
    void decode_step(const std::vector<std::shared_ptr<Sequence>>& active);
    // What a step's plan gives to choose tokens by: the greedy pairs of every row, when a
    // stepping sequence is greedy, and the rows of logits, when one samples.
    struct StepChoices {
        std::vector<float> greedy_ids;
        std::vector<float> greedy_logits;
        std::vector<float> logits;
        std::vector<float> pairs; // [rows, top_k, 2] when a generation samples from pairs
        int64_t top_k = 0;
        int64_t vocab = 0;
        // Whether `params` samples from the top_k pairs (else greedy, or from the row).
        bool from_pairs(const SamplingParams& params) const {
            return !params.greedy() && params.top_k > 0 && params.top_k <= top_k;
        }
        // The token of `sequence` from row `row` of the step (sampling from its rng).
        absl::StatusOr<int64_t> token(Sequence& sequence, int64_t row) const;
    };
    absl::StatusOr<StepChoices> offload_choices(runtime::Plan& plan, int64_t rows,
                                                const std::vector<Sequence*>& stepping);
    // Token `token` chosen for `sequence`: queued for its call, and the sequence finished when it
    // ends it. The call is woken by flush_notifications.
    void deliver(Sequence& sequence, int64_t token);
    // Hands the generations given tokens since the last flush to the notifier thread, which wakes
    // their calls while the stepping thread goes on to the next step (the stepping thread's).
    void flush_notifications();
    // The notifier thread's loop.
    void notify_loop();
    // Ends `sequence` with `status` (OK: finished) and frees its slot and pages.
    void finish(Sequence& sequence, absl::Status status);
    // The pages a generation of `req` reserves: its prompt's and max_tokens' (at most the
    // capacity).
    int64_t pages_for(const GenerationRequest& req) const;
    // The length `sequence`'s prompt is padded to in a prefill (padded_length).
    int64_t padded_prompt(const Sequence& sequence) const;
    // The cache row of the key at place `place` of `sequence` (through its pages).
    int64_t cache_row(const Sequence& sequence, int64_t place) const;
    void report_slots();
    // device_bytes_ from the plans made so far (the stepping thread, or start()).
    void update_device_bytes();

    Engine& engine_;
    const std::shared_ptr<const Model> model_;
    const GenerationInterface interface_;
    const v1::CompileOptions options_;
    const Options pool_;
    std::unique_ptr<runtime::Plan> decode_; // every slot's step; defines the resident layout
    std::map<int64_t, std::unique_ptr<runtime::Plan>> decodes_; // steps of the first 2^k slots
    // Prefill steps by (sequences, padded prompt length), with when each was last used.
    struct PrefillPlan {
        std::unique_ptr<runtime::Plan> plan;
        int64_t last_used = 0;
    };
    std::map<std::pair<int64_t, int64_t>, PrefillPlan> prefills_;
    int64_t prefill_runs_ = 0; // the stepping thread's clock for last_used
    std::atomic<int64_t> prefill_plan_count_{0};
    bool shares_weights_ = false; // the layout is the model's (WeightResidency)
    // Every step plan's greedy outputs (ir::add_greedy_choice): per row the id of its largest
    // logit and that logit, so a greedy generation takes its token without its row of logits.
    ir::GreedyChoice greedy_;
    // Their top_k's saved output (ir::add_top_k_choice) and its k; empty and 0 without.
    std::string top_k_pairs_;
    int64_t top_k_ = 0;
    int64_t vocab_ = 0;
    std::atomic<int64_t> sampled_from_pairs_{0};
    std::atomic<int64_t> sampled_from_rows_{0};

    mutable std::mutex mutex_; // guards what follows
    std::condition_variable wake_;
    std::deque<std::shared_ptr<Sequence>> waiting_;
    std::vector<std::shared_ptr<Sequence>> slots_; // by slot; null: free
    std::set<int64_t> free_pages_; // the lowest first, so a generation's pages tend to follow
    std::vector<int64_t> device_bytes_;
    std::vector<int64_t> prefill_lengths_;
    std::atomic<int64_t> largest_prefill_batch_{0};
    bool stopping_ = false;
    std::thread stepper_;

    std::vector<std::shared_ptr<Sequence>> pending_notify_; // the stepping thread's
    std::mutex notify_mutex_;                               // guards what follows
    std::condition_variable notify_wake_;
    std::vector<std::shared_ptr<Sequence>> to_notify_;
    bool notifier_stopping_ = false;
    std::thread notifier_;
};

// The pools of the daemon's models, one per model and compile options, made on a model's first
// Generate and dropped when the model goes (thread-safe).
class GenerationPools {
public:
    explicit GenerationPools(GenerationPool::Options options) : options_(options) {}
    // The pool of `model` for `options`, made on first use by the first call, outside the
    // registry's lock (calls for the same pool meanwhile wait for it; others go on). An
    // Unimplemented (see GenerationPool::create: the model cannot generate on caches) is
    // remembered, so that Generate does not try again for this model and options; other errors
    // (a weight not uploaded yet, a compile that did not fit) are not. Null pool options (slots
    // 0): always Unimplemented.
    absl::StatusOr<std::shared_ptr<GenerationPool>>
    find_or_create(Engine& engine, std::shared_ptr<const Model> model,
                   const GenerationInterface& interface, const v1::CompileOptions& options);
    // Drops the pools of the model named `model` (unregistered or replaced); generations in
    // progress keep their pool until they end.
    void erase(const std::string& model);
    const GenerationPool::Options& options() const { return options_; }
    // Slots holding a generation now, over every pool.
    int64_t slots_in_use() const;
    // Pages reserved by generations now, over every pool.
    int64_t pages_in_use() const;
    // Each pool's plans' bytes per device and its resident memory (for the engine's count, which
    // counts each resident memory once however many plans and pools read it).
    struct Memory {
        std::vector<int64_t> plan_bytes;
        std::shared_ptr<runtime::ResidentWeights> resident;
    };
    std::vector<Memory> device_memory() const;

    // A pool, or why it could not be made, once its maker is done.
    using Entry = std::shared_future<absl::StatusOr<std::shared_ptr<GenerationPool>>>;

private:
    // `count` summed over the pools made.
    int64_t sum(int64_t (GenerationPool::*count)() const) const;
    const GenerationPool::Options options_;
    mutable std::mutex mutex_;
    // By model name, then model id and options' serialization.
    std::map<std::string, std::map<std::string, Entry>> pools_;
};

} // namespace einsummable::server
