// The CPU backend on hand-built ExecGraphs: a matmul split in k over two devices against a direct
// computation (and the bytes its copies move), repeated runs on the same arenas, f16/bf16
// storage through kernels and aggregates, arena bytes reused by later buffers under four devices
// with two workers each, a failing kernel, and the checks of prepare(), write_buffer() and
// read_buffer().

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/physical/exec_graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/cpu_executable.h"

namespace einsummable::runtime::cpu {
namespace {

using ir::Box;
using ir::DType;
using ir::Interval;
using physical::BufferId;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 0x5eed7e57;

// A seeded generator that prints its seed, so a failure can be replayed.
std::mt19937_64 seeded_rng(const std::string& test) {
    std::cout << test << ": seed " << kSeed << "\n";
    return std::mt19937_64(kSeed);
}

Box box2(Interval rows, Interval cols) {
    return Box({rows, cols});
}

ir::TensorType matrix_type(DType dtype, int64_t rows, int64_t cols) {
    return {dtype, {{"rows", rows}, {"cols", cols}}};
}

// Builds ExecGraphs by hand: buffers get offsets from a per-device bump allocator (64-byte
// aligned) unless placed explicitly, and arena_bytes grows to cover them.
class GraphBuilder {
public:
    explicit GraphBuilder(int devices) : next_(devices, 0) {
        graph_.devices = devices;
        graph_.arena_bytes.assign(devices, 0);
    }

    BufferId buffer(int device, DType dtype, Box box, std::string tensor, bool persistent = false) {
        const BufferId id =
            buffer_at(device, dtype, std::move(box), std::move(tensor), next_[device], persistent);
        next_[device] = align(graph_.buffers[id].offset + graph_.buffers[id].bytes());
        return id;
    }

    // A buffer at a chosen offset (to share bytes with another one).
    BufferId buffer_at(int device, DType dtype, Box box, std::string tensor, int64_t offset,
                       bool persistent = false) {
        physical::Buffer buffer;
        buffer.device = device;
        buffer.dtype = dtype;
        buffer.box = std::move(box);
        buffer.tensor = std::move(tensor);
        buffer.persistent = persistent;
        buffer.offset = offset;
        graph_.arena_bytes[device] =
            std::max(graph_.arena_bytes[device], align(offset + buffer.bytes()));
        graph_.buffers.push_back(std::move(buffer));
        return static_cast<BufferId>(graph_.buffers.size()) - 1;
    }

    // Reserves `bytes` on `device` and returns their offset.
    int64_t reserve(int device, int64_t bytes) {
        const int64_t offset = next_[device];
        next_[device] = align(offset + bytes);
        graph_.arena_bytes[device] = std::max(graph_.arena_bytes[device], next_[device]);
        return offset;
    }

    int slice(BufferId in, BufferId out, std::vector<int> deps = {}) {
        return add(NodeKind::slice, device_of(out), {in}, {out}, std::move(deps));
    }
    int copy(BufferId in, BufferId out, std::vector<int> deps = {}) {
        return add(NodeKind::copy, device_of(out), {in}, {out}, std::move(deps));
    }
    int aggregate(ir::AggOp agg, std::vector<BufferId> ins, BufferId out,
                  std::vector<int> deps = {}) {
        const int node =
            add(NodeKind::aggregate, device_of(out), std::move(ins), {out}, std::move(deps));
        graph_.nodes[node].agg = agg;
        return node;
    }
    int concat(std::vector<BufferId> ins, BufferId out, std::vector<int> deps = {}) {
        return add(NodeKind::concat, device_of(out), std::move(ins), {out}, std::move(deps));
    }
    // A kernel whose function spec is the buffers' boxes.
    int kernel(const ir::Operator& op, int function, std::vector<BufferId> ins,
               std::vector<BufferId> outs, std::vector<int> deps = {}) {
        ir::FunctionSpec spec;
        for (BufferId in : ins) {
            spec.inputs.push_back(graph_.buffers[in].box);
        }
        for (BufferId out : outs) {
            spec.outputs.push_back(graph_.buffers[out].box);
        }
        const int device = device_of(outs[0]);
        const int node =
            add(NodeKind::kernel, device, std::move(ins), std::move(outs), std::move(deps));
        graph_.nodes[node].op = &op;
        graph_.nodes[node].function = function;
        graph_.nodes[node].spec = std::move(spec);
        return node;
    }

    ExecGraph& graph() { return graph_; }

private:
    static int64_t align(int64_t bytes) { return (bytes + 63) / 64 * 64; }
    int device_of(BufferId id) const { return graph_.buffers[id].device; }

    int add(NodeKind kind, int device, std::vector<BufferId> ins, std::vector<BufferId> outs,
            std::vector<int> deps) {
        ExecNode node;
        node.kind = kind;
        node.device = device;
        node.inputs = std::move(ins);
        node.outputs = std::move(outs);
        node.deps = std::move(deps);
        graph_.nodes.push_back(std::move(node));
        return static_cast<int>(graph_.nodes.size()) - 1;
    }

    ExecGraph graph_;
    std::vector<int64_t> next_;
};

std::vector<float> random_floats(int64_t n, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) {
        v = value(rng);
    }
    return values;
}

template <typename T>
absl::Status write(Executable& exe, BufferId id, const std::vector<T>& values) {
    return exe.write_buffer(id,
                            absl::MakeConstSpan(reinterpret_cast<const std::byte*>(values.data()),
                                                values.size() * sizeof(T)));
}

template <typename T>
std::vector<T> read(Executable& exe, BufferId id, int64_t n) {
    std::vector<T> values(n);
    absl::Status status = exe.read_buffer(
        id, absl::MakeSpan(reinterpret_cast<std::byte*>(values.data()), n * sizeof(T)));
    EXPECT_TRUE(status.ok()) << status;
    return values;
}

// C = A B for row-major A [m, k] and B [k, n], in double.
std::vector<double> matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                           int64_t k, int64_t n) {
    std::vector<double> c(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t p = 0; p < k; ++p) {
            for (int64_t j = 0; j < n; ++j) {
                c[i * n + j] += static_cast<double>(a[i * k + p]) * b[p * n + j];
            }
        }
    }
    return c;
}

ir::OperatorPtr must(absl::StatusOr<ir::OperatorPtr> op) {
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

std::unique_ptr<Executable> must_prepare(Backend& backend, const ExecGraph& graph) {
    absl::StatusOr<std::unique_ptr<Executable>> exe = backend.prepare(graph);
    EXPECT_TRUE(exe.ok()) << exe.status();
    return exe.ok() ? *std::move(exe) : nullptr;
}

// C [m, n] = A [m, k] B [k, n] with k split at k_split over two devices and n split at n_split
// on each: A and B live on device 0, which slices them and copies the second k-half to device
// 1; each device runs two kernels (one per n-half); device 1 copies its partials back, device 0
// sums them per n-half and concatenates the halves into C.
struct SplitMatmul {
    static constexpr int64_t m = 7, k = 10, n = 9, k_split = 6, n_split = 4;

    SplitMatmul() : builder(2) {
        op = must(ir::make_matmul(matrix_type(DType::f32, m, k), matrix_type(DType::f32, k, n)));
        const Interval rows{0, m}, k0{0, k_split}, k1{k_split, k}, n0{0, n_split}, n1{n_split, n};
        GraphBuilder& g = builder;
        a = g.buffer(0, DType::f32, box2(rows, {0, k}), "A", true);
        b = g.buffer(0, DType::f32, box2({0, k}, {0, n}), "B", true);
        c = g.buffer(0, DType::f32, box2(rows, {0, n}), "C", true);
        const BufferId a0 = g.buffer(0, DType::f32, box2(rows, k0), "A");
        const BufferId b0 = g.buffer(0, DType::f32, box2(k0, {0, n}), "B");
        const BufferId a1_src = g.buffer(0, DType::f32, box2(rows, k1), "A");
        const BufferId b1_src = g.buffer(0, DType::f32, box2(k1, {0, n}), "B");
        const BufferId a1 = g.buffer(1, DType::f32, box2(rows, k1), "A");
        const BufferId b1 = g.buffer(1, DType::f32, box2(k1, {0, n}), "B");
        const int slice_a0 = g.slice(a, a0);
        const int slice_b0 = g.slice(b, b0);
        const int slice_a1 = g.slice(a, a1_src);
        const int slice_b1 = g.slice(b, b1_src);
        const int copy_a1 = g.copy(a1_src, a1, {slice_a1});
        const int copy_b1 = g.copy(b1_src, b1, {slice_b1});
        // Per device, B's k-half split in n, then one kernel per n-half.
        const BufferId a_half[2] = {a0, a1};
        const BufferId b_half[2] = {b0, b1};
        const int a_ready[2] = {slice_a0, copy_a1};
        const int b_ready[2] = {slice_b0, copy_b1};
        const Interval k_half[2] = {k0, k1};
        const Interval n_half[2] = {n0, n1};
        BufferId partial[2][2];
        int partial_ready[2][2];
        for (int d = 0; d < 2; ++d) {
            for (int h = 0; h < 2; ++h) {
                const BufferId b_block = g.buffer(d, DType::f32, box2(k_half[d], n_half[h]), "B");
                const int sliced = g.slice(b_half[d], b_block, {b_ready[d]});
                partial[d][h] = g.buffer(d, DType::f32, box2(rows, n_half[h]), "C");
                partial_ready[d][h] = g.kernel(*op, 2 * d + h, {a_half[d], b_block},
                                               {partial[d][h]}, {a_ready[d], sliced});
            }
        }
        std::vector<BufferId> halves;
        std::vector<int> halves_ready;
        for (int h = 0; h < 2; ++h) {
            const BufferId moved = g.buffer(0, DType::f32, box2(rows, n_half[h]), "C");
            const int copied = g.copy(partial[1][h], moved, {partial_ready[1][h]});
            halves.push_back(g.buffer(0, DType::f32, box2(rows, n_half[h]), "C"));
            halves_ready.push_back(g.aggregate(ir::AggOp::sum, {partial[0][h], moved},
                                               halves.back(), {partial_ready[0][h], copied}));
        }
        g.concat(halves, c, halves_ready);
        g.graph().outputs["C"] = {c};
        g.graph().input_blocks["A"] = {a};
        g.graph().input_blocks["B"] = {b};
    }

    // Writes random A and B, runs, and checks C against a direct product.
    void run_and_check(Executable& exe, std::mt19937_64& rng) const {
        const std::vector<float> a_values = random_floats(m * k, rng);
        const std::vector<float> b_values = random_floats(k * n, rng);
        ASSERT_TRUE(write(exe, a, a_values).ok());
        ASSERT_TRUE(write(exe, b, b_values).ok());
        absl::Status status = exe.run();
        ASSERT_TRUE(status.ok()) << status;
        const std::vector<float> got = read<float>(exe, c, m * n);
        const std::vector<double> want = matmul(a_values, b_values, m, k, n);
        for (int64_t i = 0; i < m * n; ++i) {
            ASSERT_NEAR(got[i], want[i], 1e-5) << "C element " << i;
        }
    }

    ir::OperatorPtr op;
    GraphBuilder builder;
    BufferId a = -1, b = -1, c = -1;
};

TEST(CpuBackend, NameAndDevices) {
    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 3, .threads_per_device = 2});
    EXPECT_EQ(backend->name(), "cpu");
    EXPECT_EQ(backend->devices(), 3);
}

TEST(CpuBackend, MatmulSplitInKAcrossTwoDevices) {
    std::mt19937_64 rng = seeded_rng("MatmulSplitInKAcrossTwoDevices");
    SplitMatmul plan;
    const ExecGraph& graph = plan.builder.graph();
    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 2, .threads_per_device = 1});
    std::unique_ptr<Executable> exe = must_prepare(*backend, graph);
    ASSERT_NE(exe, nullptr);
    EXPECT_EQ(exe->allocated_bytes(), graph.arena_bytes);
    EXPECT_EQ(exe->bytes_moved(), (std::vector<std::vector<int64_t>>{{0, 0}, {0, 0}}));

    plan.run_and_check(*exe, rng);
    // A's and B's second k-half go to device 1; device 1's two partials (together m x n) come
    // back.
    const int64_t k1 = SplitMatmul::k - SplitMatmul::k_split;
    const int64_t to_1 = (SplitMatmul::m * k1 + k1 * SplitMatmul::n) * 4;
    const int64_t to_0 = SplitMatmul::m * SplitMatmul::n * 4;
    const std::vector<std::vector<int64_t>> once = {{0, to_1}, {to_0, 0}};
    EXPECT_EQ(exe->bytes_moved(), once);
    EXPECT_EQ(exe->bytes_moved(), graph.copy_bytes());

    plan.run_and_check(*exe, rng);
    EXPECT_EQ(exe->bytes_moved(),
              (std::vector<std::vector<int64_t>>{{0, 2 * to_1}, {2 * to_0, 0}}));
}

TEST(CpuBackend, RepeatedRunsReuseTheArenas) {
    std::mt19937_64 rng = seeded_rng("RepeatedRunsReuseTheArenas");
    SplitMatmul plan;
    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 4, .threads_per_device = 3});
    std::unique_ptr<Executable> exe = must_prepare(*backend, plan.builder.graph());
    ASSERT_NE(exe, nullptr);
    auto* cpu_exe = dynamic_cast<CpuExecutable*>(exe.get());
    ASSERT_NE(cpu_exe, nullptr);
    const std::byte* arenas[2] = {cpu_exe->arena(0), cpu_exe->arena(1)};
    EXPECT_EQ(reinterpret_cast<uintptr_t>(arenas[0]) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(arenas[1]) % 64, 0u);
    const std::vector<int64_t> allocated = exe->allocated_bytes();
    for (int run = 0; run < 30; ++run) {
        SCOPED_TRACE(absl::StrCat("run ", run));
        plan.run_and_check(*exe, rng);
        EXPECT_EQ(exe->allocated_bytes(), allocated);
        EXPECT_EQ(cpu_exe->arena(0), arenas[0]);
        EXPECT_EQ(cpu_exe->arena(1), arenas[1]);
    }
    std::vector<std::vector<int64_t>> expected = plan.builder.graph().copy_bytes();
    for (std::vector<int64_t>& row : expected) {
        for (int64_t& bytes : row) {
            bytes *= 30;
        }
    }
    EXPECT_EQ(exe->bytes_moved(), expected);
}

TEST(CpuBackend, ExecutableOutlivesItsBackend) {
    std::mt19937_64 rng = seeded_rng("ExecutableOutlivesItsBackend");
    SplitMatmul plan;
    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 2, .threads_per_device = 2});
    std::unique_ptr<Executable> exe = must_prepare(*backend, plan.builder.graph());
    ASSERT_NE(exe, nullptr);
    backend.reset();
    plan.run_and_check(*exe, rng);
}

// Runs of different executables may overlap: they share the backend's workers.
TEST(CpuBackend, ExecutablesOfOneBackendRunConcurrently) {
    std::mt19937_64 seed_rng = seeded_rng("ExecutablesOfOneBackendRunConcurrently");
    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 2, .threads_per_device = 2});
    constexpr int callers = 3;
    std::vector<std::unique_ptr<SplitMatmul>> plans;
    std::vector<std::unique_ptr<Executable>> exes;
    for (int caller = 0; caller < callers; ++caller) {
        plans.push_back(std::make_unique<SplitMatmul>());
        exes.push_back(must_prepare(*backend, plans.back()->builder.graph()));
        ASSERT_NE(exes.back(), nullptr);
    }
    std::vector<std::thread> threads;
    for (int caller = 0; caller < callers; ++caller) {
        threads.emplace_back([&, caller, seed = seed_rng()] {
            std::mt19937_64 rng(seed);
            for (int run = 0; run < 20; ++run) {
                plans[caller]->run_and_check(*exes[caller], rng);
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
}

TEST(CpuBackend, HalfPrecisionStorage) {
    std::mt19937_64 rng = seeded_rng("HalfPrecisionStorage");
    constexpr int64_t m = 5, k = 16, n = 6, len = 100;
    ir::OperatorPtr op =
        must(ir::make_matmul(matrix_type(DType::f16, m, k), matrix_type(DType::f16, k, n)));
    GraphBuilder g(1);
    const BufferId a = g.buffer(0, DType::f16, box2({0, m}, {0, k}), "A", true);
    const BufferId b = g.buffer(0, DType::f16, box2({0, k}, {0, n}), "B", true);
    const BufferId c = g.buffer(0, DType::f16, box2({0, m}, {0, n}), "C", true);
    g.kernel(*op, 0, {a, b}, {c});
    // bf16: the sum of three parts; f16: the max of two.
    const Box vec({Interval{0, len}});
    std::vector<BufferId> bf16_parts;
    for (int p = 0; p < 3; ++p) {
        bf16_parts.push_back(g.buffer(0, DType::bf16, vec, "x", true));
    }
    const BufferId bf16_sum = g.buffer(0, DType::bf16, vec, "x", true);
    g.aggregate(ir::AggOp::sum, bf16_parts, bf16_sum);
    const BufferId f16_parts[2] = {g.buffer(0, DType::f16, vec, "y", true),
                                   g.buffer(0, DType::f16, vec, "y", true)};
    const BufferId f16_max = g.buffer(0, DType::f16, vec, "y", true);
    g.aggregate(ir::AggOp::max, {f16_parts[0], f16_parts[1]}, f16_max);

    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 1, .threads_per_device = 2});
    std::unique_ptr<Executable> exe = must_prepare(*backend, g.graph());
    ASSERT_NE(exe, nullptr);

    // Values rounded to the storage dtype, as bits and as floats.
    auto round = [](const std::vector<float>& values, DType dtype, std::vector<uint16_t>* bits,
                    std::vector<float>* rounded) {
        for (float v : values) {
            const uint16_t stored =
                dtype == DType::f16 ? ir::float_to_f16(v) : ir::float_to_bf16(v);
            bits->push_back(stored);
            rounded->push_back(dtype == DType::f16 ? ir::f16_to_float(stored)
                                                   : ir::bf16_to_float(stored));
        }
    };
    for (int run = 0; run < 3; ++run) {
        SCOPED_TRACE(absl::StrCat("run ", run));
        std::vector<uint16_t> a_bits, b_bits;
        std::vector<float> a_values, b_values;
        round(random_floats(m * k, rng), DType::f16, &a_bits, &a_values);
        round(random_floats(k * n, rng), DType::f16, &b_bits, &b_values);
        ASSERT_TRUE(write(*exe, a, a_bits).ok());
        ASSERT_TRUE(write(*exe, b, b_bits).ok());
        std::vector<double> sum(len, 0.0);
        for (BufferId part : bf16_parts) {
            std::vector<uint16_t> bits;
            std::vector<float> values;
            round(random_floats(len, rng), DType::bf16, &bits, &values);
            ASSERT_TRUE(write(*exe, part, bits).ok());
            for (int64_t i = 0; i < len; ++i) {
                sum[i] += values[i];
            }
        }
        std::vector<double> max(len, -INFINITY);
        for (BufferId part : f16_parts) {
            std::vector<uint16_t> bits;
            std::vector<float> values;
            round(random_floats(len, rng), DType::f16, &bits, &values);
            ASSERT_TRUE(write(*exe, part, bits).ok());
            for (int64_t i = 0; i < len; ++i) {
                max[i] = std::max<double>(max[i], values[i]);
            }
        }
        absl::Status status = exe->run();
        ASSERT_TRUE(status.ok()) << status;

        // f16 keeps 11 significant bits, bf16 8: the result is the exact value rounded once
        // (plus f32 accumulation error far below that).
        const std::vector<double> product = matmul(a_values, b_values, m, k, n);
        const std::vector<uint16_t> c_bits = read<uint16_t>(*exe, c, m * n);
        for (int64_t i = 0; i < m * n; ++i) {
            ASSERT_NEAR(ir::f16_to_float(c_bits[i]), product[i], std::abs(product[i]) * 1e-3 + 1e-5)
                << "C element " << i;
        }
        const std::vector<uint16_t> sum_bits = read<uint16_t>(*exe, bf16_sum, len);
        const std::vector<uint16_t> max_bits = read<uint16_t>(*exe, f16_max, len);
        for (int64_t i = 0; i < len; ++i) {
            ASSERT_NEAR(ir::bf16_to_float(sum_bits[i]), sum[i], std::abs(sum[i]) * 4e-3 + 1e-6)
                << "bf16 sum element " << i;
            ASSERT_EQ(ir::f16_to_float(max_bits[i]), max[i]) << "f16 max element " << i;
        }
    }
}

// Four devices, two workers each; on every device one temporary slot is reused three times
// (t1, t2, t3 at the same offset), each reuse ordered after every reader of the previous
// occupant, including a reader on the next device (through a copy) and one that aggregates
// a copy from the previous device:
//   t1 = 2 x;       y1 = t1 + x         (= 3x)
//   t2 = x + 1;     y2[d] = t2[d] + copy of t2[d-1]
//   t3 = -x;        y3 = max(t3, x)     (= |x|)
TEST(CpuBackend, ReusedArenaBytesFourDevicesTwoThreads) {
    std::mt19937_64 rng = seeded_rng("ReusedArenaBytesFourDevicesTwoThreads");
    constexpr int devices = 4;
    constexpr int64_t len = 1000;
    const ir::TensorType type{DType::f32, {{"i", devices * len}}};
    ir::OperatorPtr twice = must(ir::make_unary(type, "scale", 2.0));
    ir::OperatorPtr plus_one = must(ir::make_unary(type, "add_scalar", 1.0));
    ir::OperatorPtr negate = must(ir::make_unary(type, "scale", -1.0));

    GraphBuilder g(devices);
    std::vector<Box> boxes;
    std::vector<BufferId> x, y1, y2, y3, t1, t2, t3, received;
    std::vector<int64_t> slot;
    for (int d = 0; d < devices; ++d) {
        boxes.push_back(Box({Interval{d * len, (d + 1) * len}}));
        x.push_back(g.buffer(d, DType::f32, boxes[d], "x", true));
        y1.push_back(g.buffer(d, DType::f32, boxes[d], "y1", true));
        y2.push_back(g.buffer(d, DType::f32, boxes[d], "y2", true));
        y3.push_back(g.buffer(d, DType::f32, boxes[d], "y3", true));
        slot.push_back(g.reserve(d, len * 4));
        t1.push_back(g.buffer_at(d, DType::f32, boxes[d], "t1", slot[d]));
        t2.push_back(g.buffer_at(d, DType::f32, boxes[d], "t2", slot[d]));
        t3.push_back(g.buffer_at(d, DType::f32, boxes[d], "t3", slot[d]));
    }
    for (int d = 0; d < devices; ++d) {
        // The copy of t2[d-1] that device d receives.
        const int prev = (d + devices - 1) % devices;
        received.push_back(g.buffer(d, DType::f32, boxes[prev], "t2"));
    }
    std::vector<int> make_t1, sum_y1, make_t2, send_t2, sum_y2, make_t3;
    for (int d = 0; d < devices; ++d) {
        make_t1.push_back(g.kernel(*twice, d, {x[d]}, {t1[d]}));
    }
    for (int d = 0; d < devices; ++d) {
        sum_y1.push_back(g.aggregate(ir::AggOp::sum, {t1[d], x[d]}, y1[d], {make_t1[d]}));
    }
    for (int d = 0; d < devices; ++d) {
        make_t2.push_back(g.kernel(*plus_one, d, {x[d]}, {t2[d]}, {sum_y1[d]}));
    }
    for (int d = 0; d < devices; ++d) {
        const int next = (d + 1) % devices;
        send_t2.push_back(g.copy(t2[d], received[next], {make_t2[d]}));
    }
    for (int d = 0; d < devices; ++d) {
        const int prev = (d + devices - 1) % devices;
        sum_y2.push_back(
            g.aggregate(ir::AggOp::sum, {t2[d], received[d]}, y2[d], {make_t2[d], send_t2[prev]}));
    }
    for (int d = 0; d < devices; ++d) {
        // t2[d]'s readers: the copy to the next device and this device's sum.
        make_t3.push_back(g.kernel(*negate, d, {x[d]}, {t3[d]}, {send_t2[d], sum_y2[d]}));
    }
    for (int d = 0; d < devices; ++d) {
        g.aggregate(ir::AggOp::max, {t3[d], x[d]}, y3[d], {make_t3[d]});
    }

    std::unique_ptr<Backend> backend =
        make_cpu_backend({.devices = devices, .threads_per_device = 2});
    std::unique_ptr<Executable> exe = must_prepare(*backend, g.graph());
    ASSERT_NE(exe, nullptr);
    constexpr int runs = 50;
    for (int run = 0; run < runs; ++run) {
        SCOPED_TRACE(absl::StrCat("run ", run));
        std::vector<std::vector<float>> inputs;
        for (int d = 0; d < devices; ++d) {
            inputs.push_back(random_floats(len, rng));
            ASSERT_TRUE(write(*exe, x[d], inputs[d]).ok());
        }
        absl::Status status = exe->run();
        ASSERT_TRUE(status.ok()) << status;
        for (int d = 0; d < devices; ++d) {
            const int prev = (d + devices - 1) % devices;
            const std::vector<float> got1 = read<float>(*exe, y1[d], len);
            const std::vector<float> got2 = read<float>(*exe, y2[d], len);
            const std::vector<float> got3 = read<float>(*exe, y3[d], len);
            for (int64_t i = 0; i < len; ++i) {
                const float v = inputs[d][i];
                ASSERT_FLOAT_EQ(got1[i], 2 * v + v) << "y1 device " << d << " element " << i;
                ASSERT_FLOAT_EQ(got2[i], (v + 1) + (inputs[prev][i] + 1))
                    << "y2 device " << d << " element " << i;
                ASSERT_EQ(got3[i], std::abs(v)) << "y3 device " << d << " element " << i;
            }
        }
    }
    const int64_t per_copy = len * 4 * runs;
    for (int src = 0; src < devices; ++src) {
        for (int dst = 0; dst < devices; ++dst) {
            EXPECT_EQ(exe->bytes_moved()[src][dst], dst == (src + 1) % devices ? per_copy : 0)
                << src << " -> " << dst;
        }
    }
}

// An operator kind the CPU kernels do not know: run_f32 rejects it.
class UnknownOperator final : public ir::Operator {
public:
    explicit UnknownOperator(const ir::TensorType& type) : Operator({}, {type}, {type}) {}
    absl::string_view kind() const override { return "no_such_kernel"; }
    std::vector<ir::ShardableIndex> shardable_indices() const override { return {}; }
    double flops(const ir::FunctionSpec&) const override { return 0.0; }

protected:
    ir::SpecLayout layout() const override { return {}; }
    std::vector<ir::HostTensor> compute(absl::Span<const ir::HostTensor>,
                                        const ir::FunctionSpec&) const override {
        return {};
    }
};

TEST(CpuBackend, FailingKernelNamesTheNodeAndLeavesTheExecutableUsable) {
    std::mt19937_64 rng = seeded_rng("FailingKernelNamesTheNodeAndLeavesTheExecutableUsable");
    constexpr int64_t len = 64;
    const ir::TensorType type{DType::f32, {{"i", len}}};
    const UnknownOperator unknown(type);
    ir::OperatorPtr twice = must(ir::make_unary(type, "scale", 2.0));
    const Box whole({Interval{0, len}});

    // Device 0 runs fine; device 1's second node fails, and the chain behind it (including a
    // copy back to device 0 and an aggregate there) must be skipped without hanging.
    GraphBuilder g(2);
    const BufferId x0 = g.buffer(0, DType::f32, whole, "x", true);
    const BufferId y0 = g.buffer(0, DType::f32, whole, "y", true);
    const BufferId x1 = g.buffer(1, DType::f32, whole, "x", true);
    const BufferId t1 = g.buffer(1, DType::f32, whole, "t");
    const BufferId z1 = g.buffer(1, DType::f32, whole, "z");
    const BufferId z0 = g.buffer(0, DType::f32, whole, "z");
    const BufferId out = g.buffer(0, DType::f32, whole, "out", true);
    const int n0 = g.kernel(*twice, 0, {x0}, {y0});
    const int n1 = g.kernel(*twice, 1, {x1}, {t1});
    const int n2 = g.kernel(unknown, 7, {t1}, {z1}, {n1});
    const int n3 = g.copy(z1, z0, {n2});
    g.aggregate(ir::AggOp::sum, {y0, z0}, out, {n0, n3});
    ASSERT_EQ(n2, 2);

    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 2, .threads_per_device = 2});
    std::unique_ptr<Executable> failing = must_prepare(*backend, g.graph());
    ASSERT_NE(failing, nullptr);
    for (int run = 0; run < 5; ++run) {
        absl::Status status = failing->run();
        EXPECT_FALSE(status.ok());
        EXPECT_THAT(std::string(status.message()), HasSubstr("node 2 (kernel no_such_kernel#7): "));
        // The copy behind the failure never ran.
        EXPECT_EQ(failing->bytes_moved()[1][0], 0);
    }

    // The backend's workers are idle and serve other executables.
    SplitMatmul plan;
    std::unique_ptr<Executable> working = must_prepare(*backend, plan.builder.graph());
    ASSERT_NE(working, nullptr);
    plan.run_and_check(*working, rng);
    EXPECT_FALSE(failing->run().ok());
    plan.run_and_check(*working, rng);
}

// prepare() polls the cancellation before it starts and, as it zeroes the arenas (most of its
// time for a large plan), before each device and each 32 MiB slice; it returns Cancelled at the
// poll that sees it. Counted in polls (cancel_at_poll), not timed.
TEST(CpuBackend, PrepareObservesCancellation) {
    SplitMatmul plan;
    ExecGraph graph = plan.builder.graph();
    // Arenas of three slices each, so the zeroing polls several times per device.
    for (int64_t& bytes : graph.arena_bytes) {
        bytes = std::max<int64_t>(bytes, int64_t{80} << 20);
    }
    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 2, .threads_per_device = 1});
    {
        // Never set: the plan is prepared, after one poll before and three per device.
        support::Cancellation unset;
        absl::StatusOr<std::unique_ptr<Executable>> exe = backend->prepare(graph, nullptr, &unset);
        ASSERT_TRUE(exe.ok()) << exe.status();
        EXPECT_EQ((*exe)->allocated_bytes(), graph.arena_bytes);
        EXPECT_EQ(unset.polls(), 7);
    }
    {
        support::Cancellation before;
        before.cancel();
        absl::StatusOr<std::unique_ptr<Executable>> exe = backend->prepare(graph, nullptr, &before);
        EXPECT_EQ(exe.status().code(), absl::StatusCode::kCancelled) << exe.status();
        EXPECT_EQ(exe.status().message(), "compile cancelled during the backend's preparation");
        EXPECT_EQ(before.polls(), 1);
    }
    for (int at : {2, 3, 5, 7}) {
        support::Cancellation during;
        during.cancel_at_poll(at);
        absl::StatusOr<std::unique_ptr<Executable>> exe = backend->prepare(graph, nullptr, &during);
        EXPECT_EQ(exe.status().code(), absl::StatusCode::kCancelled) << exe.status();
        EXPECT_EQ(exe.status().message(),
                  absl::StrCat("compile cancelled during the backend's preparation (device ",
                               at < 5 ? 0 : 1, "'s arena)"));
        EXPECT_EQ(during.polls(), at) << "polls after the cancellation: prepare went on";
    }
}

TEST(CpuBackend, PrepareRejectsBadGraphs) {
    std::unique_ptr<Backend> backend = make_cpu_backend({.devices = 2, .threads_per_device = 1});
    const Box whole({Interval{0, 16}});
    const ir::TensorType type{DType::f32, {{"i", 16}}};
    ir::OperatorPtr twice = must(ir::make_unary(type, "scale", 2.0));

    auto expect_invalid = [&](const ExecGraph& graph, const std::string& needle) {
        absl::StatusOr<std::unique_ptr<Executable>> exe = backend->prepare(graph);
        ASSERT_FALSE(exe.ok()) << "expected an error naming " << needle;
        EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument) << exe.status();
        EXPECT_THAT(std::string(exe.status().message()), HasSubstr(needle)) << exe.status();
    };

    {
        GraphBuilder g(3);
        g.buffer(2, DType::f32, whole, "x");
        expect_invalid(g.graph(), "needs 3 devices");
    }
    {
        GraphBuilder g(2);
        g.buffer(0, DType::f32, whole, "x");
        g.buffer(1, DType::f32, whole, "y");
        g.graph().arena_bytes[1] = 32; // y needs 64
        expect_invalid(g.graph(), "buffer b1 (y[0,16) f32 on device 1)");
    }
    {
        GraphBuilder g(1);
        g.buffer_at(0, DType::f32, whole, "x", -4);
        expect_invalid(g.graph(), "buffer b0");
    }
    {
        GraphBuilder g(2);
        const BufferId x = g.buffer(0, DType::f32, whole, "x");
        const BufferId y = g.buffer(0, DType::f32, whole, "y");
        g.kernel(*twice, 0, {x}, {y});
        g.graph().nodes[0].deps = {0};
        expect_invalid(g.graph(), "node 0 (kernel einsum#0): dependency on node 0");
    }
    {
        GraphBuilder g(1);
        const BufferId x = g.buffer(0, DType::f32, whole, "x");
        g.copy(x, x);
        g.graph().nodes[0].outputs = {5};
        expect_invalid(g.graph(), "node 0 (copy): buffer b5 does not exist");
    }
    {
        // A kernel whose output buffer is smaller than its spec's block.
        GraphBuilder g(1);
        const BufferId x = g.buffer(0, DType::f32, whole, "x");
        const BufferId y = g.buffer(0, DType::f32, Box({Interval{0, 8}}), "y");
        g.kernel(*twice, 0, {x}, {y});
        g.graph().nodes[0].spec.outputs = {whole};
        expect_invalid(g.graph(), "differs in shape from the spec's block");
    }
    {
        // A concat whose inputs leave part of the output uncovered.
        GraphBuilder g(1);
        const BufferId part = g.buffer(0, DType::f32, Box({Interval{0, 8}}), "x");
        const BufferId all = g.buffer(0, DType::f32, whole, "x");
        g.concat({part}, all);
        expect_invalid(g.graph(), "node 0 (concat): inputs do not tile the output");
    }
    {
        // An aggregate writing over one of its inputs.
        GraphBuilder g(1);
        const BufferId a = g.buffer(0, DType::f32, whole, "a");
        const BufferId b = g.buffer(0, DType::f32, whole, "b");
        const BufferId out = g.buffer_at(0, DType::f32, whole, "out", g.graph().buffers[a].offset);
        g.aggregate(ir::AggOp::sum, {a, b}, out);
        expect_invalid(g.graph(), "overlaps input buffer b0");
    }
    {
        // A slice reaching outside its source.
        GraphBuilder g(1);
        const BufferId x = g.buffer(0, DType::f32, Box({Interval{0, 8}}), "x");
        const BufferId y = g.buffer(0, DType::f32, Box({Interval{4, 12}}), "x");
        g.slice(x, y);
        expect_invalid(g.graph(), "node 0 (slice)");
    }
}

TEST(CpuBackend, WriteAndReadCheckBuffersAndSizes) {
    GraphBuilder g(1);
    const BufferId x = g.buffer(0, DType::f16, Box({Interval{0, 10}}), "x", true);
    std::unique_ptr<Backend> backend = make_cpu_backend({});
    std::unique_ptr<Executable> exe = must_prepare(*backend, g.graph());
    ASSERT_NE(exe, nullptr);
    std::vector<std::byte> bytes(20);
    for (size_t i = 0; i < bytes.size(); ++i) {
        bytes[i] = static_cast<std::byte>(i);
    }
    ASSERT_TRUE(exe->write_buffer(x, bytes).ok());
    std::vector<std::byte> back(20);
    ASSERT_TRUE(exe->read_buffer(x, absl::MakeSpan(back)).ok());
    EXPECT_EQ(back, bytes);
    EXPECT_TRUE(exe->run().ok()); // no nodes

    std::vector<std::byte> wrong(40);
    absl::Status status = exe->write_buffer(x, wrong);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("buffer b0 (x[0,10) f16 on device 0)"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("20 bytes"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("40"));
    status = exe->read_buffer(x, absl::MakeSpan(wrong));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    status = exe->write_buffer(3, bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("buffer b3 does not exist"));
}

} // namespace
} // namespace einsummable::runtime::cpu
