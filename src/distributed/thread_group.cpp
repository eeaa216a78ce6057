// ThreadGroup: ranks as threads, meeting at a generation-counted rendezvous.
//
// A collective is one to three rendezvous ("phases"). At the first, each rank
// posts its request and the addresses of its host buffers into the slot of
// its rank; the last to arrive advances the generation and wakes the others.
// A waiter waits for the generation to move past the one it arrived in, so a
// fast rank already posting for the next collective cannot be mistaken for
// this one, and nothing needs clearing between steps. Posted slots alternate
// between two banks by generation parity: a rank reads the bank of
// generation g only before it arrives at g + 1, and no rank can post into
// that bank again (at g + 2) before every rank has arrived at g + 1.
//
// After the first phase every rank checks the requests (the same check on the
// same data, so all ranks raise the same error) and moves data by reading the
// peers' buffers directly:
//   all_reduce:     each rank reduces its 1/W of the elements from all inputs
//                   into a private buffer; phase 2; it writes that range into
//                   every rank's buffer; phase 3 (nobody returns while a peer
//                   may still write into its buffer). One rank (a loopback
//                   group) reduces in place: no copy.
//   reduce_scatter: each rank reduces its chunk of all inputs into its output; phase 2
//   all_gather:     each rank copies every input into its output; phase 2
//   broadcast:      non-roots copy the root's buffer; phase 2
//   barrier:        the first phase alone
// Between the first and the last phase a rank runs host loops only: the later
// phases cannot fail and wait without a timeout, so a rank never leaves while
// another may still touch its memory. Only the first phase can fail: when a
// rank has failed, left early, or not arrived within the timeout.
#include "rumus/distributed/thread_group.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "deadline.hpp"
#include "host_reduce.hpp"
#include "rumus/core/parallel.hpp"

namespace rumus::distributed {

namespace detail {

struct Slot {
  CollectiveRequest request;
  const void* in = nullptr;
  void* out = nullptr;
};

struct ThreadShared {
  ThreadShared(int size, std::chrono::milliseconds timeout, std::chrono::microseconds delay, bool loopback)
      : size(size), timeout(timeout), delay(delay), loopback(loopback), here(std::size_t(size), 0),
        left(std::size_t(size), 0) {
    for (auto& b : banks) b.resize(std::size_t(size));
  }

  const int size;
  const std::chrono::milliseconds timeout;
  const std::chrono::microseconds delay;
  const bool loopback;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t generation = 0;
  int arrived = 0;
  std::vector<char> here;  // arrived in the current generation
  std::vector<char> left;  // will never arrive again
  std::vector<Slot> banks[2];

  bool failed = false;
  int failed_rank = -1;
  bool timed_out = false;
  std::string failure;

  // Under mu.
  void fail(int rank, std::string reason, bool timeout_failure = false) {
    if (failed) return;
    failed = true;
    failed_rank = rank;
    failure = std::move(reason);
    timed_out = timeout_failure;
    cv.notify_all();
  }
  [[noreturn]] void throw_failure(const char* op) const {
    throw RankFailedError(failed_rank, fmt::format("{}: {}", op, failure));
  }
  // The first rank that left without arriving, or -1.
  int missing_leaver() const {
    for (int k = 0; k < size; ++k)
      if (left[std::size_t(k)] && !here[std::size_t(k)]) return k;
    return -1;
  }
  void advance() {
    arrived = 0;
    std::fill(here.begin(), here.end(), 0);
    ++generation;
    cv.notify_all();
  }

  // The first phase of a collective: posts `slot`, returns the bank of this
  // generation once every rank has posted. Throws when the group fails.
  const std::vector<Slot>& meet(int rank, const Slot& slot) {
    const char* op = collective_name(slot.request.op);
    std::unique_lock lk(mu);
    if (failed) throw_failure(op);
    if (left[std::size_t(rank)])
      throw DistributedError(fmt::format("{}: rank {} already left the group", op, rank));
    const std::uint64_t gen = generation;
    std::vector<Slot>& bank = banks[gen & 1];
    bank[std::size_t(rank)] = slot;
    here[std::size_t(rank)] = 1;
    if (++arrived == size) {
      advance();
      return bank;
    }
    const auto deadline =
        saturating_deadline<std::chrono::steady_clock>(std::chrono::steady_clock::now(), timeout);
    for (;;) {
      if (generation != gen) return bank;
      if (failed) {
        // Our slot stays posted; nobody reads it: the group is finished.
        throw_failure(op);
      }
      if (int k = missing_leaver(); k >= 0) {
        fail(k, fmt::format("rank {} left the group (its function returned) without reaching this collective", k));
        throw_failure(op);
      }
      if (cv.wait_until(lk, deadline) == std::cv_status::timeout && generation == gen && !failed) {
        std::vector<int> missing;
        for (int k = 0; k < size; ++k)
          if (!here[std::size_t(k)]) missing.push_back(k);
        std::string reason = fmt::format("rank{} {} did not arrive within {} ms", missing.size() > 1 ? "s" : "",
                                         fmt::join(missing, ", "), timeout.count());
        fail(missing.front(), reason, true);
        throw CollectiveTimeoutError(fmt::format("{}: {}", op, reason));
      }
    }
  }

  // A later phase: every rank is inside the same collective running host
  // loops, so this cannot fail and needs no timeout.
  void phase(int rank) {
    std::unique_lock lk(mu);
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      advance();
      return;
    }
    cv.wait(lk, [&] { return generation != gen; });
  }
};

class ThreadRank final : public ProcessGroup {
 public:
  ThreadRank(std::shared_ptr<ThreadShared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
  ~ThreadRank() override { stop_communication(); }
  void close() { close_communication(); }
  int rank() const override { return rank_; }
  int size() const override { return shared_->size; }
  std::string name() const override { return "ThreadGroup"; }
  bool loopback() const override { return shared_->loopback; }

  void abort(const std::string& reason) override {
    std::lock_guard lk(shared_->mu);
    shared_->fail(rank_, fmt::format("rank {} failed: {}", rank_, reason));
  }

 protected:
  void exchange(const CollectiveRequest& request, const void* in, void* out, std::size_t count) override {
    ThreadShared& s = *shared_;
    const int n = s.size;
    const std::size_t esize = dtype_size(request.dtype);
    // Everything that allocates happens before the first phase: between the
    // phases nothing may throw, or a peer would wait for this rank forever.
    std::vector<CollectiveRequest> requests(static_cast<std::size_t>(n));
    std::vector<const void*> ins(static_cast<std::size_t>(n));
    const std::size_t begin = count * std::size_t(rank_) / std::size_t(n);
    const std::size_t end = count * std::size_t(rank_ + 1) / std::size_t(n);
    // This rank's reduced range, in a buffer of the thread kept across calls:
    // a fresh one would fault its pages in at every call.
    thread_local std::vector<char> scratch;
    const std::size_t mine_bytes = request.op == Collective::all_reduce && n > 1 ? (end - begin) * esize : 0;
    if (scratch.size() < mine_bytes) scratch.resize(mine_bytes);
    char* mine = scratch.data();
    if (s.delay.count() > 0 && request.op != Collective::barrier && !request.error_kind && request.piece == 0)
      std::this_thread::sleep_for(s.delay);

    const std::vector<Slot>& bank = s.meet(rank_, Slot{request, in, out});
    for (int k = 0; k < n; ++k) requests[std::size_t(k)] = bank[std::size_t(k)].request;
    check_requests(requests.data(), n);  // every rank throws the same error, before any data moves

    switch (request.op) {
      case Collective::barrier: return;
      case Collective::all_reduce: {
        if (n == 1) {  // nobody else reads the input: in place, which for one rank changes nothing
          detail::reduce_host(out, &in, 1, 0, count, request.dtype, request.reduce);
          return;
        }
        for (int k = 0; k < n; ++k)
          ins[std::size_t(k)] = static_cast<const char*>(bank[std::size_t(k)].in) + begin * esize;
        detail::reduce_host(mine, ins.data(), n, 0, end - begin, request.dtype, request.reduce);
        s.phase(rank_);  // every rank has read every input
        for (int k = 0; k < n; ++k)
          if (mine_bytes) std::memcpy(static_cast<char*>(bank[std::size_t(k)].out) + begin * esize, mine, mine_bytes);
        s.phase(rank_);  // every rank has written its range everywhere
        return;
      }
      case Collective::reduce_scatter: {
        for (int k = 0; k < n; ++k)
          ins[std::size_t(k)] = static_cast<const char*>(bank[std::size_t(k)].in) + std::size_t(rank_) * count * esize;
        detail::reduce_host(out, ins.data(), n, 0, count, request.dtype, request.reduce);
        s.phase(rank_);
        return;
      }
      case Collective::all_gather: {
        for (int k = 0; k < n; ++k) {
          char* block = static_cast<char*>(out) + std::size_t(k) * count * esize;
          // Staging may have put this rank's block in its place already.
          if (count && block != bank[std::size_t(k)].in) std::memcpy(block, bank[std::size_t(k)].in, count * esize);
        }
        s.phase(rank_);
        return;
      }
      case Collective::broadcast: {
        if (rank_ != request.root && count)
          std::memcpy(out, bank[std::size_t(request.root)].in, count * esize);
        s.phase(rank_);
        return;
      }
    }
  }

 private:
  std::shared_ptr<ThreadShared> shared_;
  int rank_;
};

}  // namespace detail

ThreadGroup::ThreadGroup(int size, ThreadGroupOptions options) {
  if (size < 1) throw Error(fmt::format("ThreadGroup: expected a world size >= 1, got {}", size));
  if (options.timeout.count() <= 0)
    throw Error(fmt::format("ThreadGroup: expected a positive timeout, got {} ms", options.timeout.count()));
  if (options.collective_delay.count() < 0)
    throw Error(fmt::format("ThreadGroup: expected a collective_delay >= 0, got {} us", options.collective_delay.count()));
  shared_ = std::make_shared<detail::ThreadShared>(size, options.timeout, options.collective_delay, options.loopback);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<detail::ThreadRank>(shared_, r));
}

ThreadGroup::~ThreadGroup() {
  // The queues close first, so what is queued fails as never run rather than
  // racing the thread to start; then every rank leaves, so a collective still
  // running fails at once instead of waiting out the timeout; then each
  // rank's handle joins its thread.
  for (auto& r : ranks_) static_cast<detail::ThreadRank&>(*r).close();
  std::lock_guard lk(shared_->mu);
  std::fill(shared_->left.begin(), shared_->left.end(), 1);
  shared_->cv.notify_all();
}

int ThreadGroup::size() const { return shared_->size; }

ProcessGroup& ThreadGroup::rank(int r) {
  if (r < 0 || r >= size())
    throw Error(fmt::format("ThreadGroup::rank: rank {} is out of range: expected 0 <= rank < {} (the world size)", r,
                            size()));
  return *ranks_[std::size_t(r)];
}

bool ThreadGroup::failed() const {
  std::lock_guard lk(shared_->mu);
  return shared_->failed;
}

void ThreadGroup::leave(int r) {
  rank(r);  // range check
  std::lock_guard lk(shared_->mu);
  shared_->left[std::size_t(r)] = 1;
  shared_->cv.notify_all();
}

void run_ranks(ThreadGroup& group, const std::function<void(ProcessGroup&)>& fn, RunOptions options) {
  if (options.threads_per_rank < 0)
    throw Error(fmt::format("run_ranks: expected threads_per_rank >= 0, got {}", options.threads_per_rank));
  const int n = group.size();
  const int threads = options.threads_per_rank > 0
                          ? options.threads_per_rank
                          : std::max(1, int(std::thread::hardware_concurrency()) / n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::mutex order_mu;
  std::vector<int> order;  // ranks in the order they failed
  std::vector<std::thread> pool;
  pool.reserve(std::size_t(n));
  for (int r = 0; r < n; ++r) {
    pool.emplace_back([&, r] {
      ProcessGroup& pg = group.rank(r);
      try {
        set_num_threads(threads);
        fn(pg);
      } catch (const std::exception& e) {
        errors[std::size_t(r)] = std::current_exception();
        {
          std::lock_guard lk(order_mu);
          order.push_back(r);
        }
        pg.abort(e.what());
      } catch (...) {
        errors[std::size_t(r)] = std::current_exception();
        {
          std::lock_guard lk(order_mu);
          order.push_back(r);
        }
        pg.abort("an exception that is not a std::exception");
      }
      group.leave(r);
    });
  }
  for (auto& t : pool) t.join();
  // The root cause: the first failure that is not a consequence of another rank's.
  for (int r : order) {
    try {
      std::rethrow_exception(errors[std::size_t(r)]);
    } catch (const RankFailedError&) {
      continue;
    } catch (...) {
      throw;
    }
  }
  if (!order.empty()) std::rethrow_exception(errors[std::size_t(order.front())]);
}

void run_threads(int size, const std::function<void(ProcessGroup&)>& fn, ThreadGroupOptions group_options,
                 RunOptions options) {
  ThreadGroup group(size, group_options);
  run_ranks(group, fn, options);
}

}  // namespace rumus::distributed
