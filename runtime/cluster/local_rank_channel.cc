#include "runtime/cluster/local_rank_channel.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace einsummable::runtime::cluster {

LocalRankChannel::LocalRankChannel(std::vector<std::shared_ptr<RankWorker>> workers)
    : workers_(std::move(workers)) {}

std::future<absl::StatusOr<v1::RankReply>> LocalRankChannel::call(int rank,
                                                                  const v1::RankRequest& request) {
    if (rank < 1 || rank >= ranks() || workers_[rank] == nullptr) {
        std::promise<absl::StatusOr<v1::RankReply>> none;
        none.set_value(absl::UnavailableError(absl::StrCat("no rank ", rank)));
        return none.get_future();
    }
    return std::async(std::launch::async,
                      [worker = workers_[rank],
                       bytes = request.SerializeAsString()]() -> absl::StatusOr<v1::RankReply> {
                          v1::RankRequest received;
                          if (!received.ParseFromString(bytes)) {
                              return absl::InternalError("a request that does not parse");
                          }
                          const std::string answer = worker->handle(received).SerializeAsString();
                          v1::RankReply reply;
                          if (!reply.ParseFromString(answer)) {
                              return absl::InternalError("a reply that does not parse");
                          }
                          return reply;
                      });
}

} // namespace einsummable::runtime::cluster
