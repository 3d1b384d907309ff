// The diagnosis of init_process_group timing out for ranks that never came
// (supervisor/explain.cpp, SetUpTimeout): the rank named is the one waited
// for, not the one that failed first.
#include <doctest/doctest.h>

#include <string>

#include "supervisor/explain.hpp"
#include "tests/unit/supervisor/explain_test_util.hpp"

namespace ddprun::supervisor {
namespace {

using explain_test::Failed;

// PyTorch 2.11, Gloo, rank 1 asleep before init_process_group(timeout=5 s).
const char* const kGlooWait =
    "  File \"/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py\", line "
    "2109, in _new_process_group_helper\n"
    "    backend_class = ProcessGroupGloo(\n"
    "torch.distributed.DistStoreError: wait timeout after 5000ms, keys: /default_pg/0//cpu//0/1";

TEST_CASE("explain: Gloo's set-up waiting for a rank names the rank waited for") {
  ExplainContext c;
  c.peers_running = true;
  auto e = Explain(Failed("", kGlooWait), c);
  REQUIRE(e.has_value());
  CHECK(e->signature == "process group set-up timeout");
  CHECK(e->cause ==
        "the worker waited 5 s (init_process_group's timeout) for rank 1 to set up the Gloo "
        "process group with it, and rank 1 never did: it had not called init_process_group by "
        "then (or got another world or store); Gloo waits for the ranks in turn, so later ones "
        "may be missing too; rank 1 was still running on this host when this worker gave up: its "
        "output says where it was");
  CHECK(e->fix.rfind("call init_process_group on every rank before any slow or rank-dependent "
                     "work",
                     0) == 0);
  c.peers_running = false;
  c.multi_node = true;
  e = Explain(
      Failed("", "DistStoreError: wait timeout after 1500 ms, keys: /default_pg/0//cpu//0/12"), c);
  REQUIRE(e.has_value());
  CHECK(e->cause.find("waited 1.5 s (init_process_group's timeout) for rank 12 ") !=
        std::string::npos);
  CHECK(e->cause.find("; the log of rank 12's node says where it was") != std::string::npos);
  // A key of another kind (a user's own store.wait, NCCL's unique id) names no rank.
  CHECK_FALSE(Explain(Failed("", "DistStoreError: wait timeout after 5000ms, keys: /mykey"), c));
  // A key of an unknown layout names no rank either.
  CHECK_FALSE(Explain(Failed("", "wait timeout after 5000ms, keys: /pg/3//cpu//0/12"), c));
  // A count too long for a double is still no crash.
  e = Explain(Failed("", "wait timeout after " + std::string(400, '9') +
                             "ms, keys: /default_pg/0//cpu//0/2"),
              c);
  REQUIRE(e.has_value());
  CHECK(e->cause.find("for rank 2 ") != std::string::npos);
}

TEST_CASE("explain: a new_group's set-up waiting names the rank within that group") {
  // Attack 100: new_group([1, 2]) with rank 2 late; rank 1 waited for group rank 1 (global rank
  // 2) and was told it waited for "rank 1", itself.
  auto e = Explain(Failed("",
                          "torch.distributed.DistStoreError: wait timeout after 3000ms, keys: "
                          "/default_pg/0//1//cpu//0/1"),
                   {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "process group set-up timeout");
  CHECK(e->cause ==
        "the worker waited 3 s (new_group's timeout) for group rank 1 of process group 1 (the "
        "rank at position 1 of the ranks given to new_group, counted from 0) to set up the Gloo "
        "group with it, and it never did: that rank had not called new_group for this group by "
        "then");
  CHECK(e->fix.rfind("every rank calls new_group for every group", 0) == 0);
}

TEST_CASE("explain: init_process_group's store-based barrier timing out counts the ranks") {
  const std::string text =
      "torch.distributed.DistStoreError: Timed out initializing process group in store based "
      "barrier on rank 0, for key: store_based_barrier_key:1 (world_size=4, "
      "num_workers_joined=3, timeout=0:00:05 error=wait timeout after 10000ms, keys: "
      "/store_based_barrier_key:1:last_worker)";
  auto e = Explain(Failed("", text), {});
  REQUIRE(e.has_value());
  CHECK(e->signature == "process group set-up timeout");
  CHECK(e->cause ==
        "only 3 of 4 ranks reached init_process_group's barrier (TORCH_DIST_INIT_BARRIER) within "
        "its timeout (0:00:05): the others had not called init_process_group by then; their "
        "output says where they were");
}

}  // namespace
}  // namespace ddprun::supervisor
