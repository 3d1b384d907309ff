#include "supervisor/containment.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "base/read_file.hpp"
#include "env/cgroup.hpp"
#include "env/processes.hpp"
#include "supervisor/self_exec.hpp"

extern char** environ;  // NOLINT: POSIX

namespace ddprun::supervisor {

namespace {

constexpr std::chrono::milliseconds kPollStep{5};
// How long the guardian keeps killing what it finds before it gives up.
constexpr std::chrono::milliseconds kGuardianWait{10000};
// The launcher's last line to the guardian: it cleaned up itself.
constexpr const char* kGoodbye = "bye\n";

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

bool PidfdKill(int pidfd) {
  return syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0) == 0;
}

std::string RandomToken() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

bool IsPopulated(const std::string& dir) {
  std::string events = ReadSmallFile(dir + "/cgroup.events", 4096);
  return events.find("populated 1") != std::string::npos;
}

int CountProcs(const std::string& dir) {
  std::string procs = ReadSmallFile(dir + "/cgroup.procs", 1 << 20);
  int n = 0;
  for (char c : procs) n += c == '\n';
  return n;
}

bool WriteString(const std::string& path, const char* text) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  return fd.valid() && WriteAll(fd.get(), text, std::strlen(text));
}

// Scans /proc until `select` picks no live process or `wait` passed, killing
// each one it picks that `confirm` (when given) agrees to. The pidfd is opened
// before the process is looked at again, so a pid reused in between is never
// signalled. Returns how many processes were signalled.
int Sweep(
    const std::function<std::vector<env::ProcEntry>(const std::vector<env::ProcEntry>&)>& select,
    const std::function<bool(const env::ProcEntry&)>& confirm, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  int signalled = 0;
  for (;;) {
    int found = 0;
    for (const auto& e : select(env::ReadProcTable())) {
      if (e.state == 'Z' || e.state == 'X') continue;
      UniqueFd pidfd(PidfdOpen(e.pid));
      if (!pidfd.valid()) continue;
      const auto now = env::ReadProcEntry(e.pid);
      if (!now || !(*now == e)) {
        ++found;  // reparented (or gone) since the scan: the next scan decides
        continue;
      }
      if (confirm && !confirm(e)) continue;
      ++found;
      if (PidfdKill(pidfd.get())) ++signalled;
    }
    if (found == 0 || std::chrono::steady_clock::now() >= deadline) return signalled;
    std::this_thread::sleep_for(kPollStep);
  }
}

// Kills every live process in the session of one of `workers` (pid to start
// time; a worker starts a session of its own). A session whose leader's pid
// now belongs to another process (start time differs) is not the worker's.
int KillSessions(const std::map<pid_t, unsigned long long>& workers,
                 std::chrono::milliseconds wait) {
  if (workers.empty()) return 0;
  const pid_t self = getpid();
  return Sweep(
      [&](const std::vector<env::ProcEntry>& table) {
        std::map<pid_t, bool> ours;  // session -> still the worker's
        for (const auto& [pid, start] : workers) ours[pid] = true;
        for (const auto& e : table) {
          auto it = workers.find(e.pid);
          if (it != workers.end() && it->second != e.start_time) ours[e.pid] = false;
        }
        std::vector<env::ProcEntry> job;
        for (const auto& e : table) {
          auto it = ours.find(e.session);
          if (it != ours.end() && it->second && e.pid != self) job.push_back(e);
        }
        return job;
      },
      nullptr, wait);
}

}  // namespace

int ReapOrphans(const std::vector<pid_t>& keep) {
  const pid_t self = getpid();
  const pid_t own_session = getsid(0);
  int reaped = 0;
  // Only this process's children, thread by thread (an orphan goes to one of
  // its threads): called at each SIGCHLD, a scan of all of /proc could not
  // keep up with a daemon that forks on and on (attack 111: the loop never
  // got to the workers' exits, nor to a SIGTERM).
  for (pid_t tid : env::ThreadsOf(self, 1024)) {
    for (pid_t child : env::ChildrenOf(self, tid)) {
      if (std::find(keep.begin(), keep.end(), child) != keep.end()) continue;
      const auto e = env::ReadProcEntry(child);
      if (!e || e->state != 'Z' || e->session == own_session) continue;
      pid_t r;
      do {
        r = waitpid(child, nullptr, WNOHANG);
      } while (r < 0 && errno == EINTR);
      reaped += r == child;
    }
  }
  return reaped;
}

int KillCgroup(const std::string& dir, std::chrono::milliseconds wait) {
  const int before = CountProcs(dir);
  if (before > 0 && !WriteString(dir + "/cgroup.kill", "1")) return -1;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (IsPopulated(dir) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(kPollStep);
  }
  return before;
}

int SweepMarkedProcesses(const std::string& env_entry, std::chrono::milliseconds wait) {
  const std::string inner = std::string(1, '\0') + env_entry + std::string(1, '\0');
  const pid_t self = getpid();
  return Sweep(
      [self](const std::vector<env::ProcEntry>& table) {
        std::vector<env::ProcEntry> others;
        for (const auto& e : table) {
          if (e.pid != self) others.push_back(e);
        }
        return others;
      },
      [&](const env::ProcEntry& e) {
        std::string env = ReadSmallFile("/proc/" + std::to_string(e.pid) + "/environ", 8 << 20);
        env.push_back('\0');
        return env.compare(0, env_entry.size() + 1, inner, 1, env_entry.size() + 1) == 0 ||
               env.find(inner) != std::string::npos;
      },
      wait);
}

namespace {

// Kills this process's children but `spare` and its helpers (its own
// session) over and over, reaping those that exited, until none other has
// been seen for kQuiet or `deadline` passed. A daemon that forks on and on
// (each generation exits as the next starts) is always one of them: adopted
// (this process is a subreaper), or the child of one; it lives too short for
// a scan of /proc to find it alive (attack 111: it outlived the job without a
// cgroup). Returns how many it signalled.
int KillChildren(const std::vector<pid_t>& spare, std::chrono::steady_clock::time_point deadline) {
  constexpr std::chrono::milliseconds kQuiet{20};
  const pid_t self = getpid();
  const pid_t own_session = getsid(0);
  std::set<pid_t> signalled;
  auto seen = std::chrono::steady_clock::now();
  for (bool first = true;; first = false) {
    bool any = false;
    bool fresh = false;  // a child not seen before, or one reaped: a chain moves on
    for (pid_t tid : env::ThreadsOf(self, 1024)) {
      for (pid_t child : env::ChildrenOf(self, tid)) {
        if (std::find(spare.begin(), spare.end(), child) != spare.end()) continue;
        UniqueFd pidfd(PidfdOpen(child));
        const auto e = env::ReadProcEntry(child);
        if (!pidfd.valid() || !e || e->session == own_session || e->ppid != self) continue;
        any = true;
        if (e->state == 'Z' || e->state == 'X') {
          while (waitpid(child, nullptr, WNOHANG) < 0 && errno == EINTR) {
          }
          fresh = true;
        } else if (PidfdKill(pidfd.get())) {
          fresh = signalled.insert(child).second || fresh;
        }
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (any) seen = now;
    if ((first && !any) || now - seen >= kQuiet || now >= deadline) {
      return static_cast<int>(signalled.size());
    }
    // Only ones already killed that have not died yet (in an uninterruptible
    // wait): no chain to race, so no spinning on the loop's thread.
    if (!fresh) std::this_thread::sleep_for(kPollStep);
  }
}

}  // namespace

int KillDescendants(const std::vector<pid_t>& spare, std::chrono::milliseconds wait) {
  const pid_t self = getpid();
  const pid_t own_session = getsid(0);
  const int signalled = KillChildren(spare, std::chrono::steady_clock::now() + wait);
  return signalled + Sweep(
                         [&](const std::vector<env::ProcEntry>& table) {
                           std::vector<env::ProcEntry> job;
                           for (const auto& e : env::Descendants(table, self)) {
                             if (std::find(spare.begin(), spare.end(), e.pid) == spare.end() &&
                                 e.session != own_session) {
                               job.push_back(e);
                             }
                           }
                           return job;
                         },
                         nullptr, wait);
}

Containment::Containment(Key) {}

StatusOr<std::unique_ptr<Containment>> Containment::Create(bool try_cgroup) {
  auto c = std::make_unique<Containment>(Key{});
  // Orphans of the job become ours, not init's: the job stays one tree below us.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) return ErrnoStatus("become a child subreaper", errno);
  c->token_ = std::to_string(getpid()) + "." + RandomToken();
  c->env_entry_ = std::string(env::kProcessTree) + "=" + c->token_;
  if (try_cgroup) {
    const auto own = env::OwnCgroupV2();
    const std::string dir = own ? own->dir() + "/ddprun-" + c->token_ : "";
    if (own && mkdir(dir.c_str(), 0755) == 0) {
      UniqueFd procs(open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
      if (procs.valid() && access((dir + "/cgroup.kill").c_str(), W_OK) == 0) {
        c->cgroup_dir_ = dir;
        c->procs_ = std::move(procs);
      } else {
        rmdir(dir.c_str());
      }
    }
  }
  if (Status st = c->StartGuardian(); !st.ok()) {
    if (!c->cgroup_dir_.empty()) rmdir(c->cgroup_dir_.c_str());
    return st;
  }
  return c;
}

Status Containment::StartGuardian() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("guardian pipe", errno);
  UniqueFd read_end(fds[0]);
  guardian_pipe_ = UniqueFd(fds[1]);
  if (read_end.get() == 3) {  // dup2(3, 3) would leave close-on-exec set
    read_end = UniqueFd(fcntl(3, F_DUPFD_CLOEXEC, 4));
    if (!read_end.valid()) return ErrnoStatus("guardian pipe", errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, read_end.get(), 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  // Neither its name nor its command line says "ddprun", so that `pkill -9
  // ddprun`, `pkill -9 -f ddprun` and `killall -9 ddprun`, the usual ways to
  // kill a job, leave it to clean up; the cgroup's path (ddprun-...) goes in
  // the environment.
  std::string exe = kGuardianName;
  SelfExec self = FindSelfExec();  // through the dynamic loader too, as ddprun itself was run
  std::vector<char*> argv = {exe.data()};
  for (auto& a : self.before) argv.push_back(a.data());
  argv.insert(argv.end(), {const_cast<char*>(kGuardianArg), token_.data(), nullptr});
  // The guardian itself does not carry the mark: a sweep must not kill it.
  std::vector<char*> envp;
  const std::string prefix = std::string(env::kProcessTree) + "=";
  const std::string cgroup_prefix = std::string(kGuardianCgroupEnv) + "=";
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0 &&
        std::strncmp(*e, cgroup_prefix.c_str(), cgroup_prefix.size()) != 0) {
      envp.push_back(*e);
    }
  }
  std::string cgroup_entry = cgroup_prefix + cgroup_dir_;
  envp.push_back(cgroup_entry.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, self.path.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return ErrnoStatus("start the guardian process (ddprun re-executed from /proc/self/exe)", rc);
  }
  guardian_ = pid;
  // Worker records must never block the launcher (a stopped guardian reads none).
  fcntl(guardian_pipe_.get(), F_SETFL, O_NONBLOCK);
  return Status::Ok();
}

Containment::~Containment() {
  KillAll(std::chrono::milliseconds(2000));
  if (!cgroup_dir_.empty()) {
    procs_.Reset();
    rmdir(cgroup_dir_.c_str());
  }
  if (guardian_pipe_.valid()) {
    // Goodbye: nothing is left to kill. A guardian that misses it (stopped,
    // its pipe full) sweeps a job that is gone: harmless.
    (void)!write(guardian_pipe_.get(), kGoodbye, std::strlen(kGoodbye));
    guardian_pipe_.Reset();
  }
  if (guardian_ > 0) {
    // Reaped when it has gone (at once, normally); a stopped guardian is not waited for.
    UniqueFd pidfd(PidfdOpen(guardian_));
    pollfd p{pidfd.get(), POLLIN, 0};
    if (pidfd.valid() && poll(&p, 1, 1000) == 1) waitpid(guardian_, nullptr, WNOHANG);
  }
}

std::string Containment::Describe() const {
  if (!cgroup_dir_.empty()) return "cgroup " + cgroup_dir_;
  return "the environment mark " + env_entry_ + " (no cgroup v2 this launcher may create)";
}

void Containment::Track(pid_t worker) {
  if (guardian_ > 0 && !guardian_seen_) {
    // By the first worker's start the guardian has long been running, or
    // failed to (ddprun run through the dynamic loader, an environment at
    // the kernel's size limit): then say what that leaves unguarded.
    guardian_seen_ = true;
    int status = 0;
    if (waitpid(guardian_, &status, WNOHANG) == guardian_) {
      guardian_ = -1;
      guardian_pipe_.Reset();
      spdlog::warn(
          "ddprun's guardian process exited at start ({}): if ddprun itself is killed with "
          "SIGKILL, processes the workers detached from their session may outlive the job{}",
          WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                            : "signal " + std::to_string(WTERMSIG(status)),
          cgroup_dir_.empty() ? std::string()
                              : " (the cgroup " + cgroup_dir_ + " still holds them)");
    }
  }
  const auto entry = env::ReadProcEntry(worker);
  if (!entry || !guardian_pipe_.valid()) return;
  const std::string line =
      "s " + std::to_string(worker) + " " + std::to_string(entry->start_time) + "\n";
  (void)!write(guardian_pipe_.get(), line.data(), line.size());  // PIPE_BUF: all or nothing
}

int Containment::ReapAdopted(std::vector<pid_t> keep) {
  ReplaceDeadGuardian(keep);
  keep.push_back(guardian_);
  return ReapOrphans(keep);
}

// The guardian killed (the OOM killer, an admin) left the job unguarded for
// the rest of the run: a later SIGKILL of the launcher would leave orphans.
void Containment::ReplaceDeadGuardian(const std::vector<pid_t>& workers) {
  if (guardian_ <= 0 || !guardian_seen_) return;  // Track() says the first one's failure
  int status = 0;
  if (waitpid(guardian_, &status, WNOHANG) != guardian_) return;
  const pid_t dead = guardian_;
  guardian_ = -1;
  guardian_pipe_.Reset();
  const std::string how = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                                            : "signal " + std::to_string(WTERMSIG(status));
  if (Status st = StartGuardian(); !st.ok()) {
    spdlog::warn(
        "ddprun's guardian process (pid {}) died ({}) and another could not be started "
        "({}): if ddprun itself is killed with SIGKILL, processes the workers detached "
        "may outlive the job",
        dead, how, st.message());
    return;
  }
  spdlog::warn("ddprun's guardian process (pid {}) died ({}): started another (pid {})", dead, how,
               guardian_);
  for (pid_t w : workers) Track(w);
}

int Containment::KillAll(std::chrono::milliseconds wait, std::vector<pid_t> spare) {
  // The tree below us first: it holds the job's orphans whatever their environment.
  spare.push_back(guardian_);
  int killed = KillDescendants(spare, wait);
  if (!cgroup_dir_.empty()) killed += std::max(0, KillCgroup(cgroup_dir_, wait));
  // Also when the cgroup did it: a process moved out of it still carries the mark.
  return killed + SweepMarkedProcesses(env_entry_, cgroup_dir_.empty() ? wait : kPollStep);
}

int RunGuardian(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string token = argv[2];
  // Started through the dynamic loader, the command line still names the
  // loader and ddprun's file: `pkill -f ddprun` must spare the guardian.
  RewriteCommandLine({kGuardianName, kGuardianArg, token});
  setsid();  // out of the launcher's process group and terminal: a group kill spares us
  prctl(PR_SET_NAME, kGuardianName);
  for (int sig :
       {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGUSR1, SIGUSR2}) {
    signal(sig, SIG_IGN);
  }
  syscall(SYS_close_range, 4U, ~0U, 0U);
  // Lines "s <pid> <start time>" name the workers; "bye" says the launcher
  // cleaned up itself; end of file without it: the launcher died.
  std::map<pid_t, unsigned long long> workers;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(3, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      const std::string line = pending.substr(0, nl + 1);
      if (line == kGoodbye) return 0;
      long pid = 0;
      unsigned long long start = 0;
      if (std::sscanf(line.c_str(), "s %ld %llu", &pid, &start) == 2) workers[pid] = start;
    }
  }
  const std::string entry = std::string(env::kProcessTree) + "=" + token;
  const char* cgroup = std::getenv(kGuardianCgroupEnv);
  const std::string dir = cgroup != nullptr ? cgroup : "";
  int killed = 0;
  if (!dir.empty()) {
    killed += std::max(0, KillCgroup(dir, kGuardianWait));
    rmdir(dir.c_str());
  }
  killed += SweepMarkedProcesses(entry, kGuardianWait);
  killed += KillSessions(workers, kGuardianWait);
  if (killed > 0) {
    std::fprintf(stderr,
                 "[ddprun guardian] the launcher died without cleaning up: killed %d leftover "
                 "process%s of its job\n",
                 killed, killed == 1 ? "" : "es");
  }
  return 0;
}

}  // namespace ddprun::supervisor
