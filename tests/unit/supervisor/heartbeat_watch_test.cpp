#include "supervisor/heartbeat_watch.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ddprun::supervisor {
namespace {

using std::chrono::seconds;

struct Files {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ddprun_heartbeat_" + std::to_string(getpid()));
  Files() {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Files() { std::filesystem::remove_all(dir); }
  std::string Make(const std::string& name, int64_t mtime_s) const {
    std::string path = (dir / name).string();
    std::ofstream(path).flush();
    SetTime(path, mtime_s);
    return path;
  }
  static void SetTime(const std::string& path, int64_t mtime_s) {
    const timespec t[2] = {{mtime_s, 0}, {mtime_s, 0}};
    REQUIRE(utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
  }
};

std::vector<WorkerRecord> Running(int n) {
  std::vector<WorkerRecord> w(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    w[i].rank = w[i].local_rank = i;
    w[i].pid = 100 + i;
  }
  return w;
}

constexpr int64_t kNs = 1000000000;

TEST_CASE("a newer file time is a beat dated by its age; a removed file is finishing") {
  Files files;
  const SteadyTime t0{};
  HeartbeatWatch watch;
  for (const char* name : {"0", "1"}) {
    const std::string path = files.Make(name, 1000);
    watch.Add(path, t0, HeartbeatWatch::FileTime(path));
  }
  watch.Add("", t0, 0);  // a worker that could not be started
  const auto workers = Running(3);
  Files::SetTime((files.dir / "0").string(), 1004);
  watch.Look(t0 + seconds(10), 1005 * kNs, workers);  // rank 0 beat 1 s before this look
  auto beats = watch.Beats(workers);
  REQUIRE(beats.size() == 3);
  CHECK(beats[0].beaten);
  CHECK(beats[0].last == t0 + seconds(9));
  CHECK_FALSE(beats[1].beaten);
  CHECK(beats[1].last == t0);
  CHECK_FALSE(beats[2].beaten);
  std::filesystem::remove(files.dir / "1");
  watch.Look(t0 + seconds(12), 1007 * kNs, workers);
  beats = watch.Beats(workers);
  CHECK(beats[1].finishing);
  CHECK(beats[1].last == t0 + seconds(12));  // its exit limit counts from now
  CHECK_FALSE(beats[2].finishing);           // no file: never finishing
  // Progress noted otherwise does not move a finishing worker's clock.
  watch.NoteProgress(1, t0 + seconds(13));
  watch.NoteProgress(0, t0 + seconds(13));
  beats = watch.Beats(workers);
  CHECK(beats[1].last == t0 + seconds(12));
  CHECK(beats[0].last == t0 + seconds(13));
}

TEST_CASE("a heartbeat file created again after its removal is running again") {
  Files files;
  const SteadyTime t0{};
  HeartbeatWatch watch;
  const std::string path = files.Make("0", 1000);
  watch.Add(path, t0, HeartbeatWatch::FileTime(path));
  const auto workers = Running(1);
  std::filesystem::remove(path);
  watch.Look(t0 + seconds(5), 1005 * kNs, workers);
  REQUIRE(watch.Beats(workers)[0].finishing);
  watch.Look(t0 + seconds(6), 1006 * kNs, workers);  // still gone: still finishing, same clock
  CHECK(watch.Beats(workers)[0].last == t0 + seconds(5));
  files.Make("0", 1007);  // a new process group's first collective
  watch.Look(t0 + seconds(8), 1008 * kNs, workers);
  const Beat b = watch.Beats(workers)[0];
  CHECK_FALSE(b.finishing);
  CHECK(b.beaten);
  CHECK(b.last == t0 + seconds(7));
  watch.Clear();
  CHECK(watch.Beats(workers).empty());
}

TEST_CASE("a heartbeat file gone with its directory is made again, not taken for finishing") {
  // Attack 102: a cleaner of /tmp removed the run's directory while the job ran; every rank was
  // taken for finishing, then killed as "hung at exit" though it trained on.
  Files files;
  const SteadyTime t0{};
  HeartbeatWatch watch;
  std::filesystem::create_directories(files.dir / "attempt_0" / "0");
  const std::string path = files.Make("attempt_0/0/heartbeat", 1000);
  watch.Add(path, t0, HeartbeatWatch::FileTime(path));
  const auto workers = Running(1);
  Files::SetTime(path, 1003);
  watch.Look(t0 + seconds(4), 1004 * kNs, workers);  // a beat at t0 + 3 s
  std::filesystem::remove_all(files.dir / "attempt_0");
  watch.Look(t0 + seconds(5), 1005 * kNs, workers);
  Beat b = watch.Beats(workers)[0];
  CHECK_FALSE(b.finishing);
  CHECK(b.last == t0 + seconds(3));  // not a beat: its hang limit still counts from the last
  CHECK(HeartbeatWatch::FileTime(path) == 1003 * kNs);
  Files::SetTime(path, 1006);  // the worker's next touch lands
  watch.Look(t0 + seconds(7), 1007 * kNs, workers);
  b = watch.Beats(workers)[0];
  CHECK(b.last == t0 + seconds(6));
  CHECK(b.cannot_beat.empty());
  // A file in the directory's place (attack 103): not made again, and not finishing either; it
  // cannot beat, until the directory can be made again.
  std::filesystem::remove_all(files.dir / "attempt_0");
  std::ofstream(files.dir / "attempt_0").flush();
  watch.Look(t0 + seconds(8), 1008 * kNs, workers);
  b = watch.Beats(workers)[0];
  CHECK_FALSE(b.finishing);
  CHECK(b.cannot_beat == "Not a directory");
  std::filesystem::remove(files.dir / "attempt_0");
  watch.Look(t0 + seconds(10), 1010 * kNs, workers);
  b = watch.Beats(workers)[0];
  CHECK(b.cannot_beat.empty());
  CHECK(b.last == t0 + seconds(10));
  CHECK(HeartbeatWatch::FileTime(path) == 1006 * kNs);
}

TEST_CASE("a file removed before the worker was added is finishing, by its time read before") {
  Files files;
  const SteadyTime t0{};
  HeartbeatWatch watch;
  const std::string path = files.Make("0", 1000);
  const int64_t before_start = HeartbeatWatch::FileTime(path);
  CHECK(before_start == 1000 * kNs);
  std::filesystem::remove(path);  // the worker touched and removed it at once
  watch.Add(path, t0, before_start);
  const auto workers = Running(1);
  watch.Look(t0 + seconds(1), 1001 * kNs, workers);
  CHECK(watch.Beats(workers)[0].finishing);
  CHECK(HeartbeatWatch::FileTime(path) == 0);
  CHECK(HeartbeatWatch::FileTime("") == 0);
}

TEST_CASE("a crash after the worker removed its heartbeat file is one of a finished program") {
  // Read afresh as the exit is read (a look may not have seen the removal), dated by the
  // directory's change; not for a file the worker never touched (a cleaner of /tmp took it),
  // nor, with the PyTorch hook's finished file, without that file (destroy_process_group alone).
  Files files;
  const SteadyTime t0{};
  HeartbeatWatch watch;
  std::vector<std::string> paths;
  for (const char* name : {"0", "1", "2", "3", "4", "5"}) {
    std::filesystem::create_directories(files.dir / name);
    paths.push_back(files.Make(std::string(name) + "/heartbeat", 1000));
    const std::string finished = (files.dir / name / "finished").string();
    watch.Add(paths.back(), t0, HeartbeatWatch::FileTime(paths.back()), false,
              std::string(name) >= "4" ? finished : "");
  }
  watch.Add("", t0, 0);  // none
  const auto workers = Running(7);
  for (const std::string& path : paths) Files::SetTime(path, 1001);  // each touched once
  watch.Look(t0 + seconds(2), 1002 * kNs, workers);
  auto remove_at = [&](size_t i, int64_t when_s) {
    std::filesystem::remove(paths[i]);
    Files::SetTime((files.dir / std::to_string(i)).string(), when_s);
  };
  remove_at(0, 1003);
  watch.Look(t0 + seconds(4), 1004 * kNs, workers);  // 0 seen finishing
  remove_at(1, 1006);                                // 1 removed since the last look
  std::filesystem::remove_all(files.dir / "2");      // 2's went with its directory
  remove_at(4, 1005);                                // 4: destroy_process_group alone
  remove_at(5, 1005);                                // 5: its main module finished
  std::ofstream(files.dir / "5" / "finished").flush();
  Files::SetTime((files.dir / "5").string(), 1005);
  const SteadyTime exit = t0 + seconds(10);
  const int64_t wall = 1010 * kNs;
  REQUIRE(watch.Finished(0, exit, wall).has_value());
  CHECK(*watch.Finished(0, exit, wall) == seconds(7));  // by its directory, not the look
  REQUIRE(watch.Finished(1, exit, wall).has_value());
  CHECK(*watch.Finished(1, exit, wall) == seconds(4));
  CHECK_FALSE(watch.Finished(2, exit, wall).has_value());  // not removed by the worker
  CHECK_FALSE(watch.Finished(3, exit, wall).has_value());  // still there: running
  CHECK_FALSE(watch.Finished(4, exit, wall).has_value());
  REQUIRE(watch.Finished(5, exit, wall).has_value());
  CHECK(*watch.Finished(5, exit, wall) == seconds(5));
  CHECK_FALSE(watch.Finished(6, exit, wall).has_value());
  CHECK_FALSE(watch.Finished(7, exit, wall).has_value());  // no such worker
  // A directory dated before the last beat (a clock step) or in the future: the look's time.
  Files::SetTime((files.dir / "0").string(), 1000);
  CHECK(*watch.Finished(0, exit, wall) == seconds(6));
  Files::SetTime((files.dir / "1").string(), 2000);
  CHECK(*watch.Finished(1, exit, wall) == SteadyTime::duration::zero());
}

TEST_CASE("a heartbeat file untouched for a day, gone, is no word that the worker finished") {
  // A cleaner of /tmp that removes old files took it. One touched between two looks (never
  // seen touched), gone soon after its start, was the worker's own removal (attack 106).
  Files files;
  const SteadyTime t0{};
  HeartbeatWatch watch;
  for (const char* name : {"0", "1"}) {
    const std::string path = files.Make(name, 1000);
    watch.Add(path, t0, HeartbeatWatch::FileTime(path));
  }
  const auto workers = Running(2);
  constexpr int64_t kDay = 24 * 3600;
  watch.Look(t0 + seconds(1), 1001 * kNs, workers);
  std::filesystem::remove(files.dir / "0");
  std::filesystem::remove(files.dir / "1");
  watch.Look(t0 + seconds(2), 1002 * kNs, workers);
  CHECK(watch.Beats(workers)[0].finishing);  // held to --exit_timeout, as before
  CHECK(watch.Finished(0, t0 + seconds(3), 1003 * kNs).has_value());
  CHECK_FALSE(watch.Finished(1, t0 + seconds(2 * kDay), (1000 + 2 * kDay) * kNs).has_value());
}

TEST_CASE("a pause places the beats from before it first, then leaves itself out") {
  Files files;
  const SteadyTime t0{};
  HeartbeatWatch watch;
  const std::string beating = files.Make("0", 1000);
  watch.Add(beating, t0, HeartbeatWatch::FileTime(beating));
  watch.Add("", t0, 0);
  const auto workers = Running(2);
  // Rank 0 beat at 1002 and the whole job froze from 1003 to 1033; nobody looked meanwhile.
  Files::SetTime(beating, 1002);
  watch.Look(t0 + seconds(33), 1033 * kNs, workers);
  watch.Postpone(seconds(30), t0 + seconds(33));
  auto beats = watch.Beats(workers);
  CHECK(beats[0].last == t0 + seconds(32));  // 1 s of silence counts, not 31
  CHECK(beats[1].last == t0 + seconds(30));  // from its start, less the pause
  // Never later than now: a worker that beat during the launcher's own pause.
  watch.NoteProgress(1, t0 + seconds(40));
  watch.Postpone(seconds(30), t0 + seconds(41));
  CHECK(watch.Beats(workers)[1].last == t0 + seconds(41));
}

}  // namespace
}  // namespace ddprun::supervisor
