#include "tests/unit/ir/random_cases.h"

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/argmax.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/concat.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/ops/embedding.h"
#include "compiler/ir/ops/layernorm.h"
#include "compiler/ir/ops/merge_heads.h"
#include "compiler/ir/ops/rmsnorm.h"
#include "compiler/ir/ops/rope.h"
#include "compiler/ir/ops/softmax.h"
#include "compiler/ir/ops/split_heads.h"
#include "compiler/ir/ops/top_k.h"
#include "compiler/ir/ops/write_rows.h"
#include "gtest/gtest.h"

namespace einsummable::ir::testing {

namespace {

int64_t uniform(std::mt19937_64& rng, int64_t low, int64_t high) { // inclusive
    return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

template <typename T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& values) {
    return values[uniform(rng, 0, static_cast<int64_t>(values.size()) - 1)];
}

TensorType random_type(std::mt19937_64& rng, int rank, int64_t max_size) {
    TensorType type;
    for (int dim = 0; dim < rank; ++dim) {
        type.dims.push_back({absl::StrCat("d", dim), uniform(rng, 1, max_size)});
    }
    return type;
}

// Random packed-sequence ends for a sequence of `length`.
std::vector<int64_t> random_ends(std::mt19937_64& rng, int64_t length) {
    std::vector<int64_t> ends;
    for (int64_t position = 1; position < length; ++position) {
        if (uniform(rng, 0, 2) == 0) {
            ends.push_back(position);
        }
    }
    ends.push_back(length);
    return ends;
}

struct Built {
    absl::string_view kind;
    Attributes attributes;
    std::vector<TensorType> inputs;
    // Integer inputs (ids) hold uniform integers in [0, integer_limit), values the operator
    // takes; floating-point inputs uniform values in [-1, 1].
    int64_t integer_limit = 1;
    // Integer inputs hold distinct values (a random draw of them from [0, integer_limit), which
    // must be at least their count): write_rows' slots.
    bool distinct_integers = false;
};

Built random_einsum(std::mt19937_64& rng) {
    const int num_inputs = static_cast<int>(uniform(rng, 1, 10) <= 3 ? 1 : uniform(rng, 2, 3));
    const std::string letters = "abcdef";
    std::vector<int64_t> sizes(letters.size());
    for (int64_t& size : sizes) {
        size = uniform(rng, 1, 5);
    }
    std::vector<TensorType> inputs;
    std::vector<std::string> terms;
    std::string used;
    for (int input_idx = 0; input_idx < num_inputs; ++input_idx) {
        std::string pool = letters.substr(0, 5);
        std::shuffle(pool.begin(), pool.end(), rng);
        const std::string term = pool.substr(0, uniform(rng, 0, 3));
        TensorType type;
        for (char c : term) {
            type.dims.push_back({std::string(1, c), sizes[c - 'a']});
            if (used.find(c) == std::string::npos) {
                used.push_back(c);
            }
        }
        inputs.push_back(type);
        terms.push_back(term);
    }
    std::string output = used;
    std::shuffle(output.begin(), output.end(), rng);
    output.resize(uniform(rng, 0, static_cast<int64_t>(output.size())));

    Attributes attributes = {{"equation", absl::StrCat(absl::StrJoin(terms, ","), "->", output)},
                             {"agg", pick<std::string>(rng, {"sum", "max", "min"})}};
    if (num_inputs == 1) {
        attributes.set("join", pick<std::string>(rng, {"identity", "neg", "abs", "relu", "gelu",
                                                       "silu", "sigmoid", "tanh", "exp", "square",
                                                       "scale", "add_scalar", "leaky_relu"}));
        attributes.set("constant", static_cast<double>(uniform(rng, -20, 20)) / 10.0);
    } else if (num_inputs == 2) {
        attributes.set("join", pick<std::string>(rng, {"add", "sub", "mul", "max", "min"}));
    }
    return {Einsum::kKind, attributes, inputs};
}

Built random_softmax(std::mt19937_64& rng) {
    const int rank = static_cast<int>(uniform(rng, 1, 3));
    return {Softmax::kKind, {{"axis", uniform(rng, -rank, rank - 1)}}, {random_type(rng, rank, 6)}};
}

// rmsnorm's x and weight, and layernorm's x, gamma and (sometimes) beta.
template <typename Norm>
Built random_norm(std::mt19937_64& rng) {
    TensorType x = random_type(rng, static_cast<int>(uniform(rng, 1, 3)), 6);
    TensorType param{DType::f32, {x.dims.back()}};
    std::vector<TensorType> inputs = {x, param};
    if (std::is_same_v<Norm, LayerNorm> && uniform(rng, 0, 1) == 1) {
        inputs.push_back(param);
    }
    return {Norm::kKind, {{"eps", 1e-5}}, inputs};
}

Built random_rope(std::mt19937_64& rng) {
    TensorType x = random_type(rng, static_cast<int>(uniform(rng, 2, 3)), 6);
    x.dims.back().size = 2 * uniform(rng, 1, 3);
    Attributes attributes = {{"theta", 100.0}, {"sequence_ends", random_ends(rng, x.dims[0].size)}};
    // Frequency scaling in a third of the cases each; with theta 100 and d_head up to 6 the
    // llama3 wavelengths (6.3, 29, 135) fall in all three of its bands for 64 / (1, 4).
    switch (uniform(rng, 0, 2)) {
    case 1:
        attributes.set("scaling", std::string("linear"));
        attributes.set("scaling_factor", 4.0);
        break;
    case 2:
        attributes.set("scaling", std::string("llama3"));
        attributes.set("scaling_factor", 8.0);
        attributes.set("low_freq_factor", 1.0);
        attributes.set("high_freq_factor", 4.0);
        attributes.set("original_max_position", int64_t{64});
        break;
    default:
        break;
    }
    if (uniform(rng, 0, 2) == 0) {
        // Run-time positions (a decode step's), i32 or i64, up to 4095.
        Attributes without_ends;
        for (const auto& [name, value] : attributes.values()) {
            if (name != "sequence_ends") {
                without_ends.set(name, value);
            }
        }
        attributes = without_ends;
        const TensorType positions{uniform(rng, 0, 1) == 0 ? DType::i32 : DType::i64, {x.dims[0]}};
        Built built{Rope::kKind, attributes, {x, positions}};
        built.integer_limit = 4096;
        return built;
    }
    return {Rope::kKind, attributes, {x}};
}

Built random_split_heads(std::mt19937_64& rng) {
    TensorType x = random_type(rng, static_cast<int>(uniform(rng, 1, 3)), 5);
    const int64_t heads = uniform(rng, 1, 4);
    x.dims.back().size = heads * uniform(rng, 1, 3);
    return {SplitHeads::kKind, {{"heads", heads}}, {x}};
}

Built random_merge_heads(std::mt19937_64& rng) {
    return {MergeHeads::kKind, {}, {random_type(rng, static_cast<int>(uniform(rng, 2, 4)), 4)}};
}

Built random_attention(std::mt19937_64& rng) {
    const int64_t sequence = uniform(rng, 1, 12);
    const int64_t heads_kv = uniform(rng, 1, 3);
    const int64_t group = uniform(rng, 1, 3);
    const int64_t head_dim = uniform(rng, 1, 4);
    const int64_t value_dim = uniform(rng, 1, 4);
    const Dim seq{"sequence", sequence};
    TensorType q{DType::f32, {seq, {"heads_q", heads_kv * group}, {"d_head", head_dim}}};
    TensorType k{DType::f32, {seq, {"heads_kv", heads_kv}, {"d_head", head_dim}}};
    TensorType v{DType::f32, {seq, {"heads_kv", heads_kv}, {"d_v", value_dim}}};
    const std::vector<int64_t> ends = random_ends(rng, sequence);
    Attributes attributes = {{"causal", uniform(rng, 0, 1) == 1}, {"sequence_ends", ends}};
    if (uniform(rng, 0, 3) == 0) {
        // Paged: a pool of capacity + 1 pages, so that every integer in [0, capacity] is both a
        // fill (key_lengths) and a page (page_table); not causal, so any fill is valid.
        const int64_t page_size = uniform(rng, 1, 3);
        const int64_t per_sequence = uniform(rng, 1, 3);
        const int64_t capacity = page_size * per_sequence;
        attributes.set("causal", false);
        attributes.set("page_size", page_size);
        k.dims[0] = {"keys", (capacity + 1) * page_size};
        v.dims[0] = k.dims[0];
        const auto sequences = static_cast<int64_t>(ends.size());
        const TensorType lengths{uniform(rng, 0, 1) == 0 ? DType::i32 : DType::i64,
                                 {{"sequences", sequences}}};
        const TensorType table{uniform(rng, 0, 1) == 0 ? DType::i32 : DType::i64,
                               {{"sequences", sequences}, {"pages", per_sequence}}};
        Built built{Attention::kKind, attributes, {q, k, v, lengths, table}};
        built.integer_limit = capacity + 1;
        return built;
    }
    if (uniform(rng, 0, 2) == 0) {
        // Decode-shaped: each sequence's queries over a cache of 0–9 more keys than queries.
        std::vector<int64_t> key_ends;
        int64_t previous = 0;
        int64_t keys = 0;
        for (int64_t end : ends) {
            keys += end - previous + uniform(rng, 0, 9);
            key_ends.push_back(keys);
            previous = end;
        }
        attributes.set("key_ends", key_ends);
        // Sometimes rows after the last region, which no query reads (a step of the first
        // slots of a larger cache).
        const int64_t unread = uniform(rng, 0, 2) == 0 ? uniform(rng, 1, 5) : 0;
        k.dims[0] = {"keys", keys + unread};
        v.dims[0] = {"keys", keys + unread};
        if (uniform(rng, 0, 1) == 0) {
            // Run-time fills of the regions, each in [0, the smallest region]: not causal, so
            // any fill is valid (a causal one needs a key per query).
            int64_t smallest = keys;
            for (size_t s = 0; s < key_ends.size(); ++s) {
                smallest = std::min(smallest, key_ends[s] - (s == 0 ? 0 : key_ends[s - 1]));
            }
            attributes.set("causal", false);
            const TensorType lengths{uniform(rng, 0, 1) == 0 ? DType::i32 : DType::i64,
                                     {{"sequences", static_cast<int64_t>(key_ends.size())}}};
            Built built{Attention::kKind, attributes, {q, k, v, lengths}};
            built.integer_limit = smallest + 1;
            return built;
        }
    }
    return {Attention::kKind, attributes, {q, k, v}};
}

// One to three inputs of one rank, equal but along the axis; the axis sometimes negative, the
// output's axis dimension sometimes named.
Built random_concat(std::mt19937_64& rng) {
    const int rank = static_cast<int>(uniform(rng, 1, 3));
    const int64_t axis = uniform(rng, -rank, rank - 1);
    const TensorType first = random_type(rng, rank, 5);
    std::vector<TensorType> inputs;
    for (int64_t idx = uniform(rng, 1, 3); idx > 0; --idx) {
        TensorType input = first;
        Dim& along = input.dims[axis < 0 ? axis + rank : axis];
        along = {absl::StrCat("part", inputs.size()), uniform(rng, 1, 4)};
        inputs.push_back(std::move(input));
    }
    Attributes attributes = {{"axis", axis}};
    if (uniform(rng, 0, 1) == 1) {
        attributes.set("dim_name", std::string("joined"));
    }
    return {Concat::kKind, attributes, inputs};
}

// table [vocab, d] (vocab up to 9, so requests cut it) and ids [tokens] of i32 or i64; ids
// cover the whole table.
Built random_embedding(std::mt19937_64& rng) {
    const int64_t vocab = uniform(rng, 1, 9);
    const TensorType table{DType::f32, {{"vocab", vocab}, {"d", uniform(rng, 1, 5)}}};
    const TensorType ids{uniform(rng, 0, 1) == 0 ? DType::i32 : DType::i64,
                         {{"tokens", uniform(rng, 1, 7)}}};
    Built built{Embedding::kKind, {}, {table, ids}};
    built.integer_limit = vocab;
    return built;
}

// state [R, ...] (R up to 9, so requests cut it), rows [n, ...] with n <= R, slots [n]: distinct
// slots in [0, R) (write_rows refuses a slot written twice), i32 or i64.
Built random_write_rows(std::mt19937_64& rng) {
    TensorType state = random_type(rng, static_cast<int>(uniform(rng, 1, 3)), 5);
    state.dims[0] = {"slots", uniform(rng, 1, 9)};
    TensorType rows = state;
    rows.dims[0] = {"new", uniform(rng, 1, state.dims[0].size)};
    const TensorType slots{uniform(rng, 0, 1) == 0 ? DType::i32 : DType::i64, {rows.dims[0]}};
    Built built{WriteRows::kKind, {}, {state, rows, slots}};
    built.integer_limit = state.dims[0].size;
    built.distinct_integers = true;
    return built;
}

// x [..., vocab] of rank 1 to 3 (vocab up to 9, so requests cut it and the arg_max ⊕ combines
// pairs).
Built random_argmax(std::mt19937_64& rng) {
    TensorType x = random_type(rng, static_cast<int>(uniform(rng, 1, 3)), 4);
    x.dims.back() = {"vocab", uniform(rng, 1, 9)};
    return {ArgMax::kKind, {}, {x}};
}

// x [..., vocab] of rank 1 to 3 (vocab up to 9, so requests cut it into blocks narrower than k
// and the top_k ⊕ merges padded lists), k anywhere in [1, vocab].
Built random_top_k(std::mt19937_64& rng) {
    TensorType x = random_type(rng, static_cast<int>(uniform(rng, 1, 3)), 4);
    x.dims.back() = {"vocab", uniform(rng, 1, 9)};
    return {TopK::kKind, {{"k", uniform(rng, 1, x.dims.back().size)}}, {x}};
}

// The random-case generator of every operator kind, keyed by the operator class: a new operator
// adds its generator above and one line here (docs/operators.md "Adding an operator").
struct Generator {
    absl::string_view kind;
    Built (*generate)(std::mt19937_64& rng);

    template <typename Op>
    static constexpr Generator of(Built (*generate)(std::mt19937_64& rng)) {
        return {Op::kKind, generate};
    }
};

constexpr Generator kGenerators[] = {
    Generator::of<Einsum>(&random_einsum),
    Generator::of<Softmax>(&random_softmax),
    Generator::of<RmsNorm>(&random_norm<RmsNorm>),
    Generator::of<LayerNorm>(&random_norm<LayerNorm>),
    Generator::of<Rope>(&random_rope),
    Generator::of<SplitHeads>(&random_split_heads),
    Generator::of<MergeHeads>(&random_merge_heads),
    Generator::of<Attention>(&random_attention),
    Generator::of<Concat>(&random_concat),
    Generator::of<Embedding>(&random_embedding),
    Generator::of<WriteRows>(&random_write_rows),
    Generator::of<ArgMax>(&random_argmax),
    Generator::of<TopK>(&random_top_k),
};

const Generator* find_generator(absl::string_view kind) {
    for (const Generator& generator : kGenerators) {
        if (generator.kind == kind) {
            return &generator;
        }
    }
    return nullptr;
}

Built random_built(absl::string_view kind, std::mt19937_64& rng) {
    if (const Generator* generator = find_generator(kind)) {
        return generator->generate(rng);
    }
    ADD_FAILURE() << "no random case generator for operator kind '" << kind
                  << "': add one to tests/unit/ir/random_cases.cc";
    return {kind, {}, {}};
}

} // namespace

bool has_random_case(absl::string_view kind) {
    return find_generator(kind) != nullptr;
}

RandomCase random_case(absl::string_view kind, std::mt19937_64& rng) {
    Built built = random_built(kind, rng);
    std::vector<std::string> types;
    for (const TensorType& type : built.inputs) {
        types.push_back(type.to_string());
    }
    const std::string description =
        absl::StrCat(kind, "(", built.attributes.to_string(), ") on ", absl::StrJoin(types, ", "));
    absl::StatusOr<OperatorPtr> op = make_operator(kind, built.attributes, built.inputs);
    EXPECT_TRUE(op.ok()) << description << ": " << op.status();
    if (!op.ok()) {
        return {nullptr, {}, description};
    }
    RandomCase out{*std::move(op), {}, description};
    for (const TensorType& type : out.op->input_types()) {
        if (is_integer(type.dtype)) {
            std::vector<double> values(type.elements());
            if (built.distinct_integers) {
                std::vector<double> pool(static_cast<size_t>(built.integer_limit));
                for (size_t i = 0; i < pool.size(); ++i) {
                    pool[i] = static_cast<double>(i);
                }
                std::shuffle(pool.begin(), pool.end(), rng);
                std::copy_n(pool.begin(), values.size(), values.begin());
            } else {
                for (double& value : values) {
                    value = static_cast<double>(uniform(rng, 0, built.integer_limit - 1));
                }
            }
            out.inputs.emplace_back(type.box(), std::move(values));
        } else {
            out.inputs.push_back(HostTensor::random(type.box(), rng));
        }
    }
    return out;
}

IntervalRequest random_request(const std::vector<ShardableIndex>& indices, std::mt19937_64& rng) {
    IntervalRequest request;
    for (const ShardableIndex& index : indices) {
        std::vector<int64_t> candidates;
        if (index.any_position) {
            for (int64_t position = 1; position < index.size; ++position) {
                candidates.push_back(position);
            }
        } else {
            candidates = index.cut_positions;
        }
        std::shuffle(candidates.begin(), candidates.end(), rng);
        candidates.resize(uniform(rng, 0, std::min<int64_t>(3, candidates.size())));
        std::sort(candidates.begin(), candidates.end());
        candidates.push_back(index.size);
        std::vector<Interval> intervals;
        int64_t lower = 0;
        for (int64_t upper : candidates) {
            intervals.push_back({lower, upper});
            lower = upper;
        }
        request.push_back(std::move(intervals));
    }
    return request;
}

uint64_t test_seed() {
    if (const char* value = std::getenv("EINSUMMABLE_TEST_SEED")) {
        return std::strtoull(value, nullptr, 10);
    }
    return 20261130;
}

} // namespace einsummable::ir::testing
