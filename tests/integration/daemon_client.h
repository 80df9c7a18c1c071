#pragma once

// What the daemon's integration tests share: the paper's FFN as a model (graph, weights, a
// request, its double-precision reference), the calls that drive it through the generated stub,
// and a daemon of a test's own with the FFN ready.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "einsummable/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/daemon_process.h"

namespace einsummable::integration {

constexpr int64_t kDModel = 1024;
constexpr int64_t kDFf = 4096;
// The runtime's bound for f32 outputs against the double reference (runtime::output_tolerance).
constexpr double kTolerance = 1e-5;

v1::GraphDef ffn_graph();
// Uniform in ±sqrt(3 / fan_in): rows of unit variance, so outputs stay of order one.
std::vector<float> random_values(int64_t n, int64_t fan_in, uint64_t seed);
std::string as_bytes(const std::vector<float>& values);
std::vector<double> as_doubles(const std::string& bytes);

std::unique_ptr<v1::Einsummable::Stub> stub_for(const std::string& address);
void with_deadline(grpc::ClientContext& context, int seconds = 60);
// Registers `graph` as `model`, the inputs in `weights` uploaded once.
grpc::Status register_graph(v1::Einsummable::Stub& stub, const std::string& model,
                            v1::GraphDef graph, const std::vector<std::string>& weights = {});
// Registers proto/examples/ffn.textproto (or `graph`) as `model` with weights w1 and w2.
grpc::Status register_ffn(v1::Einsummable::Stub& stub, const std::string& model,
                          v1::GraphDef graph = ffn_graph());
// Streams `values` as `chunks` messages of near-equal size, each with its offset; the header
// and the CRC-32 of the whole tensor ride on the first (tests/integration/uploads_test.cc sends
// the streams of older clients, without either).
grpc::Status upload(v1::Einsummable::Stub& stub, const std::string& model, const std::string& name,
                    const std::vector<float>& values, std::vector<int64_t> shape, int chunks,
                    v1::UploadTensorResponse* resp);
v1::ExecuteRequest execute_request(const std::string& model, int64_t tokens,
                                   const std::vector<float>& x);
// y = relu(x w1) w2 by ir::evaluate_graph with the BLAS block kernel, in double precision.
std::vector<double> reference_y(int64_t tokens, const std::vector<float>& x,
                                const std::vector<float>& w1, const std::vector<float>& w2);
double max_relative_error(const std::vector<double>& got, const std::vector<double>& want);

// Whether this run asks for the CUDA backend (scripts/gpu-check sets EINSUMMABLE_DAEMON_ARGS to
// "--backend=cuda --devices=0,0,0,0").
bool cuda_run();
std::string metrics_text(int metrics_port);
// Polls the metrics endpoint until `needle` appears (or ten seconds pass).
bool wait_for_metric(int metrics_port, const std::string& needle);

// A daemon of its own with 2 devices, the FFN registered, its weights uploaded and tokens=4
// compiled; null (with a test failure) when it did not start.
std::unique_ptr<v1::Einsummable::Stub>
ready_daemon(DaemonProcess& daemon, std::vector<std::string> flags, const std::vector<float>& w1,
             const std::vector<float>& w2, v1::CompileResponse* compiled);

} // namespace einsummable::integration
