#pragma once

// The plan matrix the CPU backend's plan_test and the CUDA backend's cuda_plan_test both run:
// workloads × device counts × planners × schedules.

#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/logical/logical_plan.h"
#include "gtest/gtest.h"

namespace einsummable::runtime::testing {

struct PlanCase {
    std::string workload;
    int devices;
    logical::Planner planner;
    exprog::SynthesisMode schedule;
};

// Every planner (dp, greedy, random) and schedule (naive, optimized) for each workload and
// device count.
inline std::vector<PlanCase> plan_matrix(const std::vector<std::string>& workloads,
                                         const std::vector<int>& device_counts) {
    std::vector<PlanCase> cases;
    for (const std::string& workload : workloads) {
        for (int devices : device_counts) {
            for (logical::Planner planner :
                 {logical::Planner::dp, logical::Planner::greedy, logical::Planner::random}) {
                for (exprog::SynthesisMode schedule :
                     {exprog::SynthesisMode::naive, exprog::SynthesisMode::optimized}) {
                    cases.push_back({workload, devices, planner, schedule});
                }
            }
        }
    }
    return cases;
}

// "ffn_tokens_48_..._p4_dp_optimized": a test name gtest accepts.
inline std::string plan_case_name(const ::testing::TestParamInfo<PlanCase>& info) {
    std::string name = absl::StrCat(info.param.workload, "_p", info.param.devices, "_",
                                    logical::planner_name(info.param.planner), "_",
                                    exprog::synthesis_mode_name(info.param.schedule));
    for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) {
            c = '_';
        }
    }
    return name;
}

} // namespace einsummable::runtime::testing
