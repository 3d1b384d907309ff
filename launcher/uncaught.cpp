#include "launcher/uncaught.hpp"
#include "base/no_thread.hpp"

#include <sys/resource.h>
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
    // No exception at all: either a bug, or the exception object itself could
    // not be allocated (the C++ runtime then terminates at once): out of memory.
    rlimit as{};
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
      std::snprintf(line, sizeof(line),
                    "ddprun: out of memory, most likely: terminated without an exception (the C++ "
                    "runtime could not allocate one) under an address-space limit of %llu KiB: "
                    "raise ulimit -v\n",
                    static_cast<unsigned long long>(as.rlim_cur / 1024));
    } else {
      std::snprintf(line, sizeof(line), "ddprun: internal error: terminate without an exception\n");
    }
  } catch (const std::bad_alloc&) {
    std::snprintf(line, sizeof(line),
                  "ddprun: out of memory (Cannot allocate memory): check ulimit -v and the "
                  "memory free on this host\n");
  } catch (const std::system_error& e) {
    std::snprintf(line, sizeof(line), "ddprun: %s%s\n", e.what(),
                  e.code() == std::errc::resource_unavailable_try_again
                      ? WhyNoThread().c_str()
                      : " (a system call failed)");
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
