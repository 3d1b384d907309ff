#include "rendezvous/store_state.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::rendezvous {
namespace {

using Sent = std::vector<std::pair<ClientId, std::string>>;

// A StoreState whose replies are recorded, with one helper per request.
class Fixture {
 public:
  Fixture() : state_([this](ClientId c, std::string b) { sent_.emplace_back(c, std::move(b)); }) {}

  bool Do(ClientId c, Op op, std::vector<std::string> keys = {},
          std::vector<std::string> values = {}, int64_t number = 0) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = number;
    return state_.Handle(c, r);
  }
  void Set(ClientId c, const std::string& k, const std::string& v) {
    REQUIRE(Do(c, Op::kSet, {k}, {v}));
  }

  // The replies sent since the last call.
  Sent Take() { return std::exchange(sent_, {}); }

  StoreState& state() { return state_; }

 private:
  Sent sent_;
  StoreState state_;
};

std::string U8(uint8_t v) { return Encoder().U8(v).bytes(); }
std::string I64(int64_t v) { return Encoder().I64(v).bytes(); }
std::string Str(const std::string& s) { return Encoder().Str(s).bytes(); }

// Reads back the stored value of a key with GET.
std::string Get(Fixture& f, const std::string& key) {
  REQUIRE(f.Do(99, Op::kGet, {key}));
  Sent s = f.Take();
  REQUIRE(s.size() == 1);
  return s[0].second.substr(8);
}

TEST_CASE("ReplySize is the size of the reply that handling the request makes") {
  Fixture f;
  f.Set(1, "big", std::string(5000, 'b'));
  f.Set(1, "small", "s");
  REQUIRE(f.Do(1, Op::kQueuePush, {"q"}, {std::string(300, 'q')}));
  f.Take();
  const auto same = [&](Op op, const std::vector<std::string>& keys,
                        const std::vector<std::string>& values) {
    Request r;
    r.op = op;
    r.keys = keys;
    r.values = values;
    const size_t predicted = f.state().ReplySize(r);
    REQUIRE(f.Do(2, op, keys, values));
    const Sent sent = f.Take();
    REQUIRE(sent.size() == 1);
    CHECK(predicted == sent[0].second.size());
  };
  same(Op::kGet, {"big"}, {});
  same(Op::kGet, {"missing"}, {});
  same(Op::kMultiGet, {"big", "small", "big", "missing"}, {});
  same(Op::kQueuePop, {"q"}, {});
  same(Op::kQueuePop, {"q"}, {});  // empty now
  same(Op::kListKeys, {}, {});
  Request count;  // the others: small, at most the size said
  count.op = Op::kGetNumKeys;
  CHECK(f.state().ReplySize(count) == 16);
  // COMPARE_SET replies one of three values: never more than predicted.
  Request cas;
  cas.op = Op::kCompareSet;
  cas.keys = {"big"};
  cas.values = {"no", std::string(9000, 'd')};
  const size_t bound = f.state().ReplySize(cas);
  CHECK(bound == 8 + 9000);
  REQUIRE(f.Do(2, Op::kCompareSet, cas.keys, cas.values));
  CHECK(f.Take()[0].second.size() <= bound);
}

TEST_CASE("SET wakes a deferred WAIT exactly once") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kWait, {"/k"}));
  CHECK(f.Take().empty());
  f.Set(2, "/k", "v");
  CHECK(f.Take() == Sent{{1, U8(kStopWaiting)}});
  f.Set(2, "/k", "w");
  CHECK(f.Take().empty());
}

TEST_CASE("WAIT on present keys replies at once") {
  Fixture f;
  f.Set(2, "/a", "1");
  f.Set(2, "/b", "2");
  REQUIRE(f.Do(1, Op::kWait, {"/a", "/b"}));
  CHECK(f.Take() == Sent{{1, U8(kStopWaiting)}});
}

TEST_CASE("WAIT on two missing keys replies only after both are set") {
  Fixture f;
  f.Set(2, "/a", "1");
  REQUIRE(f.Do(1, Op::kWait, {"/a", "/b", "/c"}));
  f.Set(2, "/b", "2");
  CHECK(f.Take().empty());
  f.Set(2, "/b", "again");
  CHECK(f.Take().empty());
  f.Set(2, "/c", "3");
  CHECK(f.Take() == Sent{{1, U8(kStopWaiting)}});
}

TEST_CASE("CANCEL_WAIT replies 1 and drops the wait") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kWait, {"/late"}));
  REQUIRE(f.Do(1, Op::kCancelWait));
  CHECK(f.Take() == Sent{{1, U8(kWaitCanceled)}});
  f.Set(2, "/late", "v");
  CHECK(f.Take().empty());
}

TEST_CASE("CANCEL_WAIT after the wait finished replies 0 then 1") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kWait, {"/late"}));
  f.Set(2, "/late", "v");
  REQUIRE(f.Do(1, Op::kCancelWait));
  CHECK(f.Take() == Sent{{1, U8(kStopWaiting)}, {1, U8(kWaitCanceled)}});
}

TEST_CASE("Disconnect drops the client's waits and no others") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kWait, {"/k"}));
  REQUIRE(f.Do(3, Op::kWait, {"/k"}));
  f.state().Disconnect(1);
  f.Set(2, "/k", "v");
  CHECK(f.Take() == Sent{{3, U8(kStopWaiting)}});
}

TEST_CASE("COMPARE_SET on a missing key with empty expected stores desired") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kCompareSet, {"/n"}, {"", "x"}));
  CHECK(f.Take() == Sent{{1, Str("x")}});
  CHECK(Get(f, "/n") == "x");
}

TEST_CASE("COMPARE_SET on a missing key with non-empty expected returns expected, stores nothing") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kCompareSet, {"/n"}, {"zz", "x"}));
  CHECK(f.Take() == Sent{{1, Str("zz")}});
  CHECK(f.state().num_keys() == 0);
}

TEST_CASE("COMPARE_SET on a present key replaces only on a match and returns what is stored") {
  Fixture f;
  f.Set(2, "/n", "old");
  REQUIRE(f.Do(1, Op::kCompareSet, {"/n"}, {"nope", "x"}));
  CHECK(f.Take() == Sent{{1, Str("old")}});
  REQUIRE(f.Do(1, Op::kCompareSet, {"/n"}, {"old", "new"}));
  CHECK(f.Take() == Sent{{1, Str("new")}});
  CHECK(Get(f, "/n") == "new");
}

TEST_CASE("COMPARE_SET wakes waiters on the key") {
  Fixture f;
  REQUIRE(f.Do(3, Op::kWait, {"/n"}));
  REQUIRE(f.Do(1, Op::kCompareSet, {"/n"}, {"", "x"}));
  Sent s = f.Take();
  CHECK(std::count(s.begin(), s.end(), std::make_pair(ClientId{3}, U8(kStopWaiting))) == 1);
}

TEST_CASE("ADD stores decimal text, counts a missing key as 0, and goes negative") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kAdd, {"init/"}, {}, 1));
  CHECK(f.Take() == Sent{{1, I64(1)}});
  f.Set(2, "/c", "5");
  REQUIRE(f.Do(1, Op::kAdd, {"/c"}, {}, -7));
  CHECK(f.Take() == Sent{{1, I64(-2)}});
  CHECK(Get(f, "/c") == "-2");
  REQUIRE(f.Do(1, Op::kAdd, {"/c"}, {}, 0));
  CHECK(f.Take() == Sent{{1, I64(-2)}});
}

TEST_CASE("ADD and BARRIER counters wrap around instead of overflowing") {
  Fixture f;
  const int64_t max = INT64_MAX;
  REQUIRE(f.Do(1, Op::kAdd, {"/c"}, {}, max));
  REQUIRE(f.Do(1, Op::kAdd, {"/c"}, {}, 1));
  CHECK(f.Take() == Sent{{1, I64(max)}, {1, I64(INT64_MIN)}});
  CHECK(Get(f, "/c") == std::to_string(INT64_MIN));
  f.Set(2, "/bar", std::to_string(max));
  REQUIRE(f.Do(1, Op::kBarrier, {"/bar"}, {}, 2));
  CHECK(Get(f, "/bar") == std::to_string(INT64_MIN));
  CHECK(f.Take().empty());  // INT64_MIN < 2: still waiting
}

TEST_CASE("ADD on a value that is not a number fails and replies nothing") {
  Fixture f;
  f.Set(2, "/c", "abc");
  CHECK_FALSE(f.Do(1, Op::kAdd, {"/c"}, {}, 1));
  f.Set(2, "/e", "");
  CHECK_FALSE(f.Do(1, Op::kAdd, {"/e"}, {}, 1));
  CHECK(f.Take().empty());
  CHECK(Get(f, "/c") == "abc");
  // The refusal tells a word from a number out of range (attack 108: both "not a number").
  CHECK_FALSE(f.Do(1, Op::kAdd, {"/c"}, {}, 1));
  CHECK(f.state().refusal() == "ADD to a value that is not a number (\"abc\")");
  f.Set(2, "/big", "99999999999999999999");
  CHECK_FALSE(f.Do(1, Op::kAdd, {"/big"}, {}, 1));
  CHECK(f.state().refusal() ==
        "ADD to a value that is a number out of a 64-bit counter's range "
        "(\"99999999999999999999\")");
  // Attack 110: a sign alone was "out of range", digits past the range with text after them
  // "not a number", and a newline in the value forged a log line.
  for (auto [value, what] :
       {std::pair{"-", "not a number (\"-\")"}, std::pair{" ", "not a number (\" \")"},
        std::pair{"--5", "not a number (\"--5\")"},
        std::pair{"99999999999999999999abc",
                  "a number out of a 64-bit counter's range "
                  "(\"99999999999999999999abc\")"},
        std::pair{"x\nFAKE", "not a number (\"x\\x0aFAKE\")"}}) {
    f.Set(2, "/v", value);
    CHECK_FALSE(f.Do(1, Op::kAdd, {"/v"}, {}, 1));
    CHECK(f.state().refusal() == std::string("ADD to a value that is ") + what);
  }
}

TEST_CASE("ADD reads a stored value as PyTorch's std::stoll does: space, a sign, trailing text") {
  Fixture f;
  for (auto [text, sum] : {std::pair{"5abc", 6}, std::pair{" 7", 8}, std::pair{"+3", 4},
                           std::pair{"\t-4\n", -3}, std::pair{"12 34", 13}}) {
    f.Set(2, "/c", text);
    REQUIRE(f.Do(1, Op::kAdd, {"/c"}, {}, 1));
    CHECK(f.Take() == Sent{{1, I64(sum)}});
  }
  f.Set(2, "/c", "-9223372036854775808");
  REQUIRE(f.Do(1, Op::kAdd, {"/c"}, {}, 0));
  CHECK(f.Take() == Sent{{1, I64(INT64_MIN)}});
  // No digit after the sign, two signs, or out of i64's range: stoll throws.
  for (const char* text : {"+", "-x", "+-1", "--1", " ", "9223372036854775808"}) {
    f.Set(2, "/c", text);
    CHECK_FALSE(f.Do(1, Op::kAdd, {"/c"}, {}, 1));
  }
}

TEST_CASE("ADD wakes waiters on the key") {
  Fixture f;
  REQUIRE(f.Do(3, Op::kWait, {"/c"}));
  REQUIRE(f.Do(1, Op::kAdd, {"/c"}, {}, 1));
  CHECK(f.Take() == Sent{{1, I64(1)}, {3, U8(kStopWaiting)}});
}

TEST_CASE("GET on a missing key returns an empty string") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kGet, {"/none"}));
  CHECK(f.Take() == Sent{{1, Str("")}});
}

TEST_CASE("DELETE_KEY returns 1 for a present key, then 0") {
  Fixture f;
  f.Set(2, "/k", "v");
  REQUIRE(f.Do(1, Op::kDeleteKey, {"/k"}));
  REQUIRE(f.Do(1, Op::kDeleteKey, {"/k"}));
  CHECK(f.Take() == Sent{{1, I64(1)}, {1, I64(0)}});
}

TEST_CASE("GETNUMKEYS counts keys, not queues") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kGetNumKeys));
  f.Set(2, "init/", "1");
  f.Set(2, "/a", "1");
  REQUIRE(f.Do(2, Op::kQueuePush, {"/q"}, {"x"}));
  REQUIRE(f.Do(1, Op::kGetNumKeys));
  CHECK(f.Take() == Sent{{1, I64(0)}, {1, I64(2)}});
}

TEST_CASE("MULTI_SET sets every pair and MULTI_GET reads them in request order") {
  Fixture f;
  REQUIRE(f.Do(3, Op::kWait, {"/a", "/b"}));
  REQUIRE(f.Do(1, Op::kMultiSet, {"/a", "/b"}, {"1", "22"}));
  CHECK(f.Take() == Sent{{3, U8(kStopWaiting)}});
  REQUIRE(f.Do(1, Op::kMultiGet, {"/b", "/missing", "/a"}));
  CHECK(f.Take() == Sent{{1, Str("22") + Str("") + Str("1")}});
}

TEST_CASE("APPEND creates a missing key, appends to a present one, and wakes waiters") {
  Fixture f;
  REQUIRE(f.Do(3, Op::kWait, {"/log"}));
  REQUIRE(f.Do(1, Op::kAppend, {"/log"}, {"ab"}));
  CHECK(f.Take() == Sent{{3, U8(kStopWaiting)}});
  REQUIRE(f.Do(1, Op::kAppend, {"/log"}, {"cd"}));
  CHECK(Get(f, "/log") == "abcd");
}

TEST_CASE("queue push, pop and length") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kQueueLen, {"/q"}));
  REQUIRE(f.Do(1, Op::kQueuePop, {"/q"}));
  CHECK(f.Take() == Sent{{1, I64(0)}, {1, I64(0)}});
  REQUIRE(f.Do(1, Op::kQueuePush, {"/q"}, {"x"}));
  REQUIRE(f.Do(1, Op::kQueuePush, {"/q"}, {"y"}));
  REQUIRE(f.Do(1, Op::kQueueLen, {"/q"}));
  REQUIRE(f.Do(1, Op::kQueuePop, {"/q"}));
  REQUIRE(f.Do(1, Op::kQueuePop, {"/q"}));
  REQUIRE(f.Do(1, Op::kQueuePop, {"/q"}));
  CHECK(f.Take() == Sent{{1, I64(2)}, {1, I64(2) + Str("x")}, {1, I64(1) + Str("y")}, {1, I64(0)}});
}

TEST_CASE("a queue push wakes exactly one waiter, and a non-empty queue counts as present") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kWait, {"/q"}));
  REQUIRE(f.Do(3, Op::kWait, {"/q"}));
  REQUIRE(f.Do(2, Op::kQueuePush, {"/q"}, {"x"}));
  CHECK(f.Take() == Sent{{1, U8(kStopWaiting)}});
  REQUIRE(f.Do(2, Op::kQueuePush, {"/q"}, {"y"}));
  CHECK(f.Take() == Sent{{3, U8(kStopWaiting)}});
  REQUIRE(f.Do(4, Op::kWait, {"/q"}));
  REQUIRE(f.Do(4, Op::kCheck, {"/q"}));
  CHECK(f.Take() == Sent{{4, U8(kStopWaiting)}, {4, U8(kReady)}});
}

TEST_CASE("CHECK is READY only when every key is present") {
  Fixture f;
  f.Set(2, "/k", "v");
  REQUIRE(f.Do(1, Op::kCheck, {"/k", "/zz"}));
  REQUIRE(f.Do(1, Op::kCheck, {"/k"}));
  CHECK(f.Take() == Sent{{1, U8(kNotReady)}, {1, U8(kReady)}});
}

TEST_CASE("LIST_KEYS returns every key, raw") {
  Fixture f;
  f.Set(2, "init/", "1");
  f.Set(2, "/a", "1");
  REQUIRE(f.Do(1, Op::kListKeys));
  Sent s = f.Take();
  REQUIRE(s.size() == 1);
  // Hash order: either permutation.
  std::string a = I64(2) + Str("init/") + Str("/a");
  std::string b = I64(2) + Str("/a") + Str("init/");
  CHECK((s[0].second == a || s[0].second == b));
}

TEST_CASE("BARRIER replies when the count reaches the world size and wakes earlier arrivals") {
  Fixture f;
  REQUIRE(f.Do(1, Op::kBarrier, {"/bar"}, {}, 3));
  CHECK(f.Take().empty());
  REQUIRE(f.Do(2, Op::kBarrier, {"/bar"}, {}, 3));
  CHECK(f.Take().empty());
  REQUIRE(f.Do(3, Op::kBarrier, {"/bar"}, {}, 3));
  Sent s = f.Take();
  REQUIRE(s.size() == 3);
  CHECK(s[0] == std::make_pair(ClientId{3}, U8(kStopWaiting)));
  std::vector<ClientId> woken{s[1].first, s[2].first};
  std::sort(woken.begin(), woken.end());
  CHECK(woken == std::vector<ClientId>{1, 2});
  CHECK(Get(f, "/bar") == "3");
}

TEST_CASE("a WAIT on a barrier key completes only when the barrier does") {
  Fixture f;
  REQUIRE(f.Do(5, Op::kWait, {"/bar"}));
  REQUIRE(f.Do(1, Op::kBarrier, {"/bar"}, {}, 2));
  // The first arrival stores "1" but does not wake: waiters are woken only at world size.
  CHECK(f.Take().empty());
  REQUIRE(f.Do(2, Op::kBarrier, {"/bar"}, {}, 2));
  Sent s = f.Take();
  REQUIRE(s.size() == 3);
  CHECK(s[0] == std::make_pair(ClientId{2}, U8(kStopWaiting)));
}

TEST_CASE("Clear empties keys and queues; waiting clients keep waiting") {
  Fixture f;
  f.Set(2, "/a", "1");
  REQUIRE(f.Do(2, Op::kQueuePush, {"/q"}, {"x"}));
  REQUIRE(f.Do(1, Op::kWait, {"/b"}));
  f.state().Clear();
  CHECK(f.state().num_keys() == 0);
  REQUIRE(f.Do(1, Op::kQueueLen, {"/q"}));
  CHECK(f.Take() == Sent{{1, I64(0)}});
  f.Set(2, "/b", "1");
  CHECK(f.Take() == Sent{{1, U8(kStopWaiting)}});
}

TEST_CASE("VALIDATE and AUTH are not state requests") {
  Fixture f;
  CHECK_FALSE(f.Do(1, Op::kValidate));
  CHECK_FALSE(f.Do(1, Op::kAuth, {}, {"t"}));
}

TEST_CASE("PING echoes its nonce") {
  Fixture f;
  Request r;
  r.op = Op::kPing;
  r.word = 4660;
  REQUIRE(f.state().Handle(1, r));
  CHECK(f.Take() == Sent{{1, Encoder().U32(4660).bytes()}});
}

}  // namespace
}  // namespace ddprun::rendezvous
