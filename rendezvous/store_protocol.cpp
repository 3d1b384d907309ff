#include "rendezvous/store_protocol.hpp"

#include <algorithm>
#include <cstring>

namespace ddprun::rendezvous {

namespace {

// A cursor over the input that fails (rather than reads past the end) when
// bytes are missing, and remembers why a request is malformed.
class Reader {
 public:
  Reader(std::string_view in, const Limits& limits) : in_(in), limits_(limits) {}

  bool U8(uint8_t* v) { return Fixed(v, 1); }
  bool U32(uint32_t* v) { return Fixed(v, 4); }
  bool U64(uint64_t* v) { return Fixed(v, 8); }
  bool I64(int64_t* v) { return Fixed(v, 8); }

  bool Str(std::string* s, size_t limit, const char* what) {
    uint64_t n = 0;
    if (!U64(&n)) return false;
    if (n > limit) {
      error_ = std::string(what) + " of " + std::to_string(n) + " bytes is over the " +
               std::to_string(limit) + "-byte limit";
      return false;
    }
    if (in_.size() - pos_ < n) return Short(n);
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Key(std::string* s) { return Str(s, limits_.max_key, "key"); }
  bool Value(std::string* s) { return Str(s, limits_.max_value, "value"); }

  bool Count(uint64_t* n) {
    if (!U64(n)) return false;
    if (*n > limits_.max_keys_per_request) {
      error_ = "request with " + std::to_string(*n) + " keys is over the " +
               std::to_string(limits_.max_keys_per_request) + "-key limit";
      return false;
    }
    return true;
  }
  bool Keys(std::vector<std::string>* keys) {
    uint64_t n = 0;
    if (!Count(&n)) return false;
    keys->clear();
    keys->reserve(std::min<uint64_t>(n, 1024));  // a count alone must not cost memory
    for (uint64_t i = 0; i < n; ++i) {
      if (!Key(&keys->emplace_back())) return false;
    }
    return true;
  }

  size_t pos() const { return pos_; }
  // The input length below which parsing again cannot get further.
  size_t needed() const { return needed_; }
  const std::string& error() const { return error_; }

 private:
  bool Short(size_t n) {
    needed_ = pos_ + n;
    return false;
  }

  template <typename T>
  bool Fixed(T* v, size_t n) {
    if (in_.size() - pos_ < n) return Short(n);
    std::memcpy(v, in_.data() + pos_, n);  // little-endian hosts only (x86-64, arm64)
    pos_ += n;
    return true;
  }

  std::string_view in_;
  const Limits& limits_;
  size_t pos_ = 0;
  size_t needed_ = 0;
  std::string error_;
};

bool ParseBody(Reader& r, Request* q) {
  switch (q->op) {
    case Op::kValidate:
    case Op::kPing:
      return r.U32(&q->word);
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      q->keys.resize(1), q->values.resize(1);
      return r.Key(&q->keys[0]) && r.Value(&q->values[0]);
    case Op::kCompareSet:
      q->keys.resize(1), q->values.resize(2);
      return r.Key(&q->keys[0]) && r.Value(&q->values[0]) && r.Value(&q->values[1]);
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      q->keys.resize(1);
      return r.Key(&q->keys[0]);
    case Op::kAdd:
    case Op::kBarrier:
      q->keys.resize(1);
      return r.Key(&q->keys[0]) && r.I64(&q->number);
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return r.Keys(&q->keys);
    case Op::kMultiSet: {
      uint64_t n = 0;
      if (!r.Count(&n)) return false;
      q->keys.resize(n), q->values.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        if (!r.Key(&q->keys[i]) || !r.Value(&q->values[i])) return false;
      }
      return true;
    }
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return true;
    case Op::kAuth:
      q->values.resize(1);
      return r.Str(&q->values[0], 4096, "token");
  }
  return false;
}

bool KnownOp(uint8_t op) {
  return op <= static_cast<uint8_t>(Op::kBarrier) || op == static_cast<uint8_t>(Op::kAuth);
}

}  // namespace

ParseResult ParseRequest(std::string_view input, const Limits& limits, Request* out,
                         size_t* consumed, std::string* error) {
  Reader r(input, limits);
  uint8_t op = 0;
  if (!r.U8(&op)) {
    *consumed = 1;
    return ParseResult::kNeedMore;
  }
  if (!KnownOp(op)) {
    *error = "unknown opcode " + std::to_string(op);
    return ParseResult::kError;
  }
  *out = Request{};
  out->op = static_cast<Op>(op);
  if (!ParseBody(r, out)) {
    if (r.error().empty()) {
      *consumed = r.needed();
      return ParseResult::kNeedMore;
    }
    *error = OpName(op) + ": " + r.error();
    return ParseResult::kError;
  }
  *consumed = r.pos();
  return ParseResult::kOk;
}

Encoder& Encoder::U8(uint8_t v) {
  out_.push_back(static_cast<char>(v));
  return *this;
}

Encoder& Encoder::U32(uint32_t v) {
  out_.append(reinterpret_cast<const char*>(&v), 4);
  return *this;
}

Encoder& Encoder::I64(int64_t v) {
  out_.append(reinterpret_cast<const char*>(&v), 8);
  return *this;
}

Encoder& Encoder::U64(uint64_t v) {
  out_.append(reinterpret_cast<const char*>(&v), 8);
  return *this;
}

Encoder& Encoder::Str(std::string_view s) {
  U64(s.size());
  out_.append(s);
  return *this;
}

std::string OpName(uint8_t op) {
  static const char* kNames[] = {
      "VALIDATE",   "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",       "WAIT",
      "GETNUMKEYS", "DELETE_KEY", "APPEND",      "MULTI_GET", "MULTI_SET", "CANCEL_WAIT", "PING",
      "QUEUE_PUSH", "QUEUE_POP",  "QUEUE_LEN",   "LIST_KEYS", "BARRIER"};
  if (op <= static_cast<uint8_t>(Op::kBarrier)) return kNames[op];
  if (op == static_cast<uint8_t>(Op::kAuth)) return "AUTH";
  return "opcode " + std::to_string(op);
}

}  // namespace ddprun::rendezvous
