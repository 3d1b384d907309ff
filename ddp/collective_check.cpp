#include "ddp/collective_check.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

namespace ddprun::ddp {

namespace {

std::shared_ptr<Work> Failed(Status s) {
  auto work = std::make_shared<Work>();
  work->Complete(std::move(s));
  return work;
}

class CheckedGroup : public ProcessGroup {
 public:
  explicit CheckedGroup(std::unique_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->backend()), inner_(std::move(inner)) {
    ProcessGroup::set_timeout(inner_->timeout());
  }

  void set_timeout(std::chrono::milliseconds t) override {
    ProcessGroup::set_timeout(t);
    inner_->set_timeout(t);
  }

  std::shared_ptr<Work> AllReduce(TensorView t, ReduceOp op) override {
    if (Status s = Check("allreduce", t, op == ReduceOp::kSum ? "sum" : "max"); !s.ok()) {
      return Failed(std::move(s));
    }
    return inner_->AllReduce(t, op);
  }

  std::shared_ptr<Work> Broadcast(TensorView t, int root) override {
    if (Status s = Check("broadcast", t, "from rank " + std::to_string(root)); !s.ok()) {
      return Failed(std::move(s));
    }
    return inner_->Broadcast(t, root);
  }

  StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& mine) override {
    return inner_->AllGatherStrings(mine);
  }

  uint64_t sequence() const override { return inner_->sequence(); }

  void Entering(const char* op, const TensorView& t) override { inner_->Entering(op, t); }

 private:
  // Every rank's description of its next collective, compared; once one
  // check failed, every later collective fails with it (the ranks are no
  // longer in step).
  Status Check(const char* op, const TensorView& t, const std::string& detail) {
    if (!broken_.ok()) return broken_;
    const uint64_t seq = inner_->sequence();
    const std::string mine = DescribeCollective(seq, op, t, detail);
    // Waiting here is waiting in the collective, for the recorder (attack 91).
    inner_->Entering(op, t);
    auto all = inner_->AllGatherStrings(mine);
    if (!all.ok()) {
      broken_ = Status(all.status().code(),
                       "ddp: rank " + std::to_string(rank_) + " at " + mine +
                           ": the other ranks' collectives could not be compared "
                           "(TORCH_DISTRIBUTED_DEBUG=DETAIL): " +
                           all.status().message() +
                           ": a rank that never reaches its next collective (it finished, "
                           "hangs or died) leaves the others waiting here");
      return broken_;
    }
    // The ranks grouped by what they were about to run, the majority first.
    std::map<std::string, std::vector<int>> by_side;
    for (int r = 0; r < static_cast<int>(all->size()); ++r) by_side[(*all)[r]].push_back(r);
    if (by_side.size() == 1) return Status::Ok();
    std::vector<std::pair<std::string, std::vector<int>>> order(by_side.begin(), by_side.end());
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
      return a.second.size() != b.second.size() ? a.second.size() > b.second.size()
                                                : a.second.front() < b.second.front();
    });
    std::string sides;
    for (const auto& [side, ranks] : order) {
      std::string who;
      for (int r : ranks) who += (who.empty() ? "" : ",") + std::to_string(r);
      sides += std::string(sides.empty() ? "" : "; ") + (ranks.size() > 1 ? "ranks " : "rank ") +
               who + ": " + side;
    }
    broken_ = InvalidArgument(  // the program, not the system
        "ddp: the ranks' collectives differ (TORCH_DISTRIBUTED_DEBUG=DETAIL): " + sides +
        ": every rank must issue the same collectives, of the same sizes, in the same order; "
        "look for a collective under a condition that differs between ranks (a rank-dependent "
        "branch, a different number of batches or steps)");
    return broken_;
  }

  std::unique_ptr<ProcessGroup> inner_;
  Status broken_;
};

}  // namespace

std::string DescribeCollective(uint64_t seq, const char* op, const TensorView& t,
                               const std::string& detail) {
  return "#" + std::to_string(seq) + " " + op + "(" + detail + ") of " + std::to_string(t.count) +
         " " + DTypeName(t.dtype);
}

StatusOr<bool> CollectiveCheckRequested() {
  const char* v = std::getenv("TORCH_DISTRIBUTED_DEBUG");
  if (v == nullptr || *v == '\0') return false;
  const std::string value = v;
  std::string level = value;  // as PyTorch reads it: any case
  for (char& c : level) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (level == "DETAIL") return true;
  if (level == "OFF" || level == "INFO") return false;
  return InvalidArgument("ddp: TORCH_DISTRIBUTED_DEBUG=" + value +
                         " is not a level: use OFF, INFO or DETAIL (DETAIL checks every "
                         "collective against the other ranks' first)");
}

std::unique_ptr<ProcessGroup> WithCollectiveCheck(std::unique_ptr<ProcessGroup> inner) {
  return std::make_unique<CheckedGroup>(std::move(inner));
}

}  // namespace ddprun::ddp
