#include "rendezvous/kv.hpp"

#include <cstring>

namespace ddprun::rendezvous {

namespace {

// COMPARE_SET with expected == desired == a value no key of ours ever holds
// changes nothing and answers in one round trip: the stored value, or the
// sentinel itself when the key is missing (PyTorch's rule for a missing key).
const std::string kAbsent(
    "\x01"
    "ddprun:absent"
    "\x01");

std::optional<std::string> Present(std::string value) {
  if (value == kAbsent) return std::nullopt;
  return value;
}

Request Keyed(Op op, const std::string& key) {
  Request r;
  r.op = op;
  r.keys.push_back("/" + key);  // as StoreClient prefixes user keys
  return r;
}

// Reads a u64-length string or an i64 from a reply produced by Encoder.
uint64_t ReadU64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

}  // namespace

StatusOr<std::optional<std::string>> ClientKv::TryGet(const std::string& key) {
  auto v = client_.CompareSet(key, kAbsent, kAbsent);
  if (!v.ok()) return v.status();
  return Present(std::move(*v));
}

Status ClientKv::Set(const std::string& key, const std::string& value) {
  return client_.Set(key, value);
}

StatusOr<int64_t> ClientKv::Add(const std::string& key, int64_t delta) {
  return client_.Add(key, delta);
}

StatusOr<std::string> ClientKv::CompareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired) {
  return client_.CompareSet(key, expected, desired);
}

LocalStore::LocalStore()
    : state_([this](ClientId, std::string bytes) { reply_ = std::move(bytes); }) {}

StatusOr<std::string> LocalStore::Call(ClientId id, const Request& request) {
  if (down_) return Unavailable("store (simulated) is gone");
  reply_.clear();
  if (!state_.Handle(id, request)) return Internal("store (simulated) refused the request");
  return std::move(reply_);
}

StatusOr<std::optional<std::string>> LocalStore::Handle::TryGet(const std::string& key) {
  auto v = CompareSet(key, kAbsent, kAbsent);
  if (!v.ok()) return v.status();
  return Present(std::move(*v));
}

Status LocalStore::Handle::Set(const std::string& key, const std::string& value) {
  Request r = Keyed(Op::kSet, key);
  r.values.push_back(value);
  return store_.Call(id_, r).status();
}

StatusOr<int64_t> LocalStore::Handle::Add(const std::string& key, int64_t delta) {
  Request r = Keyed(Op::kAdd, key);
  r.number = delta;
  auto reply = store_.Call(id_, r);
  if (!reply.ok()) return reply.status();
  return static_cast<int64_t>(ReadU64(*reply, 0));
}

StatusOr<std::string> LocalStore::Handle::CompareSet(const std::string& key,
                                                     const std::string& expected,
                                                     const std::string& desired) {
  Request r = Keyed(Op::kCompareSet, key);
  r.values = {expected, desired};
  auto reply = store_.Call(id_, r);
  if (!reply.ok()) return reply.status();
  return reply->substr(sizeof(uint64_t), ReadU64(*reply, 0));
}

}  // namespace ddprun::rendezvous
