#include "ddp/store_exchange.hpp"

#include "base/format.hpp"

namespace ddprun::ddp {

std::string MissingRanks(rendezvous::StoreClient& store, const std::vector<std::string>& keys) {
  // The wait was cancelled cleanly: ask for each key to name who is missing.
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    auto there = store.Check({key});
    if (there.ok() && !*there) missing.push_back(key.substr(key.rfind('/') + 1));
  }
  std::string ranks;
  for (size_t i = 0; i < missing.size() && i < 16; ++i) ranks += (i ? "," : "") + missing[i];
  if (missing.size() > 16) ranks += ",... (" + std::to_string(missing.size()) + " in all)";
  return ranks;
}

StatusOr<std::vector<std::string>> ExchangeThroughStore(rendezvous::StoreClient& store,
                                                        const std::string& base, int rank, int size,
                                                        const std::string& mine,
                                                        std::chrono::milliseconds timeout) {
  if (Status s = store.Set(base + std::to_string(rank), mine); !s.ok()) return s;
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(base + std::to_string(r));
  Status waited = store.Wait(keys, timeout);
  if (waited.code() == StatusCode::kDeadlineExceeded) {
    if (const std::string ranks = MissingRanks(store, keys); !ranks.empty()) {
      return Status(StatusCode::kDeadlineExceeded,
                    "rank(s) " + ranks + " did not arrive within " +
                        FormatSeconds(timeout.count() / 1e3) + " s (no record under " + base +
                        "): they failed, hang or run other code before this point; their logs "
                        "say which");
    }
    // Every rank arrived as the wait ended: their records are there to read.
  } else if (!waited.ok()) {
    return waited;
  }
  return store.MultiGet(keys);
}

}  // namespace ddprun::ddp
