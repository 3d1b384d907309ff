// libFuzzer harness for the store's request parser and state (scripts/fuzz.sh).
//
// Feeds the input to ParseRequest the way the server's read loop does:
// requests are consumed from the front until kNeedMore or kError. Every
// parsed request is checked against two properties and then applied to a
// StoreState whose replies are discarded:
//   - re-encoding the request gives back exactly the bytes it consumed;
//   - a strict prefix of those bytes parses as kNeedMore.
// VALIDATE opens a new simulated connection (client id) and AUTH switches to
// the previous one, so that waits and wakes cross clients; a request the state
// refuses disconnects its client, as the server would.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "rendezvous/store_protocol.hpp"
#include "rendezvous/store_state.hpp"

namespace ddprun::rendezvous {
namespace {

std::string Encode(const Request& r) {
  Encoder e;
  e.Op(r.op);
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
      e.U32(r.word);
      break;
    case Op::kAdd:
    case Op::kBarrier:
      e.Str(r.keys[0]).I64(r.number);
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      e.U64(r.keys.size());
      for (const auto& k : r.keys) e.Str(k);
      break;
    case Op::kMultiSet:
      e.I64(static_cast<int64_t>(r.keys.size()));
      for (size_t i = 0; i < r.keys.size(); ++i) e.Str(r.keys[i]).Str(r.values[i]);
      break;
    default:  // one key (if any), then the values in order
      for (const auto& k : r.keys) e.Str(k);
      for (const auto& v : r.values) e.Str(v);
      break;
  }
  return e.bytes();
}

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "store_parser_fuzz: property violated: %s\n", what);
    abort();
  }
}

void CheckRequest(std::string_view bytes, const Limits& limits, const Request& req) {
  Check(Encode(req) == bytes, "re-encoding a request gives back the bytes it consumed");
  Request partial;
  size_t used = 0;
  std::string error;
  ParseResult r = ParseRequest(bytes.substr(0, bytes.size() - 1), limits, &partial, &used, &error);
  Check(r == ParseResult::kNeedMore, "a strict prefix of a request needs more bytes");
}

class Session {
 public:
  Session() : state_([this](ClientId, std::string bytes) { sent_ += bytes.size(); }) {}
  ~Session() {
    for (ClientId c = 1; c <= last_; ++c) state_.Disconnect(c);
  }

  void Apply(const Request& req) {
    switch (req.op) {
      case Op::kValidate:
        current_ = ++last_;
        return;
      case Op::kAuth:
        if (req.values[0].empty()) state_.Clear();
        current_ = current_ > 1 ? current_ - 1 : last_;
        return;
      default:
        if (!state_.Handle(current_, req)) state_.Disconnect(current_);
    }
  }

 private:
  StoreState state_;
  size_t sent_ = 0;
  ClientId current_ = 1;
  ClientId last_ = 1;
};

// The server's read loop over one input.
void FuzzOne(std::string_view input) {
  Limits limits;
  Session session;
  size_t off = 0;
  for (;;) {
    Request req;
    size_t used = 0;
    std::string error;
    ParseResult r = ParseRequest(input.substr(off), limits, &req, &used, &error);
    if (r == ParseResult::kNeedMore) break;
    if (r == ParseResult::kError) {
      Check(!error.empty(), "an error has a message");
      break;
    }
    Check(used > 0 && used <= input.size() - off, "a request consumes 1..remaining bytes");
    CheckRequest(input.substr(off, used), limits, req);
    session.Apply(req);
    off += used;
  }
}

}  // namespace
}  // namespace ddprun::rendezvous

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ddprun::rendezvous::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
