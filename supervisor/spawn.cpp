#include "supervisor/spawn.hpp"

#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>

#include "env/processes.hpp"

namespace ddprun::supervisor {

namespace bp = boost::process;

namespace {

struct CpuSetFree {
  void operator()(cpu_set_t* set) const { CPU_FREE(set); }
};

// The affinity set for `cpus`, made before fork: the child may not allocate.
struct Affinity {
  std::unique_ptr<cpu_set_t, CpuSetFree> set;
  size_t bytes = 0;
};

Affinity MakeAffinity(const std::vector<int>& cpus) {
  Affinity a;
  if (cpus.empty()) return a;
  const int size = *std::max_element(cpus.begin(), cpus.end()) + 1;
  a.set.reset(CPU_ALLOC(size));
  if (!a.set) return a;
  a.bytes = CPU_ALLOC_SIZE(size);
  CPU_ZERO_S(a.bytes, a.set.get());
  for (int c : cpus) CPU_SET_S(c, a.bytes, a.set.get());
  return a;
}

// Runs in the forked child: async-signal-safe calls only.
void SetUpChild(const SpawnRequest& req, const Affinity& affinity, pid_t parent) {
  if (req.cgroup_procs_fd >= 0) {
    char digits[16];
    size_t n = 0;
    for (pid_t pid = getpid(); pid > 0; pid /= 10) digits[n++] = static_cast<char>('0' + pid % 10);
    char text[16];
    for (size_t i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
    // A failure leaves the environment mark as the only containment.
    (void)!write(req.cgroup_procs_fd, text, n);
  }
  if (affinity.set) (void)sched_setaffinity(0, affinity.bytes, affinity.set.get());
  // A session of its own (as torchrun's start_new_session): its own process
  // group, and no controlling terminal, so a worker reading an inherited
  // terminal (pdb, input()) is not stopped by SIGTTIN as a background job.
  setsid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(137);  // the launcher died before prctl took hold
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    const bool ignored = req.ignored != nullptr && sigismember(req.ignored, sig) == 1;
    signal(sig, ignored ? SIG_IGN : SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  dup2(req.stdin_fd, 0);
  dup2(req.stdout_fd, 1);
  dup2(req.stderr_fd, 2);
  // Marks rather than closes: Boost.Process's exec-error pipe must stay open
  // until execve() succeeds.
  syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
}

// Blocks every signal in the launcher while it forks, so that no handler of
// the launcher's (libuv's signal pipe) runs in the child before exec.
class BlockAllSignals {
 public:
  BlockAllSignals() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~BlockAllSignals() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  BlockAllSignals(const BlockAllSignals&) = delete;
  BlockAllSignals& operator=(const BlockAllSignals&) = delete;

 private:
  sigset_t saved_;
};

}  // namespace

StatusOr<pid_t> SpawnWorker(const SpawnRequest& req) {
  // The environment goes straight to the executor's envp: Boost 1.74's
  // basic_environment::operator[] reads past the end of shorter names.
  std::vector<char*> envp;
  for (const auto& entry : req.envp) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  std::vector<std::string> args(req.argv.begin() + 1, req.argv.end());
  const pid_t parent = getpid();
  const Affinity affinity = MakeAffinity(req.cpus);
  std::error_code ec;
  pid_t pid = -1;
  int child_errno = 0;
  {
    BlockAllSignals block;
    errno = 0;
    bp::child child(
        bp::exe = req.argv[0], bp::args = args, ec,
        bp::extend::on_setup = [&envp](auto& exec) { exec.env = envp.data(); },
        bp::extend::on_exec_setup = [&req, &affinity,
                                     parent](auto&) { SetUpChild(req, affinity, parent); });
    child_errno = errno;
    if (!ec && child.id() > 0) {
      pid = child.id();
      child.detach();  // the supervisor reaps with waitpid()
    }
  }
  // Boost.Process 1.74 returns an empty child and leaves ec clear when its
  // exec-error pipe cannot be made (out of fds); errno still says why.
  if (!ec && pid <= 0) {
    if (child_errno == 0) return Internal("start " + req.argv[0] + ": no process was started");
    ec = std::error_code(child_errno, std::system_category());
  }
  if (ec) {
    int err = ec.value();
    if (err == EAGAIN) {
      return Unavailable("start " + req.argv[0] +
                         ": fork failed with EAGAIN: a process/thread limit is reached (the "
                         "user's RLIMIT_NPROC, ulimit -u, or the cgroup's pids.max): raise it or "
                         "run fewer processes");
    }
    // Found but not runnable (not a program for this machine, a symlink
    // loop, a directory): exit 126 as a shell's, beside ENOENT's 127.
    if (err == ENOEXEC || err == ELOOP || err == EISDIR) {
      return PermissionDenied("start " + req.argv[0] + ": " + std::strerror(err));
    }
    return ErrnoStatus("start " + req.argv[0], err);
  }
  return pid;
}

void PosixProcessControl::SignalGroup(pid_t pgid, int sig) {
  if (pgid > 0) killpg(pgid, sig);
}

char PosixProcessControl::StoppedState(pid_t pid) { return env::StoppedState(pid); }

}  // namespace ddprun::supervisor
