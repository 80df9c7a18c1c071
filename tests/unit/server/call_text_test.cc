// server/call_text.h: status messages cut to fit a status header without splitting a character,
// and client text made safe for one log line.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/call_text.h"

namespace einsummable::server {
namespace {

using ::testing::EndsWith;
using ::testing::StartsWith;

TEST(CallTextTest, AMessageThatFitsIsUnchanged) {
    EXPECT_EQ(truncate_message("model 'ffn' is not registered"), "model 'ffn' is not registered");
    const std::string exactly(kMaxStatusMessageBytes, 'a');
    EXPECT_EQ(truncate_message(exactly), exactly);
}

TEST(CallTextTest, ALongMessageIsCutAndSaysHowMuchIsMissing) {
    const std::string message = "'" + std::string(20000, 'n') + "' is not an input of model 'ffn'";
    const std::string cut = truncate_message(message);
    EXPECT_LE(cut.size(), kMaxStatusMessageBytes);
    EXPECT_THAT(cut, StartsWith("'nnnn"));
    const size_t kept = cut.find(" \u2026and ");
    ASSERT_NE(kept, std::string::npos);
    EXPECT_THAT(cut,
                EndsWith(" \u2026and " + std::to_string(message.size() - kept) + " more bytes"));
}

TEST(CallTextTest, TheCutNeverSplitsAUtf8Character) {
    // "é" is two bytes: wherever the limit falls, the kept part is whole characters.
    std::string message;
    for (int i = 0; i < 1000; ++i) {
        message += "\u00e9";
    }
    for (size_t limit : {size_t{100}, size_t{101}, size_t{102}, size_t{103}}) {
        const std::string cut = truncate_message(message, limit);
        const size_t kept = cut.find(" \u2026and ");
        ASSERT_NE(kept, std::string::npos) << limit;
        EXPECT_EQ(kept % 2, 0u) << limit;
        EXPECT_LE(cut.size(), limit) << limit;
    }
}

TEST(CallTextTest, ControlCharactersArePrintedAsEscapes) {
    EXPECT_EQ(printable("plain 'name' \u00e9"), "plain 'name' \u00e9");
    EXPECT_EQ(printable("x\n[error] forged"), "x\\x0a[error] forged");
    EXPECT_EQ(printable(std::string("a\0b\tc\x7f\x1b", 7)), "a\\x00b\\x09c\\x7f\\x1b");
}

} // namespace
} // namespace einsummable::server
