// Resuming (--resume), as every trainer but mnist_fsdp does it: the checkpoint
// restores the model, the optimizer's state, the random generator and the
// epoch/step counters; the schedule is a function of the step. A checkpoint of
// a run with other settings than `state.settings` is refused
// (support/run_settings.hpp says which settings count).
#pragma once
#include <rumus/rumus.hpp>

#include <cstdio>
#include <vector>

#include "cli.hpp"
#include "metrics.hpp"
#include "training_size.hpp"

namespace example {

// Returns the metrics of the epochs already done (read from --metrics, whose
// columns `names` describes); nothing without --resume.
inline std::vector<EpochMetrics> resume(const Options& o, rumus::nn::Module& net, rumus::optim::Optimizer& opt,
                                        rumus::optim::LRScheduler& sched, rumus::io::TrainingState& state,
                                        const MetricNames& names = {}) {
  if (o.resume.empty()) return {};
  state = rumus::io::load_checkpoint(o.resume, net, opt, state.settings);
  check_epochs_left(state.epoch, o.epochs, o.resume);
  sched.set_step(state.step);
  std::fprintf(stderr, "resumed from %s at epoch %lld, step %lld\n", o.resume.c_str(), (long long)state.epoch,
               (long long)state.step);
  return read_metrics(o.metrics, state.epoch, names);
}

}  // namespace example
