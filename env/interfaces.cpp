#include "env/interfaces.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <memory>

#include "env/names.hpp"

namespace ddprun::env {

namespace {

// Split at commas as std::getline does: a trailing empty piece is dropped.
std::vector<std::string> Pieces(const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    out.push_back(value.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

const NetInterface* Named(const std::vector<NetInterface>& interfaces, const std::string& name) {
  for (const auto& i : interfaces) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

// The interface that has `address`, for a value that gives an address where a
// name is wanted; "" when none has it.
std::string OwnerOf(const std::vector<NetInterface>& interfaces, const std::string& address) {
  for (const auto& i : interfaces) {
    for (const auto& a : i.addresses) {
      if (a.text == address || (address.back() == '.' && a.text.rfind(address, 0) == 0)) {
        return i.name;
      }
    }
  }
  return "";
}

bool LooksLikeAddress(const std::string& s) {
  return !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) != 0) &&
         s.find_first_not_of("0123456789.") == std::string::npos;
}

// NCCL's usable addresses: IPv4 and IPv6 but ::1, of the family asked for.
bool NcclUsable(const NetInterface& i, int family) {
  return std::any_of(i.addresses.begin(), i.addresses.end(), [&](const NetAddress& a) {
    return (family == 0 || a.family == family) && a.text != "::1";
  });
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// NCCL's list syntax, as its findInterfaces and IB device filter read it:
// [^][=]NAME[:PORT],... ; '^' excludes the names, '=' makes them exact, else
// they are prefixes; an empty list matches everything.
struct NcclList {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> prefixes;

  bool Selects(const std::string& name) const {
    bool listed = prefixes.empty();
    for (const auto& p : prefixes) listed = listed || (exact ? name == p : name.rfind(p, 0) == 0);
    return listed != exclude;  // NCCL: match XOR exclude
  }
  // "starts with eth, ib" / "is named eth0"
  std::string Wanted() const {
    return std::string(exact ? "is named " : "starts with ") + Joined(prefixes);
  }
};

NcclList ParseNcclList(std::string value) {
  NcclList l;
  l.exclude = !value.empty() && value[0] == '^';
  if (l.exclude) value.erase(0, 1);
  l.exact = !value.empty() && value[0] == '=';
  if (l.exact) value.erase(0, 1);
  for (auto& p : Pieces(value)) l.prefixes.push_back(p.substr(0, p.find(':')));  // NAME:PORT
  return l;
}

}  // namespace

std::vector<NetInterface> ListInterfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, freeifaddrs);
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const NetInterface& i) { return i.name == a->ifa_name; });
    if (it == out.end()) it = out.insert(out.end(), NetInterface{a->ifa_name, a->ifa_flags, {}});
    if (a->ifa_addr == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const void* addr =
        family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr);
    char text[INET6_ADDRSTRLEN] = {};
    if (inet_ntop(family, addr, text, sizeof(text)) != nullptr) {
      it->addresses.push_back({family, text});
    }
  }
  return out;
}

std::string DescribeInterfaces(const std::vector<NetInterface>& interfaces) {
  std::string out;
  for (const auto& i : interfaces) {
    if (i.addresses.empty()) continue;
    out += (out.empty() ? "" : ", ") + i.name + " " + i.addresses.front().text;
    if ((i.flags & IFF_UP) == 0) out += " (down)";
  }
  return out.empty() ? "none" : out;
}

std::optional<std::string> GlooIfnameProblem(const std::string& value,
                                             const std::vector<NetInterface>& interfaces) {
  if (value.size() <= 1) return std::nullopt;  // PyTorch ignores it
  std::vector<std::string> problems;
  for (const auto& name : Pieces(value)) {
    if (name.empty()) {
      problems.push_back("an empty entry (a comma too many)");
      continue;
    }
    const NetInterface* found = Named(interfaces, name);
    if (found != nullptr && !found->addresses.empty()) continue;
    if (found != nullptr) {
      problems.push_back(name + " has no IP address");
    } else if (name[0] == '^' || name[0] == '=') {
      problems.push_back(name +
                         " is no interface name (^ and = are NCCL_SOCKET_IFNAME's "
                         "syntax; Gloo takes exact names)");
    } else if (LooksLikeAddress(name)) {
      const std::string owner = OwnerOf(interfaces, name);
      problems.push_back(name + " is an address, not an interface name" +
                         (owner.empty() ? "" : " (" + owner + " has it)"));
    } else {
      problems.push_back(name + " is no interface of this host");
    }
  }
  if (problems.empty()) return std::nullopt;
  return Joined(problems);
}

std::optional<std::string> NcclIfnameProblem(const std::string& value, const std::string& family,
                                             const std::vector<NetInterface>& interfaces) {
  if (value.size() <= 1) return std::nullopt;  // NCCL ignores it
  const NcclList list = ParseNcclList(value);
  const int want = family == "AF_INET" ? AF_INET : family == "AF_INET6" ? AF_INET6 : 0;
  for (const auto& i : interfaces) {
    if (NcclUsable(i, want) && list.Selects(i.name)) return std::nullopt;
  }
  std::string why = list.exclude ? "it excludes every interface with an address"
                                 : "no interface with an address " + list.Wanted();
  if (want != 0) why += " (of family " + family + ": NCCL_SOCKET_FAMILY)";
  if (!list.exact && !list.exclude &&
      std::any_of(list.prefixes.begin(), list.prefixes.end(), LooksLikeAddress)) {
    why += "; it takes interface names, not addresses";
  }
  return why;
}

std::vector<std::string> ListIbDevices(const std::string& sys_root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(sys_root + "/class/infiniband", ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> NcclHcaProblem(const std::string& value,
                                          const std::vector<std::string>& devices) {
  if (value.empty()) return std::nullopt;
  if (devices.empty()) return std::string("this host has no InfiniBand device");
  const NcclList list = ParseNcclList(value);
  for (const auto& d : devices) {
    if (list.Selects(d)) return std::nullopt;
  }
  return list.exclude ? "it excludes every InfiniBand device of this host"
                      : "no InfiniBand device of this host " + list.Wanted();
}

std::vector<LimitCheck> SocketInterfaceChecks(const Environ& environ,
                                              const std::vector<NetInterface>& interfaces,
                                              const std::vector<std::string>& ib_devices,
                                              int gpus) {
  std::vector<LimitCheck> out;
  const std::string have = DescribeInterfaces(interfaces);
  // No interface listed (getifaddrs failed): nothing to judge the names by.
  if (auto gloo = Lookup(environ, kGlooSocketIfname);
      gloo && gloo->size() > 1 && !interfaces.empty()) {
    auto problem = GlooIfnameProblem(*gloo, interfaces);
    out.push_back({std::string(kGlooSocketIfname) + "=" + *gloo,
                   problem ? CheckStatus::kFail : CheckStatus::kOk,
                   problem ? *problem + ": Gloo's init_process_group would fail (\"Unable to find "
                                        "address for\")"
                           : "selects interfaces with an address",
                   problem ? "set it to interfaces of this host with an address (" + have +
                                 "), the ones other nodes reach it by, or unset it"
                           : ""});
  }
  if (auto nccl = Lookup(environ, kNcclSocketIfname);
      nccl && nccl->size() > 1 && !interfaces.empty()) {
    const std::string family = Lookup(environ, kNcclSocketFamily).value_or("");
    auto problem = NcclIfnameProblem(*nccl, family, interfaces);
    const bool no_gpu = gpus == 0;  // the workers' NCCL has nothing to run on
    out.push_back(
        {std::string(kNcclSocketIfname) + "=" + *nccl,
         !problem ? CheckStatus::kOk
         : no_gpu ? CheckStatus::kWarn
                  : CheckStatus::kFail,
         problem ? *problem +
                       ": NCCL's bootstrap would fail (\"no socket interface "
                       "found\")" +
                       (no_gpu ? "; no GPU is visible, so the workers use Gloo, not NCCL" : "")
                 : "selects an interface with an address",
         problem ? "set it to a prefix of an interface of this host with an address (" + have +
                       "; =NAME for exactly NAME, ^NAME,... to exclude), or "
                       "unset it"
                 : ""});
  }
  if (auto hca = Lookup(environ, kNcclIbHca); hca && !hca->empty()) {
    // No device at all (a login or CPU node sharing the cluster's environment): nothing to
    // select, and nothing wrong with the name; said, not warned.
    auto problem = ib_devices.empty() ? std::nullopt : NcclHcaProblem(*hca, ib_devices);
    const std::string have = Joined(ib_devices);
    out.push_back({std::string(kNcclIbHca) + "=" + *hca,
                   problem ? CheckStatus::kWarn : CheckStatus::kOk,
                   problem ? *problem + ": NCCL would not use InfiniBand (sockets instead, far "
                                        "slower), or fail where NCCL_NET=IB"
                   : ib_devices.empty() ? "this host has no InfiniBand device: NCCL uses sockets"
                                        : "selects an InfiniBand device",
                   problem ? "set it to this host's devices (" + have +
                                 ", /sys/class/infiniband; =NAME exact, ^NAME,... to exclude), "
                                 "or unset it"
                           : ""});
  }
  return out;
}

}  // namespace ddprun::env
