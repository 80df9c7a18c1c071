#pragma once

// The model repository (--model_repository DIR; docs/server.md "Model repository"): every model
// under DIR loaded at start and served with no client, after Triton's layout:
//   DIR/<model>/config.pbtxt            optional: a RegisterModelRequest in text format giving
//                                       only `weights` and `batching`
//   DIR/<model>/<version>/graph.pbtxt   the GraphDef in text format (symbolic dimensions)
//   DIR/<model>/<version>/*.safetensors its weights (server/safetensors.h)
// Versions are directories named by a positive decimal number without a leading zero; other
// names are ignored, and the greatest version is served. A model is checked whole (graph,
// config, every weight present once with the graph's dtype and shape, no tensor that is not a
// weight) before it is registered, and a model that fails any check is not registered at all:
// its state is UNAVAILABLE with the reason, logged, and the other models load as before.
// Registering over gRPC keeps working beside the repository's models.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "einsummable/v1/service.pb.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/safetensors.h"

namespace einsummable::server {

// What the repository holds for one model.
struct RepositoryModel {
    enum class State { loading, ready, unavailable };

    std::string name;
    int64_t version = 0; // 0 until the version directory is chosen
    State state = State::loading;
    std::string reason;   // why it is unavailable
    int64_t bytes = 0;    // weight bytes read from its safetensors files
    double seconds = 0.0; // how long loading took (ready or not)
};

// "LOADING", "READY", "UNAVAILABLE".
const char* repository_state_name(RepositoryModel::State state);

// The version served from `model_dir`: the greatest of its subdirectories whose name is a
// positive decimal number without a leading zero ("01", "0" and "abc" are ignored). NotFound
// naming the directory when there is none.
absl::StatusOr<int64_t> latest_version(const std::filesystem::path& model_dir);

// The checked registration request and weights of one version directory, nothing registered:
// `graph.pbtxt` parsed, `config` (a RegisterModelRequest with only weights and batching; may be
// empty) applied, every *.safetensors file of the directory opened, and each weight found in
// exactly one of them with the graph's dtype and shape, and every tensor of the files a weight.
// Errors are InvalidArgument (Unimplemented for I32/I64 weights, which the IR does not have yet)
// naming the file and the tensor.
struct RepositoryLoad {
    v1::RegisterModelRequest request;
    std::vector<SafetensorsFile> files;
    // Per weight of request.weights(), in order: the tensor in `files` holding it.
    std::vector<const SafetensorsTensor*> weights;
    int64_t bytes = 0; // of the weights
};
absl::StatusOr<RepositoryLoad> check_version_directory(const std::string& model,
                                                       const std::filesystem::path& version_dir,
                                                       const std::string& config_text);

// The models of one repository and their states (thread-safe). `metrics` may be null; otherwise
// einsummable_repository_models{state} and einsummable_repository_load_seconds{model} follow
// the states.
class ModelRepository {
public:
    ModelRepository(std::filesystem::path root, std::shared_ptr<Engine> engine,
                    std::shared_ptr<Metrics> metrics);

    // Loads every model of the repository, one after another, on the calling thread; their
    // failures are their states, not this call's. An error only when the root is not a
    // readable directory (NotFound / InvalidArgument naming it).
    absl::Status load_all();

    // By name.
    std::vector<RepositoryModel> models() const;
    // Whether every model found has finished loading (READY or UNAVAILABLE).
    bool settled() const;

private:
    // Loads `name` from root_/name; its state afterwards.
    void load(const std::string& name);
    // Checks, registers and uploads; the weight bytes. Nothing stays registered on error.
    absl::StatusOr<int64_t> load_version(const std::string& name, int64_t version);
    void set(const RepositoryModel& model);
    void publish_metrics() const; // caller holds mutex_

    const std::filesystem::path root_;
    const std::shared_ptr<Engine> engine_;
    const std::shared_ptr<Metrics> metrics_;
    struct Gauges;
    std::shared_ptr<Gauges> gauges_;
    mutable std::mutex mutex_; // guards models_
    std::vector<RepositoryModel> models_;
};

} // namespace einsummable::server
