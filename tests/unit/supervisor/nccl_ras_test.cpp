#include "supervisor/nccl_ras.hpp"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.hpp"

namespace ddprun::supervisor {
namespace {

using std::chrono::milliseconds;

bool Has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// A stand-in for NCCL's RAS thread on 127.0.0.1: accepts `sessions`
// clients, reads their command lines, answers each with `answer(line)`
// ("" for no answer; "CLOSE" closes the connection), and after VERBOSE STATUS
// sends `report` and closes, as NCCL does. Records every line it got.
class FakeRas {
 public:
  FakeRas(std::function<std::string(const std::string&)> answer, std::string report,
          int sessions = 1)
      : answer_(std::move(answer)), report_(std::move(report)) {
    listener_ = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(listen(listener_.get(), 4) == 0);
    socklen_t len = sizeof a;
    getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, sessions] {
      for (int i = 0; i < sessions; ++i) Serve();
    });
  }
  ~FakeRas() { Wait(); }
  void Wait() {
    if (thread_.joinable()) thread_.join();
  }
  FakeRas(const FakeRas&) = delete;
  FakeRas& operator=(const FakeRas&) = delete;

  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::vector<std::string>& got() {  // after the sessions ended
    Wait();
    return got_;
  }

 private:
  void Serve() {
    UniqueFd c(accept(listener_.get(), nullptr, nullptr));
    if (!c.valid()) return;
    std::string buffered;
    char buf[256];
    for (;;) {
      const size_t nl = buffered.find('\n');
      if (nl == std::string::npos) {
        const ssize_t n = read(c.get(), buf, sizeof buf);
        if (n <= 0) return;
        buffered.append(buf, static_cast<size_t>(n));
        continue;
      }
      const std::string line = buffered.substr(0, nl);
      buffered.erase(0, nl + 1);
      got_.push_back(line);
      if (line == "VERBOSE STATUS") {
        Write(c.get(), report_);
        return;
      }
      const std::string reply = answer_(line);
      if (reply == "CLOSE") return;
      if (!reply.empty()) Write(c.get(), reply);
    }
  }

  static void Write(int fd, const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = write(fd, s.data() + done, s.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

  std::function<std::string(const std::string&)> answer_;
  std::string report_;
  UniqueFd listener_;
  int port_ = 0;
  std::thread thread_;
  std::vector<std::string> got_;
};

// NCCL 2.28's answers: protocol 2, OK to TIMEOUT and SET FORMAT.
std::string Nccl228(const std::string& line) {
  if (line.rfind("CLIENT PROTOCOL ", 0) == 0) return "SERVER PROTOCOL 2\n";
  return "OK\n";
}

// The shape NCCL's RAS writes (client_support.cc, rasDumpCommsToJSON): rank 1
// is one all-reduce behind, rank 2 never answered.
constexpr char kJson[] = R"({
  "nccl_version": "2.28.9",
  "communicators_count": 1,
  "communicators": [
    {
      "hash": "0xabc", "secondary_hash": "0x1:0x2", "size": 3, "ranks_count": 2,
      "missing_ranks_count": 1,
      "ranks": [
        {"rank": 0, "host": "10.0.0.1", "pid": 100, "cuda_dev": 0, "nvml_dev": 0,
         "status": {"init_state": 0, "async_error": 0, "finalize_called": false,
                    "destroy_flag": false, "abort_flag": false},
         "collective_counts": {"Broadcast": 1, "AllReduce": 21}},
        {"rank": 1, "host": "10.0.0.1", "pid": 101, "cuda_dev": 1, "nvml_dev": 1,
         "status": {"init_state": 0, "async_error": 6, "finalize_called": false,
                    "destroy_flag": false, "abort_flag": true},
         "collective_counts": {"Broadcast": 1, "AllReduce": 20}}
      ],
      "missing_ranks": [
        {"rank": 2, "host": "10.0.0.2", "pid": 200, "cuda_dev": 0, "nvml_dev": 0,
         "status": {"unresponsive": true, "considered_dead": false}}
      ]
    }
  ],
  "ras": {"collection_time_sec": 0.012, "timeouts_count": 0}
}
)";

TEST_CASE("QueryNcclRas speaks ncclras's protocol and reads the JSON report") {
  FakeRas ras(Nccl228, kJson);
  const RasReport r = QueryNcclRas(ras.addr(), milliseconds(4000));
  CHECK(r.error.empty());
  CHECK(r.json);
  CHECK(r.raw == kJson);
  REQUIRE(ras.got().size() == 4);
  CHECK(ras.got()[0] == "CLIENT PROTOCOL 2");
  CHECK(ras.got()[1] == "TIMEOUT 2");
  CHECK(ras.got()[2] == "SET FORMAT json");
  CHECK(ras.got()[3] == "VERBOSE STATUS");
  const std::string s = SummarizeRas(r);
  CHECK(Has(s, "NCCL 2.28.9, 1 communicators"));
  CHECK(Has(s, "communicator 0xabc (size 3): 2 ranks answered, 1 missing"));
  CHECK(Has(s, "AllReduce: 21 on the most advanced rank; behind: rank 1 at 20"));
  CHECK(Has(s, "the same on every rank that answered: Broadcast 1"));
  CHECK(Has(s, "rank 1 (host 10.0.0.1, pid 101): NCCL async error 6"));
  CHECK(Has(s, "rank 1 (host 10.0.0.1, pid 101): aborted"));
  CHECK(Has(s, "missing rank 2 (host 10.0.0.2, pid 200): unresponsive"));
  CHECK_FALSE(Has(s, "considered dead"));
}

TEST_CASE("QueryNcclRas falls back to text when NCCL drops a client that asks for JSON") {
  int sessions = 0;
  FakeRas ras(
      [&](const std::string& line) -> std::string {
        if (line == "SET FORMAT json") return "CLOSE";
        if (line.rfind("CLIENT PROTOCOL", 0) == 0) ++sessions;
        return Nccl228(line);
      },
      "Communicators... (0.00s)\n=============\nGroup  Comms  Nodes  Ranks\n    1      1      1    "
      "  2\n",
      2);
  const RasReport r = QueryNcclRas(ras.addr(), milliseconds(4000));
  CHECK(r.error.empty());
  CHECK_FALSE(r.json);
  ras.Wait();
  CHECK(sessions == 2);
  const std::string s = SummarizeRas(r);
  CHECK(Has(s, "  Communicators... (0.00s)\n"));
  CHECK(Has(s, "  Group  Comms  Nodes  Ranks\n"));
}

TEST_CASE("QueryNcclRas: an answer to SET FORMAT other than OK means the text report") {
  FakeRas ras(
      [](const std::string& line) -> std::string {
        return line == "SET FORMAT json" ? "ERROR: Unknown command\n" : Nccl228(line);
      },
      "Job summary\n");
  const RasReport r = QueryNcclRas(ras.addr(), milliseconds(4000));
  CHECK(r.error.empty());
  CHECK_FALSE(r.json);
  CHECK(SummarizeRas(r) == "  Job summary\n");
}

TEST_CASE("QueryNcclRas says why there is no report, within its timeout") {
  SUBCASE("nothing listens") {
    UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
    const std::string addr = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));  // bound, no listen
    const RasReport r = QueryNcclRas(addr, milliseconds(2000));
    CHECK(r.raw.empty());
    CHECK(Has(r.error, "connect " + addr));
    CHECK(Has(r.error, "NCCL_RAS_ENABLE=0"));
    CHECK(Has(SummarizeRas(r), r.error));
  }
  SUBCASE("a server that never answers") {
    FakeRas ras([](const std::string&) { return std::string(); }, "");
    const auto start = std::chrono::steady_clock::now();
    const RasReport r = QueryNcclRas(ras.addr(), milliseconds(300));
    CHECK(std::chrono::steady_clock::now() - start < milliseconds(3000));
    CHECK(Has(r.error, "did not answer the handshake"));
  }
  SUBCASE("not host:port") {
    CHECK(Has(QueryNcclRas("localhost", milliseconds(100)).error, "is not host:port"));
  }
}

TEST_CASE("SummarizeRas shows JSON it cannot read as text, never guesses") {
  RasReport r;
  r.json = true;
  r.raw = "{\"something\": 1}\n";
  const std::string s = SummarizeRas(r);
  CHECK(Has(s, "not the JSON expected"));
  CHECK(Has(s, "  {\"something\": 1}\n"));
}

}  // namespace
}  // namespace ddprun::supervisor
