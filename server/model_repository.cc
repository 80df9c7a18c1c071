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
#include "nlohmann/json.hpp"
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

// A file name of a directory: not empty, not "." or "..", no '/' or NUL.
bool plain_file_name(const std::string& name) {
    return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
           name.find('\0') == std::string::npos;
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
        return absl::InvalidArgumentError(absl::StrCat(
            path.string(),
            ": gives `model` or `graph`; the model's name is its directory's and its "
            "graph is graph.pbtxt or graph.json of the version directory (only `weights`, "
            "`batching` and `options` belong here)"));
    }
    *request.mutable_weights() = config.weights();
    if (config.has_batching()) {
        *request.mutable_batching() = config.batching();
    }
    if (config.has_options()) {
        *request.mutable_options() = config.options();
    }
    return absl::OkStatus();
}

// Checks `tensor` (in `file`) against the graph's declaration of weight `input`.
absl::Status check_weight(const v1::TensorDesc& input, const std::string& file,
                          const SafetensorsTensor& tensor) {
    const std::string where = absl::StrCat(file, ": tensor '", tensor.name, "'");
    const std::optional<SafetensorsDtype> wanted = safetensors_dtype(input.dtype());
    if (!wanted.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the graph declares weight '", input.name(), "' ",
                         v1::DType_Name(input.dtype()),
                         ", which safetensors weights cannot give (F32, F16, BF16, I32 or I64)"));
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
                             "' in the graph; a weight's dimensions are fixed"));
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

// The index of a sharded checkpoint, as transformers writes it.
constexpr const char* kIndexFile = "model.safetensors.index.json";

// Thrown from the JSON parser's callback at a duplicate key (nlohmann keeps the last silently, so
// a tensor mapped to two files would be read as mapped to one).
struct DuplicateKey {
    std::string key;
};

// `weight_map` of model.safetensors.index.json: tensor name -> file name (a plain name in the
// version directory). InvalidArgument naming the file, and the tensor where there is one.
absl::StatusOr<std::map<std::string, std::string>> read_index(const fs::path& path) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string text, read_file(path));
    using Json = nlohmann::json;
    std::vector<std::set<std::string>> keys; // per open object
    const auto callback = [&](int, Json::parse_event_t event, Json& parsed) {
        if (event == Json::parse_event_t::object_start) {
            keys.emplace_back();
        } else if (event == Json::parse_event_t::object_end) {
            keys.pop_back();
        } else if (event == Json::parse_event_t::key) {
            std::string key = parsed.get<std::string>();
            if (!keys.back().insert(key).second) {
                throw DuplicateKey{std::move(key)};
            }
        }
        return true;
    };
    Json index;
    try {
        index = Json::parse(text, callback);
    } catch (const DuplicateKey& duplicate) {
        return absl::InvalidArgumentError(
            absl::StrCat(path.string(), ": duplicate key '", duplicate.key, "'"));
    } catch (const Json::exception& error) {
        return absl::InvalidArgumentError(
            absl::StrCat(path.string(), ": not JSON: ", error.what()));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path.string(), ": has no `weight_map` object (tensor name -> safetensors file)"));
    }
    std::map<std::string, std::string> weight_map;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
        if (!file.is_string()) {
            return absl::InvalidArgumentError(
                absl::StrCat(path.string(), ": tensor '", tensor, "': its file is not a string"));
        }
        const std::string name = file.get<std::string>();
        if (!plain_file_name(name) || fs::path(name).extension() != ".safetensors") {
            return absl::InvalidArgumentError(
                absl::StrCat(path.string(), ": tensor '", tensor, "' is mapped to '", name,
                             "', not a .safetensors file of the version directory"));
        }
        weight_map.emplace(tensor, name);
    }
    return weight_map;
}

// Checks the files against the index's weight map (`found`: tensor -> the file holding it).
absl::Status
check_index(const fs::path& index_path, const fs::path& version_dir,
            const std::map<std::string, std::string>& weight_map,
            const std::map<std::string,
                           std::pair<const SafetensorsFile*, const SafetensorsTensor*>>& found) {
    for (const auto& [tensor, file] : weight_map) {
        std::error_code error;
        if (!fs::exists(version_dir / file, error)) {
            return absl::InvalidArgumentError(
                absl::StrCat(index_path.string(), ": tensor '", tensor, "' is mapped to ", file,
                             ", which does not exist in ", version_dir.string()));
        }
        const auto holder = found.find(tensor);
        if (holder == found.end()) {
            return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": tensor '",
                                                           tensor, "' is mapped to ", file,
                                                           ", which does not hold it"));
        }
        const std::string holder_file = fs::path(holder->second.first->path()).filename().string();
        if (holder_file != file) {
            return absl::InvalidArgumentError(
                absl::StrCat(index_path.string(), ": tensor '", tensor, "' is mapped to ", file,
                             ", which does not hold it (", holder_file, " does)"));
        }
    }
    for (const auto& [tensor, where] : found) {
        if (weight_map.count(tensor) == 0) {
            return absl::InvalidArgumentError(absl::StrCat(where.first->path(), ": tensor '",
                                                           tensor, "' is not in ", kIndexFile,
                                                           "'s weight_map"));
        }
    }
    return absl::OkStatus();
}

// The graph of a version directory: graph.pbtxt (text format) or graph.json (JSON), not both.
absl::StatusOr<v1::GraphDef> read_graph(const fs::path& version_dir) {
    const fs::path text_path = version_dir / "graph.pbtxt";
    const fs::path json_path = version_dir / "graph.json";
    bool has_text = false;
    bool has_json = false;
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string text, read_file(text_path, &has_text));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string json, read_file(json_path, &has_json));
    if (has_text && has_json) {
        return absl::InvalidArgumentError(
            absl::StrCat(version_dir.string(), ": both graph.pbtxt and graph.json; keep one"));
    }
    if (!has_text && !has_json) {
        return absl::NotFoundError(absl::StrCat(
            version_dir.string(), ": no graph.pbtxt (text format) or graph.json (JSON)"));
    }
    absl::StatusOr<v1::GraphDef> graph =
        has_text ? graphdef::parse_text(text) : graphdef::parse_json(json);
    if (!graph.ok()) {
        return prefixed((has_text ? text_path : json_path).string(), graph.status());
    }
    return graph;
}

// A model name that is a directory of the root: a plain file name not starting with '.'.
bool plain_name(const std::string& name) {
    return plain_file_name(name) && name[0] != '.';
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
    EINSUMMABLE_ASSIGN_OR_RETURN(*load.request.mutable_graph(), read_graph(version_dir));
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
        // Shared: every weight read from the file keeps it mapped (repository_weight_values).
        load.files.push_back(std::make_shared<const SafetensorsFile>(std::move(file)));
    }
    std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsTensor*>> found;
    std::map<const SafetensorsFile*, std::shared_ptr<const SafetensorsFile>> owners;
    for (const std::shared_ptr<const SafetensorsFile>& file : load.files) {
        owners.emplace(file.get(), file);
        for (const SafetensorsTensor& tensor : file->tensors()) {
            auto [it, inserted] = found.try_emplace(tensor.name, file.get(), &tensor);
            if (!inserted) {
                return absl::InvalidArgumentError(
                    absl::StrCat(file->path(), ": tensor '", tensor.name, "' is also in ",
                                 it->second.first->path(), "; a weight must be in one file"));
            }
        }
    }
    const fs::path index_path = version_dir / kIndexFile;
    bool has_index = false;
    {
        std::error_code index_error;
        has_index = fs::exists(index_path, index_error);
    }
    if (has_index) {
        EINSUMMABLE_ASSIGN_OR_RETURN(auto weight_map, read_index(index_path));
        EINSUMMABLE_RETURN_IF_ERROR(check_index(index_path, version_dir, weight_map, found));
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
                                                           "' is not an input of the graph"));
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
        load.weights.push_back({owners.at(tensor->second.first), tensor->second.second});
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

Engine::WeightValues repository_weight_values(const RepositoryLoad& load) {
    Engine::WeightValues values;
    for (const RepositoryLoad::Weight& weight : load.weights) {
        const std::span<const std::byte> data = weight.tensor->data;
        values.emplace_back(weight.tensor->name, std::make_shared<const WeightData>(
                                                     weight.file, absl::Span<const std::byte>(
                                                                      data.data(), data.size())));
    }
    return values;
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
    EINSUMMABLE_RETURN_IF_ERROR(scan());
    load_scanned();
    return absl::OkStatus();
}

absl::Status ModelRepository::scan() {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::string> names, model_names());
    std::lock_guard<std::mutex> load_lock(load_mutex_);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& name : names) {
        if (std::none_of(models_.begin(), models_.end(),
                         [&](const RepositoryModel& model) { return model.name == name; })) {
            models_.push_back(RepositoryModel{name});
        }
    }
    std::sort(models_.begin(), models_.end(),
              [](const RepositoryModel& a, const RepositoryModel& b) { return a.name < b.name; });
    publish_metrics();
    spdlog::info("model repository {}: {} model{} to load", root_.string(), names.size(),
                 names.size() == 1 ? "" : "s");
    return absl::OkStatus();
}

void ModelRepository::load_scanned() {
    std::vector<std::string> names;
    for (const RepositoryModel& model : models()) {
        names.push_back(model.name);
    }
    for (const std::string& name : names) {
        // One model at a time under the lock, so a RepositoryModelLoad or Unload called while
        // the repository loads waits for one model, not for all of them.
        std::lock_guard<std::mutex> load_lock(load_mutex_);
        std::optional<RepositoryModel> held = find(name);
        if (!held.has_value() || held->state != RepositoryModel::State::loading || held->id != 0) {
            continue; // a load or unload call took it in hand since the scan
        }
        if (stopped_) {
            RepositoryModel model{name};
            model.state = RepositoryModel::State::unavailable;
            model.reason = "the server stopped before loading it";
            set(model);
            continue;
        }
        set(load(*held).first);
    }
    int ready = 0;
    const std::vector<RepositoryModel> loaded = models();
    for (const RepositoryModel& model : loaded) {
        ready += model.state == RepositoryModel::State::ready ? 1 : 0;
    }
    spdlog::info("model repository {}: {} of {} models ready", root_.string(), ready,
                 loaded.size());
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
        engine_->load_model(load.request, repository_weight_values(load), replaces, version);
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
