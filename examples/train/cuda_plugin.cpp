#include "examples/train/cuda_plugin.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace ddprun::train {
namespace {

constexpr char kEntryPoint[] = "ddprun_train_cuda_run_v1";
constexpr char kWhatToDo[] =
    "install the CUDA runtime, cuBLAS and NCCL libraries this build was made with (or add "
    "their directory to LD_LIBRARY_PATH) and keep the plugin beside train, or use --device cpu";

StatusOr<std::filesystem::path> ExecutableDirectory() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ErrnoStatus("read /proc/self/exe", ec.value());
  return exe.parent_path();
}

}  // namespace

StatusOr<int> RunInCudaPlugin(const char* file_name, const TrainOptions& options) {
  StatusOr<std::filesystem::path> dir = ExecutableDirectory();
  if (!dir.ok()) return dir.status().Annotate("load the CUDA plugin");
  const std::string path = (*dir / file_name).string();
  // RTLD_LOCAL: the plugin's copy of the DDP core binds only to itself. No
  // dlclose: CUDA and NCCL keep threads and exit handlers in the libraries
  // the plugin brought in, which must stay mapped until the process ends.
  void* plugin = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) {
    return Unavailable("load the CUDA plugin: " + std::string(dlerror()) + ": " + kWhatToDo);
  }
  void* entry = dlsym(plugin, kEntryPoint);
  if (entry == nullptr) {
    return Unavailable("load the CUDA plugin: " + path + " has no " + kEntryPoint +
                       " (from another build?): reinstall ddprun, or use --device cpu");
  }
  return reinterpret_cast<decltype(&ddprun_train_cuda_run_v1)>(entry)(&options);
}

}  // namespace ddprun::train
