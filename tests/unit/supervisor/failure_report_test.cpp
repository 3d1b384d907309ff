#include "supervisor/failure_report.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace ddprun::supervisor {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST_CASE("error files in torchrun's nested and flat forms are read") {
  FailureRecord nested;
  auto p1 =
      TempFile("ddprun_err1.json",
               R"({"message": {"message": "RuntimeError: boom", "extraInfo": )"
               R"({"py_callstack": "Traceback...\nRuntimeError: boom", "timestamp": "17"}}})");
  REQUIRE(ReadErrorFile(p1, nested));
  CHECK(nested.message == "Traceback...\nRuntimeError: boom");
  CHECK(nested.timestamp == 17);
  FailureRecord flat;
  auto p2 = TempFile("ddprun_err2.json", R"({"message": "oops", "timestamp": 5})");
  REQUIRE(ReadErrorFile(p2, flat));
  CHECK(flat.message == "oops");
  CHECK(flat.timestamp == 5);
  FailureRecord bad;
  CHECK_FALSE(ReadErrorFile("/nonexistent/error.json", bad));
  // Created but empty (killed as it began writing): named, not taken for none.
  FailureRecord empty;
  empty.output_tail = "step 10\n";
  empty.tail_has_stdout = true;
  auto p0 = TempFile("ddprun_err0.json", "");
  REQUIRE(ReadErrorFile(p0, empty));
  CHECK(empty.error_file == p0);
  CHECK(empty.message ==
        "the worker's error file is empty (0 bytes: the worker was killed while it wrote the "
        "file, or opened it and wrote nothing)\nits last output line: step 10");
  std::remove(p0.c_str());
  // Written, but cut off (killed mid-write) or not UTF-8: named and shown, not taken for none.
  auto p3 = TempFile("ddprun_err3.json", "{\"message\": {\"message\": \"caf\xe9");
  REQUIRE(ReadErrorFile(p3, bad));
  CHECK(bad.error_file == p3);
  CHECK(bad.message ==
        "the worker's error file is not a record ddprun can read (not JSON: cut off, or not "
        "UTF-8, 29 bytes); it begins: {\"message\": {\"message\": \"caf\\xe9");
  // Python's json writes a name that is not UTF-8 with lone surrogates: still a record.
  FailureRecord surrogate;
  auto p5 = TempFile(
      "ddprun_err5.json",
      R"({"message": {"message": "FileNotFoundError: /tmp/a\udcff \ud83d\ude00 \\udcff"}})");
  REQUIRE(ReadErrorFile(p5, surrogate));
  CHECK(surrogate.message == "FileNotFoundError: /tmp/a\xef\xbf\xbd \xf0\x9f\x98\x80 \\udcff");
  std::remove(p5.c_str());
  CHECK(WithoutLoneSurrogates(R"("\ud800x\\ud800\udc00\ud83d\ude00\"")") ==
        R"("\ufffdx\\ud800\ufffd\ud83d\ude00\"")");  // an escaped backslash is no escape
  FailureRecord other;
  REQUIRE(ReadErrorFile(TempFile("ddprun_err4.json", "[1, 2]"), other));
  CHECK(other.message.find("(JSON without a \"message\", 6 bytes)") != std::string::npos);
  std::remove(p3.c_str());
  std::remove(p1.c_str());
  std::remove(p2.c_str());
}

TEST_CASE("a large error file is read whole; one over the limit is named with its size") {
  // An exception with a huge message (a tensor's repr): valid JSON of 17 MiB.
  const std::string huge(size_t{17} << 20, 'x');
  FailureRecord large;
  auto p1 = TempFile("ddprun_err_large.json",
                     R"({"message": {"message": "RuntimeError: )" + huge +
                         R"(", "extraInfo": {"py_callstack": "Traceback MARKER\nRuntimeError: )"
                         R"(boom", "timestamp": "17"}}})");
  REQUIRE(ReadErrorFile(p1, large));
  CHECK(large.message == "Traceback MARKER\nRuntimeError: boom");
  CHECK(large.timestamp == 17);
  std::remove(p1.c_str());
  FailureRecord over;
  auto p2 = TempFile("ddprun_err_over.json",
                     R"({"message": ")" + std::string(kErrorFileLimit, 'x') + R"("})");
  REQUIRE(ReadErrorFile(p2, over));
  CHECK(over.message.find("larger than the 64 MiB ddprun reads of an error file") !=
        std::string::npos);
  CHECK(over.message.find(std::to_string(kErrorFileLimit + 15) + " bytes") != std::string::npos);
  std::remove(p2.c_str());
}

TEST_CASE("error files with other JSON types, odd times or deep nesting are read, never thrown") {
  // A C++ or hand-written writer: a number for the time, a list for the call stack.
  FailureRecord typed;
  typed.timestamp = 99;
  auto p1 = TempFile("ddprun_err_t1.json",
                     R"({"message": {"message": 42, "extraInfo": {"py_callstack": ["a", "b"], )"
                     R"("timestamp": 1700000000}}})");
  REQUIRE(ReadErrorFile(p1, typed));
  CHECK(typed.message == R"(["a","b"])");
  CHECK(typed.timestamp == 1700000000);
  FailureRecord number;
  auto p2 = TempFile("ddprun_err_t2.json", R"({"message": {"message": 42, "extraInfo": "x"}})");
  REQUIRE(ReadErrorFile(p2, number));
  CHECK(number.message == "42");
  // A time that is not one keeps the time ddprun saw the exit: garbage never wins the root cause.
  for (const char* ts :
       {R"("abc")", R"("1e3")", R"("99999999999999999999999")", "-5", "1e300", "\"\xc3\xa9\""}) {
    FailureRecord odd;
    odd.timestamp = 1234;
    auto p = TempFile(
        "ddprun_err_t3.json",
        std::string(R"({"message": {"message": "m", "extraInfo": {"timestamp": )") + ts + "}}}");
    REQUIRE(ReadErrorFile(p, odd));
    CHECK_MESSAGE(odd.timestamp == 1234, ts);
    std::remove(p.c_str());
  }
  // Python's json.dump writes a float field that is not finite as NaN or Infinity.
  FailureRecord nan;
  auto p6 = TempFile("ddprun_err_t6.json",
                     R"({"message": {"message": "m", "extraInfo": {"py_callstack": "tb NaN", )"
                     R"("loss": NaN, "grad": -Infinity, "lr": Infinity, "timestamp": "7"}}})");
  REQUIRE(ReadErrorFile(p6, nan));
  CHECK(nan.message == "tb NaN");  // inside a string: untouched
  CHECK(nan.timestamp == 7);
  CHECK(StrictJson(R"(["NaN", NaN, "\"Infinity", -Infinity])") ==
        R"(["NaN", null, "\"Infinity", null])");
  std::remove(p6.c_str());
  // 100,000 brackets deep: named as unreadable (the library would recurse off the stack).
  FailureRecord deep;
  const std::string nested(100000, '[');
  auto p4 = TempFile("ddprun_err_t4.json", R"({"message": )" + nested);
  REQUIRE(ReadErrorFile(p4, deep));
  CHECK(deep.message.find("JSON nested more than 100 levels deep") != std::string::npos);
  CHECK_FALSE(NestsTooDeep(R"({"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})"));
  CHECK(NestsTooDeep(std::string(101, '{')));
  CHECK_FALSE(NestsTooDeep(std::string(100, '{')));
  CHECK(DumpRootCause(deep, TempFile("ddprun_err_t5.json", "")).ok());  // the fallback record
  for (const auto& p : {p1, p2, p4}) std::remove(p.c_str());
}

TEST_CASE("the root cause is the earliest error file, and the report keeps torchrun's layout") {
  GroupResult r;
  auto t = std::chrono::system_clock::from_time_t(100);
  for (int i : {0, 1}) {
    WorkerRecord w;
    w.local_rank = w.rank = i;
    w.pid = 10 + i;
    w.state = WorkerState::kFailed;
    w.exit = i == 0 ? ExitStatus::Signaled(SIGKILL) : ExitStatus::Exited(3);
    w.exit_time = t;
    r.workers.push_back(w);
  }
  r.failures = {0, 1};
  auto err = TempFile("ddprun_err4.json",
                      R"({"message": {"message": "x", "extraInfo": {"py_callstack": "tb", )"
                      R"("timestamp": "50"}}})");
  auto failures = CollectFailures(r, {"", err}, true);
  REQUIRE(failures.size() == 2);
  CHECK(failures[0].rank == 1);
  CHECK(failures[1].message == "Signal 9 (SIGKILL) received by PID 10");
  // What a worker killed by a signal said last is kept, as for an exit code.
  r.workers[0].output_tail = "giving up: checkpoint 7 is corrupt\n";
  r.workers[0].tail_has_stdout = false;
  failures = CollectFailures(r, {"", err}, true);
  REQUIRE(failures.size() == 2);
  CHECK(failures[1].message ==
        "Signal 9 (SIGKILL) received by PID 10\nits last stderr line: giving up: checkpoint 7 "
        "is corrupt");
  std::string report = FormatReport("train.py", "node1", failures);
  CHECK(report.find("train.py FAILED\n") != std::string::npos);
  CHECK(report.find("Root Cause (first observed failure):\n[0]:\n") != std::string::npos);
  CHECK(report.find("  rank      : 1 (local_rank: 1)\n  exitcode  : 3 (pid: 11) \n") !=
        std::string::npos);
  CHECK(report.find("  exitcode  : -9 (pid: 10)  (SIGKILL)") != std::string::npos);
  CHECK(report.find("  host      : node1") != std::string::npos);
  // A worker that could not be started has no pid to show.
  auto unstarted = failures;
  unstarted[0].pid = 0;
  CHECK(FormatReport("train.py", "node1", unstarted).find("  exitcode  : 3 (never started) \n") !=
        std::string::npos);
  std::string border = report.substr(0, report.find('\n') + 1);
  CHECK(border.find_first_not_of('=') == border.size() - 1);
  CHECK(report.substr(report.size() - border.size()) == border);
  std::remove(err.c_str());
}

TEST_CASE(
    "a worker without an error file has its last output line, and Python advice only "
    "under Python") {
  GroupResult r;
  WorkerRecord w;
  w.state = WorkerState::kFailed;
  w.exit = ExitStatus::Exited(1);
  w.output_tail = "step 1\ntrain: rank 0: crashing at step 2 as asked\n\n";
  r.workers.push_back(w);
  r.failures = {0};
  auto native = CollectFailures(r, {""}, false);
  // Its stdout went straight on, unread (attack 81: "its last output line" quoted an
  // earlier stderr line while the worker's last words were on stdout).
  CHECK(native.front().message ==
        "no traceback: the worker wrote no error file\nits last stderr line: train: rank 0: "
        "crashing at step 2 as asked");
  r.workers[0].tail_has_stdout = true;
  native = CollectFailures(r, {""}, false);
  CHECK(native.front().message ==
        "no traceback: the worker wrote no error file\nits last output line: train: rank 0: "
        "crashing at step 2 as asked");
  CHECK(CollectFailures(r, {""}, true)
            .front()
            .message.find(
                "has nothing to record then)\nits last output line: train: rank 0: crashing at "
                "step 2 as asked") != std::string::npos);
  r.workers[0].output_tail.clear();
  CHECK(CollectFailures(r, {""}, false).front().message ==
        "no traceback: the worker wrote no error file");
}

TEST_CASE("a Python worker is advised @record only where it raised") {
  GroupResult r;
  WorkerRecord w;
  w.state = WorkerState::kFailed;
  w.exit = ExitStatus::Exited(1);
  r.workers.push_back(w);
  r.failures = {0};
  auto advice = [&](const std::string& tail) {
    r.workers[0].output_tail = tail;
    return CollectFailures(r, {""}, true).front().message;
  };
  const std::string raised = advice(
      "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n"
      "    raise RuntimeError('boom')\nRuntimeError: boom\n");
  CHECK(raised.find("decorate the entry point with") != std::string::npos);
  CHECK(raised.find("its last stderr line: RuntimeError: boom") != std::string::npos);
  // The header cut off the kept tail: the indented source line above says it.
  CHECK(advice("    raise ValueError(x)\nValueError: 3\n").find("decorate") != std::string::npos);
  // sys.exit("message"), `python -m` without its module: @record never sees them.
  for (const char* tail : {"giving up: no data\n", "/usr/bin/python3: No module named nomod\n"}) {
    const std::string m = advice(tail);
    CHECK(m.find("decorate") == std::string::npos);
    CHECK(m.find("it exited without raising: sys.exit(), os._exit()") != std::string::npos);
  }
  const std::string interrupted =
      advice("Traceback (most recent call last):\n    time.sleep(9)\nKeyboardInterrupt\n");
  CHECK(interrupted.find("decorate") == std::string::npos);
  CHECK(interrupted.find("KeyboardInterrupt: a SIGINT") != std::string::npos);
  // Nothing seen of its stderr (a terminal, not read): the advice stays.
  CHECK(advice("").find("decorate the entry point with") != std::string::npos);
  // Its stderr read, and empty: no traceback was printed, so it did not raise
  // (a silent sys.exit(4): attack 87).
  r.workers[0].stderr_seen = true;
  CHECK(advice("").find("it exited without raising") != std::string::npos);
}

TEST_CASE("the root cause is copied to the launcher's own error file with its code") {
  FailureRecord f;
  f.pid = 1;
  f.exit = ExitStatus::Exited(3);
  f.timestamp = 42;
  f.error_file = "<N/A>";
  f.message = "no traceback";
  auto out = std::filesystem::temp_directory_path() / "ddprun_own_error.json";
  CHECK(DumpRootCause(f, out.string()).ok());
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text.find("\"errorCode\":3") != std::string::npos);
  CHECK(text.find("no traceback") != std::string::npos);
  std::filesystem::remove(out);
}

TEST_CASE("the launcher's own error file never waits for a reader, nor the worker's for a writer") {
  FailureRecord f;
  f.pid = 1;
  f.exit = ExitStatus::Exited(3);
  f.message = "boom";
  const auto dir = std::filesystem::temp_directory_path() / "ddprun_error_fifo";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const Status s = DumpRootCause(f, fifo);  // nobody reads it: an error, at once
  CHECK(!s.ok());
  CHECK(s.message().find(fifo + " is a named pipe that nobody reads") != std::string::npos);
  FailureRecord from_fifo;
  CHECK(!ReadErrorFile(fifo, from_fifo));  // nobody writes it: nothing to read, at once
  const Status full = DumpRootCause(f, "/dev/full");
  CHECK(full.message().find("/dev/full: write failed: No space left on device") !=
        std::string::npos);
  const Status missing = DumpRootCause(f, (dir / "no" / "such").string());
  CHECK(missing.message().find("cannot open it for writing: No such file or directory") !=
        std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("workers that failed on their own while the group stopped are failures, not stopped") {
  GroupResult r;
  r.outcome = Outcome::kFailed;
  auto worker = [](int lr, WorkerState state, ExitStatus exit) {
    WorkerRecord w;
    w.local_rank = w.rank = lr;
    w.pid = 100 + lr;
    w.state = state;
    w.exit = exit;
    return w;
  };
  r.workers = {worker(0, WorkerState::kFailed, ExitStatus::Exited(3)),
               worker(1, WorkerState::kStopped, ExitStatus::Exited(1)),          // its own code
               worker(2, WorkerState::kStopped, ExitStatus::Signaled(SIGTERM)),  // ours
               worker(3, WorkerState::kStopped, ExitStatus::Exited(143)),        // 128+SIGTERM
               worker(4, WorkerState::kStopped, ExitStatus::Signaled(SIGTERM)),  // raised first
               worker(5, WorkerState::kSucceeded, ExitStatus::Exited(0)),
               // Attack 77: Slurm's SIGUSR1 to every process of the step, not ddprun's.
               worker(6, WorkerState::kStopped, ExitStatus::Signaled(SIGUSR1)),
               worker(7, WorkerState::kStopped, ExitStatus::Signaled(SIGKILL))};  // ours
  r.failures = {0};
  r.signals_sent = {SIGTERM, SIGCONT};
  std::vector<std::string> error_files(8, "");
  error_files[4] = TempFile("ddprun_err_own4.json", R"({"message": "RuntimeError: mine"})");
  error_files[2] = "/nonexistent/error.json";
  CountOwnFailures(r, error_files);
  CHECK(r.failures == std::vector<size_t>{0, 1, 4, 6});
  CHECK(r.workers[1].state == WorkerState::kFailed);
  CHECK(r.workers[2].state == WorkerState::kStopped);
  CHECK(r.workers[3].state == WorkerState::kStopped);
  CHECK(r.workers[6].state == WorkerState::kFailed);
  CHECK(r.workers[7].state == WorkerState::kStopped);
  // Its timestamps earlier than the root cause's: still listed after it.
  r.workers[0].exit_time = std::chrono::system_clock::from_time_t(2000);
  r.workers[1].exit_time = std::chrono::system_clock::from_time_t(1000);
  auto records = CollectFailures(r, error_files, true);
  REQUIRE(records.size() == 4);
  CHECK(records[0].rank == 0);
  CHECK(records[0].message != "RuntimeError: mine");
  for (const FailureRecord& f : records) {
    if (f.rank == 4) CHECK(f.message == "RuntimeError: mine");
  }
  // A group that did not fail is left alone.
  GroupResult stopped = r;
  stopped.outcome = Outcome::kInterrupted;
  stopped.failures = {};
  stopped.workers[1].state = WorkerState::kStopped;
  CountOwnFailures(stopped, error_files);
  CHECK(stopped.failures.empty());
  std::remove(error_files[4].c_str());
}

TEST_CASE("a rank that lost its peer is not the root cause where a rank near it died first") {
  // Found by an attacking helper: rank 2 SIGKILLed while ddprun looked late (a starved host);
  // ranks 0 and 3 raised "Connection closed by peer" at once, their error files (whole seconds)
  // two seconds older than the exit ddprun saw for rank 2. Rank 0 was named; exit 1, not 137.
  GroupResult r;
  r.outcome = Outcome::kFailed;
  const auto seen = std::chrono::system_clock::from_time_t(5002);
  std::vector<std::string> error_files(4, "");
  for (int lr : {0, 2, 3}) {
    WorkerRecord w;
    w.local_rank = w.rank = lr;
    w.pid = 300 + lr;
    w.state = WorkerState::kFailed;
    w.exit = lr == 2 ? ExitStatus::Signaled(SIGKILL) : ExitStatus::Exited(1);
    w.exit_time = seen;
    r.workers.push_back(w);
    if (lr != 2) {
      error_files[static_cast<size_t>(lr)] =
          TempFile("ddprun_err_peer" + std::to_string(lr) + ".json",
                   R"({"message": {"message": "RuntimeError: [gloo/transport/tcp/pair.cc:534] )"
                   R"(Connection closed by peer [127.0.0.1]:1", "extraInfo": {"py_callstack": "tb )"
                   R"(Connection closed by peer", "timestamp": "5000"}}})");
    }
  }
  r.failures = {0, 1, 2};
  auto records = CollectFailures(r, error_files, true);
  REQUIRE(records.size() == 3);
  CHECK(records[0].rank == 2);
  CHECK(records[0].exit.signal == SIGKILL);
  // A rank that died of SIGPIPE writing to the dead peer is a victim too.
  WorkerRecord& rank2 = r.workers[1];
  WorkerRecord& rank3 = r.workers[2];
  const std::string rank3_file = error_files[3];
  error_files[3] = "";  // died without a word
  rank3.exit = ExitStatus::Signaled(SIGPIPE);
  rank3.exit_time = std::chrono::system_clock::from_time_t(5001);
  records = CollectFailures(r, error_files, true);
  CHECK(records[0].rank == 2);
  error_files[3] = rank3_file;
  // However late ddprun saw it (stopped 5 s here), found with them: their cause.
  rank2.exit = ExitStatus::Exited(7);
  rank2.exit_time = std::chrono::system_clock::from_time_t(5005);  // the error files say 5000
  CHECK(CollectFailures(r, error_files, true)[0].rank == 2);
  // Failing only once the group was being stopped: not their cause.
  rank2.state = WorkerState::kStopped;
  r.failures = {0, 2};
  CountOwnFailures(r, error_files);
  REQUIRE(r.failures.size() == 3);
  CHECK(CollectFailures(r, error_files, true)[0].rank != 2);
  for (const auto& f : error_files) {
    if (!f.empty()) std::remove(f.c_str());
  }
}

TEST_CASE("a worker that raised before the root cause, and exited only at the stop, is the root") {
  // Found by an attacking helper: rank 1 raised (its error file written) and a thread that is
  // not a daemon kept it alive; rank 0 gave up on it later and exited first. torchrun takes the
  // oldest error file; ddprun named rank 0's later, secondary error.
  GroupResult r;
  r.outcome = Outcome::kFailed;
  for (int lr : {0, 1}) {
    WorkerRecord w;
    w.local_rank = w.rank = lr;
    w.pid = 200 + lr;
    w.state = lr == 0 ? WorkerState::kFailed : WorkerState::kStopped;
    w.exit = lr == 0 ? ExitStatus::Exited(1) : ExitStatus::Signaled(SIGTERM);
    w.exit_time = std::chrono::system_clock::from_time_t(lr == 0 ? 3000 : 3001);
    r.workers.push_back(w);
  }
  r.failures = {0};
  auto err = [](const std::string& name, const std::string& message, int when) {
    return TempFile(name, R"({"message": {"message": ")" + message +
                              R"(", "extraInfo": {"py_callstack": "tb", "timestamp": ")" +
                              std::to_string(when) + R"("}}})");
  };
  std::vector<std::string> files = {err("ddprun_first0.json", "RuntimeError: secondary", 3000),
                                    err("ddprun_first1.json", "RuntimeError: REAL", 2998)};
  CountOwnFailures(r, files);
  auto records = CollectFailures(r, files, true);
  REQUIRE(records.size() == 2);
  CHECK(records[0].rank == 1);
  CHECK(records[0].raised_first);
  CHECK(records[0].message == "tb");
  CHECK_FALSE(records[1].raised_first);
  const std::string report = FormatReport("t.py", "node0", records);
  CHECK(report.find("Root Cause (first observed failure):\n[0]:\n  time      : ") !=
        std::string::npos);
  CHECK(report.find("note      : it raised first (its error file is the oldest)") >
        report.find("Root Cause"));
  // Raised in the same second as the root cause, or later: the stop's order stands.
  std::remove(files[1].c_str());
  files[1] = err("ddprun_first1.json", "RuntimeError: REAL", 3000);
  records = CollectFailures(r, files, true);
  CHECK(records[0].rank == 0);
  CHECK_FALSE(records[1].raised_first);
  for (const auto& f : files) std::remove(f.c_str());
}

}  // namespace
}  // namespace ddprun::supervisor
