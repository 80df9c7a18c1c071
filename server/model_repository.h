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

#include <atomic>
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
    std::string reason;   // why it is unavailable, or why its last reload failed
    uint64_t id = 0;      // the engine's Model::id() of the version served (READY)
    int64_t bytes = 0;    // weight bytes read from its safetensors files
    double seconds = 0.0; // how long loading took (ready or not)
};

// What the repository calls (RepositoryIndex, RepositoryModelLoad, RepositoryModelUnload, ours
// and KServe's) answer when the daemon runs without --model_repository: FailedPrecondition
// naming the flag.
absl::Status no_repository_error(const char* call);

// "LOADING", "READY", "UNAVAILABLE".
const char* repository_state_name(RepositoryModel::State state);

// The version served from `model_dir`: the greatest of its subdirectories whose name is a
// positive decimal number without a leading zero ("01", "0" and "abc" are ignored). NotFound
// naming the directory when there is none.
absl::StatusOr<int64_t> latest_version(const std::filesystem::path& model_dir);

// The checked registration request and weights of one version directory, nothing registered:
// the graph (`graph.pbtxt`, text format, or `graph.json`, the JSON mapping; both is an error
// naming both) parsed, `config` (a RegisterModelRequest with only weights and batching; may be
// empty) applied, every *.safetensors file of the directory opened, and each weight found in
// exactly one of them with the graph's dtype and shape, and every tensor of the files a weight.
// With `model.safetensors.index.json` (a sharded checkpoint, as transformers writes it) its
// `weight_map` must match the files exactly: every file it names exists, holds every tensor it
// maps there, and every tensor of the files is in it. Errors are InvalidArgument naming the file
// and the tensor.
struct RepositoryLoad {
    // A weight: the tensor in `file` holding it (its data points into the file's mapping).
    struct Weight {
        std::shared_ptr<const SafetensorsFile> file;
        const SafetensorsTensor* tensor = nullptr;
    };
    v1::RegisterModelRequest request;
    std::vector<std::shared_ptr<const SafetensorsFile>> files;
    // Per weight of request.weights(), in order.
    std::vector<Weight> weights;
    int64_t bytes = 0; // of the weights
};
absl::StatusOr<RepositoryLoad> check_version_directory(const std::string& model,
                                                       const std::filesystem::path& version_dir,
                                                       const std::string& config_text);

// The weights of a checked load as the engine takes them: views into the files' mappings, each
// keeping its file mapped for as long as the weight lives (WeightData), so no weight's bytes are
// copied or read here; the pages are read when a plan places the weight on its devices.
Engine::WeightValues repository_weight_values(const RepositoryLoad& load);

// The models of one repository and their states (thread-safe). `metrics` may be null; otherwise
// einsummable_repository_models{state} and einsummable_repository_load_seconds{model} follow
// the states.
class ModelRepository {
public:
    ModelRepository(std::filesystem::path root, std::shared_ptr<Engine> engine,
                    std::shared_ptr<Metrics> metrics);

    // Loads every model of the repository, one after another, on the calling thread; their
    // failures are their states, not this call's. An error only when the root is not a
    // readable directory (NotFound / InvalidArgument naming it). scan() then load_scanned().
    absl::Status load_all();
    // Lists the model directories of the root, each LOADING from now on (RepositoryIndex shows
    // them), loading nothing. An error only when the root is not a readable directory.
    absl::Status scan();
    // Loads the models scan() found, one after another, on the calling thread (the daemon's
    // background loader): each is registered whole when it has loaded, so requests see every
    // model either not at all or with all its weights. A model that a RepositoryModelLoad or
    // RepositoryModelUnload took in hand since the scan is left as that call left it. After
    // stop(), the models not loaded yet are UNAVAILABLE ("the server stopped before loading
    // it") and it returns when the model loading now has finished.
    void load_scanned();
    void stop() { stopped_ = true; }

    // RepositoryModelLoad: loads `name` (a directory of the root) again from disk, its
    // greatest version checked whole first. On success that version serves in one step in
    // place of the one served (Engine::load_model; requests that found the old finish on it).
    // On failure the version served, if any, keeps serving (READY, the failure its reason),
    // else the model is UNAVAILABLE, and the error names the file and tensor. NotFound when
    // `name` is not a model directory of the root; AlreadyExists when a model registered over
    // RegisterModel holds the name. Loads and unloads run one at a time.
    absl::StatusOr<RepositoryModel> load_model(const std::string& name);
    // RepositoryModelUnload: the model unregistered (if this repository registered it and it
    // is still the one served), UNAVAILABLE with reason "unloaded". NotFound when `name` is
    // not a model of the repository.
    absl::Status unload_model(const std::string& name);

    // By name.
    std::vector<RepositoryModel> models() const;
    // RepositoryIndex: models(), with the model directories of the root not loaded yet (found
    // since start: UNAVAILABLE, "not loaded"); with `ready_only`, the READY ones only.
    std::vector<RepositoryModel> index(bool ready_only) const;
    const std::filesystem::path& root() const { return root_; }
    // Whether every model found has finished loading (READY or UNAVAILABLE).
    bool settled() const;

private:
    // Loads `name` from root_/name in place of `served` (its state now; id 0 when nothing is
    // served); its state afterwards, and the error when loading failed. Caller holds
    // load_mutex_.
    std::pair<RepositoryModel, absl::Status> load(const RepositoryModel& served);
    // The model directories of the root, by name. NotFound / InvalidArgument naming the root.
    absl::StatusOr<std::vector<std::string>> model_names() const;
    std::optional<RepositoryModel> find(const std::string& name) const;
    // Checks, then registers with its weights in place of the model with id `replaces`; the
    // model's id and weight bytes. Nothing changes on error.
    absl::StatusOr<std::pair<uint64_t, int64_t>> load_version(const std::string& name,
                                                              int64_t version, uint64_t replaces);
    void set(const RepositoryModel& model);
    void publish_metrics() const; // caller holds mutex_

    const std::filesystem::path root_;
    const std::shared_ptr<Engine> engine_;
    const std::shared_ptr<Metrics> metrics_;
    struct Gauges;
    std::shared_ptr<Gauges> gauges_;
    std::mutex load_mutex_; // held by a load or unload, so they run one at a time
    std::atomic<bool> stopped_{false};
    mutable std::mutex mutex_; // guards models_
    std::vector<RepositoryModel> models_;
};

} // namespace einsummable::server
