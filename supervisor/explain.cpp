#include "supervisor/explain.hpp"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <vector>

#include "base/format.hpp"
#include "supervisor/explain_entries.hpp"

namespace ddprun::supervisor {

namespace explain {

std::optional<std::smatch> Find(const std::string& text, const char* pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return std::nullopt;
  return m;
}

bool Has(const std::string& text, const char* needle) {
  return text.find(needle) != std::string::npos;
}

Explanation Lines(std::string cause, std::string fix) {
  Explanation e;
  e.cause = std::move(cause);
  e.fix = std::move(fix);
  return e;
}

}  // namespace explain

namespace {

using namespace explain;  // NOLINT(google-build-using-namespace): the entries' own helpers

// `text` from its last Python traceback on, with the tracebacks chained to
// it ("During handling of the above exception, ..."): the exception the
// worker died of, not what it printed and handled before. The whole text
// when it holds no traceback.
std::string FromLastTraceback(const std::string& text) {
  static const std::string kHeader = "Traceback (most recent call last):";
  size_t at = text.rfind(kHeader);
  if (at == std::string::npos) return text;
  for (bool chained = true; chained;) {
    // "...another exception occurred:", a blank line, then the header (each
    // line perhaps "[rankN]: " first, as PyTorch prints them): two newlines.
    chained = false;
    for (const std::string marker :
         {"another exception occurred:", "the direct cause of the following exception:"}) {
      const size_t m = text.rfind(marker, at);
      if (m == std::string::npos) continue;
      const size_t gap = m + marker.size();
      if (gap > at || std::count(text.begin() + static_cast<long>(gap),
                                 text.begin() + static_cast<long>(at), '\n') != 2) {
        continue;
      }
      const size_t previous = text.rfind(kHeader, m);
      if (previous == std::string::npos) continue;
      at = previous;
      chained = true;
      break;
    }
  }
  const size_t line = text.rfind('\n', at);
  return text.substr(line == std::string::npos ? 0 : line + 1);
}

// The text a failure is matched against: its traceback or message, then its
// last output lines (a worker without an error file still printed why). A
// Python traceback narrows it to the exception the worker died of: the error
// file's when there is one, else the output's last.
std::string TextOf(const FailureRecord& f) {
  if (f.message.find("Traceback (most recent call last):") != std::string::npos) {
    return FromLastTraceback(f.message);
  }
  return f.message + "\n" + FromLastTraceback(f.output_tail);
}

// The quoted name after `marker` ("No module named 'torch'" gives torch).
std::optional<std::string> QuotedAfter(const std::string& text, const std::string& marker) {
  auto at = text.rfind(marker);
  if (at == std::string::npos) return std::nullopt;
  size_t open = at + marker.size();
  if (open >= text.size() || (text[open] != '\'' && text[open] != '"')) return std::nullopt;
  size_t close = text.find(text[open], open + 1);
  if (close == std::string::npos || close == open + 1 || close - open > 200) return std::nullopt;
  return text.substr(open + 1, close - open - 1);
}

struct Entry {
  const char* signature;
  std::function<Match(const std::string&, const ExplainContext&)> match;
};

Match ModuleNotFound(const std::string& text, const ExplainContext& c) {
  auto module = QuotedAfter(text, "ModuleNotFoundError: No module named ");
  if (!module) return std::nullopt;
  const std::string top = module->substr(0, module->find('.'));
  return Lines("the workers' Python cannot import " + *module +
                   (c.interpreter.empty()
                        ? ""
                        : ": they ran " + c.interpreter + " (from " + c.interpreter_source + ")"),
               "install " + top +
                   " into that Python's environment, or run the workers under the Python that "
                   "has it: PYTHON_EXEC=/path/to/python, or the ddprun installed in that "
                   "environment");
}

// torch/csrc/distributed/c10d/reducer.cpp, Reducer::ensure_prior_reduction_finished.
Match UnusedParameters(const std::string& text, const ExplainContext&) {
  if (!Has(text, "Expected to have finished reduction in the prior iteration")) return {};
  auto names = Find(text, R"(Parameters which did not receive grad for rank (\d+): ([^\n]+))");
  auto indices =
      Find(text, R"(Parameter indices which did not receive grad for rank (\d+): ([\d ]+))");
  std::string which, rank = "?";
  if (names) which = (*names)[2].str(), rank = (*names)[1].str();
  if (indices) {
    std::string list = (*indices)[2].str();
    while (!list.empty() && list.back() == ' ') list.pop_back();
    which += (which.empty() ? "with indices " : " (indices ") + list + (names ? ")" : "");
    rank = (*indices)[1].str();
  }
  const std::string subject = which.empty() ? "some parameters" : "parameters " + which;
  if (Has(text, "not compatible with static_graph set to True")) {
    return Lines("DDP(static_graph=True) got no gradient for " + subject + " on rank " + rank +
                     ": the training graph changed between iterations",
                 "pass static_graph=False to DistributedDataParallel, or use the same "
                 "parameters in every iteration");
  }
  return Lines(
      "DDP got no gradient for " + subject + " on rank " + rank +
          " in the previous iteration: they took no part in producing the loss",
      "use them in the loss, freeze them (requires_grad_(False)) before wrapping the model, or "
      "pass find_unused_parameters=True to DistributedDataParallel" +
          std::string(names ? "" : "; TORCH_DISTRIBUTED_DEBUG=INFO names the parameters"));
}

// DDP's constructor compares the parameters' number and shapes across ranks
// (torch/csrc/distributed/c10d/reducer.cpp, verify_params_across_processes).
Match ModelMismatch(const std::string& text, const ExplainContext&) {
  const char* fix =
      "build the model the same way on every rank before DistributedDataParallel(model): the "
      "same configuration and code path, no layers that depend on the rank; DDP broadcasts "
      "rank 0's values, never its shapes";
  if (auto m = Find(text, R"(DDP expects same model across all ranks, but Rank (\d+) has (\d+) )"
                          R"(params, while rank (\d+) has inconsistent (\d+) params)")) {
    return Lines("the ranks built different models: rank " + (*m)[1].str() + " has " +
                     (*m)[2].str() + " parameters, rank " + (*m)[3].str() + " has " + (*m)[4].str(),
                 fix);
  }
  if (auto m = Find(text, R"(\[(\d+)\]: params\[(\d+)\] in this process with sizes (\[[^\]]*\]) )"
                          R"(appears not to match sizes of the same param in process (\d+))")) {
    return Lines("the ranks built different models: parameter " + (*m)[2].str() + " is " +
                     (*m)[3].str() + " on rank " + (*m)[1].str() + " and another shape on rank " +
                     (*m)[4].str(),
                 fix);
  }
  return {};
}

// torch/csrc/autograd/saved_variable.cpp, SavedVariable::unpack.
Match InplaceModified(const std::string& text, const ExplainContext&) {
  auto m =
      Find(text, R"(one of the variables needed for gradient computation has been modified by an )"
                 R"(inplace operation: (\[[^\]\[]+\[[^\]]*\]\])[^\n]*? is at version (\d+); )"
                 R"(expected version (\d+) instead)");
  if (!m) return {};
  return Lines("autograd saved the tensor " + (*m)[1].str() +
                   " for backward and it was changed in place before backward (version " +
                   (*m)[2].str() + ", expected " + (*m)[3].str() + ")",
               "update a buffer the forward used out of place (self.buf = self.buf * k) or "
               "after backward; torch.autograd.set_detect_anomaly(True) names the op; under "
               "DDP, broadcast_buffers=False where the ranks need not share buffers");
}

// init_process_group waiting for ranks that never came: Gloo's connection
// set-up reads each rank's address from the store in turn (key
// ".../cpu//<device>/<rank>": c10d's ProcessGroupGloo), and the barrier
// after it (TORCH_DIST_INIT_BARRIER=1: distributed_c10d.py,
// _store_based_barrier). The worker that timed out is the first to fail,
// not the cause: the rank it waited for is.
Match SetUpTimeout(const std::string& text, const ExplainContext& c) {
  const std::string fix =
      "call init_process_group on every rank before any slow or rank-dependent work (a "
      "download or data preparation on one rank, a checkpoint load), or give it a longer "
      "timeout=; the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE on every rank (ddprun sets "
      "them)";
  // The default group's keys are /default_pg/N//cpu//D/R, a new_group's
  // /default_pg/N//G//cpu//D/R: R is the rank within that group.
  if (auto m = Find(text, R"(wait timeout after (\d+) ?ms, keys: /default_pg/\d+/(?:/([^/\s]+)/)?)"
                          R"(/cpu//\d+/(\d+)\b)")) {
    const std::string waited = FormatSeconds(std::strtod((*m)[1].str().c_str(), nullptr) / 1000);
    const std::string rank = (*m)[3].str();
    if ((*m)[2].matched) {
      // attack 100: group rank 1 of new_group([1, 2]) was named as global rank 1.
      const std::string group = (*m)[2].str();
      return Lines("the worker waited " + waited + " s (new_group's timeout) for group rank " +
                       rank + " of process group " + group + " (the rank at position " + rank +
                       " of the ranks given to new_group, counted from 0) to set up the Gloo "
                       "group with it, and it never did: that rank had not called new_group for "
                       "this group by then",
                   "every rank calls new_group for every group, members or not, in the same "
                   "order; give new_group a longer timeout= if a rank is legitimately slower "
                   "to get there");
    }
    return Lines("the worker waited " + waited + " s (init_process_group's timeout) for rank " +
                     rank + " to set up the Gloo process group with it, and rank " + rank +
                     " never did: it had not called init_process_group by then (or got another "
                     "world or store); Gloo waits for the ranks in turn, so later ones may be "
                     "missing too; " +
                     (c.multi_node      ? "the log of rank " + rank + "'s node says where it was"
                      : c.peers_running ? "rank " + rank +
                                              " was still running on this host when this worker "
                                              "gave up: its output says where it was"
                                        : "rank " + rank + "'s output says where it was"),
                 fix);
  }
  if (auto m = Find(text, R"(Timed out initializing process group in store based barrier on )"
                          R"(rank \d+, for key: \S+ \(world_size=(\d+), num_workers_joined=(\d+), )"
                          R"(timeout=([^ )]+))")) {
    return Lines("only " + (*m)[2].str() + " of " + (*m)[1].str() +
                     " ranks reached init_process_group's barrier (TORCH_DIST_INIT_BARRIER) "
                     "within its timeout (" +
                     (*m)[3].str() +
                     "): the others had not called init_process_group by then; their " +
                     (c.multi_node ? "nodes' logs say" : "output says") + " where they were" +
                     (c.peers_running ? " (every other rank of this host was still running "
                                        "when this worker gave up)"
                                      : ""),
                 fix);
  }
  return {};
}

// ddprun's own verdict (supervisor/hang_check.cpp) on a worker that removed
// its heartbeat file and did not exit.
Match HungAtExit(const std::string& text, const ExplainContext&) {
  if (text.rfind("hung at exit: ", 0) != 0) return {};
  // ProcessGroupNCCL's destructor, when the group was never destroyed: 2.3-2.6, then 2.7 on.
  if (Has(text, "process group has NOT been destroyed before") ||
      Has(text, "destroy_process_group() was not called before program exit")) {
    return Lines(
        "the worker's program had finished but never destroyed its process group (PyTorch "
        "warned so): the group's teardown at exit waits, which NCCL needs every rank to do "
        "together",
        "call torch.distributed.destroy_process_group() on every rank at the end of the "
        "program; the dump's stacks show where it waits; the job is not restarted (that would "
        "run the finished program again)");
  }
  return Lines(
      "the worker's program had finished (it removed its heartbeat file) but its process "
      "did not exit: something in its exit waits (a process group's teardown, a thread "
      "that is not a daemon, a DataLoader worker, a CUDA or NCCL destructor)",
      "the dump's stacks show where it waits; call "
      "torch.distributed.destroy_process_group() on every rank before the end, join or "
      "daemonize threads; the job is not restarted (that would run the finished program "
      "again); --exit_timeout=0 waits for such an exit without a bound");
}

// torch/distributed/distributed_c10d.py, _get_default_group.
Match NoProcessGroup(const std::string& text, const ExplainContext&) {
  if (!Has(text, "Default process group has not been initialized")) return {};
  return Lines("the worker called torch.distributed before init_process_group",
               "call torch.distributed.init_process_group(backend) in every worker first; "
               "ddprun sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE for its env:// default");
}

// What training scripts raise on a non-finite loss, and anomaly mode's check
// (torch/csrc/autograd/engine.cpp: "Function 'X' returned nan values").
Match NonFiniteLoss(const std::string& text, const ExplainContext&) {
  auto m = Find(text, R"((?:[Ll]oss|LOSS) (?:is|became|=) ?(nan|NaN|NAN|inf|-inf|Inf))");
  auto fn = Find(text, R"(Function '(\w+)' returned nan values in its (\d+)\w* output)");
  if (!m && !fn) return {};
  return Lines(m ? "the loss became " + (*m)[1].str()
                 : "autograd's " + (*fn)[1].str() + " returned nan in its output " + (*fn)[2].str(),
               "with AMP call scaler.unscale_(optimizer) before clip_grad_norm_; lower or warm up "
               "the learning rate; train in bf16 rather than fp16; "
               "torch.autograd.set_detect_anomaly(True) names the first op to make a nan");
}

// A worker that lost a peer, or waited for one in a collective until a
// timeout, after a rank of its group had exited 0: the finished rank ran
// fewer collectives than it (uneven data, a data-dependent loop), and its
// exit closed the connections the others' next collective needed.
Match PeerFinished(const std::string& text, const ExplainContext& c) {
  if (c.finished_ranks.empty()) return {};
  std::string what;
  if (auto sign = LostPeerSign(text)) {
    what = "lost its connection to a peer (\"" + *sign + "\")";
  } else if (Has(text, "Watchdog caught collective operation timeout") ||
             Find(text, R"((?:ddp: [^\n]* timed out after|Timed out waiting \d+ ?ms for \w+))")) {
    what = "waited in a collective until its timeout";
  } else {
    return {};
  }
  const bool one = c.finished_ranks.size() == 1;
  return Lines("the worker " + what + " after " + RanksNoun(c.finished_ranks) + " had finished (" +
                   (one ? "exited 0, " : "exited 0, the last ") +
                   FormatSeconds(c.finished_seconds_before) +
                   " s earlier) while it still ran collectives: the ranks ran different numbers "
                   "of steps or collectives, and the one that ended left the others' next "
                   "collective without a partner",
               "give every rank the same number of steps: as many batches on each "
               "(DistributedSampler with drop_last=True, or the smallest count agreed with "
               "all_reduce(op=MIN)), or DDP's join() context manager for uneven inputs; a "
               "barrier before destroy_process_group() keeps a finished rank until all are");
}

// A shell worker's 128+N that nothing above explained: Explain() says what
// the code means; where to look is all there is to add.
Match SignalThroughShell(const std::string&, const ExplainContext& c) {
  if (!c.signal_via_shell) return {};
  return Lines("",
               "the command's own output above, if any, says why; dmesg shows a kill by the "
               "kernel; a shell script that runs its last command with exec passes the "
               "signal itself on to ddprun");
}

const std::vector<Entry>& Catalogue() {
  static const std::vector<Entry> kEntries = {
      {"hung at exit", HungAtExit},
      {"out of memory (OOM killer)", OomKilled},
      {"address space limit", AddressSpaceLimit},
      {"module not found", ModuleNotFound},
      {"unused parameters", UnusedParameters},
      {"model differs across ranks", ModelMismatch},
      {"in-place modified tensor", InplaceModified},
      {"process group set-up timeout", SetUpTimeout},
      {"a peer finished first", PeerFinished},
      {"collective timeout", CollectiveTimeout},
      {"Gloo timeout", GlooTimeout},
      {"DDP collective timeout", DdpCollectiveTimeout},
      {"DDP core set-up timeout", DdpSetUpTimeout},
      {"collectives diverged", CollectivesDiverged},
      {"monitored barrier", MonitoredBarrier},
      {"CUDA out of memory", CudaOutOfMemory},
      {"CUDA device-side assert", DeviceAssert},
      {"duplicate GPU", DuplicateGpu},
      {"invalid device ordinal", InvalidDeviceOrdinal},
      {"NCCL without a GPU", NcclWithoutGpu},
      {"address in use", AddressInUse},
      {"network interface", NetworkInterface},
      {"Gloo peer at loopback", GlooLoopbackPeer},
      {"process group made again", StaleGroupAddress},
      {"DataLoader bus error", DataLoaderBusError},
      {"shared memory full", SharedMemoryFull},
      {"NCCL shared memory", NcclSharedMemory},
      {"process group not initialized", NoProcessGroup},
      {"thread limit", ThreadLimit},
      {"non-finite loss", NonFiniteLoss},
      {"checkpoint cut short", CheckpointShortWrite},
      {"no space left", NoSpace},
      {"file too large", FileTooLarge},
      {"too many open files", TooManyOpenFiles},
      {"crashed at exit", CrashedAtExit},              // what the text names says more
      {"native crash", NativeCrash},                   // (both)
      {"signal through a shell", SignalThroughShell},  // last: only what the exit code says
  };
  return kEntries;
}

}  // namespace

std::optional<Explanation> Explain(const FailureRecord& failure, const ExplainContext& context) {
  const std::string text = TextOf(failure);
  ExplainContext c = context;
  c.core_dump = failure.core;
  c.hung = failure.hung;
  c.crashed_at_exit_after = failure.crashed_at_exit_after;
  c.output_tail = failure.output_tail;
  for (const auto& entry : Catalogue()) {
    if (auto e = entry.match(text, c)) {
      e->signature = entry.signature;
      if (c.signal_via_shell) {
        e->cause = "the worker, a shell, exited " + std::to_string(128 + c.unasked_signal) +
                   " = 128 + " + SignalName(c.unasked_signal) +
                   ": a command it ran died of that signal" +
                   (e->cause.empty() ? "" : "; " + e->cause);
      }
      return e;
    }
  }
  return std::nullopt;
}

std::optional<std::string> LostPeerSign(std::string_view text) {
  for (const char* sign : {"Connection reset by peer", "Connection closed by peer", "Broken pipe",
                           "ECONNRESET", "connection was closed by the remote"}) {
    if (text.find(sign) != std::string_view::npos) return sign;
  }
  return std::nullopt;
}

}  // namespace ddprun::supervisor
