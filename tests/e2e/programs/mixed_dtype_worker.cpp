// A DDP worker with float32, float16 and bfloat16 parameters on the real Gloo
// group (tests/e2e/test_ddp_dtypes.py): rank r's gradients are (r + 1) times
// a value per parameter, and after each step every rank must hold the mean,
// value * (world + 1) / 2, in the parameter's own type. The float16 value is
// large enough that the sum over 4 ranks overflows float16 (the reducer
// divides 16-bit buckets before the sum). Prints the buckets' types and
// "rank R ok", or the first wrong element and exits 1.
//   mixed_dtype_worker [--views] [--small-buckets] [--device cuda]
// --device cuda (the mixed_dtype_worker_cuda build only): the parameters in
// device memory of GPU LOCAL_RANK and the NCCL group, the gradients set and
// checked through host copies.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/gloo_reduce.hpp"
#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"

#ifdef DDPRUN_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

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

// Where the parameters live: host memory, or (--device cuda) device memory
// reached through copies. Every buffer has a host mirror of whole floats.
struct Memory {
  bool cuda = false;
  std::vector<std::vector<float>> mirrors;

  float* Allocate(size_t bytes) {
    mirrors.emplace_back((bytes + 3) / 4, 0.0f);
#ifdef DDPRUN_HAVE_CUDA
    if (cuda) {
      void* p = nullptr;
      if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) {
        return nullptr;
      }
      return static_cast<float*>(p);
    }
#endif
    return mirrors.back().data();
  }
  // The `bytes` at `p` as the host sees them (copied from the device).
  const void* Read(const void* p, size_t bytes, std::vector<float>& scratch) const {
    if (!cuda) return p;
    scratch.resize((bytes + 3) / 4);
#ifdef DDPRUN_HAVE_CUDA
    cudaDeviceSynchronize();
    cudaMemcpy(scratch.data(), p, bytes, cudaMemcpyDeviceToHost);
#endif
    return scratch.data();
  }
  void Write(void* p, const void* host, size_t bytes) const {
#ifdef DDPRUN_HAVE_CUDA
    if (cuda) {
      cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
      return;
    }
#endif
    std::memcpy(p, host, bytes);
  }
};

}  // namespace

int main(int argc, char** argv) {
  bool views = false, small = false;
  Memory memory;
  for (int i = 1; i < argc; ++i) {
    views |= std::strcmp(argv[i], "--views") == 0;
    small |= std::strcmp(argv[i], "--small-buckets") == 0;
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      memory.cuda = std::strcmp(argv[++i], "cuda") == 0;
    }
  }
#ifndef DDPRUN_HAVE_CUDA
  if (memory.cuda) {
    std::fprintf(stderr, "--device cuda: this build has no CUDA path (mixed_dtype_worker_cuda)\n");
    return 2;
  }
#endif
  auto env = ddp::ReadLaunchEnv();
  if (!env.ok()) {
    std::fprintf(stderr, "%s\n", env.status().message().c_str());
    return 2;
  }
#ifdef DDPRUN_HAVE_CUDA
  if (memory.cuda && cudaSetDevice(env->local_rank) != cudaSuccess) {
    std::fprintf(stderr, "rank %d: no CUDA device %d\n", env->rank, env->local_rank);
    return 2;
  }
#endif
  auto group = ddp::CreateProcessGroup(*env, memory.cuda ? ddp::Device::kCuda : ddp::Device::kCpu);
  if (!group.ok()) {
    std::fprintf(stderr, "%s\n", group.status().message().c_str());
    return 1;
  }
  const int rank = (*group)->rank(), world = (*group)->size();
  std::vector<ddp::Parameter> params;
  for (const Spec& s : kSpecs) {
    const size_t bytes = s.numel * ddp::SizeOf(s.dtype);
    float* data = memory.Allocate(bytes);
    float* grad = memory.Allocate(bytes);
    if (data == nullptr || grad == nullptr) {
      std::fprintf(stderr, "rank %d: cannot allocate %s\n", rank, s.name);
      return 1;
    }
    params.push_back({s.name, {static_cast<int64_t>(s.numel)}, data, grad, s.dtype});
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
  std::vector<float> scratch;
  for (int step = 0; step < 3; ++step) {
    const std::vector<ddp::Parameter>& p = (*reducer)->parameters();
    (*reducer)->BeginBackward();
    for (size_t i = p.size(); i-- > 0;) {
      scratch.assign((p[i].bytes() + 3) / 4, 0.0f);
      for (size_t k = 0; k < p[i].numel(); ++k) {
        Store(p[i].dtype, scratch.data(), k, kSpecs[i].value * static_cast<float>(rank + 1));
      }
      memory.Write(p[i].grad, scratch.data(), p[i].bytes());
      (*reducer)->MarkGradReady(i);
    }
    if (ddprun::Status s = (*reducer)->FinishBackward(); !s.ok()) {
      std::fprintf(stderr, "rank %d step %d: %s\n", rank, step, s.message().c_str());
      return 1;
    }
    for (size_t i = 0; i < p.size(); ++i) {
      const float want = kSpecs[i].value * static_cast<float>(world + 1) / 2.0f;
      const void* grad = memory.Read(p[i].grad, p[i].bytes(), scratch);
      for (size_t k = 0; k < p[i].numel(); ++k) {
        const float got = Load(p[i].dtype, grad, k);
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
