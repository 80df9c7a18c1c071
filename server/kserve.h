#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kserve/grpc_predict_v2.pb.h"
#include "server/engine.h"
#include "server/model_repository.h"

namespace einsummable::server {

// The KServe v2 inference protocol (proto/kserve/grpc_predict_v2.proto) over the Engine, without
// gRPC: what the daemon's GRPCInferenceService answers (kserve_service.h), unit-tested directly.
// docs/server.md "KServe v2" is the user's description.
//
// Mapping: a registered model is a KServe model with one version: "1" for a model registered
// over RegisterModel, its version directory's number for one of the model repository; its inputs
// are the model's non-weight graph inputs, its outputs the saved tensors. ModelInfer becomes one
// Engine::execute: the inputs' shapes bind the model's symbols, request parameters choose the
// compile options. Datatypes: FP32, FP16, BF16, FP64, INT32, INT64 (typed contents: fp32, fp64,
// int and int64; the others raw).

// The only version of every model registered over RegisterModel.
inline constexpr absl::string_view kKServeModelVersion = "1";
inline constexpr absl::string_view kKServePlatform = "einsummable";
// Request parameters whose names start with this are reserved for Triton (its docs,
// "Parameters Extension"); the one Triton's frontend defines, which Triton's C++ client (so
// perf_analyzer) puts on every request:
inline constexpr absl::string_view kTritonParameterPrefix = "triton_";
inline constexpr absl::string_view kTritonEnableEmptyFinalResponse =
    "triton_enable_empty_final_response";

// The model's one KServe version: its repository version directory's number (Model::version()),
// "1" for a model registered over RegisterModel.
std::string kserve_model_version(const Model& model);

// "FP32" etc. for an ir dtype.
std::string kserve_datatype(ir::DType dtype);
// Triton's DataType enum (TYPE_FP32 etc., ModelConfig's) for an ir dtype.
inference::DataType triton_data_type(ir::DType dtype);
// The wire dtype of a KServe datatype; InvalidArgument naming `what` (e.g. "input 'x'") for a
// datatype einsummable does not compute in (INT8, BYTES, ...).
absl::StatusOr<v1::DType> from_kserve_datatype(absl::string_view datatype, absl::string_view what);

inference::ServerMetadataResponse kserve_server_metadata(const Engine& engine);

// NotFound for an unknown model or a version other than "" and kserve_model_version.
absl::StatusOr<inference::ModelMetadataResponse>
kserve_model_metadata(const Engine& engine, const inference::ModelMetadataRequest& req);

// Triton's ModelConfig extension, which perf_analyzer reads before its first request: name,
// platform, max_batch_size 0 (no batch dimension of Triton's: the inputs' shapes bind the
// symbols) and the inputs and outputs of kserve_model_metadata as Triton's ModelInput and
// ModelOutput (-1 for a symbolic dimension). NotFound as for kserve_model_metadata.
absl::StatusOr<inference::ModelConfigResponse>
kserve_model_config(const Engine& engine, const inference::ModelConfigRequest& req);

// Triton's model repository extension over `repository` (null without --model_repository:
// FailedPrecondition naming the flag). The index gives each model's repository version as its
// version, as the other calls do; InvalidArgument for a
// `repository_name` other than "" or for `parameters` (Triton's config override and files, not
// supported). Load and unload are ModelRepository::load_model and unload_model.
absl::StatusOr<inference::RepositoryIndexResponse>
kserve_repository_index(ModelRepository* repository, const inference::RepositoryIndexRequest& req);
absl::Status kserve_repository_load(ModelRepository* repository,
                                    const inference::RepositoryModelLoadRequest& req);
absl::Status kserve_repository_unload(ModelRepository* repository,
                                      const inference::RepositoryModelUnloadRequest& req);

// Ready: registered (at this version) and every weight uploaded. An unknown model is not ready
// (false, not an error: readiness probes ask about models that may not exist yet).
bool kserve_model_ready(const Engine& engine, const inference::ModelReadyRequest& req);

// The ExecuteRequest a ModelInfer stands for: the inputs' shapes bind the model's symbols.
// Request parameters (all optional):
//   devices   int64   CompileOptions.devices (0 = all the server's devices);
//   planner   string  CompileOptions.planner (dp, greedy, random, data-parallel, megatron,
//                     ulysses, row-sharded: logical::parse_planner);
//   objective string  CompileOptions.objective (bytes, time, search, and cost as an alias of
//                     bytes: logical::parse_objective); unset: time;
//   schedule  string  CompileOptions.schedule (optimized, naive, ai);
//   seed      int64   CompileOptions.seed;
//   sequence_ends  string  ExecuteRequest.sequence_ends of a model with batching, as comma-
//                     separated integers ("5,14,17": three packed prompts of 5, 9 and 3 tokens);
//                     a bad entry is InvalidArgument naming it, the ends themselves are
//                     Engine::execute's checks (not Triton's sequence_end, a sequence batcher's
//                     flag, which is refused as unknown);
//   timeout   int64   microseconds, at least 0 (negative: InvalidArgument naming the value);
//                     handled by kserve_model_infer;
//   priority  —       accepted and ignored (one queue);
//   triton_enable_empty_final_response  bool  accepted (a streaming call's flag: ModelInfer
//                     answers once, so it changes nothing), another type is InvalidArgument.
// Any other name starting with triton_ is InvalidArgument naming it, as in Triton (the prefix
// is Triton's; the parameter may mean something einsummabled would not do). Anything else
// (Triton's sequence_* parameters, unknown names) and any tensor parameter
// (shared memory, classification) is InvalidArgument naming the parameter. InvalidArgument also
// names the input and dimension for datatype, rank and fixed-size mismatches, a missing or
// unknown input, and two inputs binding one symbol to different sizes; NotFound for a version
// other than "" and kserve_model_version. An input with contents in a request that has
// raw_input_contents is InvalidArgument naming the input (as in Triton). Byte counts, weights and
// outputs are Engine::execute's checks.
absl::StatusOr<v1::ExecuteRequest> kserve_execute_request(const Model& model,
                                                          const inference::ModelInferRequest& req);

// One inference: kserve_execute_request, Engine::execute, outputs as raw little-endian bytes
// (raw_output_contents, one per output in order). `cancelled` as for Engine::execute; a
// `timeout` parameter adds DeadlineExceeded after that many microseconds; one too large for the
// clock (2^63 ns, about 9.2e15 µs, and more) adds no deadline, the call's own still applies.
absl::StatusOr<inference::ModelInferResponse>
kserve_model_infer(Engine& engine, const inference::ModelInferRequest& req,
                   const CancelCheck& cancelled = nullptr);

} // namespace einsummable::server
