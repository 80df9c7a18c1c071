#pragma once

// The small FFN GraphDef the server's unit tests register: y = relu(x w1) w2 with x [tokens, 4]
// (tokens symbolic), w1 [4, 8], w2 [8, 4]; seeded values and the reference result.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/plan.h"
#include "server/engine.h"

namespace einsummable::server::testing {

inline constexpr int kModel = 4;
inline constexpr int kFf = 8;

inline constexpr char kFfn[] = R"pb(
  inputs {
    name: "x"
    dtype: F32
    dims { name: "tokens" symbol: "tokens" }
    dims { name: "d_model" fixed: 4 }
  }
  inputs {
    name: "w1"
    dtype: F32
    dims { name: "d_model" fixed: 4 }
    dims { name: "d_ff" fixed: 8 }
  }
  inputs {
    name: "w2"
    dtype: F32
    dims { name: "d_ff" fixed: 8 }
    dims { name: "d_model" fixed: 4 }
  }
  operators {
    name: "h"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "x", "w1" ]
  }
  operators {
    name: "a"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij->ij" }
    }
    attributes {
      key: "join"
      value { string_value: "relu" }
    }
    inputs: "h"
  }
  operators {
    name: "y"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "a", "w2" ]
  }
  saved: "y"
)pb";

// What the engine tests run on: 2 CPU devices with dgx-a100's first two GPUs' topology, 50
// synthesis iterations per exchange.
inline EngineOptions test_engine_options() {
    EngineOptions options;
    options.version = "test";
    options.topology = runtime::default_topology(2);
    options.synthesis_iterations = 50;
    return options;
}

// n values in [-1, 1) from `seed`.
inline std::vector<float> random_values(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) {
        v = dist(rng);
    }
    return values;
}

inline std::string as_bytes(const std::vector<float>& values) {
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4);
}

inline std::vector<float> as_floats(const std::string& bytes) {
    std::vector<float> values(bytes.size() / 4);
    std::memcpy(values.data(), bytes.data(), values.size() * 4);
    return values;
}

// y for x [tokens, kModel], computed in double.
inline std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w1,
                                    const std::vector<float>& w2, int tokens) {
    std::vector<float> y(tokens * kModel, 0.0f);
    for (int t = 0; t < tokens; ++t) {
        std::vector<double> a(kFf, 0.0);
        for (int f = 0; f < kFf; ++f) {
            for (int d = 0; d < kModel; ++d) {
                a[f] += double(x[t * kModel + d]) * w1[d * kFf + f];
            }
            a[f] = std::max(a[f], 0.0);
        }
        for (int d = 0; d < kModel; ++d) {
            double sum = 0.0;
            for (int f = 0; f < kFf; ++f) {
                sum += a[f] * w2[f * kModel + d];
            }
            y[t * kModel + d] = static_cast<float>(sum);
        }
    }
    return y;
}

// An Execute of `model` (the FFN's interface) on x [tokens, kModel] (f32), tokens bound in dims.
inline v1::ExecuteRequest ffn_execute_request(const std::string& model, int tokens,
                                              const std::vector<float>& x) {
    v1::ExecuteRequest req;
    req.set_model(model);
    (*req.mutable_dims())["tokens"] = tokens;
    v1::NamedTensor* input = req.add_inputs();
    input->set_name("x");
    input->mutable_tensor()->set_dtype(v1::F32);
    input->mutable_tensor()->add_shape(tokens);
    input->mutable_tensor()->add_shape(kModel);
    input->mutable_tensor()->set_data(as_bytes(x));
    return req;
}

// Uploads f32 weight `name` of `model` through the engine, in three chunks of uneven size (so
// chunk boundaries fall inside elements).
inline absl::Status upload_f32(Engine& engine, const std::string& model, const std::string& name,
                               const std::vector<float>& values,
                               const std::vector<int64_t>& shape) {
    v1::UploadTensorChunk header;
    header.set_model(model);
    header.set_name(name);
    header.set_dtype(v1::F32);
    for (int64_t size : shape) {
        header.add_shape(size);
    }
    absl::StatusOr<std::unique_ptr<WeightUpload>> upload = engine.begin_upload(header);
    if (!upload.ok()) {
        return upload.status();
    }
    const std::string bytes = as_bytes(values);
    const size_t cuts[] = {0, bytes.size() / 3, bytes.size() / 2, bytes.size()};
    for (int piece = 0; piece < 3; ++piece) {
        absl::Status status =
            (*upload)->append({reinterpret_cast<const std::byte*>(bytes.data()) + cuts[piece],
                               cuts[piece + 1] - cuts[piece]});
        if (!status.ok()) {
            return status;
        }
    }
    return (*upload)->commit();
}

} // namespace einsummable::server::testing
