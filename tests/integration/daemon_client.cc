#include "tests/integration/daemon_client.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <zlib.h>

#include "compiler/ir/spec_execution.h"
#include "kernels/cpu/block_kernel.h"
#include "proto/graph_def.h"

namespace einsummable::integration {

// An idle client channel answers the daemon's shutdown (GOAWAY and ping) only when gRPC's backup
// poller runs, every 5 s by default: poll often, so a daemon drains without waiting for the test.
const bool kPollOften = setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "50", 1) == 0;

v1::GraphDef ffn_graph() {
    std::ifstream in(std::string(EINSUMMABLE_SOURCE_DIR) + "/proto/examples/ffn.textproto");
    std::ostringstream text;
    text << in.rdbuf();
    return graphdef::parse_text(text.str()).value();
}

std::vector<float> random_values(int64_t n, int64_t fan_in, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const float bound = std::sqrt(3.0f / static_cast<float>(fan_in));
    std::uniform_real_distribution<float> dist(-bound, bound);
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) {
        v = dist(rng);
    }
    return values;
}

std::string as_bytes(const std::vector<float>& values) {
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

std::vector<double> as_doubles(const std::string& bytes) {
    std::vector<float> floats(bytes.size() / 4);
    std::memcpy(floats.data(), bytes.data(), floats.size() * 4);
    return std::vector<double>(floats.begin(), floats.end());
}

std::unique_ptr<v1::Einsummable::Stub> stub_for(const std::string& address) {
    return v1::Einsummable::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

void with_deadline(grpc::ClientContext& context, int seconds) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

grpc::Status register_graph(v1::Einsummable::Stub& stub, const std::string& model,
                            v1::GraphDef graph, const std::vector<std::string>& weights) {
    v1::RegisterModelRequest req;
    req.set_model(model);
    *req.mutable_graph() = std::move(graph);
    for (const std::string& weight : weights) {
        req.add_weights(weight);
    }
    v1::RegisterModelResponse resp;
    grpc::ClientContext context;
    with_deadline(context);
    return stub.RegisterModel(&context, req, &resp);
}

grpc::Status register_ffn(v1::Einsummable::Stub& stub, const std::string& model,
                          v1::GraphDef graph) {
    return register_graph(stub, model, std::move(graph), {"w1", "w2"});
}

grpc::Status upload(v1::Einsummable::Stub& stub, const std::string& model, const std::string& name,
                    const std::vector<float>& values, std::vector<int64_t> shape, int chunks,
                    v1::UploadTensorResponse* resp) {
    grpc::ClientContext context;
    with_deadline(context);
    std::unique_ptr<grpc::ClientWriter<v1::UploadTensorChunk>> writer =
        stub.UploadTensor(&context, resp);
    const std::string bytes = as_bytes(values);
    for (int chunk_idx = 0; chunk_idx < chunks; ++chunk_idx) {
        v1::UploadTensorChunk chunk;
        if (chunk_idx == 0) {
            chunk.set_model(model);
            chunk.set_name(name);
            chunk.set_dtype(v1::F32);
            for (int64_t size : shape) {
                chunk.add_shape(size);
            }
            chunk.set_crc32(static_cast<uint32_t>(
                ::crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size())));
        }
        const size_t begin = bytes.size() * chunk_idx / chunks;
        const size_t end = bytes.size() * (chunk_idx + 1) / chunks;
        chunk.set_offset(static_cast<int64_t>(begin));
        chunk.set_data(bytes.substr(begin, end - begin));
        if (!writer->Write(chunk)) {
            break;
        }
    }
    writer->WritesDone();
    return writer->Finish();
}

v1::ExecuteRequest execute_request(const std::string& model, int64_t tokens,
                                   const std::vector<float>& x) {
    v1::ExecuteRequest req;
    req.set_model(model);
    (*req.mutable_dims())["tokens"] = tokens;
    v1::NamedTensor* input = req.add_inputs();
    input->set_name("x");
    input->mutable_tensor()->set_dtype(v1::F32);
    input->mutable_tensor()->add_shape(tokens);
    input->mutable_tensor()->add_shape(kDModel);
    input->mutable_tensor()->set_data(as_bytes(x));
    return req;
}

std::vector<double> reference_y(int64_t tokens, const std::vector<float>& x,
                                const std::vector<float>& w1, const std::vector<float>& w2) {
    ir::Graph graph = graphdef::build_graph(ffn_graph(), {{"tokens", tokens}}).value();
    auto host = [](std::vector<int64_t> shape, const std::vector<float>& values) {
        return ir::HostTensor(ir::Box::from_shape(shape),
                              std::vector<double>(values.begin(), values.end()));
    };
    std::map<std::string, ir::HostTensor> inputs;
    inputs["x"] = host({tokens, kDModel}, x);
    inputs["w1"] = host({kDModel, kDFf}, w1);
    inputs["w2"] = host({kDFf, kDModel}, w2);
    auto outputs = ir::evaluate_graph(graph, inputs, kernels::cpu::run_block).value();
    return outputs.at("y").values();
}

double max_relative_error(const std::vector<double>& got, const std::vector<double>& want) {
    EXPECT_EQ(got.size(), want.size());
    double scale = 1.0;
    double diff = 0.0;
    for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
        scale = std::max(scale, std::abs(want[i]));
        diff = std::max(diff, std::abs(got[i] - want[i]));
    }
    return diff / scale;
}

bool cuda_run() {
    const char* extra = std::getenv("EINSUMMABLE_DAEMON_ARGS");
    return extra != nullptr && std::string(extra).find("--backend=cuda") != std::string::npos;
}

std::string metrics_text(int metrics_port) {
    return integration::http_get(metrics_port, "/metrics");
}

bool wait_for_metric(int metrics_port, const std::string& needle) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
        if (metrics_text(metrics_port).find(needle) != std::string::npos) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

std::unique_ptr<v1::Einsummable::Stub>
ready_daemon(DaemonProcess& daemon, std::vector<std::string> flags, const std::vector<float>& w1,
             const std::vector<float>& w2, v1::CompileResponse* compiled) {
    flags.push_back("--devices=2");
    flags.push_back("--synthesis_iterations=100");
    const std::string error = daemon.start(flags);
    EXPECT_EQ(error, "");
    if (!error.empty()) {
        return nullptr;
    }
    auto stub = stub_for(daemon.address());
    EXPECT_TRUE(register_ffn(*stub, "ffn").ok());
    v1::UploadTensorResponse uploaded;
    EXPECT_TRUE(upload(*stub, "ffn", "w1", w1, {kDModel, kDFf}, 2, &uploaded).ok());
    EXPECT_TRUE(upload(*stub, "ffn", "w2", w2, {kDFf, kDModel}, 2, &uploaded).ok());
    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 4;
    grpc::ClientContext context;
    with_deadline(context);
    grpc::Status status = stub->Compile(&context, compile, compiled);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return stub;
}

} // namespace einsummable::integration
