// The reducer against a fake process group: buckets, launch order and timing
// relative to backward, averaging, unused parameters, cross-rank checks.
#include "ddp/reducer.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "ddp/gloo_reduce.hpp"
#include "ddp/nonfinite.hpp"

namespace ddprun::ddp {
namespace {

// Acts as `size` ranks holding identical data: a sum multiplies by size.
class FakeGroup : public ProcessGroup {
 public:
  explicit FakeGroup(int size, int rank = 0) : ProcessGroup(rank, size, "fake") {}

  std::shared_ptr<Work> AllReduce(TensorView t, ReduceOp op) override {
    auto* p = static_cast<float*>(t.data);
    const auto n = static_cast<float>(size_);
    auto* bits = static_cast<uint16_t*>(t.data);
    for (size_t i = 0; op == ReduceOp::kSum && i < t.count; ++i) {
      if (t.dtype == DType::kFloat32) p[i] *= n;
      if (t.dtype == DType::kFloat16) bits[i] = FloatToHalfBits(HalfBitsToFloat(bits[i]) * n);
      if (t.dtype == DType::kBFloat16) bits[i] = FloatToBFloat16(BFloat16ToFloat(bits[i]) * n);
    }
    launches.push_back({events, t.count});
    reduced.push_back(p);
    dtypes.push_back(t.dtype);
    return Done();
  }
  std::shared_ptr<Work> Broadcast(TensorView t, int) override {
    broadcasts.push_back(t.count);
    return Done();
  }
  StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& mine) override {
    std::vector<std::string> all(size_, mine);
    for (auto& [rank, text] : others) all[rank] = text;
    for (auto& [rank, text] : others_at[gathers]) all[rank] = text;
    ++gathers;
    return all;
  }
  uint64_t sequence() const override { return launches.size(); }

  int events = 0;                                // MarkGradReady calls so far
  std::vector<std::pair<int, size_t>> launches;  // (events at launch, elements)
  std::vector<float*> reduced;                   // each all-reduce's data
  std::vector<DType> dtypes;                     // and element type
  std::vector<size_t> broadcasts;
  std::map<int, std::string> others;  // what other ranks "send" in AllGatherStrings
  std::map<int, std::map<int, std::string>> others_at;  // the same, for the call of that index
  int gathers = 0;

 private:
  static std::shared_ptr<Work> Done() {
    auto w = std::make_shared<Work>();
    w->Complete(Status::Ok());
    return w;
  }
};

struct Model {
  std::vector<std::vector<float>> data, grad;
  std::vector<Parameter> params;

  // Layers of `sizes` floats each, named layers.i.
  explicit Model(const std::vector<size_t>& sizes) {
    data.resize(sizes.size());
    grad.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      data[i].assign(sizes[i], 1.0f);
      grad[i].assign(sizes[i], static_cast<float>(i + 1));
      params.push_back({"layers." + std::to_string(i),
                        {static_cast<int64_t>(sizes[i])},
                        data[i].data(),
                        grad[i].data()});
    }
  }
};

ReducerOptions SmallBuckets() {
  ReducerOptions o;
  o.first_bucket_bytes = 4 * 100;  // 100 floats
  o.bucket_cap_bytes = 4 * 250;
  return o;
}

TEST_CASE("buckets follow reverse registration order with a small first bucket") {
  FakeGroup g(2);
  Model m({100, 100, 100, 100, 100});
  auto r = Reducer::Create(&g, m.params, {}, SmallBuckets());
  REQUIRE(r.ok());
  CHECK((*r)->buckets() == std::vector<std::vector<size_t>>{{4}, {3, 2}, {1, 0}});
}

TEST_CASE("a bucket starts as soon as its last gradient is ready, before backward ends") {
  FakeGroup g(2);
  Model m({100, 100, 100, 100, 100});
  auto r = Reducer::Create(&g, m.params, {}, SmallBuckets());
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  for (size_t i = 5; i-- > 0;) {
    (*r)->MarkGradReady(i);
    ++g.events;
  }
  REQUIRE((*r)->FinishBackward().ok());
  // Launched after gradient 4 (1 event), after 3 and 2 (3 events), after 1 and 0 (5).
  REQUIRE(g.launches.size() == 3);
  CHECK(g.launches[0].first == 0);
  CHECK(g.launches[1].first == 2);
  CHECK(g.launches[2].first == 4);
  CHECK((*r)->last_step().bucket_started.size() == 3);
}

TEST_CASE("buckets start in order even when gradients arrive out of order") {
  FakeGroup g(2);
  Model m({100, 100, 100});
  ReducerOptions o = SmallBuckets();
  o.bucket_cap_bytes = 4 * 100;
  auto r = Reducer::Create(&g, m.params, {}, o);
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  (*r)->MarkGradReady(0);  // bucket 2 full first
  ++g.events;
  CHECK(g.launches.empty());
  (*r)->MarkGradReady(2);
  ++g.events;
  CHECK(g.launches.size() == 1);
  (*r)->MarkGradReady(1);
  CHECK(g.launches.size() == 3);
  REQUIRE((*r)->FinishBackward().ok());
}

TEST_CASE("gradients are averaged by the world size") {
  FakeGroup g(4);
  Model m({3, 2});
  auto r = Reducer::Create(&g, m.params, {}, ReducerOptions{});
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  (*r)->MarkGradReady(1);
  (*r)->MarkGradReady(0);
  REQUIRE((*r)->FinishBackward().ok());
  const auto& p = (*r)->parameters();
  CHECK(p[0].grad[0] == doctest::Approx(1.0f));  // 4 ranks x 1, averaged
  CHECK(p[1].grad[1] == doctest::Approx(2.0f));
}

TEST_CASE("an unused parameter fails the first step with names, shapes and both fixes") {
  FakeGroup g(2);
  Model m({4, 4, 4});
  auto r = Reducer::Create(&g, m.params, {}, ReducerOptions{});
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  (*r)->MarkGradReady(2);
  (*r)->MarkGradReady(0);
  Status s = (*r)->FinishBackward();
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("layers.1 [4]") != std::string::npos);
  CHECK(s.message().find("step 0") != std::string::npos);
  CHECK(s.message().find("find_unused_parameters") != std::string::npos);
  CHECK(s.message().find("remove them") != std::string::npos);
}

TEST_CASE("find_unused_parameters reduces unused parameters as zeros") {
  FakeGroup g(2);
  Model m({4, 4, 4});
  ReducerOptions o;
  o.find_unused_parameters = true;
  o.unused_notice_after = 2;
  auto r = Reducer::Create(&g, m.params, {}, o);
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  (*r)->MarkGradReady(2);
  (*r)->MarkGradReady(0);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK((*r)->parameters()[1].grad[0] == 0.0f);
  CHECK((*r)->last_step().unused == std::vector<size_t>{1});
  for (int step = 0; step < 2; ++step) {
    (*r)->BeginBackward();
    for (size_t i = 0; i < 3; ++i) (*r)->MarkGradReady(i);
    REQUIRE((*r)->FinishBackward().ok());
  }
  CHECK((*r)->TakeNotice().find("no parameter went unused") != std::string::npos);
  CHECK((*r)->TakeNotice().empty());
}

TEST_CASE("no_sync reduces nothing") {
  FakeGroup g(2);
  Model m({4});
  auto r = Reducer::Create(&g, m.params, {}, ReducerOptions{});
  REQUIRE(r.ok());
  (*r)->set_no_sync(true);
  (*r)->BeginBackward();
  (*r)->MarkGradReady(0);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK(g.launches.empty());
}

TEST_CASE("buckets are rebuilt once from rank 0's observed gradient order") {
  FakeGroup g(2);
  Model m({100, 100, 100});
  ReducerOptions o = SmallBuckets();
  o.bucket_cap_bytes = 4 * 100;
  auto r = Reducer::Create(&g, m.params, {}, o);
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  for (size_t i : {1, 0, 2}) (*r)->MarkGradReady(i);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK((*r)->buckets() == std::vector<std::vector<size_t>>{{1}, {0}, {2}});
}

TEST_CASE("a model that differs between ranks is reported, not hung") {
  FakeGroup g(2);
  Model m({4, 4});
  g.others[1] = "layers.0 [4]\nlayers.1 [5]\n";
  auto r = Reducer::Create(&g, m.params, {}, ReducerOptions{});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("parameter #1: rank 0 has layers.1 [4], rank 1 has layers.1 "
                                  "[5]") != std::string::npos);
}

TEST_CASE("settings that differ between ranks are reported, naming the first") {
  FakeGroup g(2);
  Model m({4});
  ReducerOptions o;
  o.same_on_every_rank = {{"--amp", "fp16"}, {"--steps", "30"}};
  REQUIRE(Reducer::Create(&g, m.params, {}, o).ok());  // every rank as this one
  g.gathers = 0;
  g.others_at[1] = {{1, "--amp=fp16\n--steps=31\n"}};  // the parameters agree, then this
  auto r = Reducer::Create(&g, m.params, {}, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message() ==
        "ddp: the ranks' settings differ: rank 0 has --steps=30, rank 1 has --steps=31: every "
        "rank must train with the same settings (ranks that differ reduce gradients of different "
        "scales, or wait in different collectives)");
}

TEST_CASE("bucket caps that differ between ranks are refused, with no settings given") {
  // Other caps give buckets of other sizes at step 0, before the layout is
  // agreed: Gloo aborted the process (attack 91).
  FakeGroup g(2);
  Model m({4});
  ReducerOptions o;
  o.bucket_cap_bytes = 1000;
  g.others_at[1] = {{1, "bucket_cap_bytes=2000\nfirst_bucket_bytes=1048576\n"}};
  auto r = Reducer::Create(&g, m.params, {}, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("rank 0 has bucket_cap_bytes=1000, rank 1 has "
                                  "bucket_cap_bytes=2000") != std::string::npos);
}

TEST_CASE("parameters and buffers are broadcast at construction, buffers before forward") {
  FakeGroup g(2);
  Model m({3});
  std::vector<float> running(2, 0.5f);
  std::vector<Buffer> buffers{{"running_mean", {2}, running.data()}};
  auto r = Reducer::Create(&g, m.params, buffers, ReducerOptions{});
  REQUIRE(r.ok());
  // Host memory goes as one broadcast of bytes: 3 + 2 floats, then the 2 of the buffer.
  CHECK(g.broadcasts == std::vector<size_t>{20});
  REQUIRE((*r)->BeforeForward().ok());
  CHECK(g.broadcasts == std::vector<size_t>{20, 8});
  ReducerOptions off;
  off.broadcast_buffers = false;
  auto r2 = Reducer::Create(&g, m.params, buffers, off);
  REQUIRE(r2.ok());
  REQUIRE((*r2)->BeforeForward().ok());
  CHECK(g.broadcasts.size() == 3);
}

ReducerOptions Views(ReducerOptions o = SmallBuckets()) {
  o.gradient_as_bucket_view = true;
  return o;
}

// Whether `p` lies inside the `count` floats at `base`.
bool Inside(const float* p, const float* base, size_t count) {
  return p >= base && p < base + count;
}

TEST_CASE("gradient_as_bucket_view: gradients move into the buckets, values kept") {
  FakeGroup g(2);
  Model m({100, 100, 100});
  auto r = Reducer::Create(&g, m.params, {}, Views());
  REQUIRE(r.ok());
  CHECK((*r)->layout_generation() == 1);
  const auto& p = (*r)->parameters();
  for (size_t i = 0; i < 3; ++i) {
    CHECK(p[i].grad != m.grad[i].data());
    CHECK(p[i].grad[99] == static_cast<float>(i + 1));  // the model's values, moved
  }
  // The model writes its gradients through the new pointers; the reducer
  // reduces that memory itself and averages it in place.
  (*r)->BeginBackward();
  std::vector<float*> written;
  for (size_t i : {2, 1, 0}) {
    std::fill(p[i].grad, p[i].grad + 100, 10.0f * static_cast<float>(i + 1));
    written.push_back(p[i].grad);
    (*r)->MarkGradReady(i);
  }
  REQUIRE((*r)->FinishBackward().ok());
  REQUIRE(g.reduced.size() == 2);
  // The step's buckets: {2}, {1, 0} (reverse order, 100-float first bucket).
  CHECK(written[0] == g.reduced[0]);
  CHECK(written[1] == g.reduced[1]);
  CHECK(Inside(written[2], g.reduced[1], 200));
  CHECK(m.grad[0][0] == 1.0f);  // the model's own buffers are left alone
  for (size_t i = 0; i < 3; ++i) {
    CHECK((*r)->parameters()[i].grad[0] == doctest::Approx(10.0f * static_cast<float>(i + 1)));
  }
}

TEST_CASE("gradient_as_bucket_view: the rebuild moves the reduced gradients once more") {
  FakeGroup g(4);
  Model m({100, 100, 100});
  ReducerOptions o = Views();
  o.bucket_cap_bytes = 4 * 100;
  auto r = Reducer::Create(&g, m.params, {}, o);
  REQUIRE(r.ok());
  std::vector<float*> before;
  for (const Parameter& p : (*r)->parameters()) before.push_back(p.grad);
  (*r)->BeginBackward();
  for (size_t i : {1, 0, 2}) (*r)->MarkGradReady(i);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK((*r)->buckets() == std::vector<std::vector<size_t>>{{1}, {0}, {2}});
  CHECK((*r)->layout_generation() == 2);
  const auto& p = (*r)->parameters();
  for (size_t i = 0; i < 3; ++i) {
    CHECK(p[i].grad != before[i]);
    // 4 ranks of identical gradients i+1, averaged: i+1, in the new place.
    CHECK(p[i].grad[0] == doctest::Approx(static_cast<float>(i + 1)));
    CHECK(p[i].grad[99] == doctest::Approx(static_cast<float>(i + 1)));
  }
  // Later steps reduce the new buckets in place and move nothing.
  (*r)->BeginBackward();
  for (size_t i : {1, 0, 2}) (*r)->MarkGradReady(i);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK((*r)->layout_generation() == 2);
  REQUIRE(g.reduced.size() == 6);
  CHECK(p[1].grad == g.reduced[3]);
  CHECK(p[0].grad == g.reduced[4]);
  CHECK(p[2].grad == g.reduced[5]);
}

TEST_CASE("gradient_as_bucket_view: unused parameters are zeros in their bucket") {
  FakeGroup g(2);
  Model m({4, 4, 4});
  ReducerOptions o = Views(ReducerOptions{});
  o.find_unused_parameters = true;
  auto r = Reducer::Create(&g, m.params, {}, o);
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  (*r)->MarkGradReady(2);
  (*r)->MarkGradReady(0);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK((*r)->parameters()[1].grad[3] == 0.0f);
  CHECK((*r)->parameters()[0].grad[0] == doctest::Approx(1.0f));
  CHECK(m.grad[1][3] == 2.0f);
}

TEST_CASE("without gradient_as_bucket_view the model keeps its gradient buffers") {
  FakeGroup g(2);
  Model m({100, 100});
  auto r = Reducer::Create(&g, m.params, {}, SmallBuckets());
  REQUIRE(r.ok());
  CHECK((*r)->layout_generation() == 0);
  (*r)->BeginBackward();
  for (size_t i : {1, 0}) (*r)->MarkGradReady(i);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK((*r)->parameters()[0].grad == m.grad[0].data());
  CHECK(m.grad[0][0] == doctest::Approx(1.0f));  // averaged back into the model's buffer
  CHECK((*r)->layout_generation() == 0);
}

// 16-bit parameters: storage of uint16_t values, carried by the float pointers.
struct HalfModel {
  std::vector<std::vector<uint16_t>> data, grad;
  std::vector<Parameter> params;

  void Add(const std::string& name, size_t n, DType dtype, float grad_value) {
    data.emplace_back(n, 0);
    grad.emplace_back(
        n, dtype == DType::kBFloat16 ? FloatToBFloat16(grad_value) : FloatToHalfBits(grad_value));
    Parameter p{name, {static_cast<int64_t>(n)}, nullptr, nullptr, dtype};
    params.push_back(p);
  }
  // After every Add: the vectors no longer move.
  std::vector<Parameter>& Wire() {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].data = reinterpret_cast<float*>(data[i].data());
      params[i].grad = reinterpret_cast<float*>(grad[i].data());
    }
    return params;
  }
};

float Value(const Parameter& p, size_t k) {
  return p.dtype == DType::kBFloat16 ? BFloat16ToFloat(p.grad16()[k])
                                     : HalfBitsToFloat(p.grad16()[k]);
}

TEST_CASE("16-bit gradients go to buckets of their own type, averaged before the sum") {
  for (bool views : {false, true}) {
    CAPTURE(views);
    FakeGroup g(4);
    HalfModel m;
    m.Add("a", 100, DType::kBFloat16, 2.0f);
    m.Add("b", 50, DType::kFloat16, 40000.0f);  // x4 ranks overflows fp16 unless divided first
    m.Add("c", 100, DType::kBFloat16, 8.0f);
    ReducerOptions o;
    o.gradient_as_bucket_view = views;
    auto r = Reducer::Create(&g, m.Wire(), {}, o);
    REQUIRE(r.ok());
    // Reverse order: c, b, a; one bucket per type.
    CHECK((*r)->buckets() == std::vector<std::vector<size_t>>{{2, 0}, {1}});
    (*r)->BeginBackward();
    for (size_t i : {2, 1, 0}) (*r)->MarkGradReady(i);
    REQUIRE((*r)->FinishBackward().ok());
    CHECK(g.dtypes == std::vector<DType>{DType::kBFloat16, DType::kFloat16});
    const auto& p = (*r)->parameters();
    CHECK(Value(p[0], 99) == 2.0f);
    CHECK(Value(p[1], 0) == 40000.0f);  // 10000 x 4: finite
    CHECK(Value(p[2], 0) == 8.0f);
    CHECK(std::isfinite(Value(p[1], 49)));
  }
}

TEST_CASE("find_nonfinite_origin names the ranks and parameters that made inf/NaN gradients") {
  for (bool views : {false, true}) {
    CAPTURE(views);
    FakeGroup g(3);
    Model m({4, 4});
    m.grad[1][2] = std::nanf("");
    ReducerOptions o;
    o.gradient_as_bucket_view = views;
    o.find_nonfinite_origin = true;
    auto r = Reducer::Create(&g, m.params, {}, o);
    REQUIRE(r.ok());
    (*r)->BeginBackward();
    (*r)->MarkGradReady(1);
    (*r)->MarkGradReady(1);  // twice: counted once
    (*r)->MarkGradReady(0);
    REQUIRE((*r)->FinishBackward().ok());
    CHECK((*r)->last_step().nonfinite == std::vector<size_t>{1});
    CHECK(std::isnan((*r)->parameters()[1].grad[2]));  // the sum spread it
    g.others_at[g.gathers] = {{1, ""}, {2, "layers.0\n"}};
    auto origin = (*r)->NonFiniteOrigin();
    REQUIRE(origin.ok());
    CHECK(*origin == "rank 0 (layers.1); rank 2 (layers.0)");
    // A finite step: nothing from anyone (the sum overflowed, if the scaler found inf).
    for (const Parameter& p : (*r)->parameters()) std::fill(p.grad, p.grad + p.numel(), 1.0f);
    (*r)->BeginBackward();
    for (size_t i : {1, 0}) (*r)->MarkGradReady(i);
    REQUIRE((*r)->FinishBackward().ok());
    CHECK((*r)->last_step().nonfinite.empty());
  }
  // Off (the default): no check.
  FakeGroup g(2);
  Model m({4});
  m.grad[0][0] = INFINITY;
  auto r = Reducer::Create(&g, m.params, {}, ReducerOptions{});
  REQUIRE(r.ok());
  (*r)->BeginBackward();
  (*r)->MarkGradReady(0);
  REQUIRE((*r)->FinishBackward().ok());
  CHECK((*r)->last_step().nonfinite.empty());
}

TEST_CASE("16-bit gradients are checked for inf/NaN by their exponent bits") {
  HalfModel m;
  m.Add("half_ok", 3, DType::kFloat16, 60000.0f);
  m.Add("half_inf", 3, DType::kFloat16, 70000.0f);  // past fp16's 65504
  m.Add("bf16_ok", 3, DType::kBFloat16, 1e38f);
  m.Add("bf16_nan", 3, DType::kBFloat16, std::nanf(""));
  const auto& p = m.Wire();
  CHECK(GradFinite(p[0]));
  CHECK_FALSE(GradFinite(p[1]));
  CHECK(GradFinite(p[2]));
  CHECK_FALSE(GradFinite(p[3]));
}

TEST_CASE("the origin of inf/NaN names three parameters per rank, then counts") {
  FakeGroup g(2);
  g.others = {{1, "a\nb\nc\nd\ne\n"}};
  auto origin = GatherNonFiniteOrigin(g, {});
  REQUIRE(origin.ok());
  CHECK(*origin == "rank 1 (a, b, c and 2 more)");
}

TEST_CASE("float32 and 16-bit parameters share no bucket; each type's first bucket is small") {
  FakeGroup g(2);
  Model f({100, 100});
  HalfModel h;
  h.Add("h0", 100, DType::kFloat16, 1.0f);
  h.Add("h1", 100, DType::kFloat16, 1.0f);
  std::vector<Parameter> params = h.Wire();
  params.insert(params.begin() + 1, f.params.begin(), f.params.end());  // h0, f0, f1, h1
  ReducerOptions o = SmallBuckets();  // first bucket 400 bytes, then 1000
  auto r = Reducer::Create(&g, params, {}, o);
  REQUIRE(r.ok());
  // Reverse order h1, f1, f0, h0: fp16 {h1}... h1 is 200 bytes, h0 fits the 400-byte first
  // fp16 bucket; f1 fills float32's first bucket (400 bytes), f0 opens the next.
  CHECK((*r)->buckets() == std::vector<std::vector<size_t>>{{3, 0}, {2}, {1}});
}

TEST_CASE(
    "a dtype that differs between ranks is named; a type the reducer cannot average is refused") {
  FakeGroup g(2);
  g.others[1] = "a [4] bfloat16\n";
  HalfModel m;
  m.Add("a", 4, DType::kFloat16, 1.0f);
  auto r = Reducer::Create(&g, m.Wire(), {}, ReducerOptions{});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("rank 0 has a [4] float16, rank 1 has a [4] bfloat16") !=
        std::string::npos);
  std::vector<int32_t> ints(4);
  Parameter bad{"step",
                {4},
                reinterpret_cast<float*>(ints.data()),
                reinterpret_cast<float*>(ints.data()),
                DType::kInt32};
  auto refused = Reducer::Create(&g, {bad}, {}, ReducerOptions{});
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("parameter step is int32") != std::string::npos);
}

TEST_CASE("Work::Synchronize orders on the device while running, waits once done") {
  Work host;  // no stream wait: as Wait()
  host.Complete(Status::Ok());
  CHECK(host.Synchronize().ok());

  Work device;
  int stream_waits = 0;
  device.set_stream_wait([&] {
    ++stream_waits;
    return Status::Ok();
  });
  CHECK(device.Synchronize().ok());  // still running: the stream waits, the host does not
  CHECK(stream_waits == 1);
  device.Complete(Unavailable("aborted"));
  CHECK(device.Synchronize().message() == "aborted");  // done: its status, no stream wait
  CHECK(stream_waits == 1);
}

}  // namespace
}  // namespace ddprun::ddp
