// Gloo reductions per dtype: each combines elements as its type, never as
// float; and a real two-rank Gloo group (ranks as threads, over the store on
// loopback) reducing with them.
#include "ddp/gloo_reduce.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "ddp/gloo_process_group.hpp"
#include "rendezvous/store_server.hpp"

namespace ddprun::ddp {
namespace {

// c = a op b through the reduction for `dtype`.
template <typename T>
std::vector<T> Reduce(DType dtype, ReduceOp op, std::vector<T> a, const std::vector<T>& b) {
  auto f = GlooReduceFor(dtype, op);
  REQUIRE(f.ok());
  (*f)(a.data(), a.data(), b.data(), a.size());
  return a;
}

TEST_CASE("integers add and compare as integers") {
  // As float bits, 1<<24 + 1<<24 is 0x01800000, not 1<<25.
  CHECK(Reduce<int32_t>(DType::kInt32, ReduceOp::kSum, {1 << 24, -5, 123456789}, {1 << 24, 2, 1}) ==
        std::vector<int32_t>{1 << 25, -3, 123456790});
  CHECK(Reduce<int32_t>(DType::kInt32, ReduceOp::kMax, {-1, 7}, {-2, 9}) ==
        std::vector<int32_t>{-1, 9});
  CHECK(Reduce<int64_t>(DType::kInt64, ReduceOp::kSum, {int64_t{1} << 40}, {1}) ==
        std::vector<int64_t>{(int64_t{1} << 40) + 1});
  CHECK(Reduce<uint8_t>(DType::kUInt8, ReduceOp::kSum, {1, 200, 3}, {2, 100, 250}) ==
        std::vector<uint8_t>{3, 44, 253});  // wraps modulo 256, as torch.uint8
  CHECK(Reduce<uint8_t>(DType::kUInt8, ReduceOp::kMax, {1, 200}, {2, 100}) ==
        std::vector<uint8_t>{2, 200});
}

TEST_CASE("floating point types add as themselves") {
  CHECK(Reduce<float>(DType::kFloat32, ReduceOp::kSum, {1.5f, -2}, {0.25f, 3}) ==
        std::vector<float>{1.75f, 1});
  CHECK(Reduce<double>(DType::kFloat64, ReduceOp::kMax, {1.5, -2}, {0.25, 3}) ==
        std::vector<double>{1.5, 3});
  // float16 bits: 1.0 = 0x3c00, 2.0 = 0x4000, 3.0 = 0x4200, -1.0 = 0xbc00.
  CHECK(Reduce<uint16_t>(DType::kFloat16, ReduceOp::kSum, {0x3c00, 0x4000}, {0x4000, 0xbc00}) ==
        std::vector<uint16_t>{0x4200, 0x3c00});
  CHECK(Reduce<uint16_t>(DType::kFloat16, ReduceOp::kMax, {0x3c00, 0xbc00}, {0x4000, 0x3c00}) ==
        std::vector<uint16_t>{0x4000, 0x3c00});
  // bfloat16 bits: 1.0 = 0x3f80, 2.0 = 0x4000, 3.0 = 0x4040, -1.0 = 0xbf80.
  CHECK(Reduce<uint16_t>(DType::kBFloat16, ReduceOp::kSum, {0x3f80, 0x4000}, {0x4000, 0xbf80}) ==
        std::vector<uint16_t>{0x4040, 0x3f80});
  CHECK(Reduce<uint16_t>(DType::kBFloat16, ReduceOp::kMax, {0x3f80, 0xbf80}, {0x4000, 0x3f80}) ==
        std::vector<uint16_t>{0x4000, 0x3f80});
}

TEST_CASE("bfloat16 rounds to nearest even and keeps NaN") {
  CHECK(FloatToBFloat16(1.0f) == 0x3f80);
  CHECK(BFloat16ToFloat(0x4040) == 3.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even 1.0.
  CHECK(FloatToBFloat16(1.0f + 1.0f / 256) == 0x3f80);
  CHECK(FloatToBFloat16(1.0f + 3.0f / 256) == 0x3f82);
  CHECK(BFloat16ToFloat(FloatToBFloat16(std::nanf(""))) !=
        BFloat16ToFloat(FloatToBFloat16(std::nanf(""))));
}

TEST_CASE("a dtype outside the list is an error naming it") {
  auto f = GlooReduceFor(static_cast<DType>(99), ReduceOp::kSum);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().code() == StatusCode::kInvalidArgument);
  CHECK(f.status().message().find("dtype 99 is not one gloo can reduce") != std::string::npos);
}

// Runs `body(group)` on two ranks at once; each rank's statuses are checked by the caller.
void OnTwoRanks(const std::function<void(ProcessGroup&)>& body) {
  rendezvous::StoreServerOptions options;
  options.host = "127.0.0.1";
  auto server = rendezvous::StoreServer::Start(options);
  REQUIRE(server.ok());
  std::vector<std::unique_ptr<ProcessGroup>> groups(2);
  std::vector<Status> created(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      LaunchEnv env;
      env.rank = r;
      env.world_size = 2;
      env.local_rank = r;
      env.local_world_size = 2;
      env.master_addr = "127.0.0.1";
      env.master_port = (*server)->port();
      env.timeout = std::chrono::seconds(20);
      auto g = CreateGlooProcessGroup(env);
      created[r] = g.status();
      if (g.ok()) groups[r] = std::move(*g);
    });
  }
  for (auto& t : ranks) t.join();
  REQUIRE(created[0].ok());
  REQUIRE(created[1].ok());
  ranks.clear();
  for (int r = 0; r < 2; ++r) ranks.emplace_back([&, r] { body(*groups[r]); });
  for (auto& t : ranks) t.join();
}

TEST_CASE("a two-rank gloo group sums int32, uint8 and bfloat16 as themselves") {
  std::vector<std::vector<int32_t>> ints(2);
  std::vector<std::vector<uint8_t>> bytes(2);
  std::vector<std::vector<uint16_t>> bf16(2);
  std::vector<Status> statuses(6);
  OnTwoRanks([&](ProcessGroup& g) {
    const int r = g.rank();
    ints[r] = {1 << 24, 100 * (r + 1), -7};
    bytes[r] = {static_cast<uint8_t>(10 + r), 200};
    bf16[r] = {0x3f80, r == 0 ? uint16_t{0x4000} : uint16_t{0xbf80}};  // {1, 2} and {1, -1}
    statuses[r] = g.AllReduce({ints[r].data(), 3, DType::kInt32}, ReduceOp::kSum)->Wait();
    statuses[2 + r] = g.AllReduce({bytes[r].data(), 2, DType::kUInt8}, ReduceOp::kSum)->Wait();
    statuses[4 + r] = g.AllReduce({bf16[r].data(), 2, DType::kBFloat16}, ReduceOp::kSum)->Wait();
  });
  for (const auto& s : statuses) CHECK(s.ok());
  for (int r = 0; r < 2; ++r) {
    CHECK(ints[r] == std::vector<int32_t>{1 << 25, 300, -14});
    CHECK(bytes[r] == std::vector<uint8_t>{21, 144});
    CHECK(bf16[r] == std::vector<uint16_t>{0x4000, 0x3f80});  // {2, 1}
  }
}

TEST_CASE("a gloo allreduce of an unknown dtype fails at once, naming it, and breaks nothing") {
  std::vector<Status> refused(2), after(2);
  std::vector<std::vector<float>> data(2, std::vector<float>{1.5f});
  OnTwoRanks([&](ProcessGroup& g) {
    const int r = g.rank();
    uint8_t junk[8] = {};
    refused[r] = g.AllReduce({junk, 1, static_cast<DType>(42)}, ReduceOp::kSum)->Wait();
    after[r] = g.AllReduce({data[r].data(), 1, DType::kFloat32}, ReduceOp::kSum)->Wait();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(refused[r].code() == StatusCode::kInvalidArgument);
    CHECK(refused[r].message() ==
          "ddp: allreduce: dtype 42 is not one gloo can reduce: float32, float16, bfloat16, "
          "float64, int32, int64 or uint8");
    CHECK(after[r].ok());
    CHECK(data[r][0] == 3.0f);
  }
}

}  // namespace
}  // namespace ddprun::ddp
