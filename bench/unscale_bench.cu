// Bandwidth of the fused unscale + inf/NaN check against the device's own
// device-to-device copy on the same buffer (the goal: at least 80% of it).
// Both move 2 bytes per byte of buffer (read + write). Exit 1 when the kernel
// gives a wrong answer or there is no device.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "ddp/cuda/unscale.hpp"

namespace {

constexpr size_t kBytes = size_t{256} << 20;
constexpr int kIters = 50;

// Mean milliseconds per call of `op`, after a warm-up call.
template <typename Op>
float TimeMs(Op op) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  op();
  cudaEventRecord(start);
  for (int i = 0; i < kIters; ++i) op();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / kIters;
}

double GBps(float ms) { return 2.0 * kBytes / 1e9 / (ms / 1e3); }

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const size_t n = kBytes / sizeof(float);
  float *a = nullptr, *b = nullptr, *flag = nullptr;
  cudaMalloc(&a, kBytes);
  cudaMalloc(&b, kBytes);
  cudaMalloc(&flag, sizeof(float));
  cudaMemset(a, 0, kBytes);  // zeros stay finite under any scale
  cudaMemset(flag, 0, sizeof(float));

  const float copy_ms = TimeMs([&] { cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice); });
  const float unscale_ms = TimeMs([&] { ddprun::ddp::UnscaleAndCheck(a, n, 0.5f, flag, nullptr); });
  float found = -1;
  cudaMemcpy(&found, flag, sizeof(float), cudaMemcpyDeviceToHost);
  const bool ok = cudaGetLastError() == cudaSuccess && found == 0.0f;

  std::printf("# unscale_bench: %s, %zu MiB float32, %d iterations, GB/s = 2*bytes/1e9/s\n",
              prop.name, kBytes >> 20, kIters);
  std::printf("# %-22s %10s %10s\n", "op", "time(us)", "GB/s");
  std::printf("  %-22s %10.1f %10.1f\n", "memcpy d2d", copy_ms * 1e3, GBps(copy_ms));
  std::printf("  %-22s %10.1f %10.1f\n", "UnscaleAndCheck", unscale_ms * 1e3, GBps(unscale_ms));
  std::printf("# ratio unscale/copy: %.2f (goal >= 0.80)\n", copy_ms / unscale_ms);
  std::printf("# %s\n", ok ? "OK" : "FAILED: wrong found_inf or CUDA error");
  cudaFree(a);
  cudaFree(b);
  cudaFree(flag);
  return ok ? 0 : 1;
}
