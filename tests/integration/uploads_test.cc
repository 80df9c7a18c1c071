// UploadTensor against the real daemon (docs/server.md, "The service"): chunk offsets refuse a
// stream whose chunks were repeated and lost with the right total, a wrong CRC-32 is DATA_LOSS
// and the old weight still serves, a client that sends neither (an older one) still uploads,
// uploads held open past --max_upload_bytes_in_flight are RESOURCE_EXHAUSTED until they go,
// and streams that trickle below --upload_min_bytes_per_second hold their slots only until the
// grace is over: then they are cut naming the weight, and other uploads go through.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "einsummable/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/daemon_client.h"

namespace einsummable {
namespace {

using namespace integration;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kWeightBytes = kDModel * kDFf * 4; // w1 and w2: 16 MiB each

// CRC-32 (IEEE, reflected), as zlib, Python's zlib.crc32 and Go's crc32.ChecksumIEEE compute it.
uint32_t crc32_of(const std::string& bytes) {
    static const std::vector<uint32_t> table = [] {
        std::vector<uint32_t> t(256);
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int bit = 0; bit < 8; ++bit) {
                c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
            }
            t[i] = c;
        }
        return t;
    }();
    uint32_t crc = 0xffffffffu;
    for (unsigned char byte : bytes) {
        crc = table[(crc ^ byte) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
}

// The header of an upload of FFN weight `name`.
v1::UploadTensorChunk header(const std::string& name) {
    v1::UploadTensorChunk chunk;
    chunk.set_model("ffn");
    chunk.set_name(name);
    chunk.set_dtype(v1::F32);
    if (name == "w1") {
        chunk.add_shape(kDModel);
        chunk.add_shape(kDFf);
    } else {
        chunk.add_shape(kDFf);
        chunk.add_shape(kDModel);
    }
    return chunk;
}

// `bytes[begin, begin + n)` as a chunk, with its offset unless `offset` is false.
v1::UploadTensorChunk piece(const std::string& bytes, int64_t begin, int64_t n,
                            bool offset = true) {
    v1::UploadTensorChunk chunk;
    if (offset) {
        chunk.set_offset(begin);
    }
    chunk.set_data(bytes.substr(static_cast<size_t>(begin), static_cast<size_t>(n)));
    return chunk;
}

// Streams `chunks` (the first should carry header()'s fields) and finishes.
grpc::Status send(v1::Einsummable::Stub& stub, std::vector<v1::UploadTensorChunk> chunks,
                  v1::UploadTensorResponse* resp = nullptr) {
    v1::UploadTensorResponse ignored;
    grpc::ClientContext context;
    with_deadline(context);
    auto writer = stub.UploadTensor(&context, resp != nullptr ? resp : &ignored);
    for (const v1::UploadTensorChunk& chunk : chunks) {
        if (!writer->Write(chunk)) {
            break;
        }
    }
    writer->WritesDone();
    return writer->Finish();
}

// Chunks 0..3 of `bytes` in quarters, offsets included, the header on the first.
std::vector<v1::UploadTensorChunk> quarters(const std::string& name, const std::string& bytes,
                                            const std::vector<int>& order, bool offsets = true) {
    std::vector<v1::UploadTensorChunk> chunks;
    const int64_t quarter = static_cast<int64_t>(bytes.size()) / 4;
    for (int quarter_idx : order) {
        chunks.push_back(piece(bytes, quarter_idx * quarter, quarter, offsets));
    }
    v1::UploadTensorChunk first = header(name);
    first.MergeFrom(chunks[0]);
    chunks[0] = first;
    return chunks;
}

// The value of einsummable_upload_bytes_in_flight, or -1 when the endpoint does not show it.
double upload_bytes_in_flight(int metrics_port) {
    std::istringstream lines(metrics_text(metrics_port));
    const std::string name = "einsummable_upload_bytes_in_flight ";
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind(name, 0) == 0) {
            return std::strtod(line.c_str() + name.size(), nullptr);
        }
    }
    return -1;
}

// Polls the gauge until it shows `bytes` (or ten seconds pass); its last value.
double wait_for_upload_bytes(int metrics_port, int64_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    double value = upload_bytes_in_flight(metrics_port);
    while (value != static_cast<double>(bytes) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        value = upload_bytes_in_flight(metrics_port);
    }
    return value;
}

// One daemon for the checks of a stream's contents: 2 devices, the FFN ready.
class UploadsTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        daemon_ = new DaemonProcess();
        w1_ = new std::vector<float>(random_values(kDModel * kDFf, kDModel, 1));
        w2_ = new std::vector<float>(random_values(kDFf * kDModel, kDFf, 2));
        v1::CompileResponse compiled;
        stub_ = ready_daemon(*daemon_, {"--metrics_port=0"}, *w1_, *w2_, &compiled).release();
    }

    static void TearDownTestSuite() {
        delete stub_;
        delete daemon_;
        delete w1_;
        delete w2_;
    }

    void SetUp() override { ASSERT_NE(stub_, nullptr); }

    // Execute at tokens=4 equals the reference with weights `w1` and `w2`.
    void expect_execute_with(const std::vector<float>& w1, const std::vector<float>& w2,
                             uint64_t seed) {
        const std::vector<float> x = random_values(4 * kDModel, kDModel, seed);
        v1::ExecuteResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        grpc::Status status = stub_->Execute(&context, execute_request("ffn", 4, x), &resp);
        ASSERT_TRUE(status.ok()) << status.error_message();
        ASSERT_EQ(resp.outputs_size(), 1);
        EXPECT_LE(max_relative_error(as_doubles(resp.outputs(0).tensor().data()),
                                     reference_y(4, x, w1, w2)),
                  kTolerance);
    }

    static DaemonProcess* daemon_;
    static v1::Einsummable::Stub* stub_;
    static std::vector<float>* w1_;
    static std::vector<float>* w2_;
};

DaemonProcess* UploadsTest::daemon_ = nullptr;
v1::Einsummable::Stub* UploadsTest::stub_ = nullptr;
std::vector<float>* UploadsTest::w1_ = nullptr;
std::vector<float>* UploadsTest::w2_ = nullptr;

TEST_F(UploadsTest, RepeatedAndLostChunksWithTheRightTotalAreRefusedNamingTheChunk) {
    const std::vector<float> other = random_values(kDModel * kDFf, kDModel, 7);
    const std::string bytes = as_bytes(other);
    const int64_t quarter = kWeightBytes / 4;

    // Quarter 1 sent twice, quarter 2 never: 16 MiB in all, as the weight takes.
    grpc::Status repeated = send(*stub_, quarters("w1", bytes, {0, 1, 1, 3}));
    EXPECT_EQ(repeated.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(repeated.error_message(),
              absl::StrCat("chunk 2 of the upload of 'w1' starts at byte ", quarter, "; expected ",
                           2 * quarter, " (a chunk was lost or repeated)"));
    // Quarters swapped.
    grpc::Status swapped = send(*stub_, quarters("w1", bytes, {0, 2, 1, 3}));
    EXPECT_EQ(swapped.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(swapped.error_message(),
                HasSubstr(absl::StrCat("chunk 1 of the upload of 'w1' starts at byte ", 2 * quarter,
                                       "; expected ", quarter)));
    // Offsets on the first chunk only.
    std::vector<v1::UploadTensorChunk> mixed = quarters("w1", bytes, {0, 1, 2, 3});
    mixed[2].clear_offset();
    grpc::Status mix = send(*stub_, mixed);
    EXPECT_EQ(mix.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(mix.error_message(), HasSubstr("chunk 2 of the upload of 'w1' carries no offset"));
    // A checksum on a later chunk.
    std::vector<v1::UploadTensorChunk> late = quarters("w1", bytes, {0, 1, 2, 3});
    late[3].set_crc32(crc32_of(bytes));
    grpc::Status late_crc = send(*stub_, late);
    EXPECT_EQ(late_crc.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(late_crc.error_message(), HasSubstr("chunk 3 of the upload of 'w1' carries a "
                                                    "crc32; only the first chunk carries"));

    expect_execute_with(*w1_, *w2_, 10); // none of them replaced w1
}

TEST_F(UploadsTest, AWrongChecksumIsDataLossAndTheOldWeightStillServes) {
    const std::vector<float> other = random_values(kDModel * kDFf, kDModel, 8);
    const std::string bytes = as_bytes(other);
    std::string corrupted = bytes;
    corrupted[12345] ^= 0x40; // one bit flipped on the way
    std::vector<v1::UploadTensorChunk> chunks = quarters("w1", corrupted, {0, 1, 2, 3});
    chunks[0].set_crc32(crc32_of(bytes));
    grpc::Status status = send(*stub_, chunks);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS);
    EXPECT_EQ(status.error_message(),
              absl::StrFormat("weight 'w1' of model 'ffn': the bytes received have CRC-32 0x%08x; "
                              "the upload's header gave 0x%08x (the data was corrupted on the "
                              "way; the weight is unchanged)",
                              crc32_of(corrupted), crc32_of(bytes)));
    expect_execute_with(*w1_, *w2_, 11);

    // The right checksum: stored, and served.
    chunks = quarters("w1", bytes, {0, 1, 2, 3});
    chunks[0].set_crc32(crc32_of(bytes));
    v1::UploadTensorResponse resp;
    status = send(*stub_, chunks, &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(resp.bytes(), kWeightBytes);
    expect_execute_with(other, *w2_, 12);

    // Back to the suite's w1, through the helper (offsets and checksum).
    ASSERT_TRUE(upload(*stub_, "ffn", "w1", *w1_, {kDModel, kDFf}, 3, &resp).ok());
    expect_execute_with(*w1_, *w2_, 13);
}

TEST_F(UploadsTest, AnOldClientWithoutOffsetsOrChecksumStillUploads) {
    const std::vector<float> other = random_values(kDFf * kDModel, kDFf, 9);
    v1::UploadTensorResponse resp;
    grpc::Status status =
        send(*stub_, quarters("w2", as_bytes(other), {0, 1, 2, 3}, /*offsets=*/false), &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(resp.bytes(), kWeightBytes);
    expect_execute_with(*w1_, other, 20);

    ASSERT_TRUE(upload(*stub_, "ffn", "w2", *w2_, {kDFf, kDModel}, 2, &resp).ok());
    expect_execute_with(*w1_, *w2_, 21);
}

// Streams that send the header and the first 12 MiB of w1's 16 MiB and wait: three fit in a
// 40 MiB budget, the fourth does not; cancelled, they give it all back.
TEST(UploadBudgetTest, UploadsHeldOpenPastTheBudgetAreRefusedUntilTheyGo) {
    constexpr int64_t kBudget = int64_t{40} << 20;
    constexpr int64_t kPart = int64_t{12} << 20;
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    const std::string bytes = as_bytes(w1);
    const int metrics_port = free_port();
    DaemonProcess daemon;
    v1::CompileResponse compiled;
    // Slots and the idle timeout well past what the test holds, and no minimum rate (the
    // streams wait on purpose), so only the budget refuses.
    auto stub = ready_daemon(daemon,
                             {absl::StrCat("--metrics_port=", metrics_port),
                              absl::StrCat("--max_upload_bytes_in_flight=", kBudget),
                              "--max_concurrent_uploads=16", "--upload_idle_timeout_seconds=600",
                              "--upload_min_bytes_per_second=0"},
                             w1, w2, &compiled);
    ASSERT_NE(stub, nullptr);
    ASSERT_EQ(wait_for_upload_bytes(metrics_port, 0), 0.0);

    struct OpenUpload {
        grpc::ClientContext context;
        v1::UploadTensorResponse resp;
        std::unique_ptr<grpc::ClientWriter<v1::UploadTensorChunk>> writer;
    };
    auto open = [&](OpenUpload& held) {
        with_deadline(held.context);
        held.writer = stub->UploadTensor(&held.context, &held.resp);
        v1::UploadTensorChunk first = header("w1");
        first.MergeFrom(piece(bytes, 0, kPart));
        return held.writer->Write(first);
    };
    std::vector<std::unique_ptr<OpenUpload>> held;
    for (int upload_idx = 0; upload_idx < 3; ++upload_idx) {
        held.push_back(std::make_unique<OpenUpload>());
        ASSERT_TRUE(open(*held.back()));
        // The daemon has read the chunk once the gauge shows it: the order is then fixed.
        ASSERT_EQ(wait_for_upload_bytes(metrics_port, (upload_idx + 1) * kPart),
                  static_cast<double>((upload_idx + 1) * kPart))
            << daemon.log();
    }

    // A fourth: 36 MiB held, 12 more do not fit in 40.
    OpenUpload fourth;
    open(fourth);
    fourth.writer->WritesDone();
    grpc::Status refused = fourth.writer->Finish();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(refused.error_message(),
              absl::StrCat("chunk 0 of the upload of 'w1' needs ", kPart,
                           " more bytes, but uploads in progress hold ", 3 * kPart,
                           " bytes; the server holds at most ", kBudget,
                           " (--max_upload_bytes_in_flight); retry when they finish"));
    // A whole upload in one go is refused alike.
    v1::UploadTensorResponse resp;
    grpc::Status whole = upload(*stub, "ffn", "w1", w1, {kDModel, kDFf}, 1, &resp);
    EXPECT_EQ(whole.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(whole.error_message(), HasSubstr("(--max_upload_bytes_in_flight)"));

    for (std::unique_ptr<OpenUpload>& open_upload : held) {
        open_upload->context.TryCancel();
        EXPECT_EQ(open_upload->writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
    EXPECT_EQ(wait_for_upload_bytes(metrics_port, 0), 0.0) << daemon.log();

    // The budget is free again: a new upload succeeds, and the weight serves.
    const std::vector<float> other = random_values(kDModel * kDFf, kDModel, 5);
    grpc::Status status = upload(*stub, "ffn", "w1", other, {kDModel, kDFf}, 4, &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(wait_for_upload_bytes(metrics_port, 0), 0.0); // committed: no longer in progress
    const std::vector<float> x = random_values(4 * kDModel, kDModel, 6);
    v1::ExecuteResponse executed;
    grpc::ClientContext context;
    with_deadline(context);
    status = stub->Execute(&context, execute_request("ffn", 4, x), &executed);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(max_relative_error(as_doubles(executed.outputs(0).tensor().data()),
                                 reference_y(4, x, other, w2)),
              kTolerance);
}

TEST(UploadBudgetTest, AWeightLargerThanTheWholeBudgetIsRefusedAtOnce) {
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    DaemonProcess daemon;
    ASSERT_EQ(daemon.start({"--devices=2", "--metrics_port=0",
                            absl::StrCat("--max_upload_bytes_in_flight=", int64_t{8} << 20)}),
              "");
    auto stub = stub_for(daemon.address());
    ASSERT_TRUE(register_ffn(*stub, "ffn").ok());
    v1::UploadTensorResponse resp;
    grpc::Status status = upload(*stub, "ffn", "w1", w1, {kDModel, kDFf}, 2, &resp);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(
        status.error_message(),
        HasSubstr(absl::StrCat("weight 'w1' takes ", kWeightBytes,
                               " bytes; uploads in progress may hold at most ", int64_t{8} << 20,
                               " bytes together (--max_upload_bytes_in_flight)")));
}

// An idle timeout alone is reset by every chunk, so streams sending 4 bytes every 20 s could
// hold every upload slot for as long as they liked; a minimum rate stops them. Here two streams
// (the slots of --max_concurrent_uploads=2) send 4 bytes every 100 ms, far below 64 KiB/s: while
// the 3 s grace runs they hold both slots, then both are cut with DEADLINE_EXCEEDED naming the
// weight and the flag, their slots are freed, and a real upload (16 MiB, far above the rate)
// goes through.
TEST(UploadRateTest, AStreamTricklingBelowTheMinimumRateIsCutAndFreesItsSlot) {
    constexpr int kGraceSeconds = 3;
    constexpr int64_t kMinRate = 65536;
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::string bytes = as_bytes(w1);
    const int metrics_port = free_port();
    DaemonProcess daemon;
    // The idle timeout stays at its 30 s: every chunk resets it, so only the rate can cut.
    ASSERT_EQ(daemon.start({"--devices=2", absl::StrCat("--metrics_port=", metrics_port),
                            "--max_concurrent_uploads=2",
                            absl::StrCat("--upload_min_bytes_per_second=", kMinRate),
                            absl::StrCat("--upload_rate_grace_seconds=", kGraceSeconds)}),
              "");
    auto stub = stub_for(daemon.address());
    ASSERT_TRUE(register_ffn(*stub, "ffn").ok());

    struct Trickle {
        grpc::Status status;
        double seconds = 0; // from the stream's opening to its end
        int64_t sent = 0;
    };
    std::vector<Trickle> trickles(2);
    std::vector<std::thread> threads;
    for (Trickle& trickle : trickles) {
        threads.emplace_back([&stub, &bytes, &trickle] {
            const auto opened = std::chrono::steady_clock::now();
            grpc::ClientContext context;
            with_deadline(context, 120);
            v1::UploadTensorResponse resp;
            auto writer = stub->UploadTensor(&context, &resp);
            v1::UploadTensorChunk chunk = header("w1");
            chunk.MergeFrom(piece(bytes, 0, 4));
            // Until the daemon ends the stream, for at most a minute (the rule cuts it after
            // about 3 s; without the rule the minute passes and the status is not the one
            // expected).
            while (writer->Write(chunk) &&
                   std::chrono::steady_clock::now() - opened < std::chrono::seconds(60)) {
                trickle.sent += 4;
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                chunk = piece(bytes, trickle.sent, 4);
            }
            writer->WritesDone();
            trickle.status = writer->Finish();
            trickle.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count();
        });
    }
    // Both slots taken: a third upload is refused.
    EXPECT_TRUE(wait_for_metric(metrics_port, "einsummable_inflight_requests 2")) << daemon.log();
    v1::UploadTensorResponse resp;
    grpc::Status refused = upload(*stub, "ffn", "w1", w1, {kDModel, kDFf}, 2, &resp);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(refused.error_message(), HasSubstr("--max_concurrent_uploads"));

    for (std::thread& thread : threads) {
        thread.join();
    }
    for (const Trickle& trickle : trickles) {
        EXPECT_EQ(trickle.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
            << trickle.status.error_message();
        EXPECT_THAT(trickle.status.error_message(),
                    AllOf(HasSubstr("the upload of weight 'w1' of model 'ffn' sent "),
                          HasSubstr(absl::StrCat(
                              "too slow: an upload may take ", kGraceSeconds,
                              " s (--upload_rate_grace_seconds=", kGraceSeconds,
                              ") plus a second for every ", kMinRate,
                              " bytes it sends (--upload_min_bytes_per_second=", kMinRate, ")")),
                          HasSubstr("it was cut")));
        // Not before the grace was over (the bytes sent earn microseconds).
        EXPECT_GE(trickle.seconds, kGraceSeconds - 0.1);
        EXPECT_GT(trickle.sent, 0);
    }
    // The daemon logs why, and gives both slots back once the handlers return.
    EXPECT_TRUE(wait_for_metric(metrics_port, "einsummable_inflight_requests 0")) << daemon.log();
    EXPECT_THAT(daemon.log(), HasSubstr("(--upload_min_bytes_per_second="));

    // The slots are free: a real upload goes through, and the weight is the one sent.
    grpc::Status status = upload(*stub, "ffn", "w1", w1, {kDModel, kDFf}, 4, &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(resp.bytes(), kWeightBytes);
    v1::ListModelsResponse models;
    grpc::ClientContext context;
    with_deadline(context);
    ASSERT_TRUE(stub->ListModels(&context, {}, &models).ok());
    ASSERT_EQ(models.models_size(), 1);
    EXPECT_THAT(models.models(0).weights_loaded(), ::testing::ElementsAre("w1"));
}

} // namespace
} // namespace einsummable
