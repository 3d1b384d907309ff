// Drives ddprun's StoreClient from a script on stdin, for tests against
// PyTorch's server and ours: `store_cli HOST PORT [TOKEN [agent]]`, one
// command per line, one result line each ("ok ..." or "error ...").
//   set K V | get K | add K N | cas K EXPECTED DESIRED | check K... |
//   wait MS K... | numkeys | delete K | append K V | multiget K... |
//   multiset K V [K V...] | list | qpush Q V | qpop Q | qlen Q | clearworkers
// A single "-" stands for the empty string (a TOKEN of "-": none). "agent"
// connects as an agent (StoreRole::kAgent): the agents' key space.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "rendezvous/store_client.hpp"

using ddprun::Status;
using ddprun::StatusOr;
using ddprun::rendezvous::StoreClient;

namespace {

std::string Arg(const std::string& s) { return s == "-" ? "" : s; }

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + (s.empty() ? "-" : s);
  return out;
}

template <typename T>
std::string Show(const StatusOr<T>& r) {
  if (!r.ok()) return "error " + r.status().message();
  std::ostringstream o;
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    o << "ok " << Join(*r);
  } else if constexpr (std::is_same_v<T, std::string>) {
    o << "ok " << (r->empty() ? "-" : *r);
  } else {
    o << "ok " << *r;
  }
  return o.str();
}

std::string Show(const Status& s) { return s.ok() ? "ok" : "error " + s.message(); }

std::string Execute(StoreClient& c, const std::vector<std::string>& w) {
  const std::string& cmd = w[0];
  std::vector<std::string> rest;
  for (size_t i = 1; i < w.size(); ++i) rest.push_back(Arg(w[i]));
  if (cmd == "set") return Show(c.Set(rest.at(0), rest.at(1)));
  if (cmd == "get") return Show(c.Get(rest.at(0)));
  if (cmd == "add") return Show(c.Add(rest.at(0), std::stoll(rest.at(1))));
  if (cmd == "cas") return Show(c.CompareSet(rest.at(0), rest.at(1), rest.at(2)));
  if (cmd == "check") return Show(c.Check(rest));
  if (cmd == "wait") {
    auto ms = StoreClient::Duration(std::stoll(rest.at(0)));
    return Show(c.Wait({rest.begin() + 1, rest.end()}, ms));
  }
  if (cmd == "numkeys") return Show(c.NumKeys());
  if (cmd == "delete") return Show(c.DeleteKey(rest.at(0)));
  if (cmd == "append") return Show(c.Append(rest.at(0), rest.at(1)));
  if (cmd == "multiget") return Show(c.MultiGet(rest));
  if (cmd == "multiset") {
    std::vector<std::string> keys, values;
    for (size_t i = 0; i + 1 < rest.size(); i += 2)
      keys.push_back(rest[i]), values.push_back(rest[i + 1]);
    return Show(c.MultiSet(keys, values));
  }
  if (cmd == "list") return Show(c.ListKeys());
  if (cmd == "qpush") return Show(c.QueuePush(rest.at(0), rest.at(1)));
  if (cmd == "qpop") return Show(c.QueuePop(rest.at(0)));
  if (cmd == "qlen") return Show(c.QueueLen(rest.at(0)));
  if (cmd == "clearworkers") return Show(c.ClearWorkers());
  return "error unknown command " + cmd;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: store_cli HOST PORT [TOKEN [agent]]\n");
    return 2;
  }
  const std::string token = argc > 3 ? Arg(argv[3]) : "";
  const auto role = argc > 4 && std::string(argv[4]) == "agent"
                        ? ddprun::rendezvous::StoreRole::kAgent
                        : ddprun::rendezvous::StoreRole::kWorker;
  auto client =
      StoreClient::Connect(argv[1], std::stoi(argv[2]), std::chrono::seconds(30), token, role);
  if (!client.ok()) {
    std::printf("error %s\n", client.status().message().c_str());
    return 1;
  }
  client->set_timeout(std::chrono::seconds(30));  // PyTorch's server can stall seconds on accept
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.empty()) continue;
    std::printf("%s\n", Execute(*client, words).c_str());
    std::fflush(stdout);
  }
  return 0;
}
