#include "env/port_holder.hpp"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

namespace ddprun::env {

namespace {

constexpr char kListen[] = "0A";  // TCP_LISTEN in /proc/net/tcp's st column

// The inodes of sockets listening on `port` in one /proc/net/tcp* table:
// "sl local_address rem_address st ... uid timeout inode", addresses as HEX:PORT.
void ListeningInodes(const std::string& table, int port, std::set<std::string>& inodes) {
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
    if (!(fields >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >>
          inode)) {
      continue;
    }
    const auto colon = local.rfind(':');
    if (st != kListen || colon == std::string::npos) continue;
    if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) inodes.insert(inode);
  }
}

std::string Command(const std::filesystem::path& process) {
  std::ifstream in(process / "comm");
  std::string comm;
  std::getline(in, comm);
  return comm.empty() ? "?" : comm;
}

}  // namespace

std::string PortHolder(int port, const std::string& proc_root) {
  std::set<std::string> inodes;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    ListeningInodes(proc_root + table, port, inodes);
  }
  if (inodes.empty()) return "";
  std::error_code ec;
  for (const auto& process : std::filesystem::directory_iterator(proc_root, ec)) {
    const std::string pid = process.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    for (const auto& fd : std::filesystem::directory_iterator(process.path() / "fd", ec)) {
      const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
      // "socket:[INODE]"
      if (target.size() > 9 && inodes.count(target.substr(8, target.size() - 9)) > 0) {
        return Command(process.path()) + " (pid " + pid + ")";
      }
    }
    ec.clear();
  }
  return "";
}

}  // namespace ddprun::env
