// PyTorch's TCPStore wire protocol as torch >= 2.2 clients speak it (see
// docs/store-protocol.md): opcodes, the incremental request parser the
// server uses, and the encoder both sides use.
//
// Framing: a u8 opcode, then fields; strings are a u64 little-endian length
// and raw bytes. There is no request length or id, so the parser is a state
// machine fed one read at a time: a request split over many reads is parsed
// once, each byte looked at once, and anything malformed or over the limits
// closes that connection.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::rendezvous {

enum class Op : uint8_t {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kGetNumKeys = 7,
  kDeleteKey = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancelWait = 12,
  kPing = 13,
  kQueuePush = 14,
  kQueuePop = 15,
  kQueueLen = 16,
  kListKeys = 17,
  kBarrier = 18,
  // ddprun's extensions (docs/store-protocol.md §6): AUTH proves the job
  // token right after VALIDATE; AGENT moves the connection into the agents'
  // key space (only after its own AUTH when the store has a token);
  // CLEAR_WORKERS, from an agent only, empties the workers' key space.
  kAuth = 0xD7,
  kAgent = 0xD8,
  kClearWorkers = 0xD9,
};

inline constexpr uint32_t kValidateMagic = 0x3C85F7CE;
inline constexpr uint8_t kStopWaiting = 0;  // WAIT / BARRIER done
inline constexpr uint8_t kWaitCanceled = 1;
inline constexpr uint8_t kReady = 0;  // CHECK
inline constexpr uint8_t kNotReady = 1;
inline constexpr uint8_t kAuthOk = 1;  // also AGENT's and CLEAR_WORKERS' reply

// Sizes above which a request closes its connection. PyTorch's libuv server
// allows 8 KiB keys, 8 MiB values and 128 Ki keys per request; these are at
// least as generous. Every length is checked when its field is parsed, before
// the bytes it announces arrive.
struct Limits {
  size_t max_key = 64 * 1024;
  size_t max_value = 64 * 1024 * 1024;
  size_t max_keys_per_request = 128 * 1024;
  size_t max_request = 256 * 1024 * 1024;  // bytes of one request, opcode included
  size_t max_unsent = 256 * 1024 * 1024;   // replies a connection has not read yet, beyond one
  size_t max_reply = 512 * 1024 * 1024;    // one reply (a MULTI_GET of many stored values)
};

struct Request {
  Op op = Op::kValidate;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // SET/APPEND/QUEUE_PUSH value, COMPARE_SET expected+desired,
                                    // MULTI_SET values, AUTH token
  int64_t number = 0;               // ADD delta, BARRIER world size
  uint32_t word = 0;                // VALIDATE magic, PING nonce
};

enum class ParseResult { kOk, kNeedMore, kError };

// Parses a stream of requests fed in pieces of any size. The cost is linear
// in the bytes fed: a partial request is kept as the fields parsed so far plus
// the field in progress, and nothing is parsed twice. Memory follows the bytes
// received, not the lengths announced: no vector or string is sized from a
// count or length field before its bytes arrive.
//
// After kError the parser is spent: the connection must be closed.
class RequestParser {
 public:
  explicit RequestParser(const Limits& limits) : limits_(limits) {}
  RequestParser(const RequestParser&) = delete;  // string_ points into request_
  RequestParser& operator=(const RequestParser&) = delete;

  // Consumes bytes from the front of `*input` up to the end of one request.
  //   kOk:       `*out` holds the request; `*input` starts after it.
  //   kNeedMore: all of `*input` was consumed into the request in progress.
  //   kError:    `*error` says why ("GET: key of 9000000 bytes is over the
  //              65536-byte limit", "unknown opcode 99").
  ParseResult Feed(std::string_view* input, Request* out, std::string* error);

  // Bytes of the request in progress consumed so far (0 between requests).
  size_t partial_bytes() const { return request_bytes_; }

 private:
  // The fields of a request, in wire order.
  enum class Field : uint8_t { kEnd, kWord, kNumber, kCount, kKey, kValue, kToken };
  static Field FieldAt(Op op, size_t index);

  bool StartRequest(uint8_t op, std::string* error);
  void StartField();
  bool TakeFixed(std::string_view* input, size_t n);
  void TakeString(std::string_view* input);
  bool FinishFixed(std::string* error);
  bool StartItems(uint64_t n, std::string* error);
  bool StartString(uint64_t n, size_t limit, const char* what, std::vector<std::string>* list,
                   std::string* error);
  void NextField();

  const Limits limits_;
  Request request_;
  bool started_ = false;
  Field field_ = Field::kEnd;  // the field in progress
  size_t index_ = 0;           // its index in FieldAt's layout
  uint64_t items_left_ = 0;    // repetitions left after a count field
  char fixed_[8] = {};         // a fixed-size field, or a string's length, being read
  size_t fixed_len_ = 0;
  bool in_string_ = false;  // reading a string's bytes into *string_
  uint64_t string_left_ = 0;
  std::string* string_ = nullptr;
  size_t request_bytes_ = 0;
};

// Parses one whole request from the front of `input` (tests and tools; the
// server feeds a RequestParser). On kOk sets `*consumed` to its length;
// kNeedMore when `input` is a strict prefix of a request; kError as above.
ParseResult ParseRequest(std::string_view input, const Limits& limits, Request* out,
                         size_t* consumed, std::string* error);

// Little-endian encoder for requests and responses.
class Encoder {
 public:
  Encoder& U8(uint8_t v);
  Encoder& U32(uint32_t v);
  Encoder& I64(int64_t v);
  Encoder& U64(uint64_t v);
  Encoder& Str(std::string_view s);
  Encoder& Op(rendezvous::Op op) { return U8(static_cast<uint8_t>(op)); }
  // Room for `n` bytes in all: a large reply is made without regrowing (each
  // regrowth held the old and the new copy at once).
  Encoder& Reserve(size_t n) {
    out_.reserve(n);
    return *this;
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Name of an opcode for messages ("WAIT"), or its number.
std::string OpName(uint8_t op);

// What a connection's first bytes are when they are another protocol's (an
// HTTP request, a TLS handshake, an SSH client): "an HTTP request (\"GET /
// HTTP/1.1\")"; "" when they look like none of those.
std::string ForeignProtocol(std::string_view first_bytes);

}  // namespace ddprun::rendezvous
