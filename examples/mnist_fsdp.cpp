// Trains the MLP (784-512-512-10) or the CNN of mnist_mlp / mnist_cnn on
// Fashion-MNIST across several ranks, fully sharded (FSDP) or replicated (DDP).
//
//   mnist_fsdp --ranks 2                      two ranks as two threads of this process
//   mnist_fsdp --ranks 4 --devices cpu,vulkan:0   ranks take the devices round-robin
//   mpirun -np 2 mnist_fsdp                   one rank per process (MpiGroup)
//
// Each step takes a global batch (--batch-size) and gives every rank an equal
// slice of it; gradients are averaged across ranks, so N ranks train the same
// model as one rank on the whole batch. The options, progress line, metrics
// files, checkpoints and --resume are those of mnist_mlp (support/); a
// checkpoint holds the whole model and optimizer state as one unsharded run
// would, so a run resumes on any number of ranks, in either mode.
// With --sharded-checkpoint DIR (FSDP) every rank writes its own shards of
// the model and optimizer state there instead, nothing gathered, and
// --resume DIR reshards them to this run's number of ranks.
// FSDP builds its models under nn::DeferredInit: each rank draws only the rows
// of its own shards, so no process holds the whole model's values (the
// CPU copy that unsharded checkpoints go through fills when rank 0 first
// writes one).
// Run with --help for the options.
#include <rumus/distributed/distributed.hpp>
#include <rumus/rumus.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "support/cli.hpp"
#include "support/metrics.hpp"
#include "support/mnist_models.hpp"
#include "support/optim.hpp"
#include "support/progress.hpp"
#include "support/run_settings.hpp"
#include "support/training_size.hpp"

using namespace rumus;
using namespace rumus::distributed;

namespace {

// The MNIST models as a PyTorch user writes them (support/mnist_models.hpp).
using Mlp = example::PlainMlp;
using Cnn = example::PlainCnn;

// A model whose parameters and optimizer state sharding matters for:
// 784-8192-8192-8192-10, 141 M parameters (565 MB, plus as much again in momentum).
struct WideMlp : nn::Module {
  nn::Linear fc1{784, 8192}, fc2{8192, 8192}, fc3{8192, 8192}, fc4{8192, 10};
  WideMlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}, {"fc4", fc4}}); }
  Tensor forward(const Tensor& x) override { return fc4(relu(fc3(relu(fc2(relu(fc1(x.flatten(1)))))))); }
  std::string type_name() const override { return "WideMlp"; }
};

// The options of this program beyond the trainers' shared ones.
struct RankOptions {
  int ranks = 2;
  std::string mode = "fsdp", model = "mlp", devices = "cpu", wrap = "none", backward_prefetch = "pre";
  std::string sharded_checkpoint;  // a directory of per-rank shards, written after every epoch (fsdp)
  bool resume_sharded = false;     // --resume names such a directory
};

std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    out.push_back(Device::parse(list.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

// An optimizer buffer ("state.<group>.<index>.<name>"; not the step count)
// has its parameter's shape, so under FSDP it is sharded as the parameter is.
bool is_buffer(const std::string& key) { return key.starts_with("state.") && !key.ends_with(".step"); }
std::size_t parameter_index(const std::string& key) {
  const std::size_t begin = key.find('.', 6) + 1;  // past "state.<group>."
  return std::stoul(key.substr(begin, key.find('.', begin) - begin));
}

// The model behind one interface, sharded or replicated.
struct Trainer {
  virtual ~Trainer() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual GradientStore backward(const Tensor& loss) = 0;
  virtual std::vector<Tensor> parameters() = 0;
  virtual void train(bool on) = 0;
  // Collective: the model's full tensors under the unsharded names.
  virtual StateDict full_state_dict() = 0;
  // Collective: `opt`'s state as an optimizer of the unsharded model holds it.
  virtual StateDict full_optimizer_state(const optim::Optimizer& opt) = 0;
  // This rank's part of such a full optimizer state, loaded into `opt`.
  virtual void load_optimizer_state(optim::Optimizer& opt, const StateDict& full) = 0;
  virtual void save(const std::string& path) = 0;  // collective
  // The sharded module behind FSDP's trainer (sharded checkpoints); null for DDP.
  virtual fsdp::FullyShardedModule* sharded_module() { return nullptr; }
};

struct FsdpTrainer : Trainer {
  FsdpTrainer(std::unique_ptr<nn::Module> net, ProcessGroup& pg, Device dev, const RankOptions& r)
      : net(std::move(net)), pg(pg) {
    for (const Tensor& p : this->net->parameters()) full_shapes.push_back(p.shape());  // before sharding empties them
    fsdp::ShardOptions options;
    // "layer": every Linear and Conv2d a unit, gathered only around its own forward and backward.
    if (r.wrap == "layer") options.auto_wrap_policy = fsdp::module_wrap_policy({"Linear", "Conv2d"});
    options.backward_prefetch = r.backward_prefetch == "pre"    ? fsdp::BackwardPrefetch::backward_pre
                                : r.backward_prefetch == "post" ? fsdp::BackwardPrefetch::backward_post
                                                                : fsdp::BackwardPrefetch::none;
    // Sharded where it was built, then moved: the device only ever holds shards
    // and the units being gathered, never the whole model.
    sharded = fsdp::shard(*this->net, pg, options);
    sharded->to(dev);
  }
  Tensor forward(const Tensor& x) override { return sharded->forward(x); }
  GradientStore backward(const Tensor& loss) override { return rumus::backward(loss); }
  std::vector<Tensor> parameters() override { return sharded->parameters(); }
  void train(bool on) override { sharded->train(on); }
  StateDict full_state_dict() override { return sharded->state_dict(); }
  StateDict full_optimizer_state(const optim::Optimizer& opt) override {
    StateDict state = opt.state_dict();
    for (auto& [key, t] : state)  // a std::map: every rank gathers in the same order
      if (is_buffer(key)) t = unshard(pg.all_gather(t), full_shapes.at(parameter_index(key)));
    return state;
  }
  void load_optimizer_state(optim::Optimizer& opt, const StateDict& full) override {
    StateDict state = full;
    for (auto& [key, t] : state)
      if (is_buffer(key)) t = shard_of(t, pg.rank(), pg.size());
    opt.load_state_dict(state);
  }
  void save(const std::string& path) override { sharded->save(path, {{"model", net->type_name()}}); }
  fsdp::FullyShardedModule* sharded_module() override { return sharded.get(); }
  std::unique_ptr<nn::Module> net;
  ProcessGroup& pg;
  std::vector<Shape> full_shapes;  // of the parameters, in optimizer order
  std::unique_ptr<fsdp::FullyShardedModule> sharded;
};

struct DdpTrainer : Trainer {
  DdpTrainer(std::unique_ptr<nn::Module> net, ProcessGroup& pg, Device dev) : net(std::move(net)) {
    this->net->to(dev);
    ddp = std::make_unique<DistributedDataParallel>(*this->net, pg);
  }
  Tensor forward(const Tensor& x) override { return ddp->forward(x); }
  GradientStore backward(const Tensor& loss) override { return ddp->backward(loss); }
  std::vector<Tensor> parameters() override { return net->parameters(); }
  void train(bool on) override { net->train(on); }
  StateDict full_state_dict() override { return net->state_dict(); }
  StateDict full_optimizer_state(const optim::Optimizer& opt) override { return opt.state_dict(); }
  void load_optimizer_state(optim::Optimizer& opt, const StateDict& full) override { opt.load_state_dict(full); }
  void save(const std::string& path) override {
    if (ddp->group().rank() == 0) io::save_safetensors(net->state_dict(), path, {{"model", net->type_name()}});
    ddp->group().barrier();
  }
  std::unique_ptr<nn::Module> net;
  std::unique_ptr<DistributedDataParallel> ddp;
};

std::unique_ptr<nn::Module> make_net(const std::string& model) {
  if (model == "mlp") return std::make_unique<Mlp>();
  if (model == "wide") return std::make_unique<WideMlp>();
  return std::make_unique<Cnn>();
}

// What the ranks share: options, data, the starting point (fresh or resumed)
// and the unsharded model and optimizer on the CPU, through which rank 0
// writes checkpoints. Only rank 0 writes to it once the ranks run.
struct Run {
  const example::Options& o;
  const RankOptions& r;
  std::shared_ptr<const data::Mnist> train_set, test_set;
  std::vector<Device> devices;
  std::int64_t steps_per_epoch;
  double lr;
  nn::Module& full;
  optim::Optimizer& full_opt;
  io::TrainingState state{};  // epochs and steps completed; its settings go into every checkpoint
  bool resumed = false;
  std::vector<example::EpochMetrics> history{};
  // FSDP: each rank's model, built deferred (by rank index; one under mpirun).
  std::vector<std::unique_ptr<nn::Module>> deferred_nets{};
};

// One rank's whole run. Rank 0 prints and writes the files.
void run_rank(ProcessGroup& pg, Run& run) {
  const example::Options& o = run.o;
  const int rank = pg.rank(), n = pg.size();
  // Devices by the rank's place on its host: with two hosts of four GPUs
  // each, ranks 4..7 take the second host's vulkan:0..3 as ranks 0..3 do the first's.
  const Device dev = run.devices[std::size_t(pg.local_rank()) % run.devices.size()];
  if (o.batch_size % n != 0)
    throw Error(fmt::format("--batch-size {} does not split evenly over {} ranks", o.batch_size, n));
  const std::int64_t local = o.batch_size / n, steps = run.steps_per_epoch;

  // Every rank starts from the same values: its deferred model, built after
  // the same seed as every other, or a copy of the full model's (the rank
  // threads share one random generator, so drawing them per rank would race).
  std::unique_ptr<nn::Module> net;
  if (!run.deferred_nets.empty()) {
    net = std::move(run.deferred_nets.at(run.deferred_nets.size() == 1 ? 0 : std::size_t(rank)));
  } else {
    net = make_net(run.r.model);
    net->load_state_dict(run.full.state_dict());
  }
  std::unique_ptr<Trainer> trainer;
  if (run.r.mode == "fsdp") trainer = std::make_unique<FsdpTrainer>(std::move(net), pg, dev, run.r);
  else trainer = std::make_unique<DdpTrainer>(std::move(net), pg, dev);
  auto opt = example::make_optimizer(o.optimizer, trainer->parameters(), run.lr, o.weight_decay, o.nesterov);
  auto sched = example::make_schedule(o.schedule, *opt, run.lr, steps * o.epochs);
  io::TrainingState state = run.state;
  if (run.r.resume_sharded) {
    // Every rank reads the rows of its own shards (any world size at the
    // save), the step counters and the generator; other settings are refused.
    state = load_sharded(o.resume, *trainer->sharded_module(), *opt, pg, run.state.settings);
    example::check_epochs_left(state.epoch, o.epochs, o.resume);
    sched->set_step(state.step);
    if (rank == 0) {
      run.history = example::read_metrics(o.metrics, state.epoch);
      std::fprintf(stderr, "resumed from %s (sharded, %d rank%s) at epoch %lld, step %lld\n", o.resume.c_str(), n,
                   n > 1 ? "s" : "", (long long)state.epoch, (long long)state.step);
    }
  } else if (run.resumed) {
    trainer->load_optimizer_state(*opt, run.full_opt.state_dict());
    sched->set_step(state.step);
  }
  pg.barrier();  // every rank has read `run.full` before rank 0 writes a checkpoint through it

  data::DataLoader order_of(run.train_set, {.batch_size = o.batch_size, .shuffle = true, .drop_last = true, .seed = o.seed});
  if (rank == 0)
    std::printf("mnist_fsdp: %s %s%s, %d rank%s (%s), global batch %lld (%lld per rank), %lld steps per epoch, %s lr "
                "%g, %s schedule\n",
                run.r.mode.c_str(), run.r.model.c_str(), run.deferred_nets.empty() ? "" : " (deferred init)", n,
                n > 1 ? "s" : "", pg.name().c_str(),
                (long long)o.batch_size, (long long)local, (long long)steps, o.optimizer.c_str(), run.lr,
                o.schedule.c_str());
  std::fflush(stdout);  // before the progress lines on stderr

  const std::shared_ptr<const data::Mnist>& train_set = run.train_set;
  const std::shared_ptr<const data::Mnist>& test_set = run.test_set;
  std::size_t training_peak = 0;  // device bytes in use at most during the steps (this process's ranks together)
  for (std::int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    const std::vector<std::int64_t> order = order_of.order(epoch);
    trainer->train(true);
    pg.barrier();
    const StagingStats staged_before = staging_stats();
    const CollectiveStats collectives_before = collective_stats();
    pg.barrier();  // the counters are shared by rank threads: every rank reads them before any moves on
    // Rank 0's progress shows its own slice's loss: reading the other ranks'
    // would add a collective to every step.
    std::optional<example::Progress> progress;
    if (rank == 0)
      progress.emplace(fmt::format("epoch {}/{}", epoch + 1, o.epochs), steps,
                       example::ProgressOptions{.loss = "rank 0 train loss"});
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (std::int64_t s = 0; s < steps; ++s) {
      auto first = order.begin() + s * o.batch_size + rank * local;
      data::Batch b = train_set->get_batch(std::vector<std::int64_t>(first, first + local));
      Tensor loss = cross_entropy(trainer->forward(b.x.to(dev)), b.y.to(dev));
      opt->step(trainer->backward(loss));
      sched->step();
      ++state.step;
      const double l = loss.item();
      loss_sum += l;
      if (progress) progress->update(s + 1, (s + 1) * o.batch_size, l);
    }
    pg.barrier();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const StagingStats staged = staging_stats();
    const CollectiveStats collectives = collective_stats();
    if (progress) progress->finish();
    pg.barrier();
    // The steps' peak, before evaluation and the checkpoint (which gathers the whole model) add theirs.
    training_peak = std::max(training_peak, device_stats(dev).peak_bytes_in_use);

    // Evaluation: each rank scores its share of the test set.
    trainer->train(false);
    double test_loss = 0, correct = 0;
    {
      NoGradGuard no_grad;
      const std::int64_t total = test_set->size(), per = (total + n - 1) / n;
      const std::int64_t begin = std::min(total, rank * per), end = std::min(total, begin + per);
      // Every rank runs the same number of forwards (FSDP gathers are collective).
      const std::int64_t chunks = (per + o.batch_size - 1) / o.batch_size;
      for (std::int64_t k = 0; k < chunks; ++k) {
        std::int64_t lo = std::min(end, begin + k * o.batch_size), hi = std::min(end, lo + o.batch_size);
        std::vector<std::int64_t> idx;
        for (std::int64_t i = lo; i < hi; ++i) idx.push_back(i);
        if (idx.empty()) idx.push_back(0);  // keeps the collectives in step; not counted
        data::Batch b = test_set->get_batch(idx);
        Tensor logits = trainer->forward(b.x.to(dev));
        if (hi > lo) {
          Tensor target = b.y.to(dev);
          test_loss += cross_entropy(logits, target, {.reduction = Reduction::sum}).item();
          correct += sum(eq(argmax(logits, 1), target).to(DType::f32)).item();
        }
      }
    }
    Tensor totals = tensor(std::vector<double>{loss_sum / double(std::max<std::int64_t>(steps, 1)), test_loss, correct});
    pg.all_reduce(totals);
    const std::vector<double> t = totals.to_vector<double>();
    if (rank == 0) {
      run.history.push_back({int(epoch + 1), t[0] / n, t[1] / double(test_set->size()),
                             t[2] / double(test_set->size()), double(steps * o.batch_size) / secs, secs});
      const example::EpochMetrics& m = run.history.back();
      std::printf("epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n",
                  (long long)epoch + 1, m.train_loss, m.eval_loss, m.eval_accuracy, m.per_sec);
      // What collectives moved between devices and the host (this process's ranks together).
      const double per_step = 1.0 / double(std::max<std::int64_t>(steps, 1));
      if (staged.device_to_host > staged_before.device_to_host || staged.host_to_device > staged_before.host_to_device)
        std::printf("  staging per step: %.2f MB device->host in %.1f reads, %.2f MB host->device in %.1f writes\n",
                    double(staged.device_to_host_bytes - staged_before.device_to_host_bytes) * per_step / 1e6,
                    double(staged.device_to_host - staged_before.device_to_host) * per_step,
                    double(staged.host_to_device_bytes - staged_before.host_to_device_bytes) * per_step / 1e6,
                    double(staged.host_to_device - staged_before.host_to_device) * per_step);
      // Per rank: this process's ranks (all of them for threads, one under mpirun) share the counters.
      // The epoch's two barriers around the steps count too.
      const double local_ranks = launched_by_mpi() ? 1.0 : double(n);
      if (collectives.calls > collectives_before.calls)
        std::printf("  collectives per step and rank: %.1f calls, %.3f ms exchanging between ranks, %.3f ms staging "
                    "through the host\n",
                    double(collectives.calls - collectives_before.calls) * per_step / local_ranks,
                    (collectives.exchange_seconds - collectives_before.exchange_seconds) * 1e3 * per_step / local_ranks,
                    (collectives.staging_seconds - collectives_before.staging_seconds) * 1e3 * per_step / local_ranks);
      std::fflush(stdout);
    }

    // The checkpoint, then the metrics. Sharded: each rank writes its own
    // shards. Otherwise collective too: FSDP gathers the model and optimizer
    // state, and rank 0 writes them as one unsharded run would.
    state.epoch = epoch + 1;
    if (!run.r.sharded_checkpoint.empty()) {
      save_sharded(run.r.sharded_checkpoint, *trainer->sharded_module(), *opt, pg, state);
    } else {
      const StateDict model_state = trainer->full_state_dict();
      const StateDict optimizer_state = trainer->full_optimizer_state(*opt);
      if (rank == 0) {
        run.full.load_state_dict(model_state);
        run.full_opt.load_state_dict(optimizer_state);
        io::save_checkpoint(o.checkpoint, run.full, run.full_opt, state);
      }
    }
    if (rank == 0)
      example::write_metrics(o.metrics, "mnist_fsdp on " + std::filesystem::path(o.data).filename().string(),
                             run.history);
    pg.barrier();
  }
  // Peak memory per rank: FSDP's sharded parameters and optimizer state shrink it as ranks grow.
  std::printf("  rank %d on %s: peak %.1f MiB of device memory in use (%.1f MiB in the training steps)\n", rank,
              dev.str().c_str(), double(device_stats(dev).peak_bytes_in_use) / 1048576.0,
              double(training_peak) / 1048576.0);
  if (auto* f = dynamic_cast<FsdpTrainer*>(trainer.get())) {
    // FSDP's own count: full parameters alive at once, against the largest
    // unit, and parameters with their gradients at their peak.
    const fsdp::FsdpMemoryStats m = f->sharded->memory_stats();
    std::printf("  rank %d: shards %.1f MiB, full parameters at most %.1f MiB at once (largest unit %.1f MiB), "
                "parameters and gradients at most %.1f MiB\n",
                rank, double(m.shard_bytes) / 1048576.0, double(m.peak_gathered_bytes) / 1048576.0,
                double(m.largest_unit_bytes) / 1048576.0, double(m.peak_param_grad_bytes) / 1048576.0);
  }
  trainer->save(o.save);
  const std::string& checkpoint = run.r.sharded_checkpoint.empty() ? o.checkpoint : run.r.sharded_checkpoint;
  if (rank == 0)
    std::printf("saved %s (checkpoint %s, metrics %s)\n", o.save.c_str(), checkpoint.c_str(), o.metrics.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  example::Options o;
  o.optimizer = "sgd";
  o.schedule = "constant";
  o.default_lr = 1e-3;
  RankOptions r;
  CLI::App app{"Trains the MLP or CNN on N ranks with FSDP or DDP: threads of this process, or one process per "
               "rank under mpirun (mpirun -np N mnist_fsdp ...).",
               "mnist_fsdp"};
  example::add_options(app, o);
  // --devices gives each rank its device; no --amp: a loss scaler's inf/nan
  // check would see only its own rank's gradients.
  app.remove_option(app.get_option("--device"));
  app.remove_option(app.get_option("--amp"));
  app.get_option("--batch-size")->description("global batch, split evenly over the ranks");
  app.get_option("--threads")->description("CPU threads per rank (default: the machine's divided by the ranks)")
      ->default_str("");
  app.add_option("--ranks", r.ranks, "ranks as threads of this process (under mpirun: one per process)")
      ->type_name("N")
      ->capture_default_str()
      ->check(example::whole_number(1));
  app.add_option("--mode", r.mode, "fsdp (sharded parameters, gradients and optimizer state) or ddp")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"fsdp", "ddp"}));
  app.add_option("--model", r.model, "mlp, cnn, or wide (784-8192-8192-8192-10)")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"mlp", "cnn", "wide"}));
  app.add_option("--wrap", r.wrap,
                 "FSDP units: none (the whole model gathered for each step) or layer (each Linear and Conv2d "
                 "gathered around its own forward and backward)")
      ->type_name("POLICY")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "layer"}));
  app.add_option("--backward-prefetch", r.backward_prefetch,
                 "FSDP units: pre (gather the next unit while this one's backward runs, PyTorch's BACKWARD_PRE), "
                 "post (gather it once this one's gradients are made, BACKWARD_POST) or none (one unit's "
                 "parameters at a time)")
      ->type_name("WHEN")
      ->capture_default_str()
      ->check(CLI::IsMember({"pre", "post", "none"}));
  app.add_option("--devices", r.devices,
                 "comma-separated devices taken round-robin by the rank's place on its host: cpu, vulkan, vulkan:1")
      ->type_name("D,...")
      ->capture_default_str();
  app.add_option("--sharded-checkpoint", r.sharded_checkpoint,
                 "fsdp: every rank writes its shards of model and optimizer to this directory after every epoch, "
                 "in place of --checkpoint; --resume DIR continues from it on any number of ranks")
      ->type_name("DIR");
  app.get_option("--resume")
      ->description("continue from a checkpoint, or from a --sharded-checkpoint directory (fsdp)");
  CLI11_PARSE(app, argc, argv);
  const int threads = app.get_option("--threads")->count() > 0 ? o.threads : 0;  // 0: the machine's / ranks

  try {
    // A sharded checkpoint (a directory) holds FSDP's shards: refused before
    // any data is read when DDP would train.
    r.resume_sharded =
        !o.resume.empty() && (std::filesystem::is_directory(o.resume) || sharded_checkpoint_exists(o.resume));
    if (r.mode != "fsdp" && r.resume_sharded)
      throw Error(fmt::format("--resume {} is a sharded checkpoint, which needs --mode fsdp, got --mode {}", o.resume,
                              r.mode));
    if (r.mode != "fsdp" && !r.sharded_checkpoint.empty())
      throw Error(
          fmt::format("--sharded-checkpoint needs --mode fsdp (it writes FSDP's shards), got --mode {}", r.mode));
    manual_seed(o.seed);  // initialisation and dropout
    const double lr = example::learning_rate(o);
    // FSDP builds deferred unless an unsharded checkpoint is resumed (its
    // values go through the full model below).
    const bool deferred = r.mode == "fsdp" && (o.resume.empty() || r.resume_sharded);
    auto build = [&] {
      std::optional<nn::DeferredInit> scope;
      if (deferred) scope.emplace();
      return make_net(r.model);
    };
    // The unsharded model and its optimizer, on the CPU: the values every rank
    // starts from (deferred: its recipe), and what a checkpoint is saved from
    // and resumed into.
    const std::unique_ptr<nn::Module> full = build();
    std::vector<std::unique_ptr<nn::Module>> deferred_nets;
    for (int i = 0; deferred && i < (launched_by_mpi() ? 1 : r.ranks); ++i) {
      manual_seed(o.seed);  // each the same recipe; the generator ends where one build leaves it
      deferred_nets.push_back(build());
    }
    const auto full_opt = example::make_optimizer(o.optimizer, full->parameters(), lr, o.weight_decay, o.nesterov);
    auto train_set = std::make_shared<data::Mnist>(o.data, data::Split::Train);
    auto test_set = std::make_shared<data::Mnist>(o.data, data::Split::Test);
    // Before any rank starts: a run that would train nothing is an error.
    const std::int64_t steps = example::steps_per_epoch(train_set->size(), o.batch_size, o.limit, o.data);
    example::check_test_set(test_set->size(), o.data);
    const data::Normalize norm = data::Normalize::fit(train_set->images());
    train_set->set_normalize(norm);
    test_set->set_normalize(norm);
    Run run{o, r, train_set, test_set, parse_devices(r.devices), steps, lr, *full, *full_opt};
    run.state.settings = example::run_settings(o, r.model, *full_opt, lr, train_set->size(), norm);
    run.deferred_nets = std::move(deferred_nets);
    // Resuming: the checkpoint restores model, optimizer state, random
    // generator and counters; one of a run with other settings is refused.
    // The rank count and mode are free to change: they train the same model.
    // (A sharded checkpoint is read by each rank once the model is sharded.)
    if (!o.resume.empty() && !r.resume_sharded) {
      run.state = io::load_checkpoint(o.resume, *full, *full_opt, run.state.settings);
      example::check_epochs_left(run.state.epoch, o.epochs, o.resume);
      run.history = example::read_metrics(o.metrics, run.state.epoch);
      run.resumed = true;
      std::fprintf(stderr, "resumed from %s at epoch %lld, step %lld\n", o.resume.c_str(), (long long)run.state.epoch,
                   (long long)run.state.step);
    }
    if (launched_by_mpi()) {
      MpiGroup world;
      const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
      set_num_threads(threads ? threads : std::max(1, hw / world.local_size()));  // the host's cores among its ranks
      try {
        run_rank(world, run);
      } catch (const std::exception& e) {
        world.abort(e.what());  // ends every process of the job, none left waiting
      }
    } else {
      run_threads(r.ranks, [&](ProcessGroup& pg) { run_rank(pg, run); }, {}, {.threads_per_rank = threads});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_fsdp: %s\n", e.what());
    return 1;
  }
  return 0;
}
