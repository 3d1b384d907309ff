#include "examples/train/options.hpp"

#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <utility>

namespace ddprun::train {
namespace {

namespace po = boost::program_options;

constexpr int kMaxBucketCapMb = 1 << 20;  // 1 TiB
constexpr int kMaxTimeoutS = 365 * 24 * 3600;

po::options_description OptionTable(TrainOptions* o) {
  po::options_description d("train: the ddprun reference trainer (an MLP on synthetic data)");
  // clang-format off
  d.add_options()
      ("help,h", "print this help and exit")
      ("device", po::value(&o->device)->default_value("cpu"), "cpu or cuda")
      ("steps", po::value(&o->steps)->default_value(50), "training steps")
      ("batch", po::value(&o->batch)->default_value(32), "samples per rank per step")
      ("width", po::value(&o->width)->default_value(256), "hidden layer width")
      ("depth", po::value(&o->depth)->default_value(3), "number of hidden layers")
      ("seed", po::value<std::string>()->default_value("1"), "seed of data, teacher and weights")
      ("lr", po::value(&o->lr)->default_value(0.01f, "0.01"), "learning rate")
      ("optimizer", po::value<std::string>()->default_value("sgd"), "sgd or adam")
      ("amp", po::value<std::string>(), "fp16 or bf16: emulated mixed precision, loss scaling")
      ("clip", po::bool_switch(&o->clip), "clip gradients to global norm 1.0 (after unscaling)")
      ("unused-layer", po::bool_switch(&o->unused_layer),
       "add a layer that forward never uses (it gets no gradient)")
      ("find-unused-parameters", po::bool_switch(&o->find_unused_parameters),
       "reduce parameters without a gradient as zeros")
      ("no-broadcast-buffers", "do not broadcast buffers from rank 0 before each forward")
      ("bucket-cap-mb", po::value(&o->bucket_cap_mb), "gradient bucket cap in MiB (default 25)")
      ("grad-copies", po::bool_switch(&o->grad_copies),
       "keep the gradients in the model and copy them into and out of the reducer's buckets "
       "(default: gradients are views of the buckets)")
      ("collective-timeout", po::value(&o->collective_timeout_s),
       "seconds a collective may take, at least 0.001 (0 or not given: 600)")
      ("crash-at-step", po::value(&o->crash_at_step), "rank --hang-rank exits 1 at step N")
      ("hang-at-step", po::value(&o->hang_at_step),
       "rank --hang-rank stops before step N's backward, forever")
      ("hang-at-exit", po::bool_switch(&o->hang_at_exit),
       "rank --hang-rank stops after its last step, having said it is finishing, forever")
      ("diverge-at-step", po::value(&o->diverge_at_step),
       "rank --hang-rank all-reduces its loss at the start of step N, where the others broadcast "
       "buffers: a collective under a rank-dependent condition")
      ("hang-rank", po::value(&o->hang_rank)->default_value(1), "the rank that crashes or hangs")
      ("nan-at-step", po::value(&o->nan_at_step),
       "put a NaN into layers.1.weight's gradient at step N (rank 1, or 0 alone)")
      ("reference", po::bool_switch(&o->reference),
       "one process on the host whatever --device, no DDP: train on the union of --world-size "
       "ranks' shards (the checksum a DDP run on CPU or CUDA must reproduce)")
      ("world-size", po::value(&o->world_size)->default_value(1), "ranks simulated by --reference")
      ("time", po::bool_switch(&o->time),
       "every rank prints its per-step and backward wall times (us) and peak RSS (KiB)")
      ("no-comm", po::bool_switch(&o->no_comm),
       "benchmark baseline: the same forward, backward and update, no communication")
      ("comm-only", po::bool_switch(&o->comm_only),
       "benchmark baseline: the step's collectives (buffers, gradient buckets, loss), no compute");
  // clang-format on
  return d;
}

Status ParseEnums(const po::variables_map& vm, TrainOptions* o) {
  const std::string opt = vm["optimizer"].as<std::string>();
  if (opt == "sgd") {
    o->optimizer = OptimizerKind::kSgd;
  } else if (opt == "adam") {
    o->optimizer = OptimizerKind::kAdam;
  } else {
    return InvalidArgument("--optimizer " + opt + ": unknown; use sgd or adam");
  }
  if (vm.count("amp") != 0) {
    const std::string amp = vm["amp"].as<std::string>();
    if (amp == "fp16") {
      o->amp = Precision::kFloat16;
    } else if (amp == "bf16") {
      o->amp = Precision::kBFloat16;
    } else {
      return InvalidArgument("--amp " + amp + ": unknown; use fp16 or bf16");
    }
  }
  o->broadcast_buffers = vm.count("no-broadcast-buffers") == 0;
  // Read here: the option parser takes "-1" for an unsigned 2^64 - 1.
  const std::string seed = vm["seed"].as<std::string>();
  errno = 0;
  char* end = nullptr;
  o->seed = std::strtoul(seed.c_str(), &end, 10);
  if (seed.empty() || seed.find_first_not_of("0123456789") != std::string::npos || errno != 0) {
    return InvalidArgument("--seed " + seed + ": must be a whole number from 0 to " +
                           std::to_string(std::numeric_limits<unsigned long>::max()));
  }
  return Status::Ok();
}

// A fault at step N: given, N must be a step the run takes.
Status CheckStep(const po::variables_map& vm, const char* name, long step, long steps) {
  if (vm.count(name) == 0 || (step >= 0 && step < steps)) return Status::Ok();
  return InvalidArgument(std::string("--") + name + " " + std::to_string(step) +
                         ": not a step of this run; use 0 to " + std::to_string(steps - 1) +
                         " (--steps " + std::to_string(steps) + ")");
}

Status CheckFaults(const po::variables_map& vm, const TrainOptions& o) {
  for (auto [name, step] :
       {std::pair{"crash-at-step", o.crash_at_step}, std::pair{"hang-at-step", o.hang_at_step},
        std::pair{"nan-at-step", o.nan_at_step}, std::pair{"diverge-at-step", o.diverge_at_step}}) {
    if (Status s = CheckStep(vm, name, step, o.steps); !s.ok()) return s;
  }
  const bool rank_fault = o.RankFault();
  if (rank_fault && o.reference) {
    return InvalidArgument(
        "--crash-at-step, --hang-at-step, --hang-at-exit and --diverge-at-step are faults of a "
        "rank of a DDP run; --reference has none (it takes --nan-at-step)");
  }
  if (o.comm_only && (o.crash_at_step >= 0 || o.hang_at_step >= 0 || o.diverge_at_step >= 0)) {
    // Its step is the collectives alone: the faults' points in the step never come (attack 98:
    // they were ignored and the run exited 0).
    return InvalidArgument(
        "--crash-at-step, --hang-at-step and --diverge-at-step act inside a training step; "
        "--comm-only runs none (it takes --hang-at-exit): drop one");
  }
  if (!vm["hang-rank"].defaulted() && !rank_fault) {
    return InvalidArgument(
        "--hang-rank names the rank of --crash-at-step, --hang-at-step, --hang-at-exit or "
        "--diverge-at-step; give one of them");
  }
  if (o.hang_rank < 0) return InvalidArgument("--hang-rank must not be negative");
  if (!vm["world-size"].defaulted() && !o.reference) {
    return InvalidArgument(
        "--world-size is the ranks --reference simulates; under ddprun the world is "
        "--nproc_per_node times the nodes");
  }
  return Status::Ok();
}

Status CheckRanges(const TrainOptions& o) {
  if (o.device != "cpu" && o.device != "cuda") {
    return InvalidArgument("--device " + o.device + ": unknown; use cpu or cuda");
  }
  if (o.steps < 1 || o.batch < 1 || o.width < 1 || o.depth < 1) {
    return InvalidArgument("--steps, --batch, --width and --depth must be at least 1");
  }
  if (o.no_comm && o.comm_only)
    return InvalidArgument("--no-comm and --comm-only exclude each other");
  if ((o.no_comm || o.comm_only) && (o.UseScaler() || o.reference)) {
    return InvalidArgument(
        "--no-comm and --comm-only are for fp32 DDP runs (no --amp, --clip, "
        "--nan-at-step or --reference)");
  }
  if (o.time && o.reference) {
    return InvalidArgument(
        "--time times the steps of a DDP run's ranks; --reference checks results and is not "
        "timed: drop one");
  }
  if (o.world_size < 1) return InvalidArgument("--world-size must be at least 1");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) {
    return InvalidArgument("--lr must be a positive, finite number");
  }
  // Bounds that the byte count and Gloo's millisecond timeout hold.
  if (!(o.bucket_cap_mb >= 0 && o.bucket_cap_mb <= kMaxBucketCapMb)) {
    return InvalidArgument("--bucket-cap-mb: a number of MiB from 0 to " +
                           std::to_string(kMaxBucketCapMb) + " (0: the default, 25)");
  }
  if (!(o.collective_timeout_s >= 0 && o.collective_timeout_s <= kMaxTimeoutS)) {
    return InvalidArgument("--collective-timeout: a number of seconds from 0 to " +
                           std::to_string(kMaxTimeoutS) + " (a year; 0: the default, 600)");
  }
  if (o.collective_timeout_s > 0 && o.collective_timeout_s < 0.001) {
    return InvalidArgument(
        "--collective-timeout: below a millisecond, the unit of Gloo's and NCCL's timeouts, it "
        "would be none at all; give at least 0.001 (or 0 for the default, 600)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<TrainOptions> ParseOptions(int argc, const char* const* argv) {
  TrainOptions o;
  const po::options_description table = OptionTable(&o);
  po::variables_map vm;
  try {
    const po::parsed_options parsed = po::command_line_parser(argc, argv).options(table).run();
    // Boost drops words that are no option's value without a word: a value
    // given to a switch (--clip 5.0) would pass unnoticed (attack 91).
    for (const po::option& opt : parsed.options) {
      if (opt.position_key >= 0 || opt.string_key.empty()) {
        const std::string word = opt.original_tokens.empty() ? "" : opt.original_tokens.front();
        return InvalidArgument("unexpected argument \"" + word +
                               "\": train takes no positional arguments (a switch such as "
                               "--clip takes no value); see train --help");
      }
    }
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return InvalidArgument(std::string(e.what()) + "; see train --help");
  }
  if (vm.count("help") != 0) {
    std::ostringstream text;
    text << table;
    o.help = true;
    o.help_text = text.str();
    return o;
  }
  Status s = ParseEnums(vm, &o);
  if (s.ok()) s = CheckRanges(o);
  if (s.ok()) s = CheckFaults(vm, o);
  if (!s.ok()) return s;
  return o;
}

}  // namespace ddprun::train
