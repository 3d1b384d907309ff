#include "launcher/uncaught.hpp"

#include <unistd.h>

#include <cstdio>
#include <exception>
#include <new>
#include <system_error>

namespace ddprun::launcher {

namespace {

constexpr int kFailureExit = 1;

[[noreturn]] void OnUncaught() {
  // Fixed buffers only: the heap may be what ran out.
  char line[512];
  try {
    if (std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
    std::snprintf(line, sizeof(line), "ddprun: internal error: terminate without an exception\n");
  } catch (const std::bad_alloc&) {
    std::snprintf(line, sizeof(line),
                  "ddprun: out of memory (Cannot allocate memory): check ulimit -v and the "
                  "memory free on this host\n");
  } catch (const std::system_error& e) {
    std::snprintf(line, sizeof(line), "ddprun: %s (%s)\n", e.what(),
                  e.code() == std::errc::resource_unavailable_try_again
                      ? "out of threads or memory: check ulimit -u and ulimit -v"
                      : "a system call failed");
  } catch (const std::exception& e) {
    std::snprintf(line, sizeof(line), "ddprun: internal error: %s\n", e.what());
  } catch (...) {
    std::snprintf(line, sizeof(line), "ddprun: internal error: an unknown exception\n");
  }
  (void)!write(STDERR_FILENO, line, __builtin_strlen(line));
  _exit(kFailureExit);
}

}  // namespace

void InstallUncaughtHandler() { std::set_terminate(OnUncaught); }

}  // namespace ddprun::launcher
