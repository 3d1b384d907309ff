#include "ddp/grad_scaler.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ddprun::ddp {
namespace {

// Host parameters over caller-owned gradient storage (group == nullptr: one process).
struct Model {
  std::vector<std::vector<float>> grads;
  std::vector<std::vector<float>> data;
  std::vector<Parameter> params;

  explicit Model(std::vector<std::pair<std::string, std::vector<float>>> named) {
    for (auto& [name, g] : named) {
      grads.push_back(g);
      data.emplace_back(g.size(), 0.0f);
    }
    for (size_t i = 0; i < named.size(); ++i) {
      params.push_back(Parameter{named[i].first,
                                 {static_cast<int64_t>(grads[i].size())},
                                 data[i].data(),
                                 grads[i].data()});
    }
  }
};

GradScalerOptions Options(float init_scale, int growth_interval = 2000, bool anomaly = false) {
  GradScalerOptions o;
  o.init_scale = init_scale;
  o.growth_interval = growth_interval;
  o.anomaly_mode = anomaly;
  return o;
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST_CASE("unscale multiplies every gradient by the float of the double reciprocal") {
  Model m({{"w", {1024.0f, -3.0f, 0.5f}}, {"b", {7.0f}}});
  GradScaler scaler(nullptr, Options(1024.0f));
  REQUIRE(scaler.Unscale(m.params, 1).ok());
  CHECK_FALSE(scaler.found_inf());
  CHECK(scaler.ShouldStep());
  const float inv = static_cast<float>(1.0 / 1024.0);
  CHECK(m.grads[0] == std::vector<float>{1.0f, -3.0f * inv, 0.5f * inv});
  CHECK(m.grads[1] == std::vector<float>{7.0f * inv});
  CHECK(scaler.anomaly().empty());
}

TEST_CASE("unscale detects inf and NaN and still unscales the finite values") {
  for (float bad : {kInf, -kInf, kNaN}) {
    Model m({{"w", {2.0f, bad, 4.0f}}});
    GradScaler scaler(nullptr, Options(2.0f));
    REQUIRE(scaler.Unscale(m.params, 3).ok());
    CHECK(scaler.found_inf());
    CHECK_FALSE(scaler.ShouldStep());
    CHECK(m.grads[0][0] == 1.0f);
    CHECK(m.grads[0][2] == 2.0f);
    CHECK_FALSE(std::isfinite(m.grads[0][1]));
  }
}

TEST_CASE("anomaly mode names the first three parameters that went non-finite, with the step") {
  Model m({{"fc1.weight", {1.0f}},
           {"fc1.bias", {kNaN}},
           {"fc2.weight", {kInf}},
           {"fc2.bias", {1.0f}},
           {"fc3.weight", {kNaN}},
           {"fc3.bias", {kInf}}});
  GradScaler scaler(nullptr, Options(1.0f, 2000, /*anomaly=*/true));
  REQUIRE(scaler.Unscale(m.params, 42).ok());
  CHECK(scaler.anomaly() ==
        "step 42: non-finite gradients in fc1.bias, fc2.weight, fc3.weight and 1 more");

  scaler.Update();
  Model clean({{"fc1.weight", {1.0f}}});
  REQUIRE(scaler.Unscale(clean.params, 43).ok());
  CHECK(scaler.anomaly().empty());
}

TEST_CASE("without anomaly mode there is no report") {
  Model m({{"w", {kNaN}}});
  GradScaler scaler(nullptr, Options(1.0f));
  REQUIRE(scaler.Unscale(m.params, 1).ok());
  CHECK(scaler.found_inf());
  CHECK(scaler.anomaly().empty());
}

// One training step: unscale what backward produced, then update.
void Step(GradScaler& scaler, float grad, long step) {
  Model m({{"w", {grad}}});
  REQUIRE(scaler.Unscale(m.params, step).ok());
  scaler.Update();
}

TEST_CASE("the scale doubles after growth_interval good steps, and only then") {
  GradScaler scaler(nullptr, Options(8.0f, /*growth_interval=*/3));
  Step(scaler, 1.0f, 1);
  Step(scaler, 1.0f, 2);
  CHECK(scaler.scale() == 8.0f);
  Step(scaler, 1.0f, 3);
  CHECK(scaler.scale() == 16.0f);
  Step(scaler, 1.0f, 4);
  Step(scaler, 1.0f, 5);
  CHECK(scaler.scale() == 16.0f);
  Step(scaler, 1.0f, 6);
  CHECK(scaler.scale() == 32.0f);
}

TEST_CASE("an inf halves the scale and restarts the growth count") {
  GradScaler scaler(nullptr, Options(8.0f, /*growth_interval=*/2));
  Step(scaler, 1.0f, 1);
  Step(scaler, kInf, 2);
  CHECK(scaler.scale() == 4.0f);
  Step(scaler, 1.0f, 3);
  CHECK(scaler.scale() == 4.0f);  // one good step since the inf, not two
  Step(scaler, 1.0f, 4);
  CHECK(scaler.scale() == 8.0f);
}

TEST_CASE("the scale never grows to inf") {
  const float max = std::numeric_limits<float>::max();
  GradScaler scaler(nullptr, Options(max, /*growth_interval=*/1));
  Step(scaler, 1.0f, 1);
  CHECK(scaler.scale() == max);
  Step(scaler, 1.0f, 2);
  CHECK(scaler.scale() == max);
}

TEST_CASE("clip_grad_norm clips to the global norm and returns the norm before clipping") {
  Model m({{"a", {3.0f}}, {"b", {0.0f, 4.0f}}});  // norm 5
  GradScaler scaler(nullptr, Options(1.0f));
  REQUIRE(scaler.Unscale(m.params, 1).ok());
  auto norm = scaler.ClipGradNorm(m.params, 1.0f);
  REQUIRE(norm.ok());
  CHECK(*norm == doctest::Approx(5.0f));
  const float coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  CHECK(m.grads[0][0] == doctest::Approx(3.0f * coef));
  CHECK(m.grads[1][1] == doctest::Approx(4.0f * coef));

  auto again = scaler.ClipGradNorm(m.params, 10.0f);  // within the bound: unchanged
  REQUIRE(again.ok());
  CHECK(*again == doctest::Approx(1.0f).epsilon(1e-5));
  CHECK(m.grads[0][0] == doctest::Approx(3.0f * coef));
}

TEST_CASE("clip_grad_norm works on unscaled gradients") {
  Model m({{"a", {300.0f, 400.0f}}});
  GradScaler scaler(nullptr, Options(100.0f));
  REQUIRE(scaler.Unscale(m.params, 1).ok());
  auto norm = scaler.ClipGradNorm(m.params, 100.0f);
  REQUIRE(norm.ok());
  CHECK(*norm == doctest::Approx(5.0f));
  CHECK(m.grads[0] == std::vector<float>{3.0f, 4.0f});
}

TEST_CASE("unscale twice before update is an error, and clip before unscale is one") {
  Model m({{"w", {2.0f}}});
  GradScaler scaler(nullptr, Options(2.0f));
  auto early = scaler.ClipGradNorm(m.params, 1.0f);
  CHECK(early.status().code() == StatusCode::kInvalidArgument);
  CHECK(m.grads[0][0] == 2.0f);
  REQUIRE(scaler.Unscale(m.params, 1).ok());
  Status twice = scaler.Unscale(m.params, 1);
  CHECK(twice.code() == StatusCode::kInvalidArgument);
  CHECK(twice.message().find("unscale called twice since the last update") != std::string::npos);
  CHECK(m.grads[0][0] == 1.0f);  // not unscaled a second time
  scaler.Update();
  CHECK(scaler.Unscale(m.params, 2).ok());
}

TEST_CASE("the loss is scaled by the current scale") {
  GradScaler scaler(nullptr, GradScalerOptions{});
  CHECK(scaler.scale() == 65536.0f);
  CHECK(scaler.ScaleLoss(0.5f) == 32768.0f);
}

TEST_CASE("16-bit gradients are refused as not supported yet, naming the parameter") {
  Model m({{"w", {1.0f, 2.0f}}});
  m.params[0].dtype = DType::kBFloat16;
  GradScaler scaler(nullptr, Options(1.0f));
  Status s = scaler.Unscale(m.params, 0);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == StatusCode::kUnimplemented);
  CHECK(s.message().find("parameter w has bfloat16 gradients") != std::string::npos);
  CHECK(s.message().find("not supported yet") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::ddp
