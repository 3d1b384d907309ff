#include "env/limits.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace ddprun::env {
namespace {

constexpr uint64_t kMiB = 1u << 20;

// A user with 100 threads in three processes on a 16-core host with room for everything.
LimitFacts Facts() {
  LimitFacts f;
  f.uid = 1000;
  f.user = "alice";
  f.nproc = {4096, 4096};
  f.nofile = {1024, 524288};
  f.memlock = {8 * kMiB, 8 * kMiB};
  f.stack = {8 * kMiB, kUnlimited};
  f.user_processes = {{10, 60, "python train.py"}, {11, 30, "jupyter"}, {12, 10, "bash"}};
  f.shm_free_bytes = 1024 * kMiB;
  f.cpus = 16;
  return f;
}

const LimitCheck& Find(const LimitPlan& plan, const std::string& prefix) {
  for (const auto& c : plan.checks) {
    if (c.check.rfind(prefix, 0) == 0) return c;
  }
  FAIL("no check " << prefix);
  return plan.checks.front();
}

TEST_CASE("a soft RLIMIT_NPROC high enough for the user's threads and the job is left alone") {
  auto plan = PlanLimits(Facts(), {8, 64});  // 100 + 512 + 32 = 644 <= 4096
  const auto& c = Find(plan, "RLIMIT_NPROC");
  CHECK(c.status == CheckStatus::kOk);
  CHECK(c.fix.empty());
  CHECK_FALSE(plan.raise_nproc_soft);
  CHECK(c.measured ==
        "soft 4096, hard 4096, in use 100 (threads of alice), needed about 544 "
        "(8 workers x 64 threads + 32)");
}

TEST_CASE("a low soft RLIMIT_NPROC under a high hard one is raised to the hard limit") {
  LimitFacts f = Facts();
  f.nproc = {150, 100000};
  auto plan = PlanLimits(f, {2, 64});  // wants 100 + 128 + 32 = 260
  CHECK(plan.raise_nproc_soft == 100000u);
  CHECK(Find(plan, "RLIMIT_NPROC").status == CheckStatus::kOk);
  REQUIRE(plan.notices.size() == 2);  // NPROC, then NOFILE (1024 < 524288)
  CHECK(plan.notices[0] ==
        "raised RLIMIT_NPROC (ulimit -u) soft limit from 150 to 100000 (hard): 100 threads in "
        "use by alice, the job needs about 160");
  CHECK(NprocFailureMessage(f, {2, 64}).empty());
}

TEST_CASE("a hard RLIMIT_NPROC too low fails with the numbers, the top processes and the fixes") {
  LimitFacts f = Facts();
  f.nproc = {50, 50};
  for (int i = 0; i < 4; ++i) f.user_processes.push_back({20 + i, 1, "sleep"});
  auto plan = PlanLimits(f, {2, 64});
  const auto& c = Find(plan, "RLIMIT_NPROC");
  CHECK(c.status == CheckStatus::kFail);
  CHECK_FALSE(plan.raise_nproc_soft);
  CHECK(c.fix.find("ulimit -u 1024") != std::string::npos);
  const std::string m = NprocFailureMessage(f, {2, 64});
  CHECK(m.find("RLIMIT_NPROC (ulimit -u) is too low") == 0);
  CHECK(m.find("soft 50, hard 50, in use 104 (threads of alice), needed about 160") !=
        std::string::npos);
  CHECK(m.find("pid 10, 60 threads: python train.py\n    pid 11, 30 threads: jupyter\n"
               "    pid 12, 10 threads: bash\n    pid 20, 1 threads: sleep\n"
               "    pid 21, 1 threads: sleep\n  fix:") != std::string::npos);
  CHECK(m.find("pid 22") == std::string::npos);  // the top 5 only
  CHECK(m.find("\"alice soft nproc 1024\" and \"alice hard nproc 1024\"") != std::string::npos);
  CHECK(m.find("/etc/security/limits.d/") != std::string::npos);
  CHECK(m.find("--threads_per_worker") != std::string::npos);
}

TEST_CASE("root is not checked against RLIMIT_NPROC: the kernel does not enforce it") {
  LimitFacts f = Facts();
  f.uid = 0;
  f.user = "root";
  f.nproc = {10, 10};
  auto plan = PlanLimits(f, {8, 64});
  CHECK(Find(plan, "RLIMIT_NPROC").status == CheckStatus::kOk);
  CHECK_FALSE(plan.raise_nproc_soft);
  REQUIRE(plan.debug_notes.size() == 1);
  CHECK(plan.debug_notes[0].find("root") != std::string::npos);
  CHECK(NprocFailureMessage(f, {8, 64}).empty());

  f.user_namespace = true;  // a container's root is another user to the kernel
  CHECK(Find(PlanLimits(f, {8, 64}), "RLIMIT_NPROC").status == CheckStatus::kFail);
}

TEST_CASE("RLIMIT_NOFILE's soft limit is raised to the hard one, capped at fs.nr_open") {
  LimitFacts f = Facts();
  auto plan = PlanLimits(f, {1, 64});
  CHECK(plan.raise_nofile_soft == 524288u);
  CHECK(Find(plan, "RLIMIT_NOFILE").measured == "soft 1024, hard 524288; soft raised to 524288");

  f.nofile = {1024, kUnlimited};
  f.nr_open = 1048576;
  CHECK(PlanLimits(f, {1, 64}).raise_nofile_soft == 1048576u);

  f.nofile = {65536, 65536};
  plan = PlanLimits(f, {1, 64});
  CHECK_FALSE(plan.raise_nofile_soft);
  CHECK(plan.notices.empty());
}

TEST_CASE("RLIMIT_MEMLOCK below unlimited warns only where there is InfiniBand") {
  LimitFacts f = Facts();
  auto without = Find(PlanLimits(f, {8, 64}), "RLIMIT_MEMLOCK");
  CHECK(without.status == CheckStatus::kOk);
  CHECK(without.measured.find("informational") != std::string::npos);

  f.infiniband = true;
  auto with = Find(PlanLimits(f, {8, 64}), "RLIMIT_MEMLOCK");
  CHECK(with.status == CheckStatus::kWarn);
  CHECK(with.fix.find("ulimit -l unlimited") != std::string::npos);
  CHECK(with.fix.find("alice hard memlock unlimited") != std::string::npos);

  f.memlock = {kUnlimited, kUnlimited};
  CHECK(Find(PlanLimits(f, {8, 64}), "RLIMIT_MEMLOCK").status == CheckStatus::kOk);
}

TEST_CASE("OMP_NUM_THREADS times the workers above the allowed CPUs warns with a value that fits") {
  LimitFacts f = Facts();
  f.omp_num_threads = "4";
  auto c = Find(PlanLimits(f, {8, 64}), "OMP_NUM_THREADS");
  CHECK(c.status == CheckStatus::kWarn);
  CHECK(c.measured == "4 x 8 workers = 32 threads on 16 allowed CPUs: oversubscribed");
  CHECK(c.fix == "OMP_NUM_THREADS=2");
  // Already one thread each: no OMP value helps, only CPUs or fewer workers.
  f.omp_num_threads = "1";
  auto one = Find(PlanLimits(f, {32, 64}), "OMP_NUM_THREADS");
  CHECK(one.status == CheckStatus::kWarn);
  CHECK(one.fix.find("OMP_NUM_THREADS") == std::string::npos);
  CHECK(one.fix.find("srun -c 32") != std::string::npos);
  CHECK(one.fix.find("--nproc_per_node") != std::string::npos);
  f.omp_num_threads = "4";

  CHECK(Find(PlanLimits(f, {4, 64}), "OMP_NUM_THREADS").status == CheckStatus::kOk);
  // More workers than CPUs: OMP_NUM_THREADS=1 alone still oversubscribes (it was the fix).
  auto above = Find(PlanLimits(f, {32, 64}), "OMP_NUM_THREADS");
  CHECK(above.status == CheckStatus::kWarn);
  CHECK(above.fix.find("OMP_NUM_THREADS=1, and more CPUs for the job (under Slurm: srun -c 32") ==
        0);
  f.omp_num_threads.reset();
  CHECK(Find(PlanLimits(f, {8, 64}), "OMP_NUM_THREADS").status == CheckStatus::kOk);
  // Unset, more workers than CPUs: ddprun's 1 thread each still oversubscribes.
  auto unset = Find(PlanLimits(f, {32, 64}), "OMP_NUM_THREADS");
  CHECK(unset.status == CheckStatus::kWarn);
  CHECK(unset.measured ==
        "unset: each of the 32 workers gets 1 of 16 CPUs: oversubscribed, more workers than CPUs");
  CHECK(unset.fix.find("srun -c 32") != std::string::npos);
  f.omp_num_threads = "many";
  CHECK(Find(PlanLimits(f, {8, 64}), "OMP_NUM_THREADS").status == CheckStatus::kWarn);
}

TEST_CASE("/dev/shm smaller than NCCL's SHM buffers for the local ranks warns") {
  LimitFacts f = Facts();
  f.shm_free_bytes = 64 * kMiB;                       // Docker's default
  auto c = Find(PlanLimits(f, {8, 64}), "/dev/shm");  // 4 MiB x 8 x 7 = 224 MiB
  CHECK(c.status == CheckStatus::kWarn);
  CHECK(c.measured ==
        "64 MiB free, NCCL's shared-memory transport needs about 224 MiB for 8 local ranks");
  CHECK(c.fix.find("--shm-size=256m") != std::string::npos);
  CHECK(c.fix.find("NCCL_SHM_DISABLE=1") != std::string::npos);

  f.shm_free_bytes = 300 * kMiB;
  CHECK(Find(PlanLimits(f, {4, 64}), "/dev/shm").status == CheckStatus::kOk);  // 48 MiB
  CHECK(Find(PlanLimits(f, {1, 64}), "/dev/shm").status == CheckStatus::kOk);
  f.shm_free_bytes.reset();
  CHECK(Find(PlanLimits(f, {2, 64}), "/dev/shm").status == CheckStatus::kWarn);
}

TEST_CASE("/dev/shm read-only, out of inodes or without a size limit, and no NCCL without GPUs") {
  LimitFacts f = Facts();
  f.shm_read_only = true;
  auto ro = Find(PlanLimits(f, {2, 64}), "/dev/shm");
  CHECK(ro.status == CheckStatus::kWarn);
  CHECK(ro.measured.rfind("mounted read-only: nothing can be made there", 0) == 0);
  f.shm_read_only = false;
  f.shm_inodes_free = 0;
  auto inodes = Find(PlanLimits(f, {2, 64}), "/dev/shm");
  CHECK(inodes.status == CheckStatus::kWarn);
  CHECK(inodes.fix.find("nr_inodes") != std::string::npos);
  f.shm_inodes_free = 10;
  f.shm_unlimited = true;  // a tmpfs of size=0
  f.shm_free_bytes = 0;
  auto unlimited = Find(PlanLimits(f, {8, 64}), "/dev/shm");
  CHECK(unlimited.status == CheckStatus::kOk);
  CHECK(unlimited.measured.rfind("no size limit (tmpfs size=0)", 0) == 0);
  f.shm_unlimited = false;
  f.shm_free_bytes = 256 * kMiB;
  auto cpu = Find(PlanLimits(f, {200, 64, /*gpus=*/0}), "/dev/shm");
  CHECK(cpu.status == CheckStatus::kOk);
  CHECK(cpu.measured == "256 MiB free; no GPU visible: NCCL's shared-memory transport is not used");
}

TEST_CASE("/dev/shm too small for a DataLoader's batches warns, NCCL or not") {
  // Attack 80: a 2 MiB /dev/shm was ok; the job's DataLoader then failed at its first batch.
  LimitFacts f = Facts();
  for (uint64_t mib : {2, 64}) {
    f.shm_free_bytes = mib * kMiB;
    for (int gpus : {0, 1}) {
      auto c = Find(PlanLimits(f, {1, 64, gpus}), "/dev/shm");
      CHECK(c.status == CheckStatus::kWarn);
      CHECK(c.measured.find("DataLoader workers (num_workers > 0) hand each batch over through "
                            "/dev/shm: under 256 MiB") != std::string::npos);
      CHECK(c.fix.find("--ipc=host") != std::string::npos);
    }
  }
}

TEST_CASE("OMP_NUM_THREADS=0 warns; a list of nesting levels counts its outer level") {
  LimitFacts f = Facts();
  f.omp_num_threads = "0";
  auto zero = Find(PlanLimits(f, {4, 64}), "OMP_NUM_THREADS");
  CHECK(zero.status == CheckStatus::kWarn);
  CHECK(zero.measured.find("OpenMP rejects it") != std::string::npos);
  CHECK(zero.fix == "OMP_NUM_THREADS=4");
  // More workers than CPUs: the count alone does not fit them (attack 110).
  for (const char* bad : {"0", "abc"}) {
    f.omp_num_threads = bad;
    auto above = Find(PlanLimits(f, {32, 64}), "OMP_NUM_THREADS");
    CHECK(above.status == CheckStatus::kWarn);
    CHECK_MESSAGE(above.fix.find("OMP_NUM_THREADS=1, and more CPUs for the job") == 0, bad);
  }
  f.omp_num_threads = "0";
  f.omp_num_threads = "4,2";
  auto list = Find(PlanLimits(f, {4, 64}), "OMP_NUM_THREADS");
  CHECK(list.status == CheckStatus::kOk);
  CHECK(list.measured == "4,2 x 4 workers = 16 threads on 16 allowed CPUs");
  f.omp_num_threads = "4,";
  CHECK(Find(PlanLimits(f, {4, 64}), "OMP_NUM_THREADS").measured.find("not a thread count") !=
        std::string::npos);
  f.omp_num_threads = " 2";  // libgomp and PyTorch take it (attack 80)
  CHECK(Find(PlanLimits(f, {4, 64}), "OMP_NUM_THREADS").status == CheckStatus::kOk);
  f.omp_num_threads = "4 , 2 ";
  CHECK(Find(PlanLimits(f, {4, 64}), "OMP_NUM_THREADS").status == CheckStatus::kOk);
}

TEST_CASE("a hard RLIMIT_NOFILE too low: root raises it in its shell, a user asks root") {
  LimitFacts f = Facts();
  f.nofile = {16, 16};
  auto user = Find(PlanLimits(f, {4, 64}), "RLIMIT_NOFILE");
  CHECK(user.status == CheckStatus::kFail);
  CHECK(user.fix.rfind("as root raise the hard limit: \"alice hard nofile ", 0) == 0);
  f.uid = 0;
  CHECK(Find(PlanLimits(f, {4, 64}), "RLIMIT_NOFILE")
            .fix.rfind("raise it in the shell that starts ddprun: ulimit -n ", 0) == 0);
}

TEST_CASE("a hard RLIMIT_NOFILE that fits the launcher but not a dump's margin is a warning") {
  // Attack 80: 48 + 8 a worker refused a 1-worker job under ulimit -n 40 that ran; the
  // launcher holds 27 + 2 a worker (5 with --tee 3) beside the fds it inherited (measured).
  LimitFacts f = Facts();
  f.open_fds = 3;
  f.nofile = {40, 40};
  CHECK(NofileFailureMessage(f, {1, 64}).empty());
  auto one = Find(PlanLimits(f, {1, 64}), "RLIMIT_NOFILE");
  CHECK(one.status == CheckStatus::kWarn);
  CHECK(one.measured.find("the launcher needs at least 36 (28 + 1 workers x 5 + those open) and "
                          "wants about 59") != std::string::npos);
  CHECK(one.measured.find("a hang dump or a burst of store connections") != std::string::npos);
  CHECK(Find(PlanLimits(f, {3, 64}), "RLIMIT_NOFILE").status == CheckStatus::kFail);
  CHECK(NofileFailureMessage(f, {3, 64}).find("needs at least 46") != std::string::npos);
  f.nofile = {59, 59};
  CHECK(Find(PlanLimits(f, {1, 64}), "RLIMIT_NOFILE").status == CheckStatus::kOk);
}

TEST_CASE("size limits: unlimited is left alone") {
  auto plan = PlanLimits(Facts(), {2, 64});
  for (const char* name : {"RLIMIT_FSIZE", "RLIMIT_AS", "RLIMIT_DATA"}) {
    const auto& c = Find(plan, name);
    CHECK(c.status == CheckStatus::kOk);
    CHECK(c.measured == "soft unlimited, hard unlimited");
    CHECK(c.fix.empty());
  }
  CHECK_FALSE(plan.raise_fsize_soft);
  CHECK_FALSE(plan.raise_address_space_soft);
  CHECK_FALSE(plan.raise_data_soft);
}

TEST_CASE("size limits: a soft value under the hard one is raised to it, with a notice") {
  LimitFacts f = Facts();
  f.nofile = {524288, 524288};  // no NOFILE notice
  f.fsize = {64 * 1024, kUnlimited};
  f.address_space = {2048 * kMiB, kUnlimited};  // a login node's ulimit -v, propagated by Slurm
  auto plan = PlanLimits(f, {2, 64});
  CHECK(plan.raise_fsize_soft == kUnlimited);
  CHECK(plan.raise_address_space_soft == kUnlimited);
  CHECK_FALSE(plan.raise_data_soft);
  CHECK(Find(plan, "RLIMIT_FSIZE").status == CheckStatus::kOk);
  CHECK(Find(plan, "RLIMIT_AS").measured ==
        "soft 2.0 GiB, hard unlimited; soft raised to unlimited");
  REQUIRE(plan.notices.size() == 2);
  CHECK(plan.notices[0] ==
        "raised RLIMIT_FSIZE (ulimit -f) soft limit from 64.0 KiB to unlimited (hard)");
  CHECK(plan.notices[1] ==
        "raised RLIMIT_AS (ulimit -v) soft limit from 2.0 GiB to unlimited (hard)");
}

TEST_CASE("size limits: a finite hard value warns with what fails there and the fix") {
  LimitFacts f = Facts();
  f.fsize = {1024 * kMiB, 4096 * kMiB};
  f.data = {8192 * kMiB, 8192 * kMiB};
  auto plan = PlanLimits(f, {2, 64});
  CHECK(plan.raise_fsize_soft == 4096 * kMiB);  // raised as far as it goes
  const auto& fsize = Find(plan, "RLIMIT_FSIZE");
  CHECK(fsize.status == CheckStatus::kWarn);
  CHECK(fsize.measured.rfind(
            "soft 1.0 GiB, hard 4.0 GiB; soft raised to 4.0 GiB: no worker can write a file "
            "larger than the hard limit",
            0) == 0);
  CHECK(fsize.measured.find("SIGXFSZ") != std::string::npos);
  CHECK(fsize.fix.find("ulimit -Hf unlimited") != std::string::npos);
  CHECK(fsize.fix.find("\"alice hard fsize unlimited\"") != std::string::npos);
  const auto& data = Find(plan, "RLIMIT_DATA");
  CHECK(data.status == CheckStatus::kWarn);
  CHECK_FALSE(plan.raise_data_soft);
  CHECK(data.fix.find("ulimit -Hd unlimited") != std::string::npos);
  CHECK(data.fix.find("Slurm --mem") != std::string::npos);
  CHECK(Find(plan, "RLIMIT_AS").status == CheckStatus::kOk);
}

TEST_CASE("a cgroup pids.max below the job's threads warns, for root too; none is no limit") {
  LimitFacts f = Facts();
  f.uid = 0;
  f.pids_cgroup = "/sys/fs/cgroup/job";
  f.pids_max = 20;
  f.pids_current = 5;
  auto c = Find(PlanLimits(f, {2, 64}), "cgroup pids.max");
  CHECK(c.status == CheckStatus::kWarn);
  CHECK(c.measured == "20 in /sys/fs/cgroup/job, 5 in use, the job needs about 160");
  CHECK(c.fix.find("--pids-limit") != std::string::npos);
  f.pids_max = 100000;
  CHECK(Find(PlanLimits(f, {2, 64}), "cgroup pids.max").status == CheckStatus::kOk);
  f.pids_max.reset();
  CHECK(Find(PlanLimits(f, {2, 64}), "cgroup pids.max").measured ==
        "max (no limit) in /sys/fs/cgroup/job");
}

TEST_CASE("a small soft stack limit is raised to 8 MiB, never past it; a small hard one warns") {
  // Found by an attacking helper: ulimit -Ss 64 crashed `import torch` (SIGSEGV) with no word.
  LimitFacts f = Facts();
  f.stack = {64 << 10, kUnlimited};
  auto plan = PlanLimits(f, {2, 64});
  REQUIRE(plan.raise_stack_soft);
  CHECK(*plan.raise_stack_soft == 8 * kMiB);
  CHECK(Find(plan, "RLIMIT_STACK").status == CheckStatus::kOk);
  CHECK(std::any_of(plan.notices.begin(), plan.notices.end(), [](const std::string& n) {
    return n.rfind("raised RLIMIT_STACK (ulimit -s) soft limit from 64.0 KiB to 8.0 MiB", 0) == 0;
  }));
  f.stack = {64 << 10, 1 * kMiB};
  plan = PlanLimits(f, {2, 64});
  REQUIRE(plan.raise_stack_soft);
  CHECK(*plan.raise_stack_soft == 1 * kMiB);
  CHECK(Find(plan, "RLIMIT_STACK").status == CheckStatus::kWarn);
  CHECK(Find(plan, "RLIMIT_STACK").fix.find("ulimit -Hs 8192") != std::string::npos);
  // 8 MiB or more, or unlimited: left alone.
  f.stack = {64 * kMiB, kUnlimited};
  CHECK_FALSE(PlanLimits(f, {2, 64}).raise_stack_soft);
  f.stack = {kUnlimited, kUnlimited};
  CHECK_FALSE(PlanLimits(f, {2, 64}).raise_stack_soft);
}

TEST_CASE("every check has a line and the names the doctor prints") {
  auto plan = PlanLimits(Facts(), {2, 64});
  REQUIRE(plan.checks.size() == 10);
  CHECK(plan.checks[0].check == "RLIMIT_NPROC (ulimit -u)");
  CHECK(plan.checks[1].check == "cgroup pids.max");
  CHECK(plan.checks[2].check == "RLIMIT_NOFILE (ulimit -n)");
  CHECK(plan.checks[3].check == "RLIMIT_MEMLOCK (ulimit -l)");
  CHECK(plan.checks[4].check == "RLIMIT_STACK (ulimit -s)");
  CHECK(plan.checks[5].check == "/dev/shm");
  CHECK(plan.checks[6].check == "OMP_NUM_THREADS");
  CHECK(plan.checks[7].check == "RLIMIT_FSIZE (ulimit -f)");
  CHECK(plan.checks[8].check == "RLIMIT_AS (ulimit -v)");
  CHECK(plan.checks[9].check == "RLIMIT_DATA (ulimit -d)");
  CHECK(std::string(CheckStatusName(CheckStatus::kWarn)) == "warn");
}

TEST_CASE("the user's processes and threads are read from an injected /proc") {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("limits_test_proc_" + std::to_string(getpid()));
  auto add = [&](const std::string& pid, int uid, int threads, const std::string& cmdline) {
    fs::create_directories(root / pid);
    std::ofstream(root / pid / "status")
        << "Name:\tproc" << pid << "\nUid:\t" << uid << "\t0\t0\t0\nThreads:\t" << threads << "\n";
    std::ofstream(root / pid / "cmdline", std::ios::binary) << cmdline;
  };
  add("7", 1000, 12, std::string("python\0train.py\0", 16));
  add("8", 1001, 40, "other");
  add("9", 1000, 3, "");  // a kernel thread or zombie: no command line
  fs::create_directories(root / "self");
  auto procs = UserProcesses(1000, root.string());
  fs::remove_all(root);
  REQUIRE(procs.size() == 2);
  std::sort(procs.begin(), procs.end(), [](auto& a, auto& b) { return a.pid < b.pid; });
  CHECK(procs[0].pid == 7);
  CHECK(procs[0].threads == 12);
  CHECK(procs[0].command == "python train.py");
  CHECK(procs[1].command == "proc9");
}

}  // namespace
}  // namespace ddprun::env
