#include "server/generation_pool.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cache_steps.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/support/status_macros.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/weight_residency.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {

namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting Generate call looks at its client's cancellation.
constexpr auto kCancelPoll = std::chrono::milliseconds(20);

double seconds_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}

// Sequence ends of `sequences` sequences of one token each.
std::vector<int64_t> one_token_each(int64_t sequences) {
    std::vector<int64_t> ends(static_cast<size_t>(sequences));
    std::iota(ends.begin(), ends.end(), 1);
    return ends;
}

// The smallest power of two of at least `count`.
int64_t power_of_two_at_least(int64_t count) {
    int64_t power = 1;
    while (power < count) {
        power *= 2;
    }
    return power;
}

// The padded length of a prefill of `tokens` tokens, at most `capacity` (a plan's size; the
// padding's keys are written nowhere): with the model's token buckets (docs/server.md "Token
// buckets"), the smallest bucket of at least `tokens`, or `tokens` itself above the largest, as
// an Execute runs; without them, the smallest power of two of at least `tokens`.
int64_t padded_length(int64_t tokens, int64_t capacity, const std::optional<BatchSpec>& batching) {
    std::optional<int64_t> padded;
    if (batching && !batching->buckets.empty()) {
        padded = batching->bucket_for(tokens);
    } else {
        padded = power_of_two_at_least(tokens);
    }
    return padded && *padded <= capacity ? *padded : tokens;
}

// The most tokens a batched prefill runs (its sequences times their padded length): prompts
// that would take more are prefilled in another group (a longer prompt alone).
constexpr int64_t kPrefillBatchTokens = 512;

} // namespace

v1::GenerateResponse token_response(const GenerationRequest& req, int64_t token, int32_t index,
                                    double seconds, bool full) {
    v1::GenerateResponse response;
    response.set_token_id(token);
    response.set_index(index);
    response.set_seconds(seconds);
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), token) != req.stop_ids.end()) {
        response.set_finish_reason("stop");
    } else if (index + 1 >= req.max_tokens || full) {
        response.set_finish_reason("length");
    }
    return response;
}

// One generation in the pool. The stepping thread owns its slot, fill and rng (its pages too,
// which it changes under the pool's mutex); the tokens and the end are handed to the Generate
// call under `mutex`.
struct GenerationPool::Sequence : std::enable_shared_from_this<Sequence> {
    GenerationRequest request;
    Clock::time_point start = Clock::now();
    Clock::time_point previous = start;
    std::mt19937_64 rng;
    std::atomic<bool> cancelled{false};

    // The stepping thread's.
    int64_t slot = -1;
    int64_t pages_needed = 0;   // reserved at admission (pages_for)
    std::vector<int64_t> pages; // its keys' pages, in order: place t is on pages[t / page_size]
    int64_t fill = 0;           // keys in its caches
    int64_t last = 0;           // the last token chosen (the next step's input)
    int32_t emitted = 0;        // tokens chosen so far
    bool finished = false;

    std::mutex mutex; // guards what follows
    std::condition_variable ready;
    std::deque<v1::GenerateResponse> tokens;
    bool done = false;
    absl::Status status;
};

GenerationPool::GenerationPool(Engine& engine, std::shared_ptr<const Model> model,
                               GenerationInterface interface, v1::CompileOptions options,
                               Options pool)
    : engine_(engine), model_(std::move(model)), interface_(std::move(interface)),
      options_(std::move(options)), pool_(pool), slots_(static_cast<size_t>(pool.slots)) {
    for (int64_t page = 0; page < pool_.pages(); ++page) {
        free_pages_.insert(free_pages_.end(), page);
    }
}

absl::StatusOr<std::unique_ptr<GenerationPool>>
GenerationPool::create(Engine& engine, std::shared_ptr<const Model> model,
                       GenerationInterface interface, const v1::CompileOptions& options,
                       Options pool) {
    if (pool.slots < 1 || pool.capacity < 1 || pool.page_size < 1 ||
        pool.capacity % pool.page_size != 0) {
        return absl::UnimplementedError(
            absl::StrCat("generation slots (", pool.slots, ") and capacity (", pool.capacity,
                         ") must be at least 1 and the capacity whole pages of ", pool.page_size,
                         " (--generation_slots, --generation_capacity, --generation_page_size)"));
    }
    std::unique_ptr<GenerationPool> made(
        new GenerationPool(engine, std::move(model), std::move(interface), options, pool));
    EINSUMMABLE_RETURN_IF_ERROR(made->start());
    return made;
}

absl::StatusOr<std::unique_ptr<runtime::Plan>>
GenerationPool::compile(bool decode, int64_t tokens, std::vector<int64_t> ends,
                        std::shared_ptr<runtime::ResidentWeights> layout) {
    absl::StatusOr<RequestShape> shape = engine_.generation_shape(model_, tokens, options_, ends);
    if (absl::IsFailedPrecondition(shape.status())) {
        return absl::UnimplementedError(absl::StrCat(
            "model '", model_->name(), "' cannot generate on caches: ", shape.status().message()));
    }
    EINSUMMABLE_RETURN_IF_ERROR(shape.status());
    absl::StatusOr<ir::Graph> graph =
        ir::cache_step_graph(shape->graph, decode ? ir::CacheStep::decode : ir::CacheStep::prefill,
                             {pool_.slots, pool_.capacity, pool_.page_size, pool_.pages()});
    if (!graph.ok()) {
        return absl::UnimplementedError(absl::StrCat(
            "model '", model_->name(), "' cannot generate on caches: ", graph.status().message()));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(greedy_, ir::add_greedy_choice(*graph, interface_.logits));
    vocab_ = graph->tensor(*graph->find_tensor(interface_.logits)).type.dims[1].size;
    if (pool_.top_k > 0) {
        EINSUMMABLE_ASSIGN_OR_RETURN(top_k_pairs_,
                                     ir::add_top_k_choice(*graph, interface_.logits, pool_.top_k));
        top_k_ = graph->tensor(*graph->find_tensor(top_k_pairs_)).type.dims[1].size;
    }
    runtime::CompileOptions options = shape->options;
    options.instances = 1; // one stepping thread
    const std::vector<std::string> caches = ir::cache_inputs(*graph);
    if (decode_ != nullptr) {
        options.resident = decode_->resident();
    } else if (layout != nullptr) {
        options.resident = std::move(layout); // the model's layout, to pin
    } else { // the first plan: it lays out the weights and the caches
        options.resident_inputs.insert(model_->weights().begin(), model_->weights().end());
        options.resident_inputs.insert(caches.begin(), caches.end());
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(
        std::unique_ptr<runtime::Plan> plan,
        runtime::Plan::compile(*std::move(graph), options, engine_.backend()));
    // Every cache must be a state of the plan: read in place from the layout and written there.
    for (const std::string& cache : caches) {
        if (!plan->states().count(cache)) {
            return absl::FailedPreconditionError(
                absl::StrCat("the resident layout holds no cache '", cache, "' of ", pool_.pages(),
                             " pages of ", pool_.page_size, " tokens for ", pool_.slots,
                             " generations at once on ", options.devices, " devices"));
        }
    }
    return plan;
}

absl::Status GenerationPool::start() {
    const WeightSnapshot weights = model_->weights_snapshot();
    for (const std::string& name : model_->weights()) {
        auto it = weights.values.find(name);
        if (it == weights.values.end() || it->second == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                "model '", model_->name(), "': weight '", name, "' has not been uploaded"));
        }
    }
    // The decode plan of every slot first: its sequences are the slots, one token each, and it
    // reads the weights and the caches from one layout that every other plan of the pool then
    // reads in place — the model's own (WeightResidency), laid out by this plan when the model
    // has none yet, so the weights are on the devices once; or, when the model's layout holds
    // no such caches (its first plan was an Execute's, or the slots changed since the plan
    // store kept it), one of the pool's own, with a copy of the weights.
    const std::vector<int64_t> every_slot = one_token_each(pool_.slots);
    WeightResidency* shared = engine_.shared_weights();
    if (shared != nullptr) {
        EINSUMMABLE_ASSIGN_OR_RETURN(WeightResidency::Choice choice,
                                     shared->choose_for_generation(*model_, nullptr));
        if (choice.defining) {
            absl::StatusOr<std::unique_ptr<runtime::Plan>> made =
                compile(/*decode=*/true, pool_.slots, every_slot);
            shared->end_generation_defining(choice, *model_,
                                            made.ok() ? (*made)->resident() : nullptr);
            EINSUMMABLE_ASSIGN_OR_RETURN(decode_, std::move(made));
        } else if (choice.resident != nullptr) {
            absl::StatusOr<std::unique_ptr<runtime::Plan>> pinned =
                compile(/*decode=*/true, pool_.slots, every_slot, choice.resident);
            if (pinned.ok()) {
                decode_ = *std::move(pinned);
            } else if (absl::IsFailedPrecondition(pinned.status())) {
                spdlog::info("model '{}': its generation pool keeps its own copy of the weights "
                             "({})",
                             model_->name(), std::string(pinned.status().message()));
            } else {
                return pinned.status();
            }
        }
        shares_weights_ = decode_ != nullptr;
    }
    if (decode_ == nullptr) {
        EINSUMMABLE_ASSIGN_OR_RETURN(decode_, compile(/*decode=*/true, pool_.slots, every_slot));
    }
    EINSUMMABLE_RETURN_IF_ERROR(write_weights(weights));
    // The decode steps of fewer slots, compiled ahead: a step never waits for a compile. (Prefill
    // plans are compiled per padded prompt length on first use.)
    for (int64_t slots = 1; slots < pool_.slots; slots *= 2) {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Plan> plan,
                                     compile(/*decode=*/true, slots, one_token_each(slots)));
        decodes_.emplace(slots, std::move(plan));
    }
    update_device_bytes();
    report_slots();
    notifier_ = std::thread([this] { notify_loop(); });
    stepper_ = std::thread([this] { run(); });
    return absl::OkStatus();
}

GenerationPool::~GenerationPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (stepper_.joinable()) {
        stepper_.join();
    }
    {
        std::lock_guard<std::mutex> lock(notify_mutex_);
        notifier_stopping_ = true;
    }
    notify_wake_.notify_all();
    if (notifier_.joinable()) {
        notifier_.join();
    }
}

void GenerationPool::notify_loop() {
    std::unique_lock<std::mutex> lock(notify_mutex_);
    while (true) {
        notify_wake_.wait(lock, [&] { return notifier_stopping_ || !to_notify_.empty(); });
        std::vector<std::shared_ptr<Sequence>> batch;
        batch.swap(to_notify_);
        if (batch.empty() && notifier_stopping_) {
            return;
        }
        lock.unlock();
        for (const std::shared_ptr<Sequence>& sequence : batch) {
            sequence->ready.notify_all();
        }
        lock.lock();
    }
}

void GenerationPool::flush_notifications() {
    if (pending_notify_.empty()) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(notify_mutex_);
        to_notify_.insert(to_notify_.end(), std::make_move_iterator(pending_notify_.begin()),
                          std::make_move_iterator(pending_notify_.end()));
    }
    pending_notify_.clear();
    notify_wake_.notify_one();
}

std::vector<int64_t> GenerationPool::prefill_lengths() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int64_t> lengths = prefill_lengths_;
    std::sort(lengths.begin(), lengths.end());
    return lengths;
}

int64_t GenerationPool::pages_in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return pool_.pages() - static_cast<int64_t>(free_pages_.size());
}

int64_t GenerationPool::pages_for(const GenerationRequest& req) const {
    const auto prompt = static_cast<int64_t>(req.prompt.size());
    const int64_t tokens = std::min(prompt + std::max<int64_t>(req.max_tokens, 1), pool_.capacity);
    return (tokens + pool_.page_size - 1) / pool_.page_size;
}

int64_t GenerationPool::padded_prompt(const Sequence& sequence) const {
    return padded_length(static_cast<int64_t>(sequence.request.prompt.size()), pool_.capacity,
                         model_->batching());
}

int64_t GenerationPool::cache_row(const Sequence& sequence, int64_t place) const {
    return sequence.pages[static_cast<size_t>(place / pool_.page_size)] * pool_.page_size +
           place % pool_.page_size;
}

int64_t GenerationPool::slots_in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::count_if(slots_.begin(), slots_.end(),
                         [](const std::shared_ptr<Sequence>& s) { return s != nullptr; });
}

std::vector<int64_t> GenerationPool::device_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return device_bytes_;
}

void GenerationPool::update_device_bytes() {
    std::vector<int64_t> bytes;
    auto add = [&](const runtime::Plan& plan) {
        const std::vector<int64_t> own = plan.allocated_bytes();
        bytes.resize(std::max(bytes.size(), own.size()), 0);
        for (size_t d = 0; d < own.size(); ++d) {
            bytes[d] += own[d];
        }
    };
    add(*decode_);
    for (const auto& [slots, plan] : decodes_) {
        add(*plan);
    }
    for (const auto& [shape, prefill] : prefills_) {
        add(*prefill.plan);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    device_bytes_ = std::move(bytes);
}

void GenerationPool::report_slots() {
    if (Metrics* metrics = engine_.metrics(); metrics != nullptr) {
        const int64_t used = slots_in_use();
        metrics->generation_slots(model_->name(), used, pool_.slots - used);
        const int64_t pages = pages_in_use();
        metrics->generation_pages(model_->name(), pages, pool_.pages() - pages);
    }
}

absl::Status GenerationPool::generate(const GenerationRequest& req,
                                      const std::function<absl::Status()>& cancelled,
                                      const TokenSink& emit) {
    const auto prompt = static_cast<int64_t>(req.prompt.size());
    if (prompt > pool_.capacity) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the prompt has ", prompt, " tokens, more than a generation's capacity of ",
            pool_.capacity, " (the daemon's --generation_capacity)"));
    }
    const int64_t pages = pages_for(req);
    if (pages > pool_.pages()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the prompt's ", prompt, " tokens and max_tokens ", req.max_tokens, " need ", pages,
            " pages of ", pool_.page_size, " tokens, more than the ", pool_.pages(),
            " the model's caches hold (the daemon's --generation_cache_tokens): ask for fewer "
            "tokens"));
    }
    auto sequence = std::make_shared<Sequence>();
    sequence->request = req;
    sequence->pages_needed = pages;
    sequence->rng.seed(req.params.seed);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) {
            return absl::UnavailableError("the model's generations are stopping");
        }
        waiting_.push_back(sequence);
    }
    wake_.notify_all();
    auto leave = [&](absl::Status status) {
        sequence->cancelled = true; // the stepping thread frees its slot
        wake_.notify_all();
        return status;
    };
    while (true) {
        std::deque<v1::GenerateResponse> tokens;
        bool done = false;
        absl::Status status;
        {
            std::unique_lock<std::mutex> lock(sequence->mutex);
            sequence->ready.wait_for(lock, kCancelPoll,
                                     [&] { return !sequence->tokens.empty() || sequence->done; });
            tokens.swap(sequence->tokens);
            done = sequence->done;
            status = sequence->status;
        }
        for (const v1::GenerateResponse& token : tokens) {
            if (!emit(token)) {
                return leave(absl::CancelledError("the client went away"));
            }
        }
        if (done) {
            return status;
        }
        if (cancelled) {
            if (absl::Status check = cancelled(); !check.ok()) {
                return leave(check);
            }
        }
    }
}

void GenerationPool::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        wake_.wait(lock, [&] {
            if (stopping_ || !waiting_.empty()) {
                return true;
            }
            return std::any_of(slots_.begin(), slots_.end(),
                               [](const std::shared_ptr<Sequence>& s) { return s != nullptr; });
        });
        if (stopping_) {
            break;
        }
        // Waiting generations whose clients went away leave the queue (they hold no pages).
        std::vector<std::shared_ptr<Sequence>> gone;
        std::erase_if(waiting_, [&](const std::shared_ptr<Sequence>& sequence) {
            if (sequence->cancelled) {
                gone.push_back(sequence);
            }
            return sequence->cancelled.load();
        });
        // Admit waiting generations in order into free slots, the lowest first, while the pages
        // of the first in line are free: it reserves them all now, so that no generation runs
        // out mid-way; the ones behind it wait (none overtakes it).
        std::vector<std::shared_ptr<Sequence>> admitted;
        for (size_t slot = 0; slot < slots_.size() && !waiting_.empty(); ++slot) {
            if (slots_[slot] != nullptr) {
                continue;
            }
            std::shared_ptr<Sequence> next = waiting_.front();
            if (next->pages_needed > static_cast<int64_t>(free_pages_.size())) {
                break;
            }
            waiting_.pop_front();
            for (int64_t p = 0; p < next->pages_needed; ++p) {
                next->pages.push_back(*free_pages_.begin());
                free_pages_.erase(free_pages_.begin());
            }
            next->slot = static_cast<int64_t>(slot);
            slots_[slot] = next;
            admitted.push_back(std::move(next));
        }
        std::vector<std::shared_ptr<Sequence>> active;
        for (const std::shared_ptr<Sequence>& sequence : slots_) {
            if (sequence != nullptr) {
                active.push_back(sequence);
            }
        }
        lock.unlock();
        for (const std::shared_ptr<Sequence>& sequence : gone) {
            finish(*sequence, absl::CancelledError("the client went away"));
        }
        report_slots();
        if (!admitted.empty()) {
            refresh_weights(admitted);
        }
        // The admitted generations' prefills, batched: in order, as many as fit a group of
        // kPrefillBatchTokens (its sequences, a power of two, times its longest padded prompt).
        std::vector<Sequence*> group;
        int64_t group_length = 0;
        for (const std::shared_ptr<Sequence>& sequence : admitted) {
            if (sequence->finished) {
                continue; // the weights' refresh failed
            }
            if (sequence->cancelled) {
                finish(*sequence, absl::CancelledError("the client went away"));
                continue;
            }
            const int64_t own = padded_prompt(*sequence);
            const int64_t length = std::max(group_length, own);
            const int64_t tokens =
                power_of_two_at_least(static_cast<int64_t>(group.size()) + 1) * length;
            if (!group.empty() && tokens > std::max(kPrefillBatchTokens, length)) {
                prefill(group);
                group.clear();
                group_length = 0;
            }
            group.push_back(sequence.get());
            group_length = std::max(group_length, own);
        }
        if (!group.empty()) {
            prefill(group);
        }
        flush_notifications();
        std::vector<std::shared_ptr<Sequence>> decoding;
        for (const std::shared_ptr<Sequence>& sequence : active) {
            if (sequence->cancelled && !sequence->finished) {
                finish(*sequence, absl::CancelledError("the client went away"));
            }
            // Sequences admitted now have their first token from the prefill; they decode from
            // the next step on.
            if (!sequence->finished &&
                std::find(admitted.begin(), admitted.end(), sequence) == admitted.end()) {
                decoding.push_back(sequence);
            }
        }
        if (!decoding.empty()) {
            decode_step(decoding);
            flush_notifications();
        }
        lock.lock();
    }
    // Stopping: every generation still here ends.
    std::vector<std::shared_ptr<Sequence>> left(waiting_.begin(), waiting_.end());
    waiting_.clear();
    for (std::shared_ptr<Sequence>& sequence : slots_) {
        if (sequence != nullptr) {
            left.push_back(std::move(sequence));
        }
    }
    lock.unlock();
    for (const std::shared_ptr<Sequence>& sequence : left) {
        std::lock_guard<std::mutex> guard(sequence->mutex);
        sequence->done = true;
        sequence->status = absl::UnavailableError("the model's generations stopped");
        sequence->ready.notify_all();
    }
}

absl::Status GenerationPool::write_weights(const WeightSnapshot& weights) {
    if (shares_weights_) {
        // The model's memory: written once for all its plans, the engine's and the pool's.
        return engine_.shared_weights()->write(*model_, *decode_, weights);
    }
    const std::shared_ptr<runtime::ResidentWeights>& resident = decode_->resident();
    const auto generation = static_cast<int64_t>(weights.generation);
    if (resident->generation() == generation) {
        return absl::OkStatus();
    }
    for (const auto& [name, bytes] : weights.values) {
        if (bytes == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat("weight '", name, "' has no bytes"));
        }
        EINSUMMABLE_RETURN_IF_ERROR(decode_->load_bytes(name, bytes->span()));
    }
    resident->set_generation(generation);
    return absl::OkStatus();
}

void GenerationPool::refresh_weights(const std::vector<std::shared_ptr<Sequence>>& admitted) {
    // A weight uploaded again since the memory was written: written once into it (the runs in
    // progress finish first), for the generations admitted from now on and, from their next
    // step, the ones running.
    if (absl::Status written = write_weights(model_->weights_snapshot()); !written.ok()) {
        for (const std::shared_ptr<Sequence>& sequence : admitted) {
            finish(*sequence, written);
        }
    }
}

void GenerationPool::prefill(const std::vector<Sequence*>& group) {
    // Each prompt padded to the group's longest padded length, the group to a power of two of
    // sequences (the rest empty): a plan per (sequences, length), compiled on first use.
    int64_t length = 1;
    for (const Sequence* sequence : group) {
        length = std::max(length, padded_prompt(*sequence));
    }
    const int64_t width = power_of_two_at_least(static_cast<int64_t>(group.size()));
    auto it = prefills_.find({width, length});
    absl::Status status;
    if (it == prefills_.end()) {
        std::vector<int64_t> ends;
        for (int64_t s = 1; s <= width; ++s) {
            ends.push_back(s * length);
        }
        absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
            compile(/*decode=*/false, width * length, std::move(ends));
        if (plan.ok()) {
            it = prefills_.emplace(std::make_pair(width, length), PrefillPlan{*std::move(plan), 0})
                     .first;
            if (static_cast<int64_t>(prefills_.size()) >
                std::max<int64_t>(pool_.prefill_plans, 1)) {
                // The least recently used other than this one goes (its arena with it).
                auto oldest = prefills_.end();
                for (auto p = prefills_.begin(); p != prefills_.end(); ++p) {
                    if (p != it && (oldest == prefills_.end() ||
                                    p->second.last_used < oldest->second.last_used)) {
                        oldest = p;
                    }
                }
                prefills_.erase(oldest);
            }
            prefill_plan_count_ = static_cast<int64_t>(prefills_.size());
            {
                std::lock_guard<std::mutex> lock(mutex_);
                if (std::find(prefill_lengths_.begin(), prefill_lengths_.end(), length) ==
                    prefill_lengths_.end()) {
                    prefill_lengths_.push_back(length);
                }
            }
            update_device_bytes();
            engine_.refresh_memory_metrics();
        } else {
            status = plan.status();
        }
    }
    // The prompts, padded with id 0: padding tokens and empty sequences write their keys
    // nowhere (slot -1, write_rows), so a generation's pages hold only its own keys.
    std::vector<float> ids(static_cast<size_t>(width * length), 0.0f);
    std::vector<float> rows(static_cast<size_t>(width * length),
                            static_cast<float>(ir::WriteRows::kNotWritten));
    for (size_t i = 0; i < group.size(); ++i) {
        const std::vector<int64_t>& prompt = group[i]->request.prompt;
        for (size_t t = 0; t < prompt.size(); ++t) {
            ids[i * length + t] = static_cast<float>(prompt[t]);
            rows[i * length + t] =
                static_cast<float>(cache_row(*group[i], static_cast<int64_t>(t)));
        }
    }
    runtime::Plan* plan = nullptr;
    if (status.ok()) {
        it->second.last_used = ++prefill_runs_;
        plan = it->second.plan.get();
    }
    if (status.ok()) {
        status = plan->load(interface_.ids, ids);
    }
    if (status.ok()) {
        status = plan->load("slots", rows);
    }
    if (status.ok()) {
        status = plan->execute();
    }
    absl::StatusOr<StepChoices> choices = status.ok()
                                              ? offload_choices(*plan, width * length, group)
                                              : absl::StatusOr<StepChoices>(status);
    if (!choices.ok()) {
        if (group.size() > 1) {
            // One prompt's error (an id outside the vocabulary) or a plan that did not fit: each
            // prompt again alone, so an error ends only the generation it belongs to.
            for (Sequence* sequence : group) {
                prefill({sequence});
            }
            return;
        }
        finish(*group[0], choices.status());
        return;
    }
    largest_prefill_batch_ =
        std::max(largest_prefill_batch_.load(), static_cast<int64_t>(group.size()));
    for (size_t i = 0; i < group.size(); ++i) {
        Sequence& sequence = *group[i];
        const auto prompt = static_cast<int64_t>(sequence.request.prompt.size());
        sequence.fill = prompt;
        absl::StatusOr<int64_t> token =
            choices->token(sequence, static_cast<int64_t>(i) * length + prompt - 1);
        if (!token.ok()) {
            finish(sequence, token.status());
            continue;
        }
        deliver(sequence, *token);
    }
}

void GenerationPool::decode_step(const std::vector<std::shared_ptr<Sequence>>& active) {
    // The step's rows: a power of two covering the active generations, row i the i-th of them
    // (each reads its own pages through its row of the page table, so a step is as wide as the
    // generations running, whichever slots they hold).
    const auto count = static_cast<int64_t>(active.size());
    const int64_t width = std::min(power_of_two_at_least(count), pool_.slots);
    // Made ahead (start()): every power of two below the pool's slots, and the pool's own.
    runtime::Plan* plan = width == pool_.slots ? decode_.get() : decodes_.at(width).get();
    // Rows without a generation get a token too — the step's shape is fixed — whose output is
    // dropped: id 0, its key written nowhere (slot -1, write_rows), attention over one key of
    // page 0 (any page: what it reads is dropped).
    const int64_t per_sequence = pool_.capacity / pool_.page_size;
    std::vector<float> ids(width, 0.0f);
    std::vector<float> positions(width, 0.0f);
    std::vector<float> rows(width, static_cast<float>(ir::WriteRows::kNotWritten));
    std::vector<float> fills(width, 1.0f);
    std::vector<float> table(static_cast<size_t>(width * per_sequence), 0.0f);
    for (int64_t i = 0; i < count; ++i) {
        const Sequence& sequence = *active[i];
        ids[i] = static_cast<float>(sequence.last);
        positions[i] = static_cast<float>(sequence.fill);
        rows[i] = static_cast<float>(cache_row(sequence, sequence.fill));
        fills[i] = static_cast<float>(sequence.fill + 1);
        // Its pages, then its first again where it reserved fewer (read by no one).
        for (int64_t p = 0; p < per_sequence; ++p) {
            table[i * per_sequence + p] = static_cast<float>(
                sequence.pages[p < static_cast<int64_t>(sequence.pages.size()) ? p : 0]);
        }
    }
    absl::Status status = plan->load(interface_.ids, ids);
    for (const auto& [name, values] :
         {std::pair<const char*, const std::vector<float>*>{"positions", &positions},
          {"slots", &rows},
          {"key_lengths", &fills},
          {"page_table", &table}}) {
        if (status.ok()) {
            status = plan->load(name, *values);
        }
    }
    if (status.ok()) {
        status = plan->execute();
    }
    std::vector<Sequence*> stepping;
    for (const std::shared_ptr<Sequence>& sequence : active) {
        stepping.push_back(sequence.get());
    }
    absl::StatusOr<StepChoices> choices =
        status.ok() ? offload_choices(*plan, width, stepping) : absl::StatusOr<StepChoices>(status);
    if (!choices.ok()) {
        for (const std::shared_ptr<Sequence>& sequence : active) {
            finish(*sequence, choices.status());
        }
        return;
    }
    if (Metrics* metrics = engine_.metrics(); metrics != nullptr) {
        metrics->decode_step(model_->name(), static_cast<int64_t>(active.size()));
    }
    for (int64_t i = 0; i < count; ++i) {
        const std::shared_ptr<Sequence>& sequence = active[i];
        sequence->fill += 1;
        absl::StatusOr<int64_t> token = choices->token(*sequence, i);
        if (!token.ok()) {
            finish(*sequence, token.status());
            continue;
        }
        deliver(*sequence, *token);
    }
}

absl::StatusOr<int64_t> GenerationPool::StepChoices::token(Sequence& sequence, int64_t row) const {
    if (sequence.request.params.greedy()) {
        return greedy_token(greedy_logits[row], static_cast<int64_t>(greedy_ids[row]), vocab);
    }
    if (from_pairs(sequence.request.params)) {
        return choose_top_token(
            absl::MakeConstSpan(pairs).subspan(static_cast<size_t>(row * 2 * top_k),
                                               static_cast<size_t>(2 * top_k)),
            vocab, sequence.request.params, sequence.rng);
    }
    const auto begin = logits.begin() + row * vocab;
    return choose_token(absl::MakeConstSpan(&*begin, static_cast<size_t>(vocab)),
                        sequence.request.params, sequence.rng);
}

absl::StatusOr<GenerationPool::StepChoices>
GenerationPool::offload_choices(runtime::Plan& plan, int64_t rows,
                                const std::vector<Sequence*>& stepping) {
    StepChoices choices;
    choices.vocab = vocab_;
    choices.top_k = top_k_;
    bool greedy = false;
    bool paired = false;
    bool sampled = false;
    for (const Sequence* sequence : stepping) {
        const SamplingParams& params = sequence->request.params;
        if (params.greedy()) {
            greedy = true;
        } else if (choices.from_pairs(params)) {
            paired = true;
            ++sampled_from_pairs_;
        } else {
            sampled = true;
            ++sampled_from_rows_;
        }
    }
    if (greedy) {
        EINSUMMABLE_ASSIGN_OR_RETURN(choices.greedy_ids, plan.offload(greedy_.ids));
        EINSUMMABLE_ASSIGN_OR_RETURN(choices.greedy_logits, plan.offload(greedy_.logits));
    }
    if (paired) {
        EINSUMMABLE_ASSIGN_OR_RETURN(choices.pairs, plan.offload(top_k_pairs_));
        if (static_cast<int64_t>(choices.pairs.size()) != rows * 2 * top_k_) {
            return absl::InternalError(absl::StrCat("the step's top-k pairs hold ",
                                                    choices.pairs.size(), " values, not ", rows,
                                                    " rows of ", top_k_, " pairs"));
        }
    }
    if (sampled) {
        EINSUMMABLE_ASSIGN_OR_RETURN(choices.logits, plan.offload(interface_.logits));
        if (static_cast<int64_t>(choices.logits.size()) != rows * vocab_) {
            return absl::InternalError(absl::StrCat("the step's logits hold ",
                                                    choices.logits.size(), " values, not ", rows,
                                                    " rows of ", vocab_));
        }
    }
    return choices;
}

void GenerationPool::deliver(Sequence& sequence, int64_t token) {
    const int32_t index = sequence.emitted++;
    sequence.last = token;
    const Clock::time_point now = Clock::now();
    if (Metrics* metrics = engine_.metrics(); metrics != nullptr) {
        metrics->generated_token(model_->name(), index, seconds_between(sequence.previous, now));
    }
    sequence.previous = now;
    // The caches hold the prompt and every token fed back: the next step would not fit.
    const bool full = sequence.fill + 1 > pool_.capacity;
    v1::GenerateResponse response =
        token_response(sequence.request, token, index, seconds_between(sequence.start, now), full);
    const bool last = !response.finish_reason().empty();
    {
        std::lock_guard<std::mutex> lock(sequence.mutex);
        sequence.tokens.push_back(std::move(response));
    }
    if (last) {
        finish(sequence, absl::OkStatus());
    } else {
        // Woken after the step by the notifier thread: waking each generation's call here
        // handed the core to it, and the step waited while it wrote its token to its stream.
        pending_notify_.push_back(sequence.shared_from_this());
    }
}

void GenerationPool::finish(Sequence& sequence, absl::Status status) {
    if (sequence.finished) {
        return;
    }
    sequence.finished = true;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (sequence.slot >= 0 && slots_[sequence.slot].get() == &sequence) {
            slots_[sequence.slot] = nullptr;
        }
        free_pages_.insert(sequence.pages.begin(), sequence.pages.end());
        sequence.pages.clear();
    }
    report_slots(); // before the generation's call returns: a client that saw it end sees it
    {
        std::lock_guard<std::mutex> lock(sequence.mutex);
        sequence.done = true;
        sequence.status = std::move(status);
    }
    sequence.ready.notify_all();
}

namespace {

// Whether `entry` is made (its future ready) and holds a pool.
const std::shared_ptr<GenerationPool>* made_pool(const GenerationPools::Entry& entry) {
    if (entry.wait_for(std::chrono::seconds(0)) != std::future_status::ready || !entry.get().ok()) {
        return nullptr;
    }
    return &*entry.get();
}

} // namespace

absl::StatusOr<std::shared_ptr<GenerationPool>>
GenerationPools::find_or_create(Engine& engine, std::shared_ptr<const Model> model,
                                const GenerationInterface& interface,
                                const v1::CompileOptions& options) {
    if (options_.slots < 1) {
        return absl::UnimplementedError("generation slots are off (--generation_slots 0)");
    }
    const std::string id = absl::StrCat(model->id(), ":");
    const std::string key = absl::StrCat(id, options.SerializeAsString());
    // Pools dropped here are destroyed after the lock is released: a pool's destructor joins its
    // stepping thread, which may be waiting for the lock (device_bytes, for the metrics).
    std::vector<Entry> stale;
    Entry entry;
    std::promise<absl::StatusOr<std::shared_ptr<GenerationPool>>> making;
    bool maker = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        std::map<std::string, Entry>& of_model = pools_[model->name()];
        // Pools of an earlier model of this name are dropped.
        for (auto it = of_model.begin(); it != of_model.end();) {
            if (it->first.starts_with(id)) {
                ++it;
                continue;
            }
            stale.push_back(std::move(it->second));
            it = of_model.erase(it);
        }
        auto it = of_model.find(key);
        if (it == of_model.end()) {
            // Made by this call outside the lock; other calls for it wait on the future.
            it = of_model.emplace(key, making.get_future().share()).first;
            maker = true;
        }
        entry = it->second;
    }
    if (maker) {
        absl::StatusOr<std::unique_ptr<GenerationPool>> made =
            GenerationPool::create(engine, model, interface, options, options_);
        absl::StatusOr<std::shared_ptr<GenerationPool>> pool =
            made.ok() ? absl::StatusOr<std::shared_ptr<GenerationPool>>(
                            std::shared_ptr<GenerationPool>(*std::move(made)))
                      : absl::StatusOr<std::shared_ptr<GenerationPool>>(made.status());
        const bool remembered = pool.ok() || absl::IsUnimplemented(pool.status());
        making.set_value(std::move(pool));
        if (!remembered) {
            // A failure that may pass (a compile that did not fit, a backend error): the next
            // Generate tries again.
            std::lock_guard<std::mutex> lock(mutex_);
            auto of_model = pools_.find(model->name());
            if (of_model != pools_.end()) {
                of_model->second.erase(key);
            }
        }
    }
    if ((maker && entry.get().ok()) || !stale.empty()) {
        engine.refresh_memory_metrics(); // the pool's device memory, or the dropped ones'
    }
    return entry.get();
}

std::vector<GenerationPools::Memory> GenerationPools::device_memory() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Memory> memory;
    for (const auto& [name, of_model] : pools_) {
        for (const auto& [key, entry] : of_model) {
            if (const std::shared_ptr<GenerationPool>* pool = made_pool(entry)) {
                memory.push_back({(*pool)->device_bytes(), (*pool)->resident()});
            }
        }
    }
    return memory;
}

int64_t GenerationPools::sum(int64_t (GenerationPool::*count)() const) const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t total = 0;
    for (const auto& [name, of_model] : pools_) {
        for (const auto& [key, entry] : of_model) {
            if (const std::shared_ptr<GenerationPool>* pool = made_pool(entry)) {
                total += ((**pool).*count)();
            }
        }
    }
    return total;
}

int64_t GenerationPools::slots_in_use() const {
    return sum(&GenerationPool::slots_in_use);
}

int64_t GenerationPools::pages_in_use() const {
    return sum(&GenerationPool::pages_in_use);
}

void GenerationPools::erase(const std::string& model) {
    std::map<std::string, Entry> dropped;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = pools_.find(model);
        if (it == pools_.end()) {
            return;
        }
        dropped = std::move(it->second);
        pools_.erase(it);
    }
    // Destroyed here, outside the lock (a pool's destructor joins its thread).
}

} // namespace einsummable::server
