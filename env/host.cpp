#include "env/host.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <memory>
#include <system_error>

#include "env/worker_env.hpp"

namespace ddprun::env {

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string Fqdn() {
  // Python's socket.getfqdn(): gethostbyaddr(gethostname()), then the first of
  // the primary name and its aliases that contains a dot, else the primary name.
  std::string host = Hostname();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return host;
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
  const void* addr = nullptr;
  socklen_t len = 0;
  if (res->ai_family == AF_INET) {
    addr = &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    len = sizeof(in_addr);
  } else {
    addr = &reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr;
    len = sizeof(in6_addr);
  }
  hostent entry{};
  hostent* found = nullptr;
  char buf[8192];
  int err = 0;
  if (gethostbyaddr_r(addr, len, res->ai_family, &entry, buf, sizeof(buf), &found, &err) != 0 ||
      found == nullptr) {
    return host;
  }
  std::string primary = found->h_name;
  if (primary.find('.') != std::string::npos) return primary;
  for (char** alias = found->h_aliases; alias != nullptr && *alias != nullptr; ++alias) {
    if (std::string(*alias).find('.') != std::string::npos) return *alias;
  }
  return primary;
}

namespace {

bool IsDeviceIndex(const std::string& s, int physical) {
  if (s.empty() || s.size() > 4) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return std::stoi(s) < physical;
}

}  // namespace

int GpuCount(const std::optional<std::string>& cuda_visible_devices, const std::string& proc_root) {
  std::error_code ec;
  int physical = 0;
  for (std::filesystem::directory_iterator it(proc_root + "/driver/nvidia/gpus", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++physical;
  }
  if (!cuda_visible_devices) return physical;
  int visible = 0;
  for (const auto& entry : SplitList(*cuda_visible_devices)) {
    bool uuid = entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0;
    if (!(uuid && physical > 0) && !IsDeviceIndex(entry, physical)) break;
    ++visible;
  }
  return visible;
}

}  // namespace ddprun::env
