#include "tests/unit/exprog/random_program.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <set>
#include <vector>

namespace einsummable::exprog::testing {
namespace {

int uniform(std::mt19937_64& rng, int low, int high) {
    return std::uniform_int_distribution<int>(low, high)(rng);
}

std::string random_identifier(std::mt19937_64& rng) {
    static const char* const tricky[] = {"GPUS", "PARTITIONS", "IN", "OUT", "ORDER", "size",
                                         "GB",   "MB",         "KB", "B",   "a_1",   "Z9"};
    if (uniform(rng, 0, 5) == 0) {
        return tricky[uniform(rng, 0, std::size(tricky) - 1)];
    }
    static const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    static const std::string rest = letters + "0123456789_";
    std::string name(1, letters[uniform(rng, 0, letters.size() - 1)]);
    const int length = uniform(rng, 0, 6);
    for (int i = 0; i < length; ++i) {
        name += rest[uniform(rng, 0, rest.size() - 1)];
    }
    return name;
}

bool is_header_keyword(const std::string& name) {
    return name == "GPUS" || name == "PARTITIONS" || name == "IN" || name == "OUT" ||
           name == "ORDER";
}

// `count` distinct identifiers; `labels`: none a header keyword (a label may not be one).
std::vector<std::string> distinct_identifiers(std::mt19937_64& rng, int count,
                                              bool labels = false) {
    std::set<std::string> seen;
    std::vector<std::string> names;
    while (static_cast<int>(names.size()) < count) {
        std::string name = random_identifier(rng);
        if (labels && is_header_keyword(name)) {
            continue;
        }
        if (seen.insert(name).second) {
            names.push_back(std::move(name));
        }
    }
    return names;
}

// Whole blocks (written with no chunk, or as [0/1]), small counts, and now and then a large
// count up to Chunk::kMaxCount, with indices at the edges as well as inside.
Chunk random_chunk(std::mt19937_64& rng) {
    int count = 1;
    switch (uniform(rng, 0, 6)) {
    case 0:
    case 1:
        return Chunk{};
    case 2:
        return Chunk{0, 1};
    case 3:
    case 4:
        count = uniform(rng, 1, 8);
        break;
    case 5:
        count = Chunk::kMaxCount;
        break;
    default:
        count = uniform(rng, 9, Chunk::kMaxCount);
        break;
    }
    switch (uniform(rng, 0, 3)) {
    case 0:
        return Chunk{0, count};
    case 1:
        return Chunk{count - 1, count};
    default:
        return Chunk{uniform(rng, 0, count - 1), count};
    }
}

double random_bytes(std::mt19937_64& rng) {
    switch (uniform(rng, 0, 6)) {
    case 0:
        return 1e9;
    case 1:
        return static_cast<double>(std::uniform_int_distribution<int64_t>(1, 1000)(rng)) * 1e9;
    case 2:
        return static_cast<double>(std::uniform_int_distribution<int64_t>(1, 999999)(rng)) * 1e3;
    case 3:
        return static_cast<double>(std::uniform_int_distribution<int64_t>(1, 1LL << 40)(rng));
    case 4:
        return static_cast<double>(2 * std::uniform_int_distribution<int64_t>(0, 500)(rng) + 1);
    case 5:
        return std::uniform_real_distribution<double>(1e-3, 1e13)(rng);
    default:
        return std::uniform_real_distribution<double>(0.5, 8.0)(rng) * 1e6;
    }
}

template <typename T>
std::vector<T> random_subset(std::mt19937_64& rng, std::vector<T> pool, int count) {
    std::shuffle(pool.begin(), pool.end(), rng);
    pool.resize(std::min<size_t>(pool.size(), count));
    return pool;
}

} // namespace

uint64_t test_seed(uint64_t fallback, const std::string& test_name) {
    uint64_t seed = fallback;
    if (const char* value = std::getenv("EINSUMMABLE_TEST_SEED")) {
        seed = std::strtoull(value, nullptr, 10);
    }
    std::cout << test_name << ": seed " << seed << " (set EINSUMMABLE_TEST_SEED to replay)\n";
    return seed;
}

Program random_program(std::mt19937_64& rng) {
    Program program;
    std::vector<int> ids(24);
    for (int i = 0; i < 24; ++i) {
        ids[i] = i < 20 ? i : 100 + i * 37;
    }
    program.gpus = random_subset(rng, ids, uniform(rng, 1, 8));
    const int gpu_count = static_cast<int>(program.gpus.size());

    std::vector<Site> sites;
    for (int gpu : program.gpus) {
        sites.push_back(Site::of_gpu(gpu));
    }
    for (const std::string& name : distinct_identifiers(rng, uniform(rng, 0, 3))) {
        Partition partition;
        partition.name = name;
        if (uniform(rng, 0, 1) == 0) {
            partition.size = uniform(rng, 1, gpu_count);
        } else {
            partition.members = random_subset(rng, program.gpus, uniform(rng, 1, gpu_count));
        }
        program.partitions.push_back(std::move(partition));
        sites.push_back(Site::of_partition(name));
    }

    const std::vector<std::string> atoms = distinct_identifiers(rng, uniform(rng, 1, 5));
    for (const std::string& atom : atoms) {
        const double bytes = random_bytes(rng);
        for (int gpu : random_subset(rng, program.gpus, uniform(rng, 1, 3))) {
            program.ins.push_back(InDecl{atom, gpu, bytes, {}});
        }
    }
    std::shuffle(program.ins.begin(), program.ins.end(), rng);

    auto random_aggregate = [&] {
        const std::vector<std::string> chosen =
            random_subset(rng, atoms, uniform(rng, 1, static_cast<int>(atoms.size())));
        return Aggregate(chosen.begin(), chosen.end());
    };
    const int out_count = uniform(rng, 0, 3);
    for (int i = 0; i < out_count; ++i) {
        program.outs.push_back(
            OutDecl{random_aggregate(), random_subset(rng, sites, uniform(rng, 1, 3)), {}});
    }
    const int action_count = uniform(rng, 0, 8);
    const std::vector<std::string> labels = distinct_identifiers(rng, action_count, true);
    std::vector<std::string> used_labels;
    for (int i = 0; i < action_count; ++i) {
        Action action;
        if (uniform(rng, 0, 2) != 0) { // two in three actions are labelled
            action.label = labels[i];
            used_labels.push_back(labels[i]);
        }
        action.aggregate = random_aggregate();
        action.chunk = random_chunk(rng);
        action.source = sites[uniform(rng, 0, static_cast<int>(sites.size()) - 1)];
        const int hop_count = uniform(rng, 0, 3);
        for (int h = 0; h < hop_count; ++h) {
            const int width = h + 1 < hop_count ? 1 : uniform(rng, 1, 3);
            action.hops.push_back(random_subset(rng, sites, width));
        }
        program.actions.push_back(std::move(action));
    }

    // ORDER pairs between distinct labelled actions: some continue the previous pair (so the
    // printer merges them into a chain), some repeat it, the rest are fresh.
    if (used_labels.size() >= 2) {
        const int label_count = static_cast<int>(used_labels.size());
        auto random_label = [&] { return used_labels[uniform(rng, 0, label_count - 1)]; };
        const int order_count = uniform(rng, 0, 6);
        for (int i = 0; i < order_count; ++i) {
            OrderDecl order;
            const int kind = program.orders.empty() ? 2 : uniform(rng, 0, 4);
            if (kind == 0) {
                order = program.orders.back();
            } else {
                order.before = kind == 1 ? program.orders.back().after : random_label();
                do {
                    order.after = random_label();
                } while (order.after == order.before);
            }
            program.orders.push_back(std::move(order));
        }
    }
    return program;
}

} // namespace einsummable::exprog::testing
