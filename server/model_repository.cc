#include "server/model_repository.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "prometheus/gauge.h"
#include "proto/graph_def.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {

namespace fs = std::filesystem;

namespace {

// The first error of a text-format parse, as graphdef::parse_text words it.
class FirstError : public google::protobuf::io::ErrorCollector {
public:
    void AddError(int line, google::protobuf::io::ColumnNumber column,
                  const std::string& message) override {
        if (error_.empty()) {
            error_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
        }
    }
    const std::string& error() const { return error_; }

private:
    std::string error_;
};

// The whole file; `exists` false when it is absent (not an error).
absl::StatusOr<std::string> read_file(const fs::path& path, bool* exists = nullptr) {
    std::error_code error;
    if (!fs::exists(path, error)) {
        if (exists != nullptr) {
            *exists = false;
            return std::string();
        }
        return absl::NotFoundError(absl::StrCat(path.string(), ": no such file"));
    }
    if (exists != nullptr) {
        *exists = true;
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    if (!in) {
        return absl::InvalidArgumentError(absl::StrCat(path.string(), ": cannot read the file"));
    }
    return contents.str();
}

// `status` with "<prefix>: " before its message.
absl::Status prefixed(const std::string& prefix, const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

std::optional<SafetensorsDtype> safetensors_dtype(v1::DType dtype) {
    switch (dtype) {
    case v1::F32:
        return SafetensorsDtype::f32;
    case v1::F16:
        return SafetensorsDtype::f16;
    case v1::BF16:
        return SafetensorsDtype::bf16;
    case v1::I32:
        return SafetensorsDtype::i32;
    case v1::I64:
        return SafetensorsDtype::i64;
    default:
        return std::nullopt;
    }
}

std::string shape_text(const std::vector<int64_t>& shape) {
    return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The config: a RegisterModelRequest giving only weights and batching.
absl::Status apply_config(const std::string& text, const fs::path& path,
                          v1::RegisterModelRequest& request) {
    v1::RegisterModelRequest config;
    FirstError errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    if (!parser.ParseFromString(text, &config)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path.string(), ": ", errors.error().empty() ? "cannot parse" : errors.error()));
    }
    if (!config.model().empty() || config.has_graph()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path.string(),
                         ": gives `model` or `graph`; the model's name is its directory's and its "
                         "graph is graph.pbtxt of the version directory (only `weights` and "
                         "`batching` belong here)"));
    }
    *request.mutable_weights() = config.weights();
    if (config.has_batching()) {
        *request.mutable_batching() = config.batching();
    }
    return absl::OkStatus();
}

// Checks `tensor` (in `file`) against the graph's declaration of weight `input`.
absl::Status check_weight(const v1::TensorDesc& input, const std::string& file,
                          const SafetensorsTensor& tensor) {
    const std::string where = absl::StrCat(file, ": tensor '", tensor.name, "'");
    if (tensor.dtype == SafetensorsDtype::i32 || tensor.dtype == SafetensorsDtype::i64) {
        return absl::UnimplementedError(
            absl::StrCat(where, " is ", safetensors_dtype_name(tensor.dtype),
                         ": integer weights are not supported yet (the IR has no integer dtype; "
                         "issue 36)"));
    }
    const std::optional<SafetensorsDtype> wanted = safetensors_dtype(input.dtype());
    if (!wanted.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the graph declares weight '", input.name(), "' ",
                         v1::DType_Name(input.dtype()),
                         ", which safetensors weights cannot give (F32, F16 or BF16)"));
    }
    if (tensor.dtype != *wanted) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " is ", safetensors_dtype_name(tensor.dtype),
                         ", but the graph declares ", safetensors_dtype_name(*wanted)));
    }
    std::vector<int64_t> shape;
    for (const v1::Dimension& dim : input.dims()) {
        if (dim.size_case() != v1::Dimension::kFixed) {
            return absl::InvalidArgumentError(
                absl::StrCat("weight '", input.name(), "' has a symbolic dimension '", dim.symbol(),
                             "' in graph.pbtxt; a weight's dimensions are fixed"));
        }
        shape.push_back(dim.fixed());
    }
    if (tensor.shape != shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " has shape ", shape_text(tensor.shape),
                         ", but the graph declares ", shape_text(shape)));
    }
    return absl::OkStatus();
}

// The checked model's weights, copied out of the mapped files once (WeightBytes owns its bytes;
// a view into the mapping is left for later, docs/server.md).
Engine::WeightValues weight_values(const RepositoryLoad& load) {
    Engine::WeightValues values;
    for (const SafetensorsTensor* tensor : load.weights) {
        values.emplace_back(tensor->name, std::make_shared<const std::vector<std::byte>>(
                                              tensor->data.begin(), tensor->data.end()));
    }
    return values;
}

// A model name that is a directory of the root: not empty, not "." or "..", no '/'.
bool plain_name(const std::string& name) {
    return !name.empty() && name != "." && name != ".." && name[0] != '.' &&
           name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

} // namespace

absl::Status no_repository_error(const char* call) {
    return absl::FailedPreconditionError(
        absl::StrCat(call, ": the server runs without a model repository (start einsummabled "
                           "with --model_repository=DIR)"));
}

const char* repository_state_name(RepositoryModel::State state) {
    switch (state) {
    case RepositoryModel::State::loading:
        return "LOADING";
    case RepositoryModel::State::ready:
        return "READY";
    case RepositoryModel::State::unavailable:
        return "UNAVAILABLE";
    }
    return "UNAVAILABLE";
}

absl::StatusOr<int64_t> latest_version(const fs::path& model_dir) {
    std::error_code error;
    int64_t latest = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(model_dir, error)) {
        const std::string name = entry.path().filename().string();
        // Triton's rule: a version is a number; "0..." names are not versions.
        // A broken entry is not a version; it does not make the listing fail.
        std::error_code entry_error;
        if (name.empty() || name.size() > 18 || name[0] == '0' ||
            !std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); }) ||
            !entry.is_directory(entry_error)) {
            continue;
        }
        latest = std::max(latest, static_cast<int64_t>(std::stoll(name)));
    }
    if (error) {
        return absl::InvalidArgumentError(
            absl::StrCat(model_dir.string(), ": cannot list the directory: ", error.message()));
    }
    if (latest == 0) {
        return absl::NotFoundError(
            absl::StrCat(model_dir.string(),
                         ": no version directory (a positive number without leading zeros)"));
    }
    return latest;
}

absl::StatusOr<RepositoryLoad> check_version_directory(const std::string& model,
                                                       const fs::path& version_dir,
                                                       const std::string& config_text) {
    RepositoryLoad load;
    load.request.set_model(model);
    const fs::path graph_path = version_dir / "graph.pbtxt";
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string graph_text, read_file(graph_path));
    absl::StatusOr<v1::GraphDef> graph = graphdef::parse_text(graph_text);
    if (!graph.ok()) {
        return prefixed(graph_path.string(), graph.status());
    }
    *load.request.mutable_graph() = *std::move(graph);
    EINSUMMABLE_RETURN_IF_ERROR(
        apply_config(config_text, version_dir.parent_path() / "config.pbtxt", load.request));

    // Every *.safetensors file, in name order, and which holds each tensor.
    std::vector<fs::path> paths;
    std::error_code error;
    for (const fs::directory_entry& entry : fs::directory_iterator(version_dir, error)) {
        if (entry.path().extension() == ".safetensors") {
            paths.push_back(entry.path());
        }
    }
    if (error) {
        return absl::InvalidArgumentError(
            absl::StrCat(version_dir.string(), ": cannot list the directory: ", error.message()));
    }
    std::sort(paths.begin(), paths.end());
    for (const fs::path& path : paths) {
        EINSUMMABLE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
        load.files.push_back(std::move(file));
    }
    std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsTensor*>> found;
    for (const SafetensorsFile& file : load.files) {
        for (const SafetensorsTensor& tensor : file.tensors()) {
            auto [it, inserted] = found.try_emplace(tensor.name, &file, &tensor);
            if (!inserted) {
                return absl::InvalidArgumentError(
                    absl::StrCat(file.path(), ": tensor '", tensor.name, "' is also in ",
                                 it->second.first->path(), "; a weight must be in one file"));
            }
        }
    }

    // The weights: the config's, else every graph input the files hold.
    std::map<std::string, const v1::TensorDesc*> inputs;
    for (const v1::TensorDesc& input : load.request.graph().inputs()) {
        inputs.emplace(input.name(), &input);
    }
    if (load.request.weights().empty()) {
        for (const v1::TensorDesc& input : load.request.graph().inputs()) {
            if (found.count(input.name()) > 0) {
                load.request.add_weights(input.name());
            }
        }
    }
    const std::string files_text =
        paths.empty() ? "none"
                      : absl::StrJoin(paths, ", ", [](std::string* out, const fs::path& path) {
                            out->append(path.filename().string());
                        });
    std::set<std::string> weights;
    for (const std::string& weight : load.request.weights()) {
        const auto input = inputs.find(weight);
        if (input == inputs.end()) {
            return absl::InvalidArgumentError(absl::StrCat(version_dir.parent_path().string(),
                                                           "/config.pbtxt: weight '", weight,
                                                           "' is not an input of graph.pbtxt"));
        }
        const auto tensor = found.find(weight);
        if (tensor == found.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat(version_dir.string(), ": weight '", weight,
                             "' of the graph is in no safetensors file (files: ", files_text, ")"));
        }
        EINSUMMABLE_RETURN_IF_ERROR(
            check_weight(*input->second, tensor->second.first->path(), *tensor->second.second));
        weights.insert(weight);
        load.weights.push_back(tensor->second.second);
        load.bytes += static_cast<int64_t>(tensor->second.second->data.size());
    }
    for (const auto& [name, where] : found) {
        if (weights.count(name) == 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                where.first->path(), ": tensor '", name, "' is not a weight of the graph",
                inputs.count(name) > 0 ? " (config.pbtxt makes it an input Execute gives)" : ""));
        }
    }
    return load;
}

struct ModelRepository::Gauges {
    prometheus::Family<prometheus::Gauge>* models = nullptr;
    prometheus::Family<prometheus::Gauge>* seconds = nullptr;
};

ModelRepository::ModelRepository(fs::path root, std::shared_ptr<Engine> engine,
                                 std::shared_ptr<Metrics> metrics)
    : root_(std::move(root)), engine_(std::move(engine)), metrics_(std::move(metrics)) {
    if (metrics_ != nullptr) {
        gauges_ = std::make_shared<Gauges>();
        gauges_->models = &prometheus::BuildGauge()
                               .Name("einsummable_repository_models")
                               .Help("Models of --model_repository by state: LOADING, READY, "
                                     "UNAVAILABLE (docs/server.md \"Model repository\")")
                               .Register(*metrics_->registry());
        gauges_->seconds = &prometheus::BuildGauge()
                                .Name("einsummable_repository_load_seconds")
                                .Help("How long loading a model of --model_repository took, "
                                      "by model (ready or not)")
                                .Register(*metrics_->registry());
        publish_metrics();
    }
}

absl::StatusOr<std::vector<std::string>> ModelRepository::model_names() const {
    std::error_code error;
    if (!fs::is_directory(root_, error)) {
        return absl::NotFoundError(
            absl::StrCat("--model_repository=", root_.string(), ": not a directory"));
    }
    std::vector<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(root_, error)) {
        std::error_code entry_error;
        if (entry.is_directory(entry_error) && plain_name(entry.path().filename().string())) {
            names.push_back(entry.path().filename().string());
        }
    }
    if (error) {
        return absl::InvalidArgumentError(absl::StrCat("--model_repository=", root_.string(),
                                                       ": cannot list it: ", error.message()));
    }
    std::sort(names.begin(), names.end());
    return names;
}

absl::Status ModelRepository::load_all() {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::string> names, model_names());
    std::lock_guard<std::mutex> load_lock(load_mutex_);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const std::string& name : names) {
            models_.push_back(RepositoryModel{name});
        }
        publish_metrics();
    }
    spdlog::info("model repository {}: {} model{} to load", root_.string(), names.size(),
                 names.size() == 1 ? "" : "s");
    for (const std::string& name : names) {
        set(load(RepositoryModel{name}).first);
    }
    int ready = 0;
    for (const RepositoryModel& model : models()) {
        ready += model.state == RepositoryModel::State::ready ? 1 : 0;
    }
    spdlog::info("model repository {}: {} of {} models ready", root_.string(), ready, names.size());
    return absl::OkStatus();
}

std::pair<RepositoryModel, absl::Status> ModelRepository::load(const RepositoryModel& served) {
    const std::string& name = served.name;
    const auto start = std::chrono::steady_clock::now();
    RepositoryModel model{name};
    absl::StatusOr<std::pair<uint64_t, int64_t>> loaded = absl::UnknownError("");
    absl::StatusOr<int64_t> version = latest_version(root_ / name);
    if (version.ok()) {
        model.version = *version;
        if (served.id == 0) {
            set(model); // LOADING; a model served stays READY while its new version loads
        }
        spdlog::info("model '{}' version {}: loading from {}", name, *version,
                     (root_ / name / std::to_string(*version)).string());
        loaded = load_version(name, *version, served.id);
    } else {
        loaded = version.status();
    }
    model.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (loaded.ok()) {
        model.state = RepositoryModel::State::ready;
        model.id = loaded->first;
        model.bytes = loaded->second;
        spdlog::info("model '{}' version {}: READY ({} weight bytes in {:.3f} s)", name,
                     model.version, model.bytes, model.seconds);
        return {model, absl::OkStatus()};
    }
    if (served.id != 0) {
        // The version served keeps serving; the failed load is its reason until the next one.
        RepositoryModel kept = served;
        kept.reason = absl::StrCat("loading version ", model.version, " failed, version ",
                                   served.version, " serves: ", loaded.status().message());
        spdlog::error("model '{}': {}", name, kept.reason);
        return {kept, loaded.status()};
    }
    model.state = RepositoryModel::State::unavailable;
    model.reason = std::string(loaded.status().message());
    spdlog::error("model '{}'{}: UNAVAILABLE, not served: {}", name,
                  model.version > 0 ? absl::StrCat(" version ", model.version) : "", model.reason);
    return {model, loaded.status()};
}

absl::StatusOr<std::pair<uint64_t, int64_t>>
ModelRepository::load_version(const std::string& name, int64_t version, uint64_t replaces) {
    bool has_config = false;
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string config,
                                 read_file(root_ / name / "config.pbtxt", &has_config));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        RepositoryLoad load,
        check_version_directory(name, root_ / name / std::to_string(version), config));
    spdlog::info("model '{}' version {}: checked {} weight{} ({} bytes) in {} file{}{}", name,
                 version, load.weights.size(), load.weights.size() == 1 ? "" : "s", load.bytes,
                 load.files.size(), load.files.size() == 1 ? "" : "s",
                 has_config ? ", with config.pbtxt" : "");
    absl::StatusOr<std::shared_ptr<const Model>> model =
        engine_->load_model(load.request, weight_values(load), replaces);
    if (absl::IsAlreadyExists(model.status()) && replaces == 0) {
        return absl::AlreadyExistsError(
            absl::StrCat("model '", name,
                         "' is registered over RegisterModel; the repository does not replace "
                         "it (unregister it first)"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(model.status());
    return std::make_pair((*model)->id(), load.bytes);
}

std::optional<RepositoryModel> ModelRepository::find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const RepositoryModel& model : models_) {
        if (model.name == name) {
            return model;
        }
    }
    return std::nullopt;
}

absl::StatusOr<RepositoryModel> ModelRepository::load_model(const std::string& name) {
    std::error_code error;
    if (!plain_name(name) || !fs::is_directory(root_ / name, error)) {
        return absl::NotFoundError(absl::StrCat("model '", name, "': no directory ",
                                                (root_ / name).string(), " in --model_repository"));
    }
    std::lock_guard<std::mutex> load_lock(load_mutex_);
    RepositoryModel served{name};
    if (std::optional<RepositoryModel> held = find(name)) {
        served = *held;
    } else {
        std::lock_guard<std::mutex> lock(mutex_);
        models_.push_back(served);
        std::sort(
            models_.begin(), models_.end(),
            [](const RepositoryModel& a, const RepositoryModel& b) { return a.name < b.name; });
    }
    // The model this repository registered, unless it was unregistered over UnregisterModel
    // since: then the name is free, or another's.
    if (served.id != 0) {
        absl::StatusOr<std::shared_ptr<const Model>> current = engine_->find_model(name);
        if (!current.ok() || (*current)->id() != served.id) {
            served.id = 0;
        }
    }
    auto [model, status] = load(served);
    set(model);
    if (!status.ok()) {
        return status;
    }
    return model;
}

absl::Status ModelRepository::unload_model(const std::string& name) {
    std::lock_guard<std::mutex> load_lock(load_mutex_);
    std::optional<RepositoryModel> held = find(name);
    if (!held.has_value()) {
        return absl::NotFoundError(
            absl::StrCat("model '", name, "' is not a model of --model_repository=", root_.string(),
                         " loaded since start"));
    }
    if (held->id != 0) {
        absl::StatusOr<std::shared_ptr<const Model>> current = engine_->find_model(name);
        // Only the model this repository registered; one registered over RegisterModel since
        // is not the repository's to unload.
        if (current.ok() && (*current)->id() == held->id) {
            v1::UnregisterModelRequest request;
            request.set_model(name);
            EINSUMMABLE_RETURN_IF_ERROR(engine_->unregister_model(request));
        }
    }
    RepositoryModel model{name};
    model.version = held->version;
    model.state = RepositoryModel::State::unavailable;
    model.reason = "unloaded";
    set(model);
    spdlog::info("model '{}': unloaded", name);
    return absl::OkStatus();
}

std::vector<RepositoryModel> ModelRepository::index(bool ready_only) const {
    std::vector<RepositoryModel> out = models();
    if (!ready_only) {
        if (absl::StatusOr<std::vector<std::string>> names = model_names(); names.ok()) {
            for (const std::string& name : *names) {
                if (std::none_of(out.begin(), out.end(),
                                 [&](const RepositoryModel& m) { return m.name == name; })) {
                    RepositoryModel model{name};
                    model.state = RepositoryModel::State::unavailable;
                    model.reason = "not loaded";
                    out.push_back(model);
                }
            }
        }
        std::sort(out.begin(), out.end(), [](const RepositoryModel& a, const RepositoryModel& b) {
            return a.name < b.name;
        });
        return out;
    }
    out.erase(std::remove_if(out.begin(), out.end(),
                             [](const RepositoryModel& m) {
                                 return m.state != RepositoryModel::State::ready;
                             }),
              out.end());
    return out;
}

void ModelRepository::set(const RepositoryModel& model) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (RepositoryModel& held : models_) {
        if (held.name == model.name) {
            held = model;
        }
    }
    publish_metrics();
}

void ModelRepository::publish_metrics() const {
    if (gauges_ == nullptr) {
        return;
    }
    std::map<RepositoryModel::State, int> counts;
    for (const RepositoryModel& model : models_) {
        ++counts[model.state];
        if (model.state != RepositoryModel::State::loading) {
            gauges_->seconds->Add({{"model", model.name}}).Set(model.seconds);
        }
    }
    for (RepositoryModel::State state :
         {RepositoryModel::State::loading, RepositoryModel::State::ready,
          RepositoryModel::State::unavailable}) {
        gauges_->models->Add({{"state", repository_state_name(state)}})
            .Set(static_cast<double>(counts[state]));
    }
}

std::vector<RepositoryModel> ModelRepository::models() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return models_;
}

bool ModelRepository::settled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::none_of(models_.begin(), models_.end(), [](const RepositoryModel& model) {
        return model.state == RepositoryModel::State::loading;
    });
}

} // namespace einsummable::server
