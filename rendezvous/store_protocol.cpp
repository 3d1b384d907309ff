#include "rendezvous/store_protocol.hpp"

#include <algorithm>
#include <cstring>

namespace ddprun::rendezvous {

namespace {

constexpr size_t kMaxToken = 4096;

bool KnownOp(uint8_t op) {
  return op <= static_cast<uint8_t>(Op::kBarrier) || op == static_cast<uint8_t>(Op::kAuth) ||
         op == static_cast<uint8_t>(Op::kAgent) || op == static_cast<uint8_t>(Op::kClearWorkers);
}

}  // namespace

RequestParser::Field RequestParser::FieldAt(Op op, size_t index) {
  using F = Field;
  // A layout that starts with kCount repeats the fields after it count times.
  static constexpr F kWord[] = {F::kWord, F::kEnd};
  static constexpr F kKeyValue[] = {F::kKey, F::kValue, F::kEnd};
  static constexpr F kCompareSet[] = {F::kKey, F::kValue, F::kValue, F::kEnd};
  static constexpr F kKey[] = {F::kKey, F::kEnd};
  static constexpr F kKeyNumber[] = {F::kKey, F::kNumber, F::kEnd};
  static constexpr F kKeys[] = {F::kCount, F::kKey, F::kEnd};
  static constexpr F kPairs[] = {F::kCount, F::kKey, F::kValue, F::kEnd};
  static constexpr F kNothing[] = {F::kEnd};
  static constexpr F kToken[] = {F::kToken, F::kEnd};
  switch (op) {
    case Op::kValidate:
    case Op::kPing:
      return kWord[index];
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      return kKeyValue[index];
    case Op::kCompareSet:
      return kCompareSet[index];
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
      return kKey[index];
    case Op::kAdd:
    case Op::kBarrier:
      return kKeyNumber[index];
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return kKeys[index];
    case Op::kMultiSet:
      return kPairs[index];
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
    case Op::kAgent:
    case Op::kClearWorkers:
      return kNothing[index];
    case Op::kAuth:
      return kToken[index];
  }
  return F::kEnd;
}

ParseResult RequestParser::Feed(std::string_view* input, Request* out, std::string* error) {
  if (!started_) {
    if (input->empty()) return ParseResult::kNeedMore;
    uint8_t op = static_cast<uint8_t>(input->front());
    input->remove_prefix(1);
    if (!StartRequest(op, error)) return ParseResult::kError;
  }
  while (field_ != Field::kEnd) {
    if (in_string_) {
      TakeString(input);
      if (in_string_) return ParseResult::kNeedMore;
      NextField();
      continue;
    }
    if (!TakeFixed(input, field_ == Field::kWord ? 4 : 8)) return ParseResult::kNeedMore;
    if (!FinishFixed(error)) {
      *error = OpName(static_cast<uint8_t>(request_.op)) + ": " + *error;
      return ParseResult::kError;
    }
  }
  *out = std::move(request_);
  request_ = Request{};
  started_ = false;
  request_bytes_ = 0;
  return ParseResult::kOk;
}

bool RequestParser::StartRequest(uint8_t op, std::string* error) {
  if (!KnownOp(op)) {
    *error = "unknown opcode " + std::to_string(op);
    return false;
  }
  request_.op = static_cast<Op>(op);
  started_ = true;
  request_bytes_ = 1;
  index_ = 0;
  items_left_ = 0;
  field_ = FieldAt(request_.op, 0);
  StartField();
  return true;
}

void RequestParser::StartField() {
  fixed_len_ = 0;
  in_string_ = false;
}

bool RequestParser::TakeFixed(std::string_view* input, size_t n) {
  size_t take = std::min(n - fixed_len_, input->size());
  std::memcpy(fixed_ + fixed_len_, input->data(), take);
  fixed_len_ += take;
  request_bytes_ += take;
  input->remove_prefix(take);
  return fixed_len_ == n;
}

void RequestParser::TakeString(std::string_view* input) {
  size_t take = static_cast<size_t>(std::min<uint64_t>(string_left_, input->size()));
  string_->append(input->data(), take);
  string_left_ -= take;
  request_bytes_ += take;
  input->remove_prefix(take);
  in_string_ = string_left_ > 0;
}

// A fixed-size field is complete in fixed_ (little-endian hosts only: x86-64,
// arm64). For a string it is the length: the bytes follow.
bool RequestParser::FinishFixed(std::string* error) {
  uint64_t n = 0;
  std::memcpy(&n, fixed_, fixed_len_);
  switch (field_) {
    case Field::kWord:
      request_.word = static_cast<uint32_t>(n);
      break;
    case Field::kNumber:
      request_.number = static_cast<int64_t>(n);
      break;
    case Field::kCount:
      return StartItems(n, error);
    case Field::kKey:
      return StartString(n, limits_.max_key, "key", &request_.keys, error);
    case Field::kValue:
      return StartString(n, limits_.max_value, "value", &request_.values, error);
    case Field::kToken:
      return StartString(n, kMaxToken, "token", &request_.values, error);
    case Field::kEnd:
      break;
  }
  NextField();
  return true;
}

// MULTI_SET's count is an i64 on the wire: a negative one is huge here.
bool RequestParser::StartItems(uint64_t n, std::string* error) {
  if (n > limits_.max_keys_per_request) {
    *error = "request with " + std::to_string(n) + " keys is over the " +
             std::to_string(limits_.max_keys_per_request) + "-key limit";
    return false;
  }
  items_left_ = n;
  if (n == 0) {
    field_ = Field::kEnd;
    return true;
  }
  NextField();
  return true;
}

// The string is appended to as its bytes arrive: its length alone allocates
// nothing.
bool RequestParser::StartString(uint64_t n, size_t limit, const char* what,
                                std::vector<std::string>* list, std::string* error) {
  if (n > limit) {
    *error = std::string(what) + " of " + std::to_string(n) + " bytes is over the " +
             std::to_string(limit) + "-byte limit";
    return false;
  }
  if (n > limits_.max_request - std::min(request_bytes_, limits_.max_request)) {
    *error = "request of at least " + std::to_string(request_bytes_ + n) + " bytes is over the " +
             std::to_string(limits_.max_request) + "-byte limit";
    return false;
  }
  string_ = &list->emplace_back();
  string_left_ = n;
  in_string_ = n > 0;
  if (!in_string_) NextField();
  return true;
}

void RequestParser::NextField() {
  field_ = FieldAt(request_.op, ++index_);
  if (field_ == Field::kEnd && items_left_ > 0 && --items_left_ > 0) {
    index_ = 1;  // the next item of a counted request
    field_ = FieldAt(request_.op, index_);
  }
  StartField();
}

ParseResult ParseRequest(std::string_view input, const Limits& limits, Request* out,
                         size_t* consumed, std::string* error) {
  RequestParser parser(limits);
  std::string_view rest = input;
  ParseResult r = parser.Feed(&rest, out, error);
  if (r == ParseResult::kOk) *consumed = input.size() - rest.size();
  return r;
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
  if (op == static_cast<uint8_t>(Op::kAgent)) return "AGENT";
  if (op == static_cast<uint8_t>(Op::kClearWorkers)) return "CLEAR_WORKERS";
  return "opcode " + std::to_string(op);
}

std::string ForeignProtocol(std::string_view first_bytes) {
  static constexpr std::string_view kHttp[] = {"GET ",    "POST ",    "HEAD ",  "PUT ",
                                               "DELETE ", "OPTIONS ", "PATCH ", "PRI * HTTP/2"};
  for (std::string_view method : kHttp) {
    if (first_bytes.substr(0, method.size()) != method) continue;
    std::string line;
    for (char ch : first_bytes.substr(0, first_bytes.find_first_of("\r\n"))) {
      if (line.size() == 60) return "an HTTP request (\"" + line + "...\")";
      line += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
    }
    return "an HTTP request (\"" + line + "\")";
  }
  if (first_bytes.size() >= 2 && first_bytes[0] == 0x16 && first_bytes[1] == 0x03) {
    return "a TLS handshake (an https:// or other TLS client)";
  }
  if (first_bytes.substr(0, 4) == "SSH-") return "an SSH client's greeting";
  return "";
}

}  // namespace ddprun::rendezvous
