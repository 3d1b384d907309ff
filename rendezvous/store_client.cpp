#include "rendezvous/store_client.hpp"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "base/pause_clock.hpp"
#include "rendezvous/store_protocol.hpp"

namespace ddprun::rendezvous {
namespace {

StoreClient::SlowHandshakeNotice slow_handshake_notice;  // set_slow_handshake_notice
StoreClient::NotUpNotice not_up_notice;                  // set_not_up_notice

std::string UserKey(const std::string& key) { return "/" + key; }

Encoder& KeyList(Encoder& e, const std::vector<std::string>& keys) {
  e.U64(keys.size());
  for (const auto& k : keys) e.Str(UserKey(k));
  return e;
}

}  // namespace

StatusOr<StoreClient> StoreClient::Connect(const std::string& host, int port, Duration timeout,
                                           const std::string& token, StoreRole role,
                                           const Interrupted& interrupted,
                                           Duration connect_within) {
  const auto deadline =
      Clock::now() + (connect_within > Duration::zero() ? connect_within : timeout);
  auto delay = std::chrono::milliseconds(100);
  for (int attempt = 0;; ++attempt) {
    bool closed = false;
    auto client = ConnectOnce(host, port, timeout, deadline, token, role, interrupted, &closed);
    if (client.ok() || !closed || attempt == kHandshakeRetries ||
        Clock::now() + delay >= deadline) {
      return client;
    }
    std::this_thread::sleep_for(delay);
    delay *= 2;
  }
}

StatusOr<StoreClient> StoreClient::ConnectOnce(const std::string& host, int port, Duration timeout,
                                               Clock::time_point deadline, const std::string& token,
                                               StoreRole role, const Interrupted& interrupted,
                                               bool* closed) {
  const std::string address = HostPort(host, port);
  // A store not up yet (its host's agent late, or a wrong address) is waited
  // for up to `deadline` (the static backend's is its join timeout, 900 s):
  // said after kNotUpNotice, then every kNotUpEvery, or it looks like a hang
  // (attack 101).
  const auto began = Clock::now();
  auto next_notice = began + kNotUpNotice;
  const Interrupted watch = [&] {
    const auto now = Clock::now();
    if (not_up_notice && now >= next_notice) {
      next_notice = now + kNotUpEvery;
      not_up_notice(address, std::chrono::duration<double>(now - began).count(),
                    std::chrono::duration<double>(deadline - now).count());
    }
    return interrupted && interrupted();
  };
  auto fd = ConnectWithRetry(host, port, deadline, watch);
  if (fd.status().code() == StatusCode::kAborted) {
    return Status(StatusCode::kAborted,
                  "interrupted while connecting to the store at " + address + " (not up yet)");
  }
  if (!fd.ok()) {
    return fd.status().Annotate("store " + address +
                                " cannot be reached (is the hosting agent running and the "
                                "address right?)");
  }
  StoreClient client(std::move(*fd), address, timeout);
  client.interrupted_ = interrupted;  // for the handshake only
  if (slow_handshake_notice) {
    client.slow_ = [address, timeout](double waited_s) {
      slow_handshake_notice(address, waited_s, std::chrono::duration<double>(timeout).count());
    };
  }
  const uint32_t nonce = static_cast<uint32_t>(getpid());
  // It took the connection: up (or its kernel is). Its answer is waited for
  // the read timeout, as the notice says, not the rest of the connect
  // deadline (attack 101: a static node waited its 900 s join timeout on a
  // listener that never answered).
  deadline = std::min(deadline, Clock::now() + timeout);
  // A store that takes the connection and never answers: a stopped or hung
  // agent, or another program on the port.
  auto silent = [&](const Status& s) {
    *closed = false;  // no retry: it took the connection
    return s.code() == StatusCode::kAborted
               ? Status(StatusCode::kAborted, "interrupted while waiting for the store at " +
                                                  address + " to answer the handshake")
               : Status(s.code(), "store " + address + " took the connection but did not answer " +
                                      "within " + std::to_string(timeout.count()) +
                                      " ms (the process listening there is stopped, hung, or "
                                      "not a ddprun store)");
  };
  // The token goes right after VALIDATE: a store with a token refuses
  // anything else from a host it has not admitted yet.
  Encoder e;
  e.Op(Op::kValidate).U32(kValidateMagic);
  if (!token.empty()) e.Op(Op::kAuth).Str(token);
  if (role == StoreRole::kAgent) e.Op(Op::kAgent);
  e.Op(Op::kPing).U32(nonce);
  if (Status s = client.SendBytes(e.bytes()); !s.ok()) {
    *closed = true;
    return s;
  }
  if (!token.empty()) {
    auto ok = client.ReadU8(deadline);
    *closed = !ok.ok();
    if (!ok.ok() && ok.status().code() != StatusCode::kUnavailable) return silent(ok.status());
    if (!ok.ok() || *ok != kAuthOk) {
      return Status(StatusCode::kPermissionDenied,
                    "store " + address +
                        " refused the job token: give every agent the same --rdzv_conf token= "
                        "or DDPRUN_STORE_TOKEN");
    }
  }
  if (role == StoreRole::kAgent) {
    auto ok = client.ReadU8(deadline);
    *closed = !ok.ok();
    if (!ok.ok() && ok.status().code() != StatusCode::kUnavailable) return silent(ok.status());
    if (!ok.ok() || *ok != kAuthOk) {
      return Status(StatusCode::kPermissionDenied,
                    "store " + address +
                        " refused this agent (is it a ddprun store, and has every agent the "
                        "same --rdzv_conf token= or DDPRUN_STORE_TOKEN?)");
    }
  }
  uint32_t echo = 0;
  if (Status s = client.ReadExact(&echo, 4, deadline); !s.ok()) {
    *closed = true;
    return s.code() == StatusCode::kUnavailable ? s : silent(s);
  }
  if (echo != nonce) return Internal("store " + address + ": PING answered with a wrong nonce");
  client.interrupted_ = nullptr;  // its reads from now on may come from any thread
  client.slow_ = nullptr;
  return client;
}

void StoreClient::Interrupt() {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

Status StoreClient::Gone(const std::string& what) const {
  return Unavailable("store " + address_ + " is gone (" + what +
                     "): the agent hosting it stopped or the network failed");
}

Status StoreClient::SendBytes(const std::string& bytes) {
  if (broken_) return Gone("connection already closed");
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = Gone(std::string("send: ") + std::strerror(errno));
      broken_ = true;  // the descriptor stays open until destruction: Interrupt() may use it
      return s;
    }
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

namespace {
std::atomic<int64_t> waited_ns{0};  // StoreClient::Waited
}  // namespace

std::chrono::nanoseconds StoreClient::Waited() {
  return std::chrono::nanoseconds(waited_ns.load());
}

void StoreClient::set_not_up_notice(NotUpNotice notice) { not_up_notice = std::move(notice); }

void StoreClient::set_slow_handshake_notice(SlowHandshakeNotice notice) {
  slow_handshake_notice = std::move(notice);
}

Status StoreClient::ReadExact(void* out, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(out);
  // Time in which this process did not run (the whole job suspended, a host
  // starved) does not count toward the deadline: the reply may be there.
  PauseClock paused;
  paused.Start(Clock::now());
  Duration waited{0};  // here, while the process ran
  while (n > 0) {
    if (broken_) return Gone("connection already closed");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    // It looks at least every PauseClock tick; while it can be interrupted, more often.
    const long slice = std::min<long>(
        left.count(), interrupted_ ? 200 : std::chrono::milliseconds(PauseClock::kTick).count());
    pollfd pfd{fd_.get(), POLLIN, 0};
    const auto before = Clock::now();
    int rc = poll(&pfd, 1, static_cast<int>(std::max<long>(0, slice)));
    const auto after = Clock::now();
    const auto discounted = paused.Look(after).discounted;
    deadline += discounted;
    if (after - before > discounted) {
      waited_ns +=
          std::chrono::duration_cast<std::chrono::nanoseconds>(after - before - discounted).count();
      waited += std::chrono::duration_cast<Duration>(after - before - discounted);
    }
    if (slow_ && waited >= kSlowHandshake) {
      std::exchange(slow_, {})(std::chrono::duration<double>(waited).count());
    }
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0 && interrupted_ && interrupted_()) {
      broken_ = true;  // the reply may come later and be taken for the next one's
      return Status(StatusCode::kAborted, "interrupted");
    }
    if (rc == 0 && Clock::now() < deadline) continue;
    if (rc == 0) {
      return Status(StatusCode::kDeadlineExceeded, "store " + address_ + ": no reply within " +
                                                       std::to_string(timeout_.count()) + " ms");
    }
    ssize_t got = ::recv(fd_.get(), p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      Status s =
          Gone(got == 0 ? "connection closed" : std::string("recv: ") + std::strerror(errno));
      broken_ = true;  // the descriptor stays open until destruction: Interrupt() may use it
      return s;
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

StatusOr<uint8_t> StoreClient::ReadU8(Clock::time_point deadline) {
  uint8_t v = 0;
  if (Status s = ReadExact(&v, 1, deadline); !s.ok()) return s;
  return v;
}

StatusOr<int64_t> StoreClient::ReadI64(Clock::time_point deadline) {
  int64_t v = 0;
  if (Status s = ReadExact(&v, 8, deadline); !s.ok()) return s;
  return v;
}

StatusOr<std::string> StoreClient::ReadString(Clock::time_point deadline) {
  uint64_t n = 0;
  if (Status s = ReadExact(&n, 8, deadline); !s.ok()) return s;
  if (n > Limits{}.max_value) return Gone("reply of " + std::to_string(n) + " bytes");
  std::string v(n, '\0');
  if (Status s = ReadExact(v.data(), n, deadline); !s.ok()) return s;
  return v;
}

Status StoreClient::Set(const std::string& key, const std::string& value) {
  Encoder e;
  return SendBytes(e.Op(Op::kSet).Str(UserKey(key)).Str(value).bytes());
}

StatusOr<std::string> StoreClient::Get(const std::string& key) {
  if (Status s = Wait({key}, timeout_); !s.ok()) return s;
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kGet).Str(UserKey(key)).bytes()); !s.ok()) return s;
  return ReadString(Deadline());
}

StatusOr<int64_t> StoreClient::Add(const std::string& key, int64_t delta) {
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kAdd).Str(UserKey(key)).I64(delta).bytes()); !s.ok()) return s;
  return ReadI64(Deadline());
}

StatusOr<std::string> StoreClient::CompareSet(const std::string& key, const std::string& expected,
                                              const std::string& desired) {
  Encoder e;
  e.Op(Op::kCompareSet).Str(UserKey(key)).Str(expected).Str(desired);
  if (Status s = SendBytes(e.bytes()); !s.ok()) return s;
  return ReadString(Deadline());
}

StatusOr<bool> StoreClient::Check(const std::vector<std::string>& keys) {
  Encoder e;
  if (Status s = SendBytes(KeyList(e.Op(Op::kCheck), keys).bytes()); !s.ok()) return s;
  auto r = ReadU8(Deadline());
  if (!r.ok()) return r.status();
  return *r == kReady;
}

Status StoreClient::Wait(const std::vector<std::string>& keys, Duration timeout) {
  Encoder e;
  if (Status s = SendBytes(KeyList(e.Op(Op::kWait), keys).bytes()); !s.ok()) return s;
  auto r = ReadU8(Clock::now() + timeout);
  if (r.ok()) return Status::Ok();
  if (r.status().code() != StatusCode::kDeadlineExceeded) return r.status();
  // Timed out: cancel, then read the cancel ack, after a late STOP_WAITING if one raced it.
  Encoder cancel;
  if (Status s = SendBytes(cancel.Op(Op::kCancelWait).bytes()); !s.ok()) return s;
  auto ack = ReadU8(Deadline());
  if (ack.ok() && *ack == kStopWaiting) ack = ReadU8(Deadline());
  if (!ack.ok()) return ack.status();
  // Which of them are still missing, said first (what was not set is the news).
  constexpr size_t kAsked = 64;
  std::string names, missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    names += (names.empty() ? "" : ", ") + keys[i];
    if (i >= kAsked) continue;
    auto there = Check({keys[i]});
    if (there.ok() && !*there) missing += (missing.empty() ? "" : ", ") + keys[i];
  }
  const std::string waited =
      "store " + address_ + ": waited " + std::to_string(timeout.count()) + " ms for ";
  if (missing.empty() || missing == names) {
    return Status(StatusCode::kDeadlineExceeded, waited + "keys " + names);
  }
  return Status(StatusCode::kDeadlineExceeded,
                waited + "keys " + missing + " (of " + names + "; the others were set)");
}

StatusOr<int64_t> StoreClient::NumKeys() {
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kGetNumKeys).bytes()); !s.ok()) return s;
  return ReadI64(Deadline());
}

StatusOr<bool> StoreClient::DeleteKey(const std::string& key) {
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kDeleteKey).Str(UserKey(key)).bytes()); !s.ok()) return s;
  auto n = ReadI64(Deadline());
  if (!n.ok()) return n.status();
  return *n == 1;
}

Status StoreClient::Append(const std::string& key, const std::string& value) {
  Encoder e;
  return SendBytes(e.Op(Op::kAppend).Str(UserKey(key)).Str(value).bytes());
}

StatusOr<std::vector<std::string>> StoreClient::MultiGet(const std::vector<std::string>& keys) {
  if (Status s = Wait(keys, timeout_); !s.ok()) return s;
  Encoder e;
  if (Status s = SendBytes(KeyList(e.Op(Op::kMultiGet), keys).bytes()); !s.ok()) return s;
  std::vector<std::string> out;
  const auto deadline = Deadline();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = ReadString(deadline);
    if (!v.ok()) return v.status();
    out.push_back(std::move(*v));
  }
  return out;
}

Status StoreClient::MultiSet(const std::vector<std::string>& keys,
                             const std::vector<std::string>& values) {
  if (keys.size() != values.size()) return InvalidArgument("multi_set: keys and values differ");
  Encoder e;
  e.Op(Op::kMultiSet).I64(static_cast<int64_t>(keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) e.Str(UserKey(keys[i])).Str(values[i]);
  return SendBytes(e.bytes());
}

StatusOr<std::vector<std::string>> StoreClient::ListKeys() {
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kListKeys).bytes()); !s.ok()) return s;
  const auto deadline = Deadline();
  auto n = ReadI64(deadline);
  if (!n.ok()) return n.status();
  std::vector<std::string> out;
  for (int64_t i = 0; i < *n; ++i) {
    auto k = ReadString(deadline);
    if (!k.ok()) return k.status();
    if (!k->empty() && (*k)[0] == '/') out.push_back(k->substr(1));
  }
  return out;
}

Status StoreClient::QueuePush(const std::string& key, const std::string& value) {
  Encoder e;
  return SendBytes(e.Op(Op::kQueuePush).Str(UserKey(key)).Str(value).bytes());
}

StatusOr<std::vector<std::string>> StoreClient::QueuePop(const std::string& key) {
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kQueuePop).Str(UserKey(key)).bytes()); !s.ok()) return s;
  const auto deadline = Deadline();
  auto n = ReadI64(deadline);
  if (!n.ok()) return n.status();
  if (*n == 0) return std::vector<std::string>{};
  auto v = ReadString(deadline);
  if (!v.ok()) return v.status();
  return std::vector<std::string>{std::move(*v)};
}

StatusOr<int64_t> StoreClient::QueueLen(const std::string& key) {
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kQueueLen).Str(UserKey(key)).bytes()); !s.ok()) return s;
  return ReadI64(Deadline());
}

Status StoreClient::ClearWorkers() {
  Encoder e;
  if (Status s = SendBytes(e.Op(Op::kClearWorkers).bytes()); !s.ok()) return s;
  auto ok = ReadU8(Deadline());
  return ok.ok() ? Status::Ok() : ok.status();
}

}  // namespace ddprun::rendezvous
