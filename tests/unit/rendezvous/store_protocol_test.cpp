#include "rendezvous/store_protocol.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::rendezvous {
namespace {

// "04 05 00" -> the bytes 0x04 0x05 0x00.
std::string Hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i < hex.size();) {
    if (hex[i] == ' ') {
      ++i;
      continue;
    }
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    i += 2;
  }
  return out;
}

// A request of tcpstore.md §6.1: its bytes and what they must decode to.
struct Vector {
  const char* name;
  std::string hex;
  Op op;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  int64_t number = 0;
  uint32_t word = 0;
};

std::vector<Vector> Vectors() {
  return {
      {"VALIDATE", "00 ce f7 85 3c", Op::kValidate, {}, {}, 0, kValidateMagic},
      {"PING nonce=4660", "0d 34 12 00 00", Op::kPing, {}, {}, 0, 4660},
      {"ADD init/ +1",
       "04 05 00 00 00 00 00 00 00 69 6e 69 74 2f 01 00 00 00 00 00 00 00",
       Op::kAdd,
       {"init/"},
       {},
       1},
      {"SET /k=v",
       "01 02 00 00 00 00 00 00 00 2f 6b 01 00 00 00 00 00 00 00 76",
       Op::kSet,
       {"/k"},
       {"v"}},
      {"WAIT [/k]",
       "06 01 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 2f 6b",
       Op::kWait,
       {"/k"},
       {}},
      {"GET /k", "03 02 00 00 00 00 00 00 00 2f 6b", Op::kGet, {"/k"}, {}},
      {"ADD /c -7",
       "04 02 00 00 00 00 00 00 00 2f 63 f9 ff ff ff ff ff ff ff",
       Op::kAdd,
       {"/c"},
       {},
       -7},
      {"CHECK [/k,/zz]",
       "05 02 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 2f 6b 03 00 00 00 00 00 00 00 2f 7a 7a",
       Op::kCheck,
       {"/k", "/zz"},
       {}},
      {"COMPARE_SET /n zz x",
       "02 02 00 00 00 00 00 00 00 2f 6e 02 00 00 00 00 00 00 00 7a 7a 01 00 00 00 00 00 00 00 78",
       Op::kCompareSet,
       {"/n"},
       {"zz", "x"}},
      {"GETNUMKEYS", "07", Op::kGetNumKeys, {}, {}},
      {"DELETE_KEY /k", "08 02 00 00 00 00 00 00 00 2f 6b", Op::kDeleteKey, {"/k"}, {}},
      {"MULTI_SET [/a,/b] [1,22]",
       "0b 02 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00 2f 61 01 00 00 00 00 00 00 00 31 "
       "02 00 00 00 00 00 00 00 2f 62 02 00 00 00 00 00 00 00 32 32",
       Op::kMultiSet,
       {"/a", "/b"},
       {"1", "22"}},
      {"WAIT [/late]",
       "06 01 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00 2f 6c 61 74 65",
       Op::kWait,
       {"/late"},
       {}},
      {"CANCEL_WAIT", "0c", Op::kCancelWait, {}, {}},
      {"QUEUE_POP /q", "0f 02 00 00 00 00 00 00 00 2f 71", Op::kQueuePop, {"/q"}, {}},
      {"LIST_KEYS", "11", Op::kListKeys, {}, {}},
      {"BARRIER /bar 2",
       "12 04 00 00 00 00 00 00 00 2f 62 61 72 02 00 00 00 00 00 00 00",
       Op::kBarrier,
       {"/bar"},
       {},
       2},
  };
}

// Encodes a request the way PyTorch's client lays it out (tcpstore.md §2.3).
std::string Encode(const Vector& v) {
  Encoder e;
  e.Op(v.op);
  switch (v.op) {
    case Op::kValidate:
    case Op::kPing:
      e.U32(v.word);
      break;
    case Op::kAdd:
    case Op::kBarrier:
      e.Str(v.keys[0]).I64(v.number);
      break;
    case Op::kCheck:
    case Op::kWait:
      e.U64(v.keys.size());
      for (const auto& k : v.keys) e.Str(k);
      break;
    case Op::kMultiSet:
      e.I64(static_cast<int64_t>(v.keys.size()));
      for (size_t i = 0; i < v.keys.size(); ++i) e.Str(v.keys[i]).Str(v.values[i]);
      break;
    default:  // single key, then the values in order (SET, GET, COMPARE_SET, ...)
      for (const auto& k : v.keys) e.Str(k);
      for (const auto& val : v.values) e.Str(val);
      break;
  }
  return e.bytes();
}

ParseResult Parse(const std::string& bytes, Request* req, size_t* used, std::string* error) {
  return ParseRequest(bytes, Limits{}, req, used, error);
}

TEST_CASE("every request of the reference vectors decodes to its op, keys, values and numbers") {
  for (const auto& v : Vectors()) {
    CAPTURE(v.name);
    std::string bytes = Hex(v.hex);
    Request req;
    size_t used = 0;
    std::string error;
    REQUIRE(Parse(bytes, &req, &used, &error) == ParseResult::kOk);
    CHECK(used == bytes.size());
    CHECK(req.op == v.op);
    CHECK(req.keys == v.keys);
    CHECK(req.values == v.values);
    CHECK(req.number == v.number);
    CHECK(req.word == v.word);
  }
}

TEST_CASE("the encoder produces exactly the reference bytes of every request") {
  for (const auto& v : Vectors()) {
    CAPTURE(v.name);
    CHECK(Encode(v) == Hex(v.hex));
  }
}

TEST_CASE("the encoder produces the reference response bytes") {
  CHECK(Encoder().U32(4660).bytes() == Hex("34 12 00 00"));
  CHECK(Encoder().I64(1).bytes() == Hex("01 00 00 00 00 00 00 00"));
  CHECK(Encoder().Str("v").bytes() == Hex("01 00 00 00 00 00 00 00 76"));
  CHECK(Encoder().I64(-2).bytes() == Hex("fe ff ff ff ff ff ff ff"));
  CHECK(Encoder().U8(kNotReady).bytes() == Hex("01"));
  CHECK(Encoder().Str("zz").bytes() == Hex("02 00 00 00 00 00 00 00 7a 7a"));
  CHECK(Encoder().U8(kWaitCanceled).bytes() == Hex("01"));
  CHECK(Encoder().I64(1).Str("x").bytes() ==
        Hex("01 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 78"));
  CHECK(Encoder().I64(0).bytes() == Hex("00 00 00 00 00 00 00 00"));
  CHECK(Encoder().I64(2).Str("init/").Str("/a").bytes() ==
        Hex("02 00 00 00 00 00 00 00 05 00 00 00 00 00 00 00 69 6e 69 74 2f "
            "02 00 00 00 00 00 00 00 2f 61"));
  CHECK(Encoder().U8(kStopWaiting).bytes() == Hex("00"));
}

TEST_CASE("every strict prefix of a valid request needs more bytes") {
  for (const auto& v : Vectors()) {
    std::string bytes = Hex(v.hex);
    for (size_t n = 0; n < bytes.size(); ++n) {
      CAPTURE(v.name);
      CAPTURE(n);
      Request req;
      size_t used = 0;
      std::string error;
      CHECK(Parse(bytes.substr(0, n), &req, &used, &error) == ParseResult::kNeedMore);
    }
  }
}

TEST_CASE("requests sent back to back are consumed one at a time") {
  std::string session = Hex("00 ce f7 85 3c") + Hex("0d 34 12 00 00") + Hex("07");
  std::vector<Op> ops;
  size_t off = 0;
  for (;;) {
    Request req;
    size_t used = 0;
    std::string error;
    ParseResult r = Parse(session.substr(off), &req, &used, &error);
    if (r != ParseResult::kOk) {
      CHECK(r == ParseResult::kNeedMore);
      break;
    }
    ops.push_back(req.op);
    off += used;
  }
  CHECK(ops == std::vector<Op>{Op::kValidate, Op::kPing, Op::kGetNumKeys});
  CHECK(off == session.size());
}

TEST_CASE("unknown opcodes are errors") {
  for (int op : {19, 0x63, 0xD6, 0xDA, 0xFF}) {
    CAPTURE(op);
    Request req;
    size_t used = 0;
    std::string error;
    CHECK(Parse(std::string(1, static_cast<char>(op)), &req, &used, &error) == ParseResult::kError);
    CHECK(error.find("unknown opcode") != std::string::npos);
  }
}

// A u64 length field as it appears on the wire.
std::string Len(uint64_t n) { return Encoder().U64(n).bytes(); }

ParseResult ParseWith(const Limits& limits, const std::string& bytes, std::string* error) {
  Request req;
  size_t used = 0;
  return ParseRequest(bytes, limits, &req, &used, error);
}

TEST_CASE("a key over the key limit is an error, one at the limit is not") {
  Limits limits;
  limits.max_key = 4;
  std::string error;
  CHECK(ParseWith(limits, Hex("03") + Len(4) + "abcd", &error) == ParseResult::kOk);
  CHECK(ParseWith(limits, Hex("03") + Len(5), &error) == ParseResult::kError);
  CHECK(error == "GET: key of 5 bytes is over the 4-byte limit");
  // Known before the bytes arrive, and for every key-carrying layout.
  CHECK(ParseWith(limits, Hex("06") + Len(1) + Len(5), &error) == ParseResult::kError);
  CHECK(ParseWith(limits, Hex("01") + Len(5), &error) == ParseResult::kError);
  CHECK(ParseWith(limits, Hex("12") + Len(1u << 31), &error) == ParseResult::kError);
}

TEST_CASE("a value over the value limit is an error, one at the limit is not") {
  Limits limits;
  limits.max_value = 3;
  std::string error;
  CHECK(ParseWith(limits, Hex("01") + Len(1) + "k" + Len(3) + "abc", &error) == ParseResult::kOk);
  CHECK(ParseWith(limits, Hex("01") + Len(1) + "k" + Len(4), &error) == ParseResult::kError);
  CHECK(error == "SET: value of 4 bytes is over the 3-byte limit");
  CHECK(ParseWith(limits, Hex("02") + Len(1) + "k" + Len(0) + Len(4), &error) ==
        ParseResult::kError);
  CHECK(ParseWith(limits, Hex("0e") + Len(1) + "k" + Len(~0ull), &error) == ParseResult::kError);
}

TEST_CASE("a key count over the per-request limit is an error, one at the limit is not") {
  Limits limits;
  limits.max_keys_per_request = 2;
  std::string error;
  std::string two = Len(2) + Len(1) + "a" + Len(1) + "b";
  for (const char* op : {"05", "06", "0a"}) {
    CAPTURE(op);
    CHECK(ParseWith(limits, Hex(op) + two, &error) == ParseResult::kOk);
    CHECK(ParseWith(limits, Hex(op) + Len(3), &error) == ParseResult::kError);
  }
  CHECK(ParseWith(limits, Hex("0b") + Len(3), &error) == ParseResult::kError);
  CHECK(error == "MULTI_SET: request with 3 keys is over the 2-key limit");
  // MULTI_SET's i64 count: a negative one is a huge unsigned one.
  CHECK(ParseWith(limits, Hex("0b") + Encoder().I64(-1).bytes(), &error) == ParseResult::kError);
}

TEST_CASE("AUTH carries a token of at most 4096 bytes") {
  std::string error;
  Request req;
  size_t used = 0;
  std::string auth = Hex("d7") + Len(3) + "abc";
  REQUIRE(ParseRequest(auth, Limits{}, &req, &used, &error) == ParseResult::kOk);
  CHECK(req.op == Op::kAuth);
  CHECK(req.values == std::vector<std::string>{"abc"});
  CHECK(ParseWith(Limits{}, Hex("d7") + Len(4097), &error) == ParseResult::kError);
}

TEST_CASE("AGENT and CLEAR_WORKERS are a single byte each") {
  std::string error;
  Request req;
  size_t used = 0;
  REQUIRE(ParseRequest(Hex("d8"), Limits{}, &req, &used, &error) == ParseResult::kOk);
  CHECK(req.op == Op::kAgent);
  CHECK(used == 1);
  REQUIRE(ParseRequest(Hex("d9"), Limits{}, &req, &used, &error) == ParseResult::kOk);
  CHECK(req.op == Op::kClearWorkers);
  CHECK(used == 1);
  CHECK(OpName(0xD8) == "AGENT");
  CHECK(OpName(0xD9) == "CLEAR_WORKERS");
}

// Feeds `bytes` to one parser in pieces of `piece` bytes; returns the requests.
std::vector<Request> FeedInPieces(const std::string& bytes, size_t piece) {
  Limits limits;
  RequestParser parser(limits);
  std::vector<Request> out;
  for (size_t off = 0; off < bytes.size(); off += piece) {
    std::string_view chunk = std::string_view(bytes).substr(off, piece);
    while (!chunk.empty()) {
      Request req;
      std::string error;
      ParseResult r = parser.Feed(&chunk, &req, &error);
      REQUIRE(r != ParseResult::kError);
      if (r == ParseResult::kOk) out.push_back(std::move(req));
    }
  }
  CHECK(parser.partial_bytes() == 0);
  return out;
}

TEST_CASE("a stream fed in pieces of any size parses into the same requests") {
  std::string stream;
  for (const auto& v : Vectors()) stream += Hex(v.hex);
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}, stream.size()}) {
    CAPTURE(piece);
    std::vector<Request> got = FeedInPieces(stream, piece);
    REQUIRE(got.size() == Vectors().size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].op == Vectors()[i].op);
      CHECK(got[i].keys == Vectors()[i].keys);
      CHECK(got[i].values == Vectors()[i].values);
      CHECK(got[i].number == Vectors()[i].number);
      CHECK(got[i].word == Vectors()[i].word);
    }
  }
}

TEST_CASE("a partial request counts the bytes consumed so far") {
  Limits limits;
  RequestParser parser(limits);
  std::string set = Hex("01") + Len(1) + "k" + Len(4) + "ab";
  std::string_view in = set;
  Request req;
  std::string error;
  CHECK(parser.Feed(&in, &req, &error) == ParseResult::kNeedMore);
  CHECK(in.empty());
  CHECK(parser.partial_bytes() == set.size());
  std::string rest = "cd" + Hex("07");
  in = rest;
  REQUIRE(parser.Feed(&in, &req, &error) == ParseResult::kOk);
  CHECK(req.values == std::vector<std::string>{"abcd"});
  CHECK(in.size() == 1);  // GETNUMKEYS is left for the next call
  CHECK(parser.partial_bytes() == 0);
}

TEST_CASE("a request over the request limit is an error when the length is parsed") {
  Limits limits;
  limits.max_request = 30;
  std::string error;
  // 1 + 8 + 1 + 8 = 18 bytes before the value: 12 more fit.
  CHECK(ParseWith(limits, Hex("01") + Len(1) + "k" + Len(12) + std::string(12, 'v'), &error) ==
        ParseResult::kOk);
  CHECK(ParseWith(limits, Hex("01") + Len(1) + "k" + Len(13), &error) == ParseResult::kError);
  CHECK(error == "SET: request of at least 31 bytes is over the 30-byte limit");
  // Many small keys add up too.
  std::string keys = Hex("06") + Len(3) + Len(1) + "a" + Len(1) + "b";
  CHECK(ParseWith(limits, keys + Len(1), &error) == ParseResult::kError);
}

TEST_CASE("opcodes are named in messages") {
  CHECK(OpName(0) == "VALIDATE");
  CHECK(OpName(6) == "WAIT");
  CHECK(OpName(18) == "BARRIER");
  CHECK(OpName(0xD7) == "AUTH");
  CHECK(OpName(99) == "opcode 99");
}

TEST_CASE("another protocol's first bytes are named") {
  CHECK(ForeignProtocol("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n") ==
        "an HTTP request (\"GET /metrics HTTP/1.1\")");
  CHECK(ForeignProtocol("POST /" + std::string(100, 'a')) ==
        "an HTTP request (\"POST /" + std::string(54, 'a') + "...\")");
  CHECK(ForeignProtocol("HEAD /\x01\n") == "an HTTP request (\"HEAD /?\")");
  CHECK(ForeignProtocol(std::string("\x16\x03\x01\x02\x00", 5)) ==
        "a TLS handshake (an https:// or other TLS client)");
  CHECK(ForeignProtocol("SSH-2.0-OpenSSH_9.2\r\n") == "an SSH client's greeting");
  CHECK(ForeignProtocol("G").empty());  // too little to tell
  CHECK(ForeignProtocol(std::string("\x00\x01\x02\x03\x04", 5)).empty());
  CHECK(ForeignProtocol("").empty());
}

}  // namespace
}  // namespace ddprun::rendezvous
