#include "launcher/program.hpp"

#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>

#include "base/unique_fd.hpp"
#include "env/names.hpp"
#include "env/worker_env.hpp"

namespace ddprun::launcher {

namespace {

// A symlink loop exits 126 as a shell's (found, not runnable); a missing file 127.
Status StatError(const std::string& path, int err) {
  if (err == ELOOP) return PermissionDenied(path + ": " + std::strerror(err));
  return ErrnoStatus(path, err);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> Shebang(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  char head[512];
  const ssize_t n = fd.valid() ? pread(fd.get(), head, sizeof(head), 0) : -1;
  if (n < 3 || head[0] != '#' || head[1] != '!') return {};
  std::string_view line(head + 2, static_cast<size_t>(n) - 2);
  line = line.substr(0, line.find('\n'));
  std::vector<std::string> words;
  // Split at blanks only: a '\r' stays, so that a CRLF line shows as one.
  for (size_t start = line.find_first_not_of(" \t"); start != std::string_view::npos;
       start = line.find_first_not_of(" \t", start)) {
    const size_t end = line.find_first_of(" \t", start);
    words.emplace_back(line.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end;
  }
  return words;
}

namespace {

// The program the kernel runs first for `path`: a script's #! interpreter or
// an ELF's dynamic loader (PT_INTERP); "" when none or unreadable.
std::string FirstRun(const std::string& path, bool& script) {
  if (auto words = Shebang(path); !words.empty()) {
    script = true;
    return words[0];
  }
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  char head[512];
  const ssize_t n = fd.valid() ? pread(fd.get(), head, sizeof(head), 0) : -1;
  if (n < 4) return "";
  Elf64_Ehdr eh{};
  if (static_cast<size_t>(n) < sizeof(eh) || std::memcmp(head, ELFMAG, SELFMAG) != 0 ||
      head[EI_CLASS] != ELFCLASS64) {
    return "";
  }
  std::memcpy(&eh, head, sizeof(eh));
  for (int i = 0; i < eh.e_phnum && i < 64; ++i) {
    Elf64_Phdr ph{};
    const auto at = static_cast<off_t>(eh.e_phoff + static_cast<uint64_t>(i) * sizeof(ph));
    if (pread(fd.get(), &ph, sizeof(ph), at) != static_cast<ssize_t>(sizeof(ph))) return "";
    if (ph.p_type != PT_INTERP || ph.p_filesz == 0 || ph.p_filesz > 4096) continue;
    std::string interp(ph.p_filesz, '\0');
    if (pread(fd.get(), interp.data(), interp.size(), static_cast<off_t>(ph.p_offset)) !=
        static_cast<ssize_t>(interp.size())) {
      return "";
    }
    return interp.substr(0, interp.find('\0'));
  }
  return "";
}

// A script that forgot its #! line: text (no NUL in its first 512 bytes),
// neither "#!" nor ELF at its start. execve fails with ENOEXEC; only a shell
// falls back to running it with /bin/sh. (Other binary formats, for
// binfmt_misc, hold NULs.)
bool TextWithoutInterpreter(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  char head[512];
  const ssize_t n = fd.valid() ? pread(fd.get(), head, sizeof(head), 0) : -1;
  if (n < 2) return false;
  const std::string_view start(head, static_cast<size_t>(n));
  if (start.substr(0, 2) == "#!" || start.substr(0, SELFMAG) == std::string_view(ELFMAG, SELFMAG)) {
    return false;
  }
  return start.find('\0') == std::string_view::npos;
}

// What execve would fail on after the file itself: a #! line with Windows
// line endings ('/bin/sh\r'), an interpreter or a dynamic loader that does
// not exist. All give "No such file or directory" for a file that exists.
Status CheckFirstRun(const std::string& path) {
  if (TextWithoutInterpreter(path)) {
    return PermissionDenied(path +
                            ": a text file without a #! line, which the kernel cannot run "
                            "(Exec format error; a shell would run it with /bin/sh): add a first "
                            "line naming its interpreter, such as #!/bin/sh, or name the "
                            "interpreter before it (ddprun ... --no_python sh " +
                            path + ")");
  }
  bool script = false;
  const std::string first = FirstRun(path, script);
  if (first.empty()) return Status::Ok();
  if (script && first.back() == '\r') {
    return PermissionDenied(path +
                            ": has Windows line endings (CRLF): its #! line names the "
                            "interpreter '" +
                            first.substr(0, first.size() - 1) +
                            "\\r', which does not exist; convert the file (dos2unix " + path +
                            ", or sed -i 's/\\r$//' " + path + ")");
  }
  struct stat st {};
  if (first[0] != '/' || stat(first.c_str(), &st) == 0) return Status::Ok();
  if (script) {
    return PermissionDenied(path + ": its #! line names the interpreter " + first +
                            ", which does not exist; fix the #! line, or name the interpreter "
                            "before the script (ddprun ... --no_python INTERPRETER " +
                            path + ")");
  }
  return PermissionDenied(path + ": its dynamic loader " + first +
                          " does not exist on this host (built for another system: another "
                          "C library or distribution); rebuild it here, or link it statically");
}

// A path that must be an executable regular file.
Status CheckExecutable(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return StatError(path, errno);
  if (S_ISDIR(st.st_mode)) return PermissionDenied(path + ": is a directory");
  if (!S_ISREG(st.st_mode)) {  // a FIFO, a device, a socket: chmod +x would not help (attack 87)
    const char* kind = S_ISFIFO(st.st_mode)   ? "a named pipe (FIFO)"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return PermissionDenied(path + ": is " + kind +
                            ", not a program file: give the path of "
                            "an executable or a script");
  }
  if (access(path.c_str(), X_OK) != 0) {
    return PermissionDenied(path +
                            ": not executable (chmod +x it, or run a script through its "
                            "interpreter)");
  }
  return CheckFirstRun(path);
}

// A program for Python: a script, a zip archive, or a directory with a
// __main__.py (as `python DIR` runs it).
Status CheckReadable(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return StatError(path, errno);
  if (S_ISDIR(st.st_mode)) {
    struct stat main {};
    for (const char* name : {"/__main__.py", "/__main__.pyc"}) {
      if (stat((path + name).c_str(), &main) == 0 && S_ISREG(main.st_mode)) {
        return access((path + name).c_str(), R_OK) == 0
                   ? Status::Ok()
                   : PermissionDenied(path + name + ": not readable");
      }
    }
    return PermissionDenied(path +
                            ": is a directory without a __main__.py, which Python would run; "
                            "name the script in it, or give a package with -m");
  }
  if (access(path.c_str(), R_OK) != 0) return PermissionDenied(path + ": not readable");
  return Status::Ok();
}

struct Interpreter {
  std::string path;
  std::string source;
};

bool IsFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// <prefix>/bin/python3 (or python) when it is an executable file.
std::optional<std::string> PythonIn(const std::string& prefix) {
  for (const char* name : {"/bin/python3", "/bin/python"}) {
    const std::string candidate = prefix + name;
    if (IsFile(candidate) && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// The environment (venv or conda) ddprun's own binary lives in, if any.
std::optional<std::string> OwnEnvironment(const std::string& self_exe) {
  char buf[4096];
  ssize_t n = readlink(self_exe.c_str(), buf, sizeof(buf) - 1);
  std::string exe = n > 0 ? std::string(buf, static_cast<size_t>(n)) : self_exe;
  auto slash = exe.rfind('/');
  if (slash == std::string::npos) return std::nullopt;
  const std::string bin = exe.substr(0, slash);
  auto up = bin.rfind('/');
  if (up == std::string::npos) return std::nullopt;
  const std::string prefix = bin.substr(0, up);
  struct stat st {};
  if (!IsFile(prefix + "/pyvenv.cfg") && stat((prefix + "/conda-meta").c_str(), &st) != 0) {
    return std::nullopt;
  }
  return prefix;
}

StatusOr<Interpreter> FindInterpreter(const env::Environ& environ, const std::string& self_exe) {
  const std::string path_var = env::Lookup(environ, "PATH").value_or("/usr/bin:/bin");
  if (auto exec = env::Lookup(environ, env::kPythonExec); exec && !exec->empty()) {
    auto path = FindExecutable(*exec, path_var);
    if (!path.ok())
      return path.status().Annotate(std::string("python interpreter (") + env::kPythonExec + "=" +
                                    *exec + ")");
    return Interpreter{*path, env::kPythonExec};
  }
  if (auto own = OwnEnvironment(self_exe)) {
    if (auto python = PythonIn(*own)) return Interpreter{*python, "ddprun's own environment"};
  }
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    auto prefix = env::Lookup(environ, var);
    if (!prefix || prefix->empty()) continue;
    if (auto python = PythonIn(*prefix)) return Interpreter{*python, var};
  }
  auto path = FindExecutable("python3", path_var);
  if (!path.ok()) {
    return path.status().Annotate(std::string("python interpreter (set ") + env::kPythonExec +
                                  " or put python3 on PATH)");
  }
  return Interpreter{*path, "PATH"};
}

StatusOr<Program> UnderPython(const LaunchConfig& c, const env::Environ& environ,
                              const std::string& self_exe) {
  auto python = FindInterpreter(environ, self_exe);
  if (!python.ok()) return python.status();
  Program p{{python->path, "-u"}, c.program, python->path, python->source};
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

Status CheckWorkingDirectory(const env::Environ& environ) {
  std::string cwd(PATH_MAX, '\0');
  if (getcwd(cwd.data(), cwd.size()) != nullptr || errno != ENOENT) return Status::Ok();
  const std::string pwd = env::Lookup(environ, "PWD").value_or("");
  struct stat st {};
  const bool again = !pwd.empty() && stat(pwd.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  return Unavailable(
      "the working directory" + (pwd.empty() ? std::string() : " " + pwd) +
      " was removed after this shell entered it; the "
      "workers would start in it, where relative paths and Python's os.getcwd() fail: " +
      (again ? "`cd " + pwd + "` enters the directory of that name that exists now"
             : std::string("cd to an existing directory")));
}

StatusOr<Program> ResolveProgram(const LaunchConfig& c, const env::Environ& environ,
                                 const std::string& self_exe) {
  if (c.module || c.run_path || (!c.no_python && EndsWith(c.program, ".py"))) {
    return UnderPython(c, environ, self_exe);
  }
  struct stat st {};
  bool exists = stat(c.program.c_str(), &st) == 0;
  // torchrun runs any script under Python (a directory or zip archive with a
  // __main__.py too); an executable file runs directly, unless the kernel
  // cannot run it (a text file without a #! line: under Python, as torchrun).
  if (!c.no_python && exists &&
      (S_ISDIR(st.st_mode) || (S_ISREG(st.st_mode) && (access(c.program.c_str(), X_OK) != 0 ||
                                                       TextWithoutInterpreter(c.program))))) {
    return UnderPython(c, environ, self_exe);
  }
  // A bare name in this directory is the script torchrun would give Python
  // (./train); with --no_python it is looked up on PATH only, as torchrun's
  // execvp does: a bash/ folder here must not hide /usr/bin/bash (attack 115).
  const bool bare = c.program.find('/') == std::string::npos;
  const std::string lookup = (exists && bare && !c.no_python) ? "./" + c.program : c.program;
  auto path = FindExecutable(lookup, env::Lookup(environ, "PATH").value_or("/usr/bin:/bin"));
  if (!path.ok() && exists && bare && c.no_python && CheckExecutable("./" + c.program).ok()) {
    return NotFound(path.status().message() + ": --no_python looks a bare name up on PATH only, " +
                    "as torchrun does; ./" + c.program + " runs the one in this directory");
  }
  if (!path.ok()) return path.status();
  Program p{{*path}, c.program, "", ""};
  p.argv.insert(p.argv.end(), c.program_args.begin(), c.program_args.end());
  return p;
}

}  // namespace ddprun::launcher
