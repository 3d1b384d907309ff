// Hosts ddprun's store for tests: `store_host HOST PORT [TOKEN] [NAME=VALUE...]`.
// Prints "port N" once listening, serves until stdin closes, then exits 0.
// NAME=VALUE sets a GuardLimits field, durations in milliseconds:
// handshake_ms, handshake_bytes, max_handshaking, evict_after_ms,
// max_handshaking_hard, per_host, auth_backoff_ms, auth_backoff_max_ms,
// auth_queue, said_every_ms (0 unless given: every close is said, for the
// tests that count them); or a ReplyLimits one: replies_max_total (bytes),
// replies_stalled_ms. A TOKEN of "-" means none.
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <string>

#include "rendezvous/store_server.hpp"

namespace {

using ddprun::rendezvous::StoreServerOptions;
using std::chrono::milliseconds;

bool SetLimit(StoreServerOptions* o, const std::string& name, long long v) {
  ddprun::rendezvous::GuardLimits* g = &o->guard;
  const auto ms = milliseconds(v);
  const auto n = static_cast<size_t>(v);
  const std::map<std::string, std::function<void()>> setters = {
      {"handshake_ms", [&] { g->handshake_timeout = ms; }},
      {"handshake_bytes", [&] { g->handshake_bytes = n; }},
      {"max_handshaking", [&] { g->max_handshaking = n; }},
      {"evict_after_ms", [&] { g->evict_after = ms; }},
      {"max_handshaking_hard", [&] { g->max_handshaking_hard = n; }},
      {"per_host", [&] { g->max_connections_per_host = n; }},
      {"auth_backoff_ms", [&] { g->auth_backoff = ms; }},
      {"auth_backoff_max_ms", [&] { g->auth_backoff_max = ms; }},
      {"auth_queue", [&] { g->max_auth_queue = n; }},
      {"said_every_ms", [&] { g->close_said_every = ms; }},
      {"replies_max_total", [&] { o->replies.max_total = n; }},
      {"replies_stalled_ms", [&] { o->replies.stalled_after = ms; }},
  };
  auto it = setters.find(name);
  if (it == setters.end()) return false;
  it->second();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: store_host HOST PORT [TOKEN] [NAME=VALUE...]\n");
    return 2;
  }
  ddprun::rendezvous::StoreServerOptions o;
  o.host = argv[1];
  o.port = std::stoi(argv[2]);
  if (argc > 3 && std::string(argv[3]) != "-") o.token = argv[3];
  o.guard.close_said_every = milliseconds(0);
  for (int i = 4; i < argc; ++i) {
    std::string arg = argv[i];
    size_t eq = arg.find('=');
    if (eq == std::string::npos ||
        !SetLimit(&o, arg.substr(0, eq), std::stoll(arg.substr(eq + 1)))) {
      std::fprintf(stderr, "store_host: unknown limit %s\n", arg.c_str());
      return 2;
    }
  }
  o.log = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  auto server = ddprun::rendezvous::StoreServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().message().c_str());
    return 1;
  }
  std::printf("port %d\n", (*server)->port());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "clear") (*server)->ClearWorkers();
    if (line == "connections") std::printf("connections %zu\n", (*server)->Connections());
    std::fflush(stdout);
  }
  return 0;
}
