// PyTorch's TCPStore wire protocol as torch >= 2.2 clients speak it (see
// docs/store-protocol.md): opcodes, the incremental request parser the
// server uses, and the encoder both sides use.
//
// Framing: a u8 opcode, then fields; strings are a u64 little-endian length
// and raw bytes. There is no request length or id, so a request that is not
// complete yet is re-parsed when more bytes arrive, and anything malformed
// or over the limits closes that connection.
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
  // ddprun's extension: proves the job token right after VALIDATE.
  kAuth = 0xD7,
};

inline constexpr uint32_t kValidateMagic = 0x3C85F7CE;
inline constexpr uint8_t kStopWaiting = 0;  // WAIT / BARRIER done
inline constexpr uint8_t kWaitCanceled = 1;
inline constexpr uint8_t kReady = 0;  // CHECK
inline constexpr uint8_t kNotReady = 1;
inline constexpr uint8_t kAuthOk = 1;

// Sizes above which a request closes its connection. PyTorch's libuv server
// allows 8 KiB keys, 8 MiB values and 128 Ki keys per request; these are at
// least as generous.
struct Limits {
  size_t max_key = 64 * 1024;
  size_t max_value = 64 * 1024 * 1024;
  size_t max_keys_per_request = 128 * 1024;
  size_t max_buffered = 256 * 1024 * 1024;  // unparsed input + unsent output per connection
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

// Parses one request from the front of `input`. On kOk sets `*consumed` to
// the request's length; on kNeedMore to the input length below which parsing
// again cannot get further (so a large request is not re-parsed per read);
// on kError sets `*error` ("unknown opcode 99", "key of 9000000 bytes is
// over the 65536-byte limit").
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
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Name of an opcode for messages ("WAIT"), or its number.
std::string OpName(uint8_t op);

}  // namespace ddprun::rendezvous
