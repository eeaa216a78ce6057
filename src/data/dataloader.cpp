#include "rumus/data/dataloader.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

namespace rumus::data {

namespace {
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

// One epoch in flight: workers claim batch numbers in order and park the
// results; the consumer takes them in order, at most `ahead` batches behind.
struct DataLoader::Run {
  std::shared_ptr<const Dataset> dataset;
  std::vector<std::int64_t> order;
  std::int64_t batch_size = 1, num_batches = 0, ahead = 1;

  std::mutex mu;
  std::condition_variable cv;
  std::map<std::int64_t, Batch> ready;
  std::int64_t next_claim = 0, consumed = 0;
  std::map<std::int64_t, std::exception_ptr> failed;  // reported when the consumer reaches them
  bool stop = false;
  std::vector<std::thread> workers;

  Batch make(std::int64_t b) const {
    auto first = order.begin() + b * batch_size;
    auto last = order.begin() + std::min<std::int64_t>((b + 1) * batch_size, std::int64_t(order.size()));
    return dataset->get_batch(std::vector<std::int64_t>(first, last));
  }

  void work() {
    for (;;) {
      std::int64_t b;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stop || next_claim >= num_batches || next_claim < consumed + ahead; });
        if (stop || next_claim >= num_batches) return;
        b = next_claim++;
      }
      Batch batch;
      std::exception_ptr err;
      try {
        batch = make(b);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard lk(mu);
      if (err)
        failed.emplace(b, err);
      else
        ready.emplace(b, std::move(batch));
      cv.notify_all();
    }
  }

  Batch take(std::int64_t b) {
    if (workers.empty()) return make(b);
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return failed.count(b) || ready.count(b); });
    if (failed.count(b)) std::rethrow_exception(failed.at(b));
    Batch batch = std::move(ready.at(b));
    ready.erase(b);
    consumed = b + 1;
    cv.notify_all();
    return batch;
  }

  ~Run() {
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  if (!dataset_) throw Error("DataLoader: the dataset is null");
  if (options_.batch_size < 1)
    throw Error(fmt::format("DataLoader: expected batch_size >= 1, got {}", options_.batch_size));
  if (options_.num_workers < 0 || options_.prefetch < 1)
    throw Error(fmt::format("DataLoader: expected num_workers >= 0 and prefetch >= 1, got {} and {}",
                            options_.num_workers, options_.prefetch));
}

std::int64_t DataLoader::size() const {
  std::int64_t n = dataset_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<std::int64_t> DataLoader::order(std::int64_t epoch) const {
  std::vector<std::int64_t> idx(std::size_t(dataset_->size()));
  std::iota(idx.begin(), idx.end(), 0);
  if (!options_.shuffle) return idx;
  // Fisher-Yates with our own generator, so the order is the same on every platform.
  std::uint64_t state = options_.seed * 0x9e3779b97f4a7c15ull ^ std::uint64_t(epoch) * 0xd1b54a32d192ed03ull;
  for (std::size_t i = idx.size(); i > 1; --i) {
    auto j = std::size_t((unsigned __int128)splitmix64(state) * i >> 64);
    std::swap(idx[i - 1], idx[j]);
  }
  return idx;
}

DataLoader::Iterator DataLoader::begin() {
  auto run = std::make_shared<Run>();
  run->dataset = dataset_;
  run->order = order(epoch_++);
  run->batch_size = options_.batch_size;
  run->num_batches = size();
  run->ahead = std::int64_t(options_.prefetch) * std::max(options_.num_workers, 1);
  for (int w = 0; w < options_.num_workers && run->num_batches > 0; ++w)
    run->workers.emplace_back([r = run.get()] { r->work(); });
  return Iterator(run, 0);
}

DataLoader::Iterator DataLoader::end() { return Iterator(nullptr, size()); }

DataLoader::Iterator::Iterator(std::shared_ptr<Run> run, std::int64_t index) : run_(std::move(run)), index_(index) {
  fetch();
}

void DataLoader::Iterator::fetch() {
  if (run_ && index_ < run_->num_batches)
    batch_ = run_->take(index_);
  else
    batch_ = {};
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  fetch();
  if (run_ && index_ >= run_->num_batches) run_.reset();  // joins the workers
  return *this;
}

}  // namespace rumus::data
