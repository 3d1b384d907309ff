// Hosts ddprun's store for tests: `store_host HOST PORT [TOKEN]`. Prints
// "port N" once listening, serves until stdin closes, then exits 0.
#include <cstdio>
#include <iostream>
#include <string>

#include "rendezvous/store_server.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: store_host HOST PORT [TOKEN]\n");
    return 2;
  }
  ddprun::rendezvous::StoreServerOptions o;
  o.host = argv[1];
  o.port = std::stoi(argv[2]);
  if (argc > 3) o.token = argv[3];
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
    if (line == "clear") (*server)->Clear();
    if (line == "connections") std::printf("connections %zu\n", (*server)->Connections());
    std::fflush(stdout);
  }
  return 0;
}
