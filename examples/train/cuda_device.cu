#include <cuda_runtime_api.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "env/names.hpp"
#include "examples/train/cuda_device.hpp"

namespace ddprun::train {
namespace {

std::string VisibleDevices() {
  const std::string name = env::kCudaVisibleDevices;
  const char* v = std::getenv(env::kCudaVisibleDevices);
  return v == nullptr ? name + " unset" : name + "=\"" + std::string(v) + "\"";
}

struct CudaFree {
  void operator()(float* p) const { cudaFree(p); }
};

}  // namespace

Status SelectDevice(int local_rank) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    return InvalidArgument("--device cuda: no CUDA device visible (" + VisibleDevices() +
                           (err != cudaSuccess ? std::string(": ") + cudaGetErrorString(err) : "") +
                           "): run on a host with a GPU, or use --device cpu");
  }
  if (local_rank >= count) {
    return InvalidArgument(
        "--device cuda: LOCAL_RANK=" + std::to_string(local_rank) + " but only " +
        std::to_string(count) + " CUDA device(s) visible (" + VisibleDevices() +
        "): each local rank uses device LOCAL_RANK, so run "
        "at most " +
        std::to_string(count) + " ranks per node (--nproc_per_node) or make more devices visible");
  }
  if (cudaError_t e = cudaSetDevice(local_rank); e != cudaSuccess) {
    return Internal("--device cuda: cudaSetDevice(" + std::to_string(local_rank) +
                    "): " + cudaGetErrorString(e));
  }
  return Status::Ok();
}

StatusOr<float> AllReduceSumOnDevice(ddp::ProcessGroup& group, float value) {
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, sizeof(float)); e != cudaSuccess) {
    return Internal(std::string("cudaMalloc: ") + cudaGetErrorString(e));
  }
  std::unique_ptr<float, CudaFree> d(static_cast<float*>(p));
  cudaError_t e = cudaMemcpy(d.get(), &value, sizeof(float), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) return Internal(std::string("copy to device: ") + cudaGetErrorString(e));
  Status s =
      group.AllReduce(ddp::View(d.get(), 1, ddp::Device::kCuda), ddp::ReduceOp::kSum)->Wait();
  if (!s.ok()) return s;
  e = cudaMemcpy(&value, d.get(), sizeof(float), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return Internal(std::string("copy to host: ") + cudaGetErrorString(e));
  return value;
}

}  // namespace ddprun::train
