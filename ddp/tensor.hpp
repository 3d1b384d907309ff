// The few tensor facts the DDP core needs: a typed view of contiguous memory
// on the host or a CUDA device. Views never own memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/format.hpp"

namespace ddprun::ddp {

enum class DType : uint8_t { kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kUInt8 };
enum class Device : uint8_t { kCpu, kCuda };

size_t SizeOf(DType t);
const char* DTypeName(DType t);  // "float32"

struct TensorView {
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  Device device = Device::kCpu;

  size_t bytes() const { return count * SizeOf(dtype); }
};

inline TensorView View(float* p, size_t n, Device d = Device::kCpu) {
  return {p, n, DType::kFloat32, d};
}

}  // namespace ddprun::ddp
