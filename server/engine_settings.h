#pragma once

#include <cstdint>

namespace einsummable::server {

// What the daemon's flags set on the engine, each as its flag gives it (docs/server.md,
// "Flags"): DaemonConfig (config.h) holds them among the daemon's other flags, EngineOptions
// (engine.h) beside what start-up found out about the machine, so that a setting is declared,
// with its default, here only. The defaults are the flags' defaults.
struct EngineSettings {
    int64_t plan_cache_entries = 64; // plans held in memory (PlanCache)
    // The largest gRPC message: an Execute's outputs must fit in one reply.
    int64_t max_message_bytes = int64_t{256} << 20;
    // The largest tensor (input, weight, intermediate or output) of any request.
    int64_t max_tensor_bytes = int64_t{1} << 30;
    // Bytes all UploadTensor streams in progress may hold together (ModelStoreLimits): four
    // weights of the default --max_tensor_bytes at once, where 64 concurrent calls could
    // otherwise hold 64 GiB.
    int64_t max_upload_bytes_in_flight = int64_t{4} << 30;
    int max_graph_operators = 10000;
    // Entries of one operator's sequence_ends (ModelStoreLimits::max_sequence_ends).
    int64_t max_sequence_ends = 65536;
    // Operators × devices of one compile (ready_plan): the paper's largest workload at 8
    // devices (llama-stack:blocks=32, 640 operators) is 5120, a thirteenth of it.
    int64_t max_operator_devices = 65536;
    // Models registered at once, and their bytes together (ModelStoreLimits::max_models,
    // max_model_bytes: the serialized graph plus every weight's size, counted at RegisterModel).
    // Without them 2,000 registrations of 10,000-operator graphs (14 MB each) were all kept.
    int max_models = 256;
    int64_t max_model_bytes = int64_t{64} << 30;
    int synthesis_iterations = 600; // runtime::CompileOptions::synthesis_iterations
    // Bytes the exchange-program cache (runtime::CompileOptions::exchange_cache) holds across
    // models and shapes, least recently used evicted first.
    int64_t exchange_cache_bytes = int64_t{256} << 20;
    // Plans compiled at once (CompilePool); 0 = the machine's cores.
    int compile_threads = 0;
    // Activation sets per plan (runtime::CompileOptions::instances): requests to one plan run
    // this many at once. 0 = as many as the devices' spare memory holds beside the model's
    // weights (1 to runtime::kMaxAutoInstances), 2 without a known device memory; 1 to 64 = that
    // many, lowered, with a log line, to what fits.
    int instances_per_plan = 0;
    // How long the first request of a batch waits for others (server/batcher.h), for models
    // whose Batching gives no max_queue_delay_us; 0 to BatchSpec::kMaxQueueDelayUs. 0: a batch
    // runs as soon as a plan instance is free, so requests batch only while every instance is
    // busy.
    int64_t max_queue_delay_us = 0;
    // Whether a model's plans read its weights where its first plan placed them (resident,
    // once per model). False (--share_weights=false): every plan keeps its own copies, as
    // before weights were shared; for measuring what sharing saves.
    bool share_weights = true;
    // Generate on key/value caches (server/generation_pool.h): per model and compile options,
    // generation_slots generations at once, each of up to generation_capacity tokens (prompt
    // and generated), their keys and values in a pool of pages of generation_page_size tokens
    // holding generation_cache_tokens tokens in all (0: slots × capacity, every generation
    // full at once). 0 slots: Generate recomputes the whole sequence every step
    // (docs/generation.md).
    int64_t generation_slots = 16;
    int64_t generation_capacity = 2048;
    int64_t generation_page_size = 16;
    int64_t generation_cache_tokens = 0;
    // The k of every step plan's top_k of the logits: a generation sampling with top_k in
    // [1, k] reads k (logit, id) pairs per step instead of its row of logits. 0: none.
    int64_t generation_top_k = 64;
    // Prefill plans each pool keeps, the least recently used dropped past it (no flag: the
    // default bounds their arenas; tests lower it).
    int64_t generation_prefill_plans = 16;
    // Testing only (--execute_delay_ms_for_testing): sleep this long inside every execute,
    // while it holds its plan instance, so a test can act while the request is in flight.
    int execute_delay_ms = 0;
};

} // namespace einsummable::server
