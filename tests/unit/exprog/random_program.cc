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
    static const char* const tricky[] = {"GPUS", "PARTITIONS", "IN", "OUT", "size", "GB",
                                         "MB",   "KB",         "B",  "a_1", "Z9"};
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

// `count` distinct identifiers.
std::vector<std::string> distinct_identifiers(std::mt19937_64& rng, int count) {
    std::set<std::string> seen;
    std::vector<std::string> names;
    while (static_cast<int>(names.size()) < count) {
        std::string name = random_identifier(rng);
        if (seen.insert(name).second) {
            names.push_back(std::move(name));
        }
    }
    return names;
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
    for (int i = 0; i < action_count; ++i) {
        Action action;
        action.aggregate = random_aggregate();
        action.source = sites[uniform(rng, 0, static_cast<int>(sites.size()) - 1)];
        const int hop_count = uniform(rng, 0, 3);
        for (int h = 0; h < hop_count; ++h) {
            const int width = h + 1 < hop_count ? 1 : uniform(rng, 1, 3);
            action.hops.push_back(random_subset(rng, sites, width));
        }
        program.actions.push_back(std::move(action));
    }
    return program;
}

} // namespace einsummable::exprog::testing
