// What ddprun tells programs rather than people (docs/machine-reports.md,
// schemas in docs/schemas/): the agent's events as JSON lines
// (--event_log_handler json|console, DDPRUN_EVENT_LOG), incident.json at the
// end of a run that failed or was stopped, and `ddprun doctor --json`. Every
// document names its schema and version ("schema": "ddprun.incident/1"); a
// change that removes or retypes a field bumps the version.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "env/limits.hpp"
#include "rendezvous/job_record.hpp"
#include "supervisor/failure_report.hpp"
#include "supervisor/group_state.hpp"

namespace ddprun::launcher {

inline constexpr char kEventSchema[] = "ddprun.event/1";
inline constexpr char kIncidentSchema[] = "ddprun.incident/1";
inline constexpr char kDoctorSchema[] = "ddprun.doctor/1";

// "2026-12-01T02:33:20.123456Z".
std::string UtcTimestamp();

// How a run ended, for incident.json's "class" and the exit event.
enum class ExitClass {
  kSucceeded,
  kWorkerFailure,  // a worker failed (or died of a peer going away)
  kHang,           // a worker was declared hung
  kUsageError,     // the request cannot run as given (exit 2)
  kSignalled,      // ddprun was told to stop (SIGINT, SIGTERM, SIGHUP, ...)
  kPreempted,      // SIGTERM inside a Slurm job: preemption, requeue, time limit or scancel
  kRendezvous,     // the nodes did not come together
  kLauncherError,  // ddprun itself could not go on (no log directory, ...)
};
const char* ExitClassName(ExitClass c);

// The hang ddprun declared, when it did.
struct HangFacts {
  std::vector<int> hung;        // ranks silent past --hang_timeout
  std::vector<int> stragglers;  // ranks the flight recorders (or PyTorch's) name
  std::string verdict;          // PyTorch's verdict line, or ""
  std::string dump_dir;         // where the dumps are ("" when none was written)
};

struct IncidentFacts {
  std::string run_id, program, host, log_dir;
  int node_rank = -1;
  int attempt = 0;  // the restart count of the last attempt
  int max_restarts = 0;
  int exit_code = 0;
  ExitClass exit_class = ExitClass::kWorkerFailure;
  std::string message;  // what ddprun printed last
  int signal = 0;       // the signal ddprun received, if that ended the run
  std::optional<rendezvous::Cause> root_cause;
  // This node's failures of the last attempt, root cause first (with its error file read).
  std::vector<supervisor::FailureRecord> failures;
  std::vector<supervisor::WorkerRecord> workers;  // this node's last attempt, by local rank
  std::optional<HangFacts> hang;
  std::string cause, fix;  // the catalogue's explanation of the root cause
  std::optional<nlohmann::ordered_json> slurm;
};

// incident.json's document.
nlohmann::ordered_json IncidentJson(const IncidentFacts& f);

// `doc` indented, a newline after; bytes that are not UTF-8 (a path, an
// environment value) are written as U+FFFD, never an exception.
std::string JsonText(const nlohmann::ordered_json& doc);

// Writes `doc` (JsonText) to `path` through a temporary file and rename.
Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& doc);

// `ddprun doctor --json`.
nlohmann::ordered_json DoctorJson(const std::string& host, int nproc_per_node,
                                  int threads_per_worker,
                                  const std::vector<env::LimitCheck>& checks, bool failed);

// `ddprun doctor --json` given options it cannot take: the same schema, no
// checks, the refusal in `usage_error` (exit 2), so a script that parses
// stdout gets a document and the reason, not nothing.
nlohmann::ordered_json DoctorUsageErrorJson(const std::string& host, const std::string& message);

}  // namespace ddprun::launcher
