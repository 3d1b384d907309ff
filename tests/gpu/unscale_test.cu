// Device tests of the GradScaler kernels and the GradScaler's CUDA path.
// Prints "skipped: no CUDA device" and passes where there is no device;
// scripts/gpu-check.sh runs it where there is one. Exit 1 on any failure.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "ddp/cuda/unscale.hpp"
#include "ddp/grad_scaler.hpp"

namespace ddprun::ddp {
namespace {

int failures = 0;

void Expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

// A one-rank group that says "nccl", so GradScaler takes its device path
// without needing NCCL or a store.
class OneRankNccl : public ProcessGroup {
 public:
  OneRankNccl() : ProcessGroup(0, 1, "nccl") {}
  std::shared_ptr<Work> AllReduce(TensorView, ReduceOp) override { return Unused(); }
  std::shared_ptr<Work> Broadcast(TensorView, int) override { return Unused(); }
  StatusOr<std::vector<std::string>> AllGatherStrings(const std::string& s) override {
    return std::vector<std::string>{s};
  }
  uint64_t sequence() const override { return 0; }

 private:
  static std::shared_ptr<Work> Unused() {
    auto w = std::make_shared<Work>();
    w->Complete(Internal("one rank: no collective expected"));
    return w;
  }
};

// Unscales host[offset..) on the device; returns the flag, writes back the values.
float RunKernel(std::vector<float>& host, size_t offset, float inv_scale) {
  float* d = nullptr;
  float* flag = nullptr;
  cudaMalloc(&d, host.size() * sizeof(float));
  cudaMalloc(&flag, sizeof(float));
  cudaMemset(flag, 0, sizeof(float));
  cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  Expect(UnscaleAndCheck(d + offset, host.size() - offset, inv_scale, flag, nullptr) == cudaSuccess,
         "kernel launch");
  float found = -1;
  cudaMemcpy(host.data(), d, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(&found, flag, sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d);
  cudaFree(flag);
  return found;
}

void TestKernelShapes(float inv) {
  for (size_t n : {1, 3, 4, 5, 17, 1000, 1 << 20}) {
    for (size_t offset : {0, 1, 2, 3}) {
      std::vector<float> v(n + offset);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) - 48.0f;
      std::vector<float> want = v;
      for (size_t i = offset; i < v.size(); ++i) want[i] *= inv;
      Expect(RunKernel(v, offset, inv) == 0.0f, "clean gradients: found_inf stays 0");
      Expect(v == want, "every element multiplied once, none outside the range");
      for (float bad :
           {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        std::vector<float> w(n + offset, 1.0f);
        w[offset + (n - 1) / 2] = bad;
        Expect(RunKernel(w, offset, inv) == 1.0f, "inf or NaN sets found_inf");
      }
    }
  }
}

// Every size and misalignment around the float4 body, clean and with one inf/NaN; with loss
// scaling and without (inv 1: the check alone, nothing written).
void TestKernelShapes() {
  for (const float inv : {static_cast<float>(1.0 / 1024.0), 1.0f}) {
    TestKernelShapes(inv);
  }
}

void TestScalerOnDevice() {
  std::vector<float> host = {3.0f * 8, std::numeric_limits<float>::quiet_NaN(), 4.0f * 8};
  float* d = nullptr;
  cudaMalloc(&d, host.size() * sizeof(float));
  cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  std::vector<Parameter> params = {
      {"a", {1}, nullptr, d}, {"bad", {1}, nullptr, d + 1}, {"b", {1}, nullptr, d + 2}};
  OneRankNccl group;
  GradScalerOptions options;
  options.init_scale = 8.0f;
  options.anomaly_mode = true;
  GradScaler scaler(&group, options);
  Expect(scaler.Unscale(params, 5).ok(), "device unscale");
  Expect(scaler.found_inf(), "device unscale finds the NaN");
  Expect(scaler.anomaly() == "step 5: non-finite gradients in bad", "anomaly names it");
  scaler.Update();
  Expect(scaler.scale() == 4.0f, "backoff");
  // Fresh gradients at the new scale: 24/4 = 6 and 32/4 = 8, norm 10.
  cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);

  std::vector<Parameter> finite = {params[0], params[2]};
  Expect(scaler.Unscale(finite, 6).ok(), "second unscale");
  auto norm = scaler.ClipGradNorm(finite, 5.0f);
  Expect(norm.ok() && std::fabs(*norm - 10.0f) < 1e-4f, "device norm");
  cudaMemcpy(host.data(), d, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  Expect(std::fabs(host[0] - 3.0f) < 1e-4f && std::fabs(host[2] - 4.0f) < 1e-4f, "device clip");
  cudaFree(d);
}

}  // namespace
}  // namespace ddprun::ddp

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  ddprun::ddp::TestKernelShapes();
  ddprun::ddp::TestScalerOnDevice();
  std::printf("%s\n", ddprun::ddp::failures == 0 ? "OK" : "FAILED");
  return ddprun::ddp::failures == 0 ? 0 : 1;
}
