// Trains the MLP (784-512-512-10) or the CNN of mnist_mlp / mnist_cnn on
// Fashion-MNIST across several ranks, fully sharded (FSDP) or replicated (DDP).
//
//   mnist_fsdp --ranks 2                      two ranks as two threads of this process
//   mnist_fsdp --ranks 4 --devices cpu,vulkan:0   ranks take the devices round-robin
//   mpirun -np 2 mnist_fsdp                   one rank per process (MpiGroup)
//
// Each step takes a global batch (--batch-size) and gives every rank an equal
// slice of it; gradients are averaged across ranks, so N ranks train the same
// model as one rank on the whole batch. Run with --help for the options.
#include <rumus/distributed/distributed.hpp>
#include <rumus/rumus.hpp>

#include "support/cli.hpp"
#include "support/training_size.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace rumus;
using namespace rumus::distributed;

namespace {

struct Mlp : nn::Module {
  nn::Linear fc1{784, 512}, fc2{512, 512}, fc3{512, 10};
  Mlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}}); }
  Tensor forward(const Tensor& x) override { return fc3(relu(fc2(relu(fc1(x.flatten(1)))))); }
  std::string type_name() const override { return "Mlp"; }
};

// A model whose parameters and optimizer state sharding matters for:
// 784-8192-8192-8192-10, 141 M parameters (565 MB, plus as much again in momentum).
struct WideMlp : nn::Module {
  nn::Linear fc1{784, 8192}, fc2{8192, 8192}, fc3{8192, 8192}, fc4{8192, 10};
  WideMlp() { register_modules({{"fc1", fc1}, {"fc2", fc2}, {"fc3", fc3}, {"fc4", fc4}}); }
  Tensor forward(const Tensor& x) override { return fc4(relu(fc3(relu(fc2(relu(fc1(x.flatten(1)))))))); }
  std::string type_name() const override { return "WideMlp"; }
};

struct Cnn : nn::Module {
  nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  nn::Dropout drop1{0.25}, drop2{0.5};
  nn::Linear fc1{9216, 128}, fc2{128, 10};
  Cnn() {
    register_modules({{"conv1", conv1}, {"conv2", conv2}, {"drop1", drop1}, {"drop2", drop2}, {"fc1", fc1}, {"fc2", fc2}});
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = drop1(max_pool2d(relu(conv2(relu(conv1(x)))), 2)).flatten(1);
    return fc2(drop2(relu(fc1(h))));
  }
  std::string type_name() const override { return "Cnn"; }
};

struct Config {
  int ranks = 2;
  std::string mode = "fsdp", model = "mlp", devices = "cpu", optimizer = "sgd";
  std::string data = "/usr/share/datasets/fashion-mnist", save;
  int epochs = 1, threads = 0;
  std::int64_t batch_size = 64, limit = 0;
  double lr = 0.05;  // SGD's; AdamW takes 1e-3 unless --lr is given
  std::uint64_t seed = 0;
};

// Options, parsed with CLI11 like the other examples: "--ranks 2" and
// "--ranks=2" both work, malformed values stop with a message. Returns the
// exit status when the program should stop (--help, or a bad option).
std::optional<int> parse(Config& c, int argc, char** argv) {
  using example::number_at_least;
  using example::whole_number;
  CLI::App app{"Trains the MLP or CNN on N ranks with FSDP or DDP: threads of this process, or one process per "
               "rank under mpirun (mpirun -np N mnist_fsdp ...)."};
  app.add_option("--ranks", c.ranks, "ranks as threads of this process (under mpirun: one per process)")
      ->type_name("N")->capture_default_str()->check(whole_number(1));
  app.add_option("--mode", c.mode, "fsdp (sharded parameters, gradients and optimizer state) or ddp")
      ->capture_default_str()->check(CLI::IsMember({"fsdp", "ddp"}));
  app.add_option("--model", c.model, "mlp, cnn, or wide (784-8192-8192-8192-10)")->capture_default_str()->check(CLI::IsMember({"mlp", "cnn", "wide"}));
  app.add_option("--devices", c.devices, "comma-separated devices taken round-robin by rank: cpu, vulkan, vulkan:1")
      ->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "global batch, split evenly over the ranks")
      ->type_name("N")->capture_default_str()->check(whole_number(1));
  app.add_option("--epochs", c.epochs, "passes over the training set")
      ->type_name("N")->capture_default_str()->check(whole_number(1));
  app.add_option("--optimizer", c.optimizer, "sgd (momentum 0.9, Nesterov) or adamw (two state tensors per parameter)")
      ->capture_default_str()->check(CLI::IsMember({"sgd", "adamw"}));
  CLI::Option* lr = app.add_option("--lr", c.lr, "learning rate (adamw: 0.001 unless given)")
                        ->capture_default_str()->check(number_at_least(0, true));
  app.add_option("--threads", c.threads, "CPU threads per rank (0: the machine's divided by the ranks)")
      ->type_name("N")->capture_default_str()->check(whole_number(0));
  app.add_option("--limit", c.limit, "train on the first N examples of each epoch (0: all)")
      ->type_name("N")->capture_default_str()->check(whole_number(0));
  app.add_option("--data", c.data, "MNIST-format IDX files, raw or .gz")->type_name("DIR")->capture_default_str();
  app.add_option("--save", c.save, "write the trained model (full tensors, one safetensors file)")->type_name("PATH");
  app.add_option("--seed", c.seed, "initialisation and shuffling")->capture_default_str()->check(whole_number(0));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (c.optimizer == "adamw" && lr->count() == 0) c.lr = 1e-3;
  return std::nullopt;
}

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

// The model behind one interface, sharded or replicated.
struct Trainer {
  virtual ~Trainer() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual GradientStore backward(const Tensor& loss) = 0;
  virtual std::vector<Tensor> parameters() = 0;
  virtual void train(bool on) = 0;
  virtual void save(const std::string& path) = 0;  // collective
};

struct FsdpTrainer : Trainer {
  FsdpTrainer(std::unique_ptr<nn::Module> net, ProcessGroup& pg, Device dev) : net(std::move(net)) {
    this->net->to(dev);
    sharded = fsdp::shard(*this->net, pg);
  }
  Tensor forward(const Tensor& x) override { return sharded->forward(x); }
  GradientStore backward(const Tensor& loss) override { return rumus::backward(loss); }
  std::vector<Tensor> parameters() override { return sharded->parameters(); }
  void train(bool on) override { sharded->train(on); }
  void save(const std::string& path) override { sharded->save(path, {{"model", net->type_name()}}); }
  std::unique_ptr<nn::Module> net;
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
  void save(const std::string& path) override {
    if (ddp->group().rank() == 0) io::save_safetensors(net->state_dict(), path, {{"model", net->type_name()}});
    ddp->group().barrier();
  }
  std::unique_ptr<nn::Module> net;
  std::unique_ptr<DistributedDataParallel> ddp;
};

// One rank's whole run. Rank 0 prints.
std::unique_ptr<nn::Module> make_net(const std::string& model) {
  if (model == "mlp") return std::make_unique<Mlp>();
  if (model == "wide") return std::make_unique<WideMlp>();
  return std::make_unique<Cnn>();
}

void run_rank(ProcessGroup& pg, const Config& c, const std::shared_ptr<const data::Mnist>& train_set,
              const std::shared_ptr<const data::Mnist>& test_set, const std::vector<Device>& devices,
              const StateDict& init) {
  const int rank = pg.rank(), n = pg.size();
  const Device dev = devices[std::size_t(rank) % devices.size()];
  if (c.batch_size % n != 0)
    throw Error(fmt::format("--batch-size {} does not split evenly over {} ranks", c.batch_size, n));
  const std::int64_t local = c.batch_size / n;

  // Every rank starts from the same initial values (the rank threads share
  // one random generator, so drawing them per rank would race).
  std::unique_ptr<nn::Module> net = make_net(c.model);
  net->load_state_dict(init);
  std::unique_ptr<Trainer> trainer;
  if (c.mode == "fsdp") trainer = std::make_unique<FsdpTrainer>(std::move(net), pg, dev);
  else trainer = std::make_unique<DdpTrainer>(std::move(net), pg, dev);
  std::unique_ptr<optim::Optimizer> opt;
  if (c.optimizer == "adamw") opt = std::make_unique<optim::AdamW>(trainer->parameters(), optim::AdamWOptions{.lr = c.lr});
  else
    opt = std::make_unique<optim::SGD>(trainer->parameters(),
                                       optim::SGDOptions{.lr = c.lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});

  data::DataLoader order_of(train_set, {.batch_size = c.batch_size, .shuffle = true, .drop_last = true, .seed = c.seed});
  const std::int64_t steps = example::steps_per_epoch(train_set->size(), c.batch_size, c.limit, c.data);
  if (rank == 0)
    std::printf("mnist_fsdp: %s %s, %d rank%s (%s), global batch %lld (%lld per rank), %lld steps per epoch, %s lr %g\n",
                c.mode.c_str(), c.model.c_str(), n, n > 1 ? "s" : "", pg.name().c_str(), (long long)c.batch_size,
                (long long)local, (long long)steps, c.optimizer.c_str(), c.lr);

  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    const std::vector<std::int64_t> order = order_of.order(epoch);
    trainer->train(true);
    pg.barrier();
    const StagingStats staged_before = staging_stats();
    const CollectiveStats collectives_before = collective_stats();
    pg.barrier();  // the counters are shared by rank threads: every rank reads them before any moves on
    const auto start = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (std::int64_t s = 0; s < steps; ++s) {
      auto first = order.begin() + s * c.batch_size + rank * local;
      data::Batch b = train_set->get_batch(std::vector<std::int64_t>(first, first + local));
      Tensor loss = cross_entropy(trainer->forward(b.x.to(dev)), b.y.to(dev));
      opt->step(trainer->backward(loss));
      loss_sum += loss.item();
    }
    pg.barrier();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const StagingStats staged = staging_stats();
    const CollectiveStats collectives = collective_stats();
    pg.barrier();

    // Evaluation: each rank scores its share of the test set.
    trainer->train(false);
    double test_loss = 0, correct = 0;
    {
      NoGradGuard no_grad;
      const std::int64_t total = test_set->size(), per = (total + n - 1) / n;
      const std::int64_t begin = std::min(total, rank * per), end = std::min(total, begin + per);
      // Every rank runs the same number of forwards (FSDP gathers are collective).
      const std::int64_t chunks = (per + c.batch_size - 1) / c.batch_size;
      for (std::int64_t k = 0; k < chunks; ++k) {
        std::int64_t lo = std::min(end, begin + k * c.batch_size), hi = std::min(end, lo + c.batch_size);
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
      std::printf("epoch %d: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n", epoch + 1,
                  t[0] / n, t[1] / double(test_set->size()), t[2] / double(test_set->size()),
                  double(steps * c.batch_size) / secs);
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
  }
  // Peak memory per rank: FSDP's sharded parameters and optimizer state shrink it as ranks grow.
  std::printf("  rank %d on %s: peak %.1f MiB of device memory in use\n", rank, dev.str().c_str(),
              double(device_stats(dev).peak_bytes_in_use) / 1048576.0);
  if (!c.save.empty()) {
    trainer->save(c.save);
    if (rank == 0) std::printf("saved %s\n", c.save.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (auto status = parse(c, argc, argv)) return *status;
  try {
    manual_seed(c.seed);
    const StateDict init = make_net(c.model)->state_dict();
    const std::vector<Device> devices = parse_devices(c.devices);
    auto train_set = std::make_shared<data::Mnist>(c.data, data::Split::Train);
    auto test_set = std::make_shared<data::Mnist>(c.data, data::Split::Test);
    // Before any rank starts: a run that would train nothing is an error.
    example::steps_per_epoch(train_set->size(), c.batch_size, c.limit, c.data);
    example::check_test_set(test_set->size(), c.data);
    const data::Normalize norm = data::Normalize::fit(train_set->images());
    train_set->set_normalize(norm);
    test_set->set_normalize(norm);
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    if (launched_by_mpi()) {
      MpiGroup world;
      set_num_threads(c.threads ? c.threads : std::max(1, hw / world.size()));
      try {
        run_rank(world, c, train_set, test_set, devices, init);
      } catch (const std::exception& e) {
        world.abort(e.what());  // ends every process of the job, none left waiting
      }
    } else {
      run_threads(c.ranks, [&](ProcessGroup& pg) { run_rank(pg, c, train_set, test_set, devices, init); }, {},
                  {.threads_per_rank = c.threads});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_fsdp: %s\n", e.what());
    return 1;
  }
  return 0;
}
