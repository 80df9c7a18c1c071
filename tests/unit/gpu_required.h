#pragma once

#include <cstdlib>

#include "gtest/gtest.h"

// Skips a test that needs what this machine lacks (a GPU, the cuDNN frontend) — or fails it
// when EINSUMMABLE_REQUIRE_GPU is set. scripts/gpu-check sets it: on a GPU machine a driver too
// old for the CUDA runtime would otherwise make every GPU test skip and the check pass.
#define EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED(message)                                              \
    do {                                                                                           \
        if (std::getenv("EINSUMMABLE_REQUIRE_GPU") != nullptr) {                                   \
            FAIL() << "EINSUMMABLE_REQUIRE_GPU is set, but: " << message;                          \
        }                                                                                          \
        GTEST_SKIP() << message;                                                                   \
    } while (0)
