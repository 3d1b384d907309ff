// The values of single options, read as torchrun reads them (launcher/option_values.hpp).
#include "launcher/option_values.hpp"

#include <cctype>
#include <csignal>
#include <random>

#include "base/parse.hpp"
#include "env/names.hpp"
#include "env/worker_env.hpp"
#include "launcher/raw_options.hpp"
#include "rendezvous/sockets.hpp"
#include "supervisor/exit_status.hpp"

namespace ddprun::launcher {
namespace {

// ": " and what the list's reading found (a GPU listed twice, say), when anything.
std::string WhyNone(const env::VisibleGpus& gpus) {
  std::string why;
  for (const auto& w : gpus.warnings) why += (why.empty() ? ": " : "; ") + w;
  return why;
}

}  // namespace

StatusOr<bool> ParseBool(const std::string& option, const std::string& v) {
  std::string l;
  for (char c : v) l.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off" || l.empty()) return false;
  // torchrun reads its PET_ switches as bool(int(v)): " 1", "01", "+1", "2", "-1" are on.
  constexpr long long kHuge = 1LL << 62;
  if (auto n = ParseInteger(option, v, -kHuge, kHuge, "", Spelling::kPython); n.ok()) {
    return *n != 0;
  }
  return Bad(option, v,
             "1 or 0 (true, yes or on; false, no or off; any whole number: not 0 is true)");
}

// `gpus`: the GPUs the workers will see (env/visible_gpus.hpp).
StatusOr<int> ParseNproc(const std::string& v, const HostCounts& host,
                         const env::VisibleGpus& gpus) {
  const int visible = static_cast<int>(gpus.gpus.size());
  if (v == "cpu") return host.cpus;
  if (v == "gpu") {
    if (visible == 0) {
      const std::string why =
          gpus.checked ? env::VisibleSourceText(gpus) + " leaves none" + WhyNone(gpus)
                       : "no NVML: " + (host.gpus.note.empty() ? "unknown" : host.gpus.note);
      return Bad("nproc_per_node", v,
                 "this machine has no visible CUDA device (" + why +
                     "; check CUDA_VISIBLE_DEVICES and the driver); give a number or cpu");
    }
    return visible;
  }
  if (v == "auto") return visible > 0 ? visible : host.cpus;
  if (v == "xpu") {  // torchrun's, for Intel GPUs
    return Unimplemented(
        "--nproc_per_node=xpu is not supported yet: ddprun counts CUDA GPUs "
        "and CPUs; give the number of XPUs");
  }
  auto n = ParseInt("nproc_per_node", v, 1, 1 << 16, "a number from 1 to 65536, cpu, gpu or auto");
  if (!n.ok()) return n.status();
  return static_cast<int>(*n);
}

// `nproc`: the workers per node, so that a pair names a local rank that exists.
StatusOr<StreamSelection> ParseStreams(const std::string& option, const std::string& v, int nproc) {
  const std::string accepted =
      "0, 1, 2 or 3, or LOCAL_RANK:VALUE pairs such as 0:1,1:2 with "
      "local ranks from 0 to " +
      std::to_string(nproc - 1);
  StreamSelection sel;
  if (v.find(':') == std::string::npos) {
    auto n = ParseInt(option, v, 0, 3, accepted);
    if (!n.ok()) return n.status();
    sel.all = static_cast<int>(*n);
    return sel;
  }
  for (const auto& pair : env::SplitList(v)) {
    auto kv = env::SplitList(pair, ':');
    if (kv.size() != 2) return Bad(option, v, accepted);
    auto r = ParseInt(option, kv[0], 0, nproc - 1, accepted);
    auto s = ParseInt(option, kv[1], 0, 3, accepted);
    if (!r.ok() || !s.ok()) return Bad(option, v, accepted);
    sel.by_rank[static_cast<int>(*r)] = static_cast<int>(*s);
  }
  return sel;
}

// Comma list where ",," stands for a literal comma. An empty item (a
// trailing comma, an empty value) is kept, as torchrun keeps it: it matches
// every line.
std::vector<std::string> ParseFilters(const std::string& v) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == ',' && i + 1 < v.size() && v[i + 1] == ',') {
      cur.push_back(',');
      ++i;
    } else if (v[i] == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(v[i]);
    }
  }
  out.push_back(cur);
  return out;
}

// As torchrun reads it (keys and values trimmed), and with one pair of quotes
// around the whole value dropped: "--rdzv-conf='join_timeout=5,timeout=5'"
// passed without a shell (as PyTorch's own launcher tests do) means the pairs.
StatusOr<std::map<std::string, std::string>> ParseRdzvConf(const std::string& given,
                                                           std::vector<std::string>* repeated) {
  std::string v = Trimmed(given);
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
    v = Trimmed(v.substr(1, v.size() - 2));
  }
  std::map<std::string, std::string> conf;
  if (v.empty()) return conf;
  for (const auto& item : env::SplitList(v)) {
    auto eq = item.find('=');
    const std::string key = Trimmed(item.substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : Trimmed(item.substr(eq + 1));
    if (key.empty() || value.empty()) {
      return Bad("rdzv_conf", given,
                 "KEY=VALUE pairs separated by commas; \"" + item + "\" has no KEY=VALUE form");
    }
    auto [it, added] = conf.emplace(key, value);
    if (!added && it->second != value && repeated != nullptr) {
      repeated->push_back("--rdzv_conf gives " + key + " twice: its last value (" + value +
                          ") replaces the first (" + it->second + "), as under torchrun");
    }
    it->second = value;
  }
  return conf;
}

Status ParseSignals(const std::string& v, LaunchConfig& c) {
  c.handled_signals.clear();
  for (const auto& item : env::SplitList(v)) {
    const std::string name = Trimmed(item);  // "SIGTERM, SIGINT", as torchrun strips them
    int sig = supervisor::SignalNumber(name);
    if (sig == 0 || sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
      return Bad("signals_to_handle", v,
                 "a comma list of catchable signal names such as SIGTERM,SIGINT,SIGUSR1 (\"" +
                     name + "\" is not one)");
    }
    c.handled_signals.insert(sig);
  }
  if (c.handled_signals.empty()) {
    // None handled, SIGTERM would end ddprun at once, its workers killed by the guardian
    // without their grace (attack 99: accepted without a word).
    return Bad("signals_to_handle", v,
               "at least one catchable signal name, such as the default "
               "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  }
  c.signals_to_handle = v;
  return Status::Ok();
}

// The syntax of --gpus; env::ResolveVisibleGpus checks it against the host.
Status ParseGpus(const std::string& v) {
  auto items = env::SplitList(v);
  if (items.empty()) return Bad("gpus", v, "a comma list of device indices or UUIDs, e.g. 0,6,7");
  for (const auto& item : items) {
    bool uuid = item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0;
    if (!uuid && !ParseInt("gpus", item, 0, 1 << 16, "").ok()) {
      return Bad(
          "gpus", v,
          "a comma list of device indices or UUIDs, e.g. 0,6,7 (\"" + item + "\" is neither)");
    }
  }
  return Status::Ok();
}

// HOST, HOST:PORT, [IPV6]:PORT or a bare IPv6 address, as the agent will read it.
Status CheckEndpoint(const std::string& v) {
  std::string host;
  int port = 0;
  if (Status s = rendezvous::SplitHostPort(v, 0, &host, &port); !s.ok()) {
    return Bad("rdzv_endpoint", v, s.message() + " (HOST[:PORT], or [IPV6]:PORT)");
  }
  return Status::Ok();
}

std::string NewRunId() {
  std::random_device rd;
  std::mt19937_64 gen(rd());
  const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) id.push_back('-');
    id.push_back(hex[gen() % 16]);
  }
  id[14] = '4';                // version 4
  id[19] = "89ab"[gen() % 4];  // RFC 4122 variant
  return id;
}

}  // namespace ddprun::launcher
