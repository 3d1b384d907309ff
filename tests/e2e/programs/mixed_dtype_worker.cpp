// A DDP worker with float32, float16 and bfloat16 parameters on the real Gloo
// group (tests/e2e/test_ddp_dtypes.py): rank r's gradients are (r + 1) times
// a value per parameter, and after each step every rank must hold the mean,
// value * (world + 1) / 2, in the parameter's own type. The float16 value is
// large enough that the sum over 4 ranks overflows float16 (the reducer
// divides 16-bit buckets before the sum). Prints the buckets' types and
// "rank R ok", or the first wrong element and exits 1.
//   mixed_dtype_worker [--views] [--small-buckets]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/gloo_reduce.hpp"
#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"

namespace ddp = ddprun::ddp;

namespace {

struct Spec {
  const char* name;
  size_t numel;
  ddp::DType dtype;
  float value;
};

constexpr Spec kSpecs[] = {
    {"embed.weight", 3000, ddp::DType::kBFloat16, 0.75f},
    {"proj.weight", 1000, ddp::DType::kFloat32, 0.1f},
    {"head.weight", 500, ddp::DType::kFloat16, 16000.0f},  // 4 ranks: 160000 > 65504
    {"head.bias", 7, ddp::DType::kFloat32, -3.0f},
};

float Load(ddp::DType t, const void* p, size_t k) {
  if (t == ddp::DType::kFloat32) return static_cast<const float*>(p)[k];
  const uint16_t bits = static_cast<const uint16_t*>(p)[k];
  return t == ddp::DType::kBFloat16 ? ddp::BFloat16ToFloat(bits) : ddp::HalfBitsToFloat(bits);
}

void Store(ddp::DType t, void* p, size_t k, float v) {
  if (t == ddp::DType::kFloat32) {
    static_cast<float*>(p)[k] = v;
  } else {
    static_cast<uint16_t*>(p)[k] =
        t == ddp::DType::kBFloat16 ? ddp::FloatToBFloat16(v) : ddp::FloatToHalfBits(v);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool views = false, small = false;
  for (int i = 1; i < argc; ++i) {
    views |= std::strcmp(argv[i], "--views") == 0;
    small |= std::strcmp(argv[i], "--small-buckets") == 0;
  }
  auto env = ddp::ReadLaunchEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().message().c_str());
    return 2;
  }
  auto group = ddp::CreateProcessGroup(*env, ddp::Device::kCpu);
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().message().c_str());
    return 1;
  }
  const int rank = (*group)->rank(), world = (*group)->size();
  // Storage as floats (4-byte aligned), each parameter's elements of its type.
  std::vector<std::vector<float>> data, grad;
  std::vector<ddp::Parameter> params;
  for (const Spec& s : kSpecs) {
    data.emplace_back(s.numel, 0.0f);
    grad.emplace_back(s.numel, 0.0f);
  }
  for (size_t i = 0; i < std::size(kSpecs); ++i) {
    params.push_back({kSpecs[i].name,
                      {static_cast<int64_t>(kSpecs[i].numel)},
                      data[i].data(),
                      grad[i].data(),
                      kSpecs[i].dtype});
  }
  ddp::ReducerOptions options;
  options.gradient_as_bucket_view = views;
  if (small) {
    options.first_bucket_bytes = 1024;
    options.bucket_cap_bytes = 4096;
  }
  auto reducer = ddp::Reducer::Create(group->get(), params, {}, options);
  if (!reducer.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, reducer.status().message().c_str());
    return 1;
  }
  for (int step = 0; step < 3; ++step) {
    const std::vector<ddp::Parameter>& p = (*reducer)->parameters();
    (*reducer)->BeginBackward();
    for (size_t i = p.size(); i-- > 0;) {
      for (size_t k = 0; k < p[i].numel(); ++k) {
        Store(p[i].dtype, p[i].grad, k, kSpecs[i].value * static_cast<float>(rank + 1));
      }
      (*reducer)->MarkGradReady(i);
    }
    if (ddprun::Status s = (*reducer)->FinishBackward(); !s.ok()) {
      std::fprintf(stderr, "rank %d step %d: %s\n", rank, step, s.message().c_str());
      return 1;
    }
    for (size_t i = 0; i < p.size(); ++i) {
      const float want = kSpecs[i].value * static_cast<float>(world + 1) / 2.0f;
      for (size_t k = 0; k < p[i].numel(); ++k) {
        const float got = Load(p[i].dtype, p[i].grad, k);
        if (!std::isfinite(got) || std::fabs(got - want) > 1e-2f * std::fabs(want)) {
          std::fprintf(stderr, "rank %d step %d: %s[%zu] = %g, want %g (%s)\n", rank, step,
                       p[i].name.c_str(), k, got, want, ddp::DTypeName(p[i].dtype));
          return 1;
        }
      }
    }
  }
  if (rank == 0) {
    std::string types;
    for (const auto& bucket : (*reducer)->buckets()) {
      types += std::string(types.empty() ? "" : ",") + ddp::DTypeName(kSpecs[bucket[0]].dtype);
    }
    std::printf("buckets %s\n", types.c_str());
  }
  std::printf("rank %d ok\n", rank);
  return 0;
}
