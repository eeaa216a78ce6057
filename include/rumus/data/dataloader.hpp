#pragma once
// Batches from a Dataset in a seeded order, prepared ahead by worker threads.
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "rumus/data/dataset.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::data {

struct DataLoaderOptions {
  std::int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;   // drop a last batch smaller than batch_size
  std::uint64_t seed = 0;   // the order of epoch e depends only on (seed, e)
  int num_workers = 1;      // 0: batches are made on the calling thread
  int prefetch = 2;         // batches made ahead of the consumer, per worker
};

class DataLoader {
 public:
  class Iterator;
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  template <class D>
    requires std::is_base_of_v<Dataset, std::decay_t<D>>
  DataLoader(D&& dataset, DataLoaderOptions options = {})
      : DataLoader(std::make_shared<std::decay_t<D>>(std::forward<D>(dataset)), options) {}

  // Each begin() starts the next epoch (0, 1, ...); set_epoch picks it, e.g. on resume.
  Iterator begin();
  Iterator end();
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }
  std::int64_t size() const;  // batches per epoch
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  // The example order of `epoch`: a permutation when shuffling, else 0..n-1.
  std::vector<std::int64_t> order(std::int64_t epoch) const;

  struct Run;
  class Iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Batch& operator*() { return batch_; }
    Batch* operator->() { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& o) const { return index_ == o.index_; }

   private:
    friend class DataLoader;
    Iterator(std::shared_ptr<Run> run, std::int64_t index);
    void fetch();
    std::shared_ptr<Run> run_;
    std::int64_t index_ = 0;
    Batch batch_;
  };

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::int64_t epoch_ = 0;
};

}  // namespace rumus::data

RUMUS_API_END
