#include "ddp/collective_check.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <deque>

namespace ddprun::ddp {
namespace {

// Rank 0 of 3, whose "other ranks" say what the test scripts.
class ScriptedGroup : public ProcessGroup {
 public:
  ScriptedGroup() : ProcessGroup(0, 3, "scripted") {}
  std::deque<std::vector<std::string>> others;  // ranks 1 and 2, per gather
  int ran = 0;                                  // collectives that reached the backend

  std::shared_ptr<Work> AllReduce(TensorView, ReduceOp) override { return Ran(); }
  std::shared_ptr<Work> Broadcast(TensorView, int) override { return Ran(); }
  StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& mine) override {
    if (others.empty()) return Unavailable("store: waited 3000 ms for keys");
    std::vector<std::string> all{mine};
    all.insert(all.end(), others.front().begin(), others.front().end());
    others.pop_front();
    return all;
  }
  uint64_t sequence() const override { return static_cast<uint64_t>(ran); }

 private:
  std::shared_ptr<Work> Ran() {
    ++ran;
    auto w = std::make_shared<Work>();
    w->Complete(Status::Ok());
    return w;
  }
};

TEST_CASE("collective check: ranks that agree run; ranks that differ fail, named, for good") {
  auto scripted = std::make_unique<ScriptedGroup>();
  ScriptedGroup* inner = scripted.get();
  auto group = WithCollectiveCheck(std::move(scripted));
  float data[4] = {};
  TensorView t{data, 4, DType::kFloat32, Device::kCpu};
  const std::string same = DescribeCollective(0, "allreduce", t, "sum");
  CHECK(same == "#0 allreduce(sum) of 4 float32");
  inner->others.push_back({same, same});
  CHECK(group->AllReduce(t, ReduceOp::kSum)->Wait().ok());
  CHECK(inner->ran == 1);
  // Rank 2 broadcasts where ranks 0 and 1 all-reduce: the majority is named first.
  const std::string mine = DescribeCollective(1, "allreduce", t, "sum");
  inner->others.push_back({mine, DescribeCollective(1, "broadcast", t, "from rank 0")});
  Status s = group->AllReduce(t, ReduceOp::kSum)->Wait();
  CHECK(s.message() ==
        "ddp: the ranks' collectives differ (TORCH_DISTRIBUTED_DEBUG=DETAIL): ranks 0,1: #1 "
        "allreduce(sum) of 4 float32; rank 2: #1 broadcast(from rank 0) of 4 float32: every rank "
        "must issue the same collectives, of the same sizes, in the same order; look for a "
        "collective under a condition that differs between ranks (a rank-dependent branch, a "
        "different number of batches or steps)");
  CHECK(inner->ran == 1);  // the mismatched collective never reached the backend
  CHECK(group->Broadcast(t, 0)->Wait().message() == s.message());  // the group stays broken
}

TEST_CASE("collective check: a gather that fails names the collective and the likely cause") {
  auto group = WithCollectiveCheck(std::make_unique<ScriptedGroup>());
  float data[2] = {};
  Status s = group->Broadcast({data, 2, DType::kFloat32, Device::kCpu}, 1)->Wait();
  CHECK(s.message().find("ddp: rank 0 at #0 broadcast(from rank 1) of 2 float32: the other "
                         "ranks' collectives could not be compared") == 0);
  CHECK(s.message().find("a rank that never reaches its next collective") != std::string::npos);
}

TEST_CASE("collective check: TORCH_DISTRIBUTED_DEBUG levels") {
  for (auto [value, wanted] : {std::pair{"", false},
                               {"OFF", false},
                               {"INFO", false},
                               {"DETAIL", true},
                               {"detail", true}}) {
    setenv("TORCH_DISTRIBUTED_DEBUG", value, 1);
    auto r = CollectiveCheckRequested();
    REQUIRE(r.ok());
    CHECK(*r == wanted);
  }
  setenv("TORCH_DISTRIBUTED_DEBUG", "verbose", 1);
  CHECK_FALSE(CollectiveCheckRequested().ok());
  unsetenv("TORCH_DISTRIBUTED_DEBUG");
  CHECK_FALSE(*CollectiveCheckRequested());
}

}  // namespace
}  // namespace ddprun::ddp
