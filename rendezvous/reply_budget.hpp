// How much the store holds in replies its clients have not read yet, all
// connections together. No sockets and no clock of its own: the server says
// what each connection holds and when, and asks whose next request may be
// read and whom to close (reply_budget_test.cpp, with made-up times).
//
//   - A connection's next request is read only once its socket has taken
//     every reply before it (backpressure): a client that reads nothing makes
//     the store hold one reply for it, not a pile (attack 93: 10 clients that
//     each left a 50 MiB value unread, 256 MiB apiece, held 2.6 GB).
//   - While the replies held for all connections together pass `max_total`,
//     a request whose reply would pass `small_reply` (a GET of a large value)
//     waits: the replies being read drain first. Many ranks reading one large
//     value at once are all served, in turn (attack 94: a bound that closed
//     the largest holder closed 3 of 16 honest readers of 60 MiB). Smaller
//     replies are made at once: handshakes, keep-alives and the rendezvous go
//     on while slow readers hold the store past the bound (attack 96).
//   - Over the bound, a connection whose replies have not moved for
//     `stalled_after` is closed, the one holding most first, until the rest
//     fit: a client that reads nothing cannot keep the store from serving.
//     Moving is any byte its peer took (acknowledged), however slowly.
//     A closing connection's replies count until they are freed.
//     An honest rank paused that long with a large reply unread (SIGSTOP, a
//     debugger) is closed too, only while the store is over the bound.
//
// Thread safety: none; the server calls it from its loop thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <unordered_map>
#include <vector>

#include "rendezvous/store_state.hpp"

namespace ddprun::rendezvous {

struct ReplyLimits {
  size_t max_total = 512 * 1024 * 1024;
  std::chrono::milliseconds stalled_after{5'000};
  std::chrono::milliseconds look_every{500};  // how often progress is looked at, over the bound
  size_t small_reply = 64 * 1024;             // made past the bound all the same
};

class ReplyBudget {
 public:
  using Time = std::chrono::steady_clock::time_point;

  explicit ReplyBudget(ReplyLimits limits) : limits_(limits) {}

  // At `now`, `id` holds `held` bytes of replies, `untaken` of which its
  // peer has not taken yet. A change in either is progress.
  void Update(ClientId id, size_t held, size_t untaken, Time now);
  // `id` is being closed: its replies count until freed, and it is not
  // closed again (Stalled).
  void Closing(ClientId id);
  // `id` is gone (unknown ids are ignored).
  void Remove(ClientId id);

  // Whether `id`'s next request may be read now: its replies were taken.
  bool MayRead(ClientId id) const { return held(id) == 0; }
  // Whether a reply of `bytes` may be made now.
  bool MayMake(size_t bytes) const { return !over() || bytes <= limits_.small_reply; }
  bool over() const { return total_ > limits_.max_total; }
  size_t total() const { return total_; }
  size_t held(ClientId id) const;

  // Over the bound at `now`: the connections to close, those holding most
  // first, until the rest fit; each has made no progress for stalled_after.
  std::vector<ClientId> Stalled(Time now) const;
  // The connections that hold replies: their progress is looked at then.
  std::vector<ClientId> Holders() const;
  // When to look at progress again: nullopt while under the bound.
  std::optional<Time> NextLook(Time now) const;

  const ReplyLimits& limits() const { return limits_; }

 private:
  struct Holding {
    size_t held = 0;
    size_t untaken = 0;
    Time moved{};  // when held or untaken last changed
    bool closing = false;
  };

  ReplyLimits limits_;
  std::unordered_map<ClientId, Holding> holding_;  // connections that hold replies only
  size_t total_ = 0;
};

}  // namespace ddprun::rendezvous
