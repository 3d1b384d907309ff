// NCCL's RAS service (NCCL >= 2.24) as a second witness of a hang: every
// NCCL process of the job runs a RAS thread that listens for clients on
// NCCL_RAS_ADDR (default localhost:28028, shared by SO_REUSEPORT between the
// processes of a host). ddprun gives each job its own address
// (--hang_detect=torch), and at a hang asks one process for the job-wide view,
// as NCCL's `ncclras` client does:
//   -> CLIENT PROTOCOL 2\n       <- SERVER PROTOCOL <n>\n
//   -> TIMEOUT <s>\n             <- OK\n
//   -> SET FORMAT json\n         <- OK\n   (NCCL versions without it answer
//                                           otherwise: the text report then)
//   -> VERBOSE STATUS\n          <- the report, then the server closes.
// Thread-compatible; QueryNcclRas blocks for at most about `timeout`.
#pragma once

#include <chrono>
#include <string>

namespace ddprun::supervisor {

struct RasReport {
  std::string raw;    // the report as NCCL sent it ("" on error)
  bool json = false;  // raw is JSON (SET FORMAT json was accepted)
  std::string error;  // why there is no report, naming the address
};

// Asks the RAS service at `addr` ("host:port", "[v6]:port") for VERBOSE STATUS.
RasReport QueryNcclRas(const std::string& addr, std::chrono::milliseconds timeout);

// The report for the hang summary: from JSON, per communicator its size, the
// ranks that answered and their collective counts where they differ (the
// ranks behind named), async errors, and the missing ranks with host, pid and
// whether RAS found them unresponsive or dead; from text, its lines. Ends with
// a newline.
std::string SummarizeRas(const RasReport& report);

}  // namespace ddprun::supervisor
