#include "env/visible_gpus.hpp"

#include <doctest/doctest.h>

namespace ddprun::env {
namespace {

// n GPUs as NVML would list them: GPU-<i>aaa..., bus 0000:<10+i>:00.0; the
// last one has MIG on with two instances when `mig`.
GpuInventory Host(int n, bool mig = false) {
  GpuInventory inv;
  inv.source = GpuSource::kNvml;
  for (int i = 0; i < n; ++i) {
    GpuDevice g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i) + "aaa-1111";
    g.pci_bus_id = "0000:" + std::to_string(10 + i) + ":00.0";
    inv.devices.push_back(g);
  }
  if (mig && n > 0) {
    inv.devices.back().mig_enabled = true;
    inv.devices.back().mig_uuids = {"MIG-x1", "MIG-x2"};
  }
  return inv;
}

std::vector<int> Devices(const VisibleGpus& v) {
  std::vector<int> out;
  for (const auto& g : v.gpus) out.push_back(g.device);
  return out;
}

VisibleGpus Resolve(const std::optional<std::string>& gpus, const Environ& environ,
                    const GpuInventory& inv) {
  auto v = ResolveVisibleGpus(gpus, environ, inv);
  REQUIRE(v.ok());
  return *v;
}

std::string Refusal(const std::string& gpus, const GpuInventory& inv) {
  auto v = ResolveVisibleGpus(gpus, {}, inv);
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().code() == StatusCode::kInvalidArgument);
  return v.status().message();
}

TEST_CASE("nothing named: every GPU of the host, workers' environment untouched") {
  auto v = Resolve(std::nullopt, {}, Host(3));
  CHECK(v.source == VisibleSource::kAll);
  CHECK(v.checked);
  CHECK(Devices(v) == std::vector<int>{0, 1, 2});
  CHECK_FALSE(v.worker_devices.has_value());
  CHECK(v.warnings.empty());
}

TEST_CASE("--gpus naming devices the host lacks is refused with what the host has") {
  const std::string m = Refusal("0,6,7", Host(1));
  CHECK(m ==
        "--gpus=0,6,7: 6, 7 name no GPU of this host, which has 1 GPU: 0 GPU-0aaa-1111 "
        "(0000:10:00.0): list indices from 0 to 0 or UUIDs of these GPUs (ddprun doctor lists "
        "them)");
  CHECK(Refusal("GPU-9", Host(2)).find("GPU-9 names no GPU") != std::string::npos);
  CHECK(Refusal("0", Host(0)).find("which has no GPU: run without --gpus") != std::string::npos);
}

TEST_CASE("--gpus listing one GPU twice is refused, also in two spellings") {
  CHECK(Refusal("1,1", Host(2)).find("GPU 1 is listed twice: list each GPU once") !=
        std::string::npos);
  CHECK(Refusal("0,GPU-0aaa", Host(2)).find("\"0\" and \"GPU-0aaa\" are the same GPU") !=
        std::string::npos);
}

TEST_CASE("--gpus takes indices, unique UUID prefixes and MIG UUIDs") {
  auto v =
      Resolve(std::string("2,GPU-0aaa,MIG-x2"), {{"CUDA_VISIBLE_DEVICES", "1"}}, Host(3, true));
  CHECK(v.source == VisibleSource::kGpusOption);
  CHECK(Devices(v) == std::vector<int>{2, 0, 2});
  CHECK(v.gpus[2].mig_uuid == "MIG-x2");
  CHECK(v.worker_devices == "2,GPU-0aaa,MIG-x2");
  GpuInventory twins = Host(2);
  twins.devices[1].uuid = "GPU-0aaa-2222";
  CHECK(Refusal("GPU-0aaa", twins).find("GPU-0aaa (a prefix of 2 UUIDs) names no GPU") !=
        std::string::npos);
}

TEST_CASE("--gpus without any GPU inventory is taken unchecked, with one warning") {
  GpuInventory none;
  none.note = "libnvidia-ml.so.1: cannot open shared object file";
  auto v = Resolve(std::string("0,6,7"), {}, none);
  CHECK_FALSE(v.checked);
  CHECK(v.gpus.empty());
  CHECK(v.worker_devices == "0,6,7");
  REQUIRE(v.warnings.size() == 1);
  CHECK(v.warnings[0].find("--gpus=0,6,7 not checked") != std::string::npos);
  CHECK(v.warnings[0].find(none.note) != std::string::npos);
  // A GPU written twice is a repeat whatever the host has.
  CHECK(Refusal("0,6,0", none) ==
        "--gpus=0,6,0: GPU 0 is listed twice: list each GPU once (two workers on one GPU make "
        "NCCL fail with \"Duplicate GPU detected\")");
}

TEST_CASE("CUDA_VISIBLE_DEVICES is read as CUDA reads it") {
  auto Cvd = [](const std::string& list, const GpuInventory& inv) {
    return Resolve(std::nullopt, {{"CUDA_VISIBLE_DEVICES", list}}, inv);
  };
  CHECK(Devices(Cvd("2,0", Host(3))) == std::vector<int>{2, 0});
  CHECK(Devices(Cvd("", Host(3))).empty());
  CHECK(Devices(Cvd(" 1 , 0", Host(3))) == std::vector<int>{1, 0});
  CHECK(Devices(Cvd("1gpu", Host(3))) == std::vector<int>{1});  // strtoul: the leading digits
  auto hidden = Cvd("-1", Host(3));
  CHECK(Devices(hidden).empty());
  CHECK(hidden.warnings.empty());  // "-1" hides the GPUs on purpose
  CHECK(Cvd("NoDevFiles", Host(3)).warnings.empty());
  auto cut = Cvd("1,7,0", Host(3));
  CHECK(Devices(cut) == std::vector<int>{1});
  REQUIRE(cut.warnings.size() == 1);
  CHECK(cut.warnings[0].find("7 names no GPU of this host") != std::string::npos);
  CHECK(Devices(Cvd("GPU-1aaa,GPU-0", Host(3))) == std::vector<int>{1, 0});
  CHECK(Devices(Cvd("MIG-x1", Host(2, true))) == std::vector<int>{1});
  auto twice = Cvd("0,1,0", Host(3));
  CHECK(Devices(twice).empty());
  REQUIRE(twice.warnings.size() == 1);
  CHECK(twice.warnings[0].find("so CUDA sees no GPU") != std::string::npos);
  CHECK_FALSE(Cvd("0", Host(3)).worker_devices.has_value());
}

TEST_CASE("Slurm's GPU lists count only where CUDA_VISIBLE_DEVICES is unset") {
  const Environ both{{"CUDA_VISIBLE_DEVICES", "0"}, {"SLURM_STEP_GPUS", "2,3"}};
  CHECK(Resolve(std::nullopt, both, Host(4)).source == VisibleSource::kCudaVisibleDevices);
  auto step =
      Resolve(std::nullopt, {{"SLURM_STEP_GPUS", "2,3"}, {"SLURM_JOB_GPUS", "0,1,2,3"}}, Host(4));
  CHECK(step.source == VisibleSource::kSlurmStepGpus);
  CHECK(Devices(step) == std::vector<int>{2, 3});
  CHECK(step.worker_devices == "2,3");
  auto job = Resolve(std::nullopt, {{"SLURM_JOB_GPUS", "1"}}, Host(4));
  CHECK(job.source == VisibleSource::kSlurmJobGpus);
  CHECK(Devices(job) == std::vector<int>{1});
}

TEST_CASE("Slurm's global indices under a device cgroup mean every GPU the host shows") {
  auto v = Resolve(std::nullopt, {{"SLURM_STEP_GPUS", "5,7"}}, Host(2));
  CHECK(Devices(v) == std::vector<int>{0, 1});
  CHECK_FALSE(v.worker_devices.has_value());
  CHECK(v.warnings.empty());
  auto odd = Resolve(std::nullopt, {{"SLURM_STEP_GPUS", "5"}}, Host(2));
  CHECK(Devices(odd) == std::vector<int>{0, 1});
  REQUIRE(odd.warnings.size() == 1);
  CHECK(odd.warnings[0].find("SLURM_STEP_GPUS=5 does not match") != std::string::npos);
}

TEST_CASE("local ranks get the bus id of the visible GPU at their position") {
  auto v = Resolve(std::string("2,0"), {}, Host(3));
  auto ids = LocalRankBusIds(v, Host(3), 3);
  REQUIRE(ids.size() == 3);
  CHECK(ids[0] == "0000:12:00.0");
  CHECK(ids[1] == "0000:10:00.0");
  CHECK_FALSE(ids[2].has_value());
  auto mig = Resolve(std::string("MIG-x2"), {}, Host(2, true));
  CHECK(LocalRankBusIds(mig, Host(2, true), 1)[0] == "0000:11:00.0");
  CHECK(LocalRankBusIds(VisibleGpus{}, GpuInventory{}, 2) ==
        std::vector<std::optional<std::string>>(2));
  // Visible GPUs that no rank drives follow: exclusive binding counts them (found by an
  // attacking helper: one rank of two GPUs on a node took all its cores; torchrun half).
  auto all = LocalRankBusIds(Resolve(std::nullopt, {}, Host(3)), Host(3), 1);
  CHECK(all ==
        std::vector<std::optional<std::string>>{"0000:10:00.0", "0000:11:00.0", "0000:12:00.0"});
}

TEST_CASE("the source is named for messages") {
  CHECK(VisibleSourceText(Resolve(std::nullopt, {}, Host(1))) == "every GPU of the host");
  CHECK(VisibleSourceText(Resolve(std::string("0"), {}, Host(1))) == "--gpus=0");
  CHECK(VisibleSourceText(Resolve(std::nullopt, {{"CUDA_VISIBLE_DEVICES", "0"}}, Host(1))) ==
        "CUDA_VISIBLE_DEVICES=0");
}

}  // namespace
}  // namespace ddprun::env
