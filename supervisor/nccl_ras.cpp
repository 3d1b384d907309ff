#include "supervisor/nccl_ras.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "base/unique_fd.hpp"

namespace ddprun::supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kClientProtocol = 2;  // NCCL's NCCL_RAS_CLIENT_PROTOCOL
constexpr size_t kTextLines = 40;

// A connection whose every read and write gives up at one deadline.
class RasConnection {
 public:
  RasConnection(UniqueFd fd, Clock::time_point deadline)
      : fd_(std::move(fd)), deadline_(deadline) {}

  bool Send(const std::string& line) {
    size_t done = 0;
    while (done < line.size()) {
      if (!Arm(SO_SNDTIMEO)) return false;
      const ssize_t n = write(fd_.get(), line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // One line without its newline; false on EOF, error or the deadline.
  bool ReadLine(std::string* line) {
    for (;;) {
      if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
        *line = buffered_.substr(0, nl);
        buffered_.erase(0, nl + 1);
        return true;
      }
      if (!Fill()) return false;
    }
  }

  // Everything until the server closes; false when the deadline came first.
  bool ReadAll(std::string* out) {
    while (Fill()) {
    }
    *out = std::move(buffered_);
    buffered_.clear();
    return eof_;
  }

 private:
  // Sets the socket's timeout to what is left before the deadline.
  bool Arm(int option) {
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - Clock::now()).count();
    if (left <= 0) return false;
    timeval tv{static_cast<time_t>(left / 1000000), static_cast<suseconds_t>(left % 1000000)};
    return setsockopt(fd_.get(), SOL_SOCKET, option, &tv, sizeof tv) == 0;
  }

  bool Fill() {
    char buf[4096];
    for (;;) {
      if (!Arm(SO_RCVTIMEO)) return false;
      const ssize_t n = read(fd_.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) eof_ = true;
      if (n <= 0) return false;
      buffered_.append(buf, static_cast<size_t>(n));
      return true;
    }
  }

  UniqueFd fd_;
  Clock::time_point deadline_;
  std::string buffered_;
  bool eof_ = false;
};

// "host:port" or "[v6]:port".
bool SplitAddr(const std::string& addr, std::string* host, std::string* port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size()) return false;
  *host = addr.substr(0, colon);
  *port = addr.substr(colon + 1);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return true;
}

// A blocking TCP connection to addr, or the reason there is none.
UniqueFd Connect(const std::string& addr, Clock::time_point deadline, std::string* error) {
  std::string host, port;
  if (!SplitAddr(addr, &host, &port)) {
    *error = "NCCL_RAS_ADDR " + addr + " is not host:port";
    return UniqueFd();
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    *error = "resolve " + addr + ": " + gai_strerror(rc);
    return UniqueFd();
  }
  std::string why = "no address";
  UniqueFd fd;
  for (addrinfo* ai = found; ai != nullptr && !fd.valid(); ai = ai->ai_next) {
    UniqueFd s(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) continue;
    const auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    timeval tv{static_cast<time_t>(std::max<long>(left, 1) / 1000000),
               static_cast<suseconds_t>(std::max<long>(left, 1) % 1000000)};
    setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // bounds connect() too
    if (connect(s.get(), ai->ai_addr, ai->ai_addrlen) == 0) {
      fd = std::move(s);
    } else {
      why = std::strerror(errno);
    }
  }
  freeaddrinfo(found);
  if (!fd.valid()) {
    *error = "connect " + addr + ": " + why +
             " (no NCCL process listens: not an NCCL job, NCCL older than 2.24, or "
             "NCCL_RAS_ENABLE=0)";
  }
  return fd;
}

std::string Rank(const json& r) {
  return r.contains("rank") ? "rank " + r["rank"].dump() : "rank ?";
}

std::string Where(const json& r) {
  std::string out;
  if (r.contains("host")) out += "host " + r["host"].get<std::string>();
  if (r.contains("pid")) out += (out.empty() ? "" : ", ") + ("pid " + r["pid"].dump());
  return out.empty() ? "" : " (" + out + ")";
}

// The collectives whose counts differ between the ranks that answered, each
// with the ranks behind the most advanced one.
std::string CountLines(const json& ranks) {
  std::map<std::string, std::vector<std::pair<std::string, uint64_t>>> by_op;
  for (const json& r : ranks) {
    if (!r.contains("collective_counts") || !r["collective_counts"].is_object()) continue;
    for (const auto& [op, count] : r["collective_counts"].items()) {
      if (count.is_number_unsigned() || count.is_number_integer()) {
        by_op[op].emplace_back(Rank(r), count.get<uint64_t>());
      }
    }
  }
  std::string out, alike;
  for (const auto& [op, counts] : by_op) {
    uint64_t most = 0, least = UINT64_MAX;
    for (const auto& c : counts) most = std::max(most, c.second), least = std::min(least, c.second);
    if (most == least) {
      if (most > 0) alike += (alike.empty() ? "" : ", ") + op + " " + std::to_string(most);
      continue;
    }
    std::string behind;
    for (const auto& [rank, count] : counts) {
      if (count < most)
        behind += (behind.empty() ? "" : ", ") + rank + " at " + std::to_string(count);
    }
    out += "    " + op + ": " + std::to_string(most) +
           " on the most advanced rank; behind: " + behind + "\n";
  }
  if (!alike.empty()) out += "    the same on every rank that answered: " + alike + "\n";
  return out;
}

std::string CommunicatorLines(const json& comm) {
  const json ranks = comm.value("ranks", json::array());
  const json missing = comm.value("missing_ranks", json::array());
  std::string out = "  communicator " + comm.value("hash", std::string("?")) + " (size " +
                    comm.value("size", json(0)).dump() + "): " + std::to_string(ranks.size()) +
                    " ranks answered, " + std::to_string(missing.size()) + " missing\n";
  out += CountLines(ranks);
  for (const json& r : ranks) {
    const json status = r.value("status", json::object());
    if (status.value("async_error", 0) != 0) {
      out +=
          "    " + Rank(r) + Where(r) + ": NCCL async error " + status["async_error"].dump() + "\n";
    }
    if (status.value("abort_flag", false)) out += "    " + Rank(r) + Where(r) + ": aborted\n";
  }
  for (const json& r : missing) {
    const json status = r.value("status", json::object());
    std::string state;
    if (status.value("unresponsive", false)) state += "unresponsive";
    if (status.value("considered_dead", false))
      state += (state.empty() ? "" : ", ") + std::string("considered dead");
    out += "    missing " + Rank(r) + Where(r) + (state.empty() ? "" : ": " + state) + "\n";
  }
  return out;
}

}  // namespace

namespace {

// One client session; `ask_json` sends SET FORMAT json first. `*dropped_at_format`
// says the server closed the connection at that request (an NCCL without it).
RasReport Session(const std::string& addr, bool ask_json, bool* dropped_at_format,
                  Clock::time_point deadline, std::chrono::milliseconds timeout) {
  RasReport report;
  UniqueFd fd = Connect(addr, deadline, &report.error);
  if (!fd.valid()) return report;
  RasConnection c(std::move(fd), deadline);
  std::string line;
  if (!c.Send("CLIENT PROTOCOL " + std::to_string(kClientProtocol) + "\n") || !c.ReadLine(&line) ||
      line.rfind("SERVER PROTOCOL ", 0) != 0) {
    report.error = "RAS at " + addr + " did not answer the handshake" +
                   (line.empty() ? "" : " (it said: " + line + ")");
    return report;
  }
  // The job-wide collection waits this long for each other process.
  const long seconds = std::max<long>(1, timeout.count() / 2000);
  if (!c.Send("TIMEOUT " + std::to_string(seconds) + "\n") || !c.ReadLine(&line)) {
    report.error = "RAS at " + addr + ": no answer to TIMEOUT";
    return report;
  }
  if (ask_json) {
    if (!c.Send("SET FORMAT json\n") || !c.ReadLine(&line)) {
      *dropped_at_format = true;
      report.error = "RAS at " + addr + ": no answer to SET FORMAT json";
      return report;
    }
    report.json = line == "OK";
  }
  if (!c.Send("VERBOSE STATUS\n")) {
    report.error = "RAS at " + addr + ": could not ask for the status";
    return report;
  }
  if (!c.ReadAll(&report.raw)) {
    report.error =
        "RAS at " + addr + ": no complete report within " + std::to_string(timeout.count()) + " ms";
  }
  return report;
}

}  // namespace

RasReport QueryNcclRas(const std::string& addr, std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  bool dropped = false;
  RasReport report = Session(addr, /*ask_json=*/true, &dropped, deadline, timeout);
  // An NCCL without SET FORMAT that drops the client: once more, in text.
  if (dropped) {
    report = Session(addr, /*ask_json=*/false, &dropped, deadline, timeout);
  }
  return report;
}

std::string SummarizeRas(const RasReport& report) {
  std::string out;
  if (!report.error.empty()) out += "  " + report.error + "\n";
  if (report.raw.empty()) return out.empty() ? "  (empty report)\n" : out;
  if (report.json) {
    const json doc = json::parse(report.raw, nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("communicators") && doc["communicators"].is_array()) {
      out += "  NCCL " + doc.value("nccl_version", std::string("?")) + ", " +
             std::to_string(doc["communicators"].size()) + " communicators\n";
      for (const json& comm : doc["communicators"]) {
        if (comm.is_object()) out += CommunicatorLines(comm);
      }
      return out;
    }
    out += "  (not the JSON expected: the report as sent)\n";
  }
  std::stringstream in(report.raw);
  size_t lines = 0;
  for (std::string line; std::getline(in, line) && lines < kTextLines; ++lines) {
    out += "  " + line + "\n";
  }
  return out;
}

}  // namespace ddprun::supervisor
