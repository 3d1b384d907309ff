#include "launcher/program.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "env/names.hpp"
#include "env/worker_env.hpp"

namespace ddprun::launcher {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A path that must be an executable regular file.
Status CheckExecutable(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(path, errno);
  if (S_ISDIR(st.st_mode)) return PermissionDenied(path + ": is a directory");
  if (access(path.c_str(), X_OK) != 0) {
    return PermissionDenied(path +
                            ": not executable (chmod +x it, or run a script through its "
                            "interpreter)");
  }
  return Status::Ok();
}

Status CheckReadable(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return ErrnoStatus(path, errno);
  if (S_ISDIR(st.st_mode)) return PermissionDenied(path + ": is a directory");
  if (access(path.c_str(), R_OK) != 0) return PermissionDenied(path + ": not readable");
  return Status::Ok();
}

StatusOr<std::string> Interpreter(const env::Environ& environ) {
  std::string python = env::Lookup(environ, env::kPythonExec).value_or("python3");
  auto path = FindExecutable(python, env::Lookup(environ, "PATH").value_or("/usr/bin:/bin"));
  if (!path.ok()) {
    return path.status().Annotate(std::string("python interpreter (set ") + env::kPythonExec +
                                  " or put python3 on PATH)");
  }
  return path;
}

StatusOr<Program> UnderPython(const LaunchConfig& c, const env::Environ& environ) {
  auto python = Interpreter(environ);
  if (!python.ok()) return python.status();
  Program p{{*python, "-u"}, c.program};
  if (c.module) {
    p.argv.insert(p.argv.end(), {"-m", c.program});
  } else {
    if (Status s = CheckReadable(c.program); !s.ok()) return s;
    if (c.run_path) {
      p.argv.insert(p.argv.end(), {"-c",
                                   "import runpy, sys; sys.argv = sys.argv[1:]; "
                                   "runpy.run_path(sys.argv[0], run_name='__main__')",
                                   c.program});
    } else {
      p.argv.push_back(c.program);
    }
  }
  p.argv.insert(p.argv.end(), c.program_args.begin(), c.program_args.end());
  return p;
}

}  // namespace

StatusOr<std::string> FindExecutable(const std::string& name, const std::string& path_var) {
  if (name.find('/') != std::string::npos) {
    if (Status s = CheckExecutable(name); !s.ok()) return s;
    return name;
  }
  Status last = NotFound(name + ": not found on PATH (" + path_var + ")");
  for (const auto& dir : env::SplitList(path_var, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), F_OK) != 0) continue;
    Status s = CheckExecutable(candidate);
    if (s.ok()) return candidate;
    last = s;
  }
  return last;
}

StatusOr<Program> ResolveProgram(const LaunchConfig& c, const env::Environ& environ) {
  if (c.module || c.run_path || (!c.no_python && EndsWith(c.program, ".py"))) {
    return UnderPython(c, environ);
  }
  struct stat st {};
  bool exists = stat(c.program.c_str(), &st) == 0;
  // torchrun runs any script under Python; an executable file runs directly.
  if (!c.no_python && exists && S_ISREG(st.st_mode) && access(c.program.c_str(), X_OK) != 0) {
    return UnderPython(c, environ);
  }
  std::string lookup =
      (exists && c.program.find('/') == std::string::npos) ? "./" + c.program : c.program;
  auto path = FindExecutable(lookup, env::Lookup(environ, "PATH").value_or("/usr/bin:/bin"));
  if (!path.ok()) return path.status();
  Program p{{*path}, c.program};
  p.argv.insert(p.argv.end(), c.program_args.begin(), c.program_args.end());
  return p;
}

}  // namespace ddprun::launcher
