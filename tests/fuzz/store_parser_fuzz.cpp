// libFuzzer harness for the store's request parser and state (scripts/fuzz.sh).
//
// Parses the input as one whole stream: requests are consumed from the front
// until kNeedMore or kError. Every parsed request is checked against two
// properties and then applied to a StoreState whose replies are discarded:
//   - re-encoding the request gives back exactly the bytes it consumed;
//   - a strict prefix of those bytes parses as kNeedMore.
// The same stream is then fed to one RequestParser in pieces, the way the
// server's reads arrive (piece sizes drawn from the input's first byte), and
// must give the same requests and the same end (the same error, or a request
// left incomplete); the parser must never hold more bytes of a request than
// it was fed, which is what bounds a connection before its handshake ends.
// VALIDATE opens a new simulated connection (client id) and AUTH switches to
// the previous one, so that waits and wakes cross clients; a request the state
// refuses disconnects its client, as the server would.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

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

// How a stream of requests ended, and what it held.
struct Outcome {
  std::vector<std::string> requests;  // re-encoded
  std::string error;                  // "" when the stream ended in an incomplete request
};

// The stream parsed whole, request by request.
Outcome ParseWhole(std::string_view input, const Limits& limits, Session* session) {
  Outcome out;
  size_t off = 0;
  for (;;) {
    Request req;
    size_t used = 0;
    std::string error;
    ParseResult r = ParseRequest(input.substr(off), limits, &req, &used, &error);
    if (r == ParseResult::kNeedMore) break;
    if (r == ParseResult::kError) {
      Check(!error.empty(), "an error has a message");
      out.error = error;
      break;
    }
    Check(used > 0 && used <= input.size() - off, "a request consumes 1..remaining bytes");
    CheckRequest(input.substr(off, used), limits, req);
    out.requests.push_back(Encode(req));
    session->Apply(req);
    off += used;
  }
  return out;
}

// The stream fed to one parser in pieces, as reads arrive at the server.
Outcome ParsePieces(std::string_view input, const Limits& limits, uint8_t seed) {
  static constexpr size_t kPieces[] = {1, 2, 3, 5, 8, 13, 64, 4096};
  Outcome out;
  RequestParser parser(limits);
  size_t fed = 0;  // bytes of the request in progress fed so far
  for (size_t i = 0; !input.empty(); ++i) {
    std::string_view piece = input.substr(0, kPieces[(seed + i * (seed | 1)) % 8]);
    input.remove_prefix(piece.size());
    while (!piece.empty()) {
      const size_t offered = piece.size();
      Request req;
      std::string error;
      ParseResult r = parser.Feed(&piece, &req, &error);
      fed += offered - piece.size();
      if (r == ParseResult::kError) {
        out.error = error;
        return out;
      }
      if (r == ParseResult::kOk) {
        out.requests.push_back(Encode(req));
        fed = 0;
      }
      Check(parser.partial_bytes() == fed, "a partial request holds exactly the bytes fed");
    }
  }
  return out;
}

void FuzzOne(std::string_view input) {
  Limits limits;
  Session session;
  Outcome whole = ParseWhole(input, limits, &session);
  Outcome pieces = ParsePieces(input, limits, input.empty() ? 0 : static_cast<uint8_t>(input[0]));
  Check(whole.requests == pieces.requests, "pieces give the requests the whole stream gives");
  Check(whole.error == pieces.error, "pieces end the way the whole stream ends");
}

}  // namespace
}  // namespace ddprun::rendezvous

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ddprun::rendezvous::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
