// The NCCL group's set-up checks that need no device.
#include "ddp/cuda/nccl_process_group.hpp"

#include <doctest/doctest.h>

namespace ddprun::ddp {
namespace {

TEST_CASE("distinct devices, and one device on different hosts, pass the device check") {
  CHECK(CheckOneRankPerDevice({"n1/0000:01:00.0/0", "n1/0000:02:00.0/1"}, nullptr).ok());
  CHECK(CheckOneRankPerDevice({"n1/0000:01:00.0/0", "n2/0000:01:00.0/0"}, "0").ok());
}

TEST_CASE("two local ranks on one device are named with the device and the fix") {
  Status s =
      CheckOneRankPerDevice({"n1/0000:01:00.0/0", "n1/0000:02:00.0/1", "n1/0000:01:00.0/2"}, "0,1");
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() ==
        "ddp: local ranks 0 and 2 on n1 both use GPU 0000:01:00.0 (CUDA_VISIBLE_DEVICES=0,1): "
        "give each local rank its own device (ddprun sets LOCAL_RANK; call "
        "cudaSetDevice(LOCAL_RANK))");
  Status unset = CheckOneRankPerDevice({"n1/0000:01:00.0/0", "n1/0000:01:00.0/1"}, nullptr);
  CHECK(unset.message().find("(CUDA_VISIBLE_DEVICES not set)") != std::string::npos);
}

TEST_CASE("a malformed device record is an internal error") {
  CHECK(CheckOneRankPerDevice({"garbage"}, nullptr).code() == StatusCode::kInternal);
}

}  // namespace
}  // namespace ddprun::ddp
