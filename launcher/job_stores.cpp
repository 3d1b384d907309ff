#include "launcher/job_stores.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "base/parse.hpp"
#include "env/gloo_address.hpp"
#include "env/host.hpp"
#include "env/names.hpp"
#include "launcher/option_table.hpp"
#include "rendezvous/sockets.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::launcher {

rendezvous::StoreServerOptions StoreOptions(const std::string& host, int port,
                                            const std::string& token) {
  rendezvous::StoreServerOptions o;
  o.host = host;
  o.port = port;
  o.token = token;
  o.log = [](const std::string& m) { spdlog::warn("{}", m); };
  return o;
}

namespace {

constexpr int kDefaultC10dPort = 29400;
constexpr int kDefaultStaticPort = 29500;

std::string ConfSubject(const std::string& key) { return "--rdzv_conf " + key; }

// torchrun's spellings of a boolean rendezvous setting.
StatusOr<bool> ParseConfBool(const std::string& key, const std::string& v) {
  auto i = ParseChoice(ConfSubject(key), v, {"1", "true", "True", "0", "false", "False"});
  if (!i.ok()) return i.status();
  return *i < 3;
}

// Rounded up, so that a tiny timeout is 1 ms and never 0.
StatusOr<std::chrono::milliseconds> ConfSeconds(const std::string& key, const std::string& v) {
  auto seconds = ParseSeconds(ConfSubject(key), v, /*allow_zero=*/false, Spelling::kPython);
  if (!seconds.ok()) return seconds.status();
  return std::chrono::ceil<std::chrono::milliseconds>(*seconds);
}

// Keys torchrun reads that change nothing here: with `backend` ("" for any),
// checked as torchrun would read them, then said to have no effect and why.
struct IneffectiveKey {
  const char* key;
  const char* backend;
  const char* why;
};
constexpr IneffectiveKey kIneffective[] = {
    // torchrun's keys differ by backend: static reads only `timeout` (its
    // store's), c10d reads join_timeout and never `timeout`.
    {"timeout", "c10d",
     " with --rdzv_backend=c10d (as under torchrun): it is the static backend's key; c10d's "
     "join deadline is join_timeout"},
    {"last_call_timeout", "static",
     " with the static backend: its round closes when all --nnodes have joined"},
    {"close_timeout", "", ": ddprun's store writes never wait on a lock"},
    {"heartbeat_timeout", "", ": ddprun's store writes never wait on a lock"},
    {"use_libuv", "", ": ddprun's store writes never wait on a lock"},
};

// Every key ApplyConfKey reads (kIneffective's besides): any other is
// warned of as unknown (UnknownConfKey).
constexpr const char* kReadKeys[] = {"join_timeout",
                                     "last_call_timeout",
                                     "keep_alive_interval",
                                     "keep_alive_max_attempt",
                                     "read_timeout",
                                     "timeout",
                                     "is_host",
                                     "token",
                                     "store_type"};

Status ApplyConfKey(const std::string& key, const std::string& v, const std::string& backend,
                    rendezvous::RendezvousSettings& s, std::vector<std::string>* notices) {
  using Ms = std::chrono::milliseconds;
  for (const auto& k : kIneffective) {
    if (key != k.key || (*k.backend != '\0' && backend != k.backend)) continue;
    Status valid =
        key == "use_libuv" ? ParseConfBool(key, v).status() : ConfSeconds(key, v).status();
    if (!valid.ok()) return valid;
    notices->push_back("--rdzv_conf " + key + "=" + v + " has no effect" + k.why);
    return Status::Ok();
  }
  for (auto [name, field] : {std::pair<const char*, Ms*>{"join_timeout", &s.join_timeout},
                             {"timeout", &s.join_timeout},
                             {"last_call_timeout", &s.last_call_timeout},
                             {"keep_alive_interval", &s.keep_alive_interval},
                             {"read_timeout", &s.read_timeout}}) {
    if (key != name) continue;
    auto d = ConfSeconds(key, v);
    if (!d.ok()) return d.status();
    // Below a store's round trip on a loaded host every request would time
    // out, the agent's first one to its own store too.
    if (key == "read_timeout" && *d < Ms(100)) {
      return InvalidArgument("invalid --rdzv_conf read_timeout=" + v +
                             ": at least 0.1 seconds (how long an agent waits for each of the "
                             "store's replies; torchrun's default is 60)");
    }
    *field = *d;
    return Status::Ok();
  }
  if (key == "keep_alive_max_attempt") {
    auto n =
        ParseInteger(ConfSubject(key), v, 1, 1 << 20, "a whole number >= 1", Spelling::kPython);
    if (!n.ok()) return n.status();
    s.keep_alive_max_attempt = static_cast<int>(*n);
    return Status::Ok();
  }
  if (key == "token") {
    s.token = v;
    return Status::Ok();
  }
  if (key == "is_host") return ParseConfBool(key, v).status();  // used by OpenJobStores
  if (key == "store_type" && v != "tcp") {
    return Unimplemented("--rdzv_conf store_type=" + v + " is not supported yet: only tcp");
  }
  // An unknown key: ParseCommandLine warns of it (UnknownConfKey).
  return Status::Ok();
}

std::string NewAgentId(const std::string& host) {
  std::random_device rd;
  return host + "_" + std::to_string(getpid()) + "_" + std::to_string(rd() % 100000);
}

// c10d: host when is_host says so, or (not said) when the endpoint can be bound here.
StatusOr<bool> HostsC10d(const LaunchConfig& c, const std::string& host, int port,
                         JobStores& stores) {
  auto is_host = C10dIsHost(c);
  if (!is_host.ok()) return is_host.status();
  const std::optional<bool> forced = *is_host;
  if (forced && !*forced) return false;
  auto start = [&] {
    return rendezvous::StoreServer::Start(StoreOptions(host, port, stores.settings.token));
  };
  auto server = start();
  // Port 0 (--standalone): no other agent can host it, so this one's failure
  // (out of threads or memory, say) is the job's, not a sign to connect.
  if (!server.ok() && (forced || port == 0)) return server.status();
  // In use here, yet nothing listens: a socket that does not listen holds the
  // port (an outgoing connection the kernel gave it, one closing), or an agent
  // of this host is between its bind and its listen. Joining as a client
  // would wait read_timeout for a store that never comes (attack 85): the
  // bind is tried again meanwhile.
  const auto until = std::chrono::steady_clock::now() + stores.settings.connect_timeout;
  bool said = false;
  while (!server.ok() &&
         server.status().message().find("address already in use") != std::string::npos) {
    const auto probe = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    if (rendezvous::ConnectWithRetry(host, port, probe).ok()) return false;  // a store listens
    if (std::chrono::steady_clock::now() >= until) {
      return Unavailable("port " + std::to_string(port) +
                         " is held on this host by a socket that does not listen (an outgoing "
                         "connection given that port, or one closing: ss -tanp | grep :" +
                         std::to_string(port) +
                         "), so no agent can host the store there: give an --rdzv_endpoint "
                         "port outside the ephemeral range (" +
                         env::EphemeralPortRange() + ")");
    }
    if (!std::exchange(said, true)) {
      spdlog::warn(
          "--rdzv_endpoint {}: port {} is in use on this host but nothing listens there: "
          "trying to bind it again for up to {} s (read_timeout)",
          c.rdzv_endpoint, port,
          std::chrono::duration_cast<std::chrono::seconds>(stores.settings.connect_timeout)
              .count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server = start();
  }
  if (!server.ok()) return false;  // the address is not this machine's: another agent hosts it
  if (said)
    spdlog::info("--rdzv_endpoint {}: bound at last: this agent hosts the store", c.rdzv_endpoint);
  stores.rdzv_server = std::move(*server);
  return true;
}

// Names where the store's address came from, for a failure to serve it: the
// options, or the Slurm step (its port derived from the step's id: another
// job's step on the node may hold it; attack 84).
std::string StoreOrigin(const LaunchConfig& c, const std::string& options) {
  const bool derived =
      c.from_slurm.count("master_port") != 0 || c.from_slurm.count("rdzv_endpoint") != 0;
  if (!derived || !c.slurm) return options;
  return options + " (taken from Slurm step " + c.slurm->Id() +
         ": its port is derived from the step's id, and another job's step on this node may "
         "hold it; give every node the same --" +
         (c.rdzv_backend == "c10d" ? "rdzv_endpoint=HOST:PORT" : "master_port=PORT") + ")";
}

// Whether the store at the static endpoint is this job's and node rank 0 is
// claimed there (asked within a few seconds; a port held by something else
// says no).
bool HeldByThisJob(const JobStores& stores) {
  auto client =
      rendezvous::StoreClient::Connect(stores.rdzv_host, stores.rdzv_port, std::chrono::seconds(3),
                                       stores.settings.token, rendezvous::StoreRole::kAgent);
  if (!client.ok()) return false;
  // The holder claims its rank just after it binds: give it a moment.
  const std::string key = rendezvous::RendezvousKeys(stores.settings.run_id).Claim(0);
  for (int tries = 0; tries < 30; ++tries) {
    auto claimed = client->Check({key});
    if (!claimed.ok()) return false;
    if (*claimed) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// How other nodes (and the workers, as MASTER_ADDR) reach this one: under
// Slurm the node's name when it resolves (nodes can share a host name, and
// Slurm names them apart), else the fully qualified host name.
std::string OwnAddress(const LaunchConfig& c) {
  if (c.slurm && !c.slurm->node_name.empty() && env::Resolves(c.slurm->node_name)) {
    return c.slurm->node_name;
  }
  return env::Fqdn();
}

}  // namespace

StatusOr<rendezvous::RendezvousSettings> SettingsFromConfig(const LaunchConfig& c,
                                                            const env::Environ& environ,
                                                            std::vector<std::string>* notices) {
  rendezvous::RendezvousSettings s;
  s.run_id = c.rdzv_id;
  s.min_nodes = c.nnodes_min;
  s.max_nodes = c.nnodes_max;
  if (c.rdzv_backend == "static") s.join_timeout = std::chrono::seconds(900);
  s.exclusive_ranks = c.rdzv_backend == "static";
  s.max_restarts = c.max_restarts;
  s.token = env::Lookup(environ, env::kStoreToken).value_or("");
  for (const auto& [key, value] : c.rdzv_conf) {
    if (Status st = ApplyConfKey(key, value, c.rdzv_backend, s, notices); !st.ok()) return st;
  }
  s.connect_timeout = c.rdzv_backend == "static" ? s.join_timeout : s.read_timeout;
  return s;
}

std::optional<std::string> UnknownConfKey(const std::string& key, const std::string& value) {
  std::vector<const char*> known(std::begin(kReadKeys), std::end(kReadKeys));
  std::string read, ineffective;
  for (const char* k : kReadKeys) read += std::string(read.empty() ? "" : ", ") + k;
  for (const auto& k : kIneffective) {
    if (std::find_if(known.begin(), known.end(),
                     [&](const char* n) { return std::string_view(n) == k.key; }) != known.end()) {
      continue;  // read by one backend, no effect with the other
    }
    known.push_back(k.key);
    ineffective += std::string(ineffective.empty() ? "" : ", ") + k.key;
  }
  const char* closest = nullptr;
  size_t distance = 0;
  for (const char* k : known) {
    if (key == k) return std::nullopt;
    const size_t d = EditDistance(key, k);
    if (closest == nullptr || d < distance) closest = k, distance = d;
  }
  return "--rdzv_conf " + key + "=" + value + " is not a key ddprun knows, so nothing reads it" +
         (distance <= 3 ? std::string(": did you mean ") + closest + "?" : std::string()) +
         " (the keys: " + read + "; " + ineffective + " change nothing here)";
}

bool NodesMaySpanHosts(const LaunchConfig& c) {
  if (c.nnodes_max <= 1) return false;
  std::string host = c.master_addr;
  int port = 0;
  if (!c.rdzv_endpoint.empty()) (void)rendezvous::SplitHostPort(c.rdzv_endpoint, 0, &host, &port);
  return !env::OnlyLoopback(host);
}

Status C10dStoreAddress(const LaunchConfig& c, std::string* host, int* port) {
  if (Status s = rendezvous::SplitHostPort(c.rdzv_endpoint, kDefaultC10dPort, host, port);
      !s.ok()) {
    return InvalidArgument("invalid --rdzv_endpoint=" + c.rdzv_endpoint + ": " + s.message());
  }
  return Status::Ok();
}

StatusOr<std::optional<bool>> C10dIsHost(const LaunchConfig& c) {
  auto it = c.rdzv_conf.find("is_host");
  if (it == c.rdzv_conf.end()) return std::optional<bool>();
  auto b = ParseConfBool("is_host", it->second);
  if (!b.ok()) return b.status();
  return std::optional<bool>(*b);
}

Status StaticStoreAddress(const LaunchConfig& c, std::string* host, int* port) {
  *host = c.master_addr;
  *port = c.master_port.value_or(kDefaultStaticPort);
  // As torchrun: a static job's --rdzv_endpoint, when given, is where the store is.
  if (c.rdzv_endpoint.empty()) return Status::Ok();
  if (Status s = rendezvous::SplitHostPort(c.rdzv_endpoint, -1, host, port); !s.ok()) {
    return InvalidArgument("invalid --rdzv_endpoint=" + c.rdzv_endpoint + ": " + s.message());
  }
  if (*port != -1) return Status::Ok();
  // Without a port: --master_port's when given. torchrun refuses it ("Port is
  // absent in endpoint"); 29500 taken without a word would be a guess.
  if (!c.master_port) {
    return InvalidArgument("--rdzv_endpoint=" + c.rdzv_endpoint +
                           " has no port, and the static backend's store needs one: give "
                           "--rdzv_endpoint=HOST:PORT (or --master_port=PORT)");
  }
  *port = *c.master_port;
  return Status::Ok();
}

std::string StaticPortOption(const LaunchConfig& c) {
  std::string host;
  int port = -1;
  if (c.rdzv_endpoint.empty() ||
      !rendezvous::SplitHostPort(c.rdzv_endpoint, -1, &host, &port).ok() || port == -1) {
    return "--master_port";
  }
  return "--rdzv_endpoint";
}

StatusOr<JobStores> OpenJobStores(const LaunchConfig& c, const env::Environ& environ,
                                  std::vector<std::string>* notices) {
  JobStores stores;
  auto settings = SettingsFromConfig(c, environ, notices);
  if (!settings.ok()) return settings.status();
  stores.settings = *settings;
  bool hosting = false;
  if (c.rdzv_backend == "static") {
    if (c.rdzv_conf.count("is_host") != 0) {
      notices->push_back(
          "--rdzv_conf is_host has no effect with the static backend: node rank 0 "
          "hosts the store");
    }
    if (Status s = StaticStoreAddress(c, &stores.rdzv_host, &stores.rdzv_port); !s.ok()) return s;
    hosting = c.node_rank == 0;
    if (hosting) {
      auto server = rendezvous::StoreServer::Start(
          StoreOptions(stores.rdzv_host, stores.rdzv_port, stores.settings.token));
      if (server.ok()) {
        stores.rdzv_server = std::move(*server);
      } else if (!HeldByThisJob(stores)) {
        std::string given = "--master_addr/--master_port";
        if (!c.rdzv_endpoint.empty()) {
          given = "--rdzv_endpoint=" + c.rdzv_endpoint;
          if (StaticPortOption(c) == "--master_port") given += " (its port from --master_port)";
        }
        return server.status().Annotate(StoreOrigin(c, given));
      } else {
        // Another agent of this job already hosts the store as node rank 0:
        // join as a client, so that the rendezvous refuses the second claim
        // by name and fails the job at once, instead of one agent failing
        // here and the others waiting for it until the join timeout.
        hosting = false;
      }
    }
  } else {
    if (Status s = C10dStoreAddress(c, &stores.rdzv_host, &stores.rdzv_port); !s.ok()) return s;
    auto hosts = HostsC10d(c, stores.rdzv_host, stores.rdzv_port, stores);
    if (!hosts.ok()) {
      return hosts.status().Annotate(StoreOrigin(c, "--rdzv_endpoint " + c.rdzv_endpoint));
    }
    hosting = *hosts;
  }
  if (stores.rdzv_server) stores.rdzv_port = stores.rdzv_server->port();
  rendezvous::NodeInfo& self = stores.self;
  // Under Slurm the node's name: simulated nodes, and some clusters, share a host name.
  self.name = c.slurm && !c.slurm->node_name.empty() ? c.slurm->node_name : env::Hostname();
  self.agent_id = NewAgentId(self.name);
  self.addr = !c.local_addr.empty()                     ? c.local_addr
              : (c.rdzv_backend == "static" && hosting) ? c.master_addr
                                                        : OwnAddress(c);
  self.nproc = c.nproc_per_node;
  self.requested_rank = (c.rdzv_backend == "static" || c.node_rank_set) ? c.node_rank : -1;
  return stores;
}

}  // namespace ddprun::launcher
