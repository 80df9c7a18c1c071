// server/call_text.h: status messages cut to fit a status header without splitting a character,
// and client text made safe for one log line. server/request_errors.h: why a request did not
// parse, naming the string field that is not UTF-8.
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "einsummable/v1/service.pb.h"
#include "server/call_text.h"
#include "server/request_errors.h"

namespace einsummable::server {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
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

// `message` serialized with its one "QQQ" replaced by three bytes that are not UTF-8 (the same
// length, so the wire stays well-formed).
std::string with_bad_utf8(const google::protobuf::Message& message) {
    std::string wire = message.SerializeAsString();
    const size_t at = wire.find("QQQ");
    EXPECT_NE(at, std::string::npos);
    return wire.replace(at, 3, "\xff\xfe\xfd");
}

std::string parse_error(const google::protobuf::Message& message) {
    const std::string wire = with_bad_utf8(message);
    std::unique_ptr<google::protobuf::Message> parsed(message.New());
    EXPECT_FALSE(parsed->ParseFromString(wire)) << "protobuf refuses such a string field";
    const absl::Status status = request_parse_error(*message.GetDescriptor(), wire);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
}

TEST(RequestErrorsTest, NamesTheStringFieldThatIsNotUtf8AsAPath) {
    v1::RegisterModelRequest req;
    req.set_model("ffn");
    v1::GraphDef& graph = *req.mutable_graph();
    graph.add_inputs()->set_name("x");
    v1::TensorDesc& w = *graph.add_inputs();
    w.set_name("w");
    w.add_dims()->set_fixed(4);
    w.add_dims()->set_symbol("QQQ");
    EXPECT_THAT(parse_error(req), HasSubstr("field graph.inputs[1].dims[1].symbol of "
                                            "einsummable.v1.RegisterModelRequest is not valid "
                                            "UTF-8"));

    req.mutable_graph()->mutable_inputs(1)->mutable_dims(1)->set_symbol("tokens");
    v1::OperatorDef& op = *graph.add_operators();
    op.set_name("h");
    (*op.mutable_attributes())["join"].set_string_value("relu");
    (*op.mutable_attributes())["equation"].set_string_value("iQQQ");
    EXPECT_THAT(parse_error(req),
                HasSubstr("field graph.operators[0].attributes['equation'].string_value of"));

    (*op.mutable_attributes())["equation"].set_string_value("ij->ij");
    (*op.mutable_attributes())["QQQ"].set_int_value(1);
    EXPECT_THAT(parse_error(req), HasSubstr("field graph.operators[0].attributes (the key of "
                                            "entry "));

    op.mutable_attributes()->erase("QQQ");
    req.add_weights("w");
    req.add_weights("QQQ");
    EXPECT_THAT(parse_error(req), HasSubstr("field weights[1] of"));
}

TEST(RequestErrorsTest, BytesThatAreNoMessageAtAllAreSaidToBeMalformed) {
    const absl::Status status = request_parse_error(*v1::ExecuteRequest::descriptor(),
                                                    std::string("\x0a\xff\xff\xff\xff", 5));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("the request is not a valid einsummable.v1.ExecuteRequest"));
}

} // namespace
} // namespace einsummable::server
