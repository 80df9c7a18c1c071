#pragma once

// Golden files (tests/golden/...): a test's text output compared with the committed file, which
// EINSUMMABLE_UPDATE_GOLDEN=1 (scripts/update-goldens) rewrites instead.

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace einsummable::golden {

// Expects `text` to equal the file at `path` (what: what changed, for the failure message). With
// EINSUMMABLE_UPDATE_GOLDEN set, writes `text` there and skips the test. Call it last in a test:
// the skip ends the test.
inline void expect_matches(const std::string& text, const std::string& path,
                           const std::string& what) {
    if (std::getenv("EINSUMMABLE_UPDATE_GOLDEN") != nullptr) {
        std::ofstream(path, std::ios::binary) << text;
        GTEST_SKIP() << "rewrote " << path;
    }
    std::ifstream file(path, std::ios::binary);
    ASSERT_TRUE(file.good()) << "missing golden file " << path << " (run scripts/update-goldens)";
    std::stringstream expected;
    expected << file.rdbuf();
    EXPECT_EQ(text, expected.str()) << what << " changed; if intended, run scripts/update-goldens";
}

} // namespace einsummable::golden
