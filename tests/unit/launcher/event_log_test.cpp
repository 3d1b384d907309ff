// The event log (launcher/event_log.hpp): its handlers and paths, one object per
// line, and a reader that stops reading.
#include "launcher/event_log.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/machine_reports.hpp"

namespace ddprun::launcher {
namespace {

using json = nlohmann::ordered_json;

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("ddprun_events_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::vector<json> Lines(std::istream& in) {
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

std::vector<json> Lines(const std::string& path) {
  std::ifstream in(path);
  return Lines(in);
}

// Everything the read end holds now.
std::string ReadAll(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

// A named pipe in a directory of its own, its read end open (non-blocking) and never read
// unless the test does; SIGPIPE ignored, as ddprun ignores it.
struct Fifo {
  explicit Fifo(const std::string& name) : dir(TempDir(name)), path(dir + "/events.fifo") {
    signal(SIGPIPE, SIG_IGN);
    REQUIRE(mkfifo(path.c_str(), 0600) == 0);
    reader = open(path.c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(reader >= 0);
  }
  ~Fifo() {
    close(reader);
    std::filesystem::remove_all(dir);
  }
  std::string dir, path;
  int reader = -1;
};

TEST_CASE("EventLog: handlers, paths, and one object per line with the common fields") {
  auto unknown = EventLog::Open("syslog", "");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find("--event_log_handler") != std::string::npos);
  CHECK(unknown.status().message().find("console") != std::string::npos);  // names the choices
  CHECK_FALSE(EventLog().enabled());
  auto none = EventLog::Open("null", "");
  REQUIRE(none.ok());
  // torchrun's dynamic_rendezvous handler is a null one: nothing written.
  auto torchrun_null = EventLog::Open("dynamic_rendezvous", "");
  REQUIRE(torchrun_null.ok());
  CHECK_FALSE(torchrun_null->enabled());
  CHECK_FALSE(none->enabled());
  auto to_stderr = EventLog::Open("json", "");
  REQUIRE(to_stderr.ok());
  CHECK(to_stderr->enabled());
  auto bad = EventLog::Open("json", "/proc/no/such/dir/events");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("DDPRUN_EVENT_LOG=/proc/no/such/dir/events") !=
        std::string::npos);

  const std::string dir = TempDir("events");
  const std::string path = dir + "/events.jsonl";
  auto log = EventLog::Open("null", path);  // the variable alone turns it on
  REQUIRE(log.ok());
  log->SetCommon("run_id", "job7");
  log->Emit("restart", {{"restart_count", 1}});
  log->SetCommon("node_rank", 2);
  log->Emit("exit", {{"exit_code", 0}});
  log->Flush(std::chrono::seconds(5), std::chrono::seconds(10));  // its thread writes them
  const auto lines = Lines(path);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0]["schema"] == kEventSchema);
  CHECK(lines[0]["event"] == "restart");
  CHECK(lines[0]["run_id"] == "job7");
  CHECK(lines[0]["restart_count"] == 1);
  CHECK_FALSE(lines[0].contains("node_rank"));
  CHECK(lines[1]["node_rank"] == 2);
  CHECK(lines[0]["time"].get<std::string>().back() == 'Z');
  std::filesystem::remove_all(dir);
}

TEST_CASE("EventLog: a pipe whose reader stops reading holds, then drops, and never blocks") {
  // Found by an attacking helper (attack 108): with the reader of DDPRUN_EVENT_LOG's FIFO
  // stalled, the agent blocked in write(2) after 64 KiB of events: no restart, no SIGTERM.
  Fifo fifo("fifo");
  const int reader = fifo.reader;
  auto log = EventLog::Open("json", fifo.path);
  REQUIRE(log.ok());
  log->SetCommon("run_id", "job3");
  const json big = {{"message", std::string(4000, 'x')}};
  int emitted = 0;
  while (log->dropped() < 10) {  // returns: a blocking write would hang here
    log->Emit("restart", big);
    ++emitted;
    REQUIRE(emitted < 10000);
  }
  CHECK(log->held_bytes() <= kEventBacklogBytes);
  CHECK(log->held_bytes() > kEventBacklogBytes - 8000);
  // The reader takes one pipe's worth (reading on and on, it could take the whole backlog
  // as the log's thread writes it: CI once did)...
  pollfd ready{reader, POLLIN, 0};
  REQUIRE(poll(&ready, 1, 5000) == 1);  // the log's thread has written some
  char some[65536];
  const ssize_t taken = read(reader, some, sizeof some);
  REQUIRE(taken > 0);
  const std::string first(some, static_cast<size_t>(taken));
  CHECK(log->dropped() == 10);
  log->Emit("restart", big);  // ...not yet with what is held: still dropped
  CHECK(log->dropped() == 11);
  std::string all = first;
  while (log->held_bytes() > 0) {
    all += ReadAll(reader);  // the log's thread writes as the reader reads
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  all += ReadAll(reader);
  log->Emit("membership_change", {{"reason", "back"}});
  log->Flush(std::chrono::seconds(5), std::chrono::seconds(10));
  all += ReadAll(reader);
  std::istringstream in(all);
  const auto lines = Lines(in);
  REQUIRE(lines.size() == static_cast<size_t>(emitted - 10 + 2));
  CHECK(lines[lines.size() - 2]["event"] == "events_dropped");
  CHECK(lines[lines.size() - 2]["count"] == 11);
  CHECK(lines[lines.size() - 2]["run_id"] == "job3");
  CHECK(lines.back()["event"] == "membership_change");
  CHECK(log->dropped() == 0);
}

TEST_CASE("EventLog: the exit event is held past the bound, after the count of those dropped") {
  Fifo fifo("exit");
  const int reader = fifo.reader;
  auto log = EventLog::Open("json", fifo.path);
  REQUIRE(log.ok());
  const json big = {{"message", std::string(4000, 'x')}};
  // The pipe full first, the log's thread blocked in write(2): what is held then stays.
  while (log->held_bytes() < 200000) log->Emit("restart", big);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Held to just under the bound, none dropped yet: the exit event still goes in.
  while (log->held_bytes() + 4500 <= kEventBacklogBytes) log->Emit("restart", big);
  log->Emit("restart",
            {{"message", std::string(kEventBacklogBytes - log->held_bytes() - 300, 'y')}});
  REQUIRE(log->dropped() == 0);
  const size_t before_exit = log->held_bytes();
  log->Emit("exit", {{"exit_code", 0}, {"message", std::string(400, 'z')}});
  CHECK(log->dropped() == 0);
  CHECK(log->held_bytes() > before_exit);
  CHECK(log->held_bytes() > kEventBacklogBytes);
  while (log->dropped() < 3) log->Emit("restart", big);
  log->Emit("exit", {{"exit_code", 1}});
  CHECK(log->held_bytes() > kEventBacklogBytes);
  // The reader reads again at the end: the log's thread gives it what is held.
  std::string all;
  while (log->held_bytes() > 0) {
    all += ReadAll(reader);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  all += ReadAll(reader);
  std::istringstream in(all);
  const auto lines = Lines(in);
  REQUIRE(lines.size() >= 2);
  CHECK(lines[lines.size() - 2]["event"] == "events_dropped");
  CHECK(lines[lines.size() - 2]["count"] == 3);
  CHECK(lines.back()["event"] == "exit");
  // A reader that takes nothing: Flush gives up after its idle limit, unblocked.
  log->Emit("restart", big);
  const auto start = std::chrono::steady_clock::now();
  while (log->held_bytes() < 200000) log->Emit("restart", big);  // past what the pipe takes
  log->Flush(std::chrono::milliseconds(50), std::chrono::seconds(5));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
  CHECK(log->held_bytes() > 0);
}

}  // namespace
}  // namespace ddprun::launcher
