// Each rank's record, published through the store, read back by every rank:
// how the NCCL group shares its device records. A rank that never publishes is
// named when the wait times out, not left as "waited for keys".
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/status.hpp"
#include "rendezvous/store_client.hpp"

namespace ddprun::ddp {

// After a wait for `keys` (each ending in "/RANK") timed out: the ranks whose
// key is still missing, the first 16 and how many in all; "" when none is.
std::string MissingRanks(rendezvous::StoreClient& store, const std::vector<std::string>& keys);

// Sets `base`+rank to `mine`, waits up to `timeout` for every rank's key, and
// returns the values in rank order. kDeadlineExceeded names the ranks whose
// key is missing (the first 16, and how many in all).
StatusOr<std::vector<std::string>> ExchangeThroughStore(rendezvous::StoreClient& store,
                                                        const std::string& base, int rank, int size,
                                                        const std::string& mine,
                                                        std::chrono::milliseconds timeout);

}  // namespace ddprun::ddp
