// Work and the communication thread of a process group.
#include "comm_queue.hpp"

#include <fmt/format.h>

#include "rumus/core/parallel.hpp"
#include "rumus/distributed/process_group.hpp"

namespace rumus::distributed {

namespace {

template <class E>
std::function<void()> fresh(const std::exception& e) {
  return [message = std::string(e.what())] { throw E(message); };
}

// What rethrows `error` on another thread: a new exception of the same rumus
// type and message (every error a collective raises is one), built from a
// new string, so nothing is shared with this thread's exception object.
std::function<void()> raiser(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const RankFailedError& e) {
    return [rank = e.rank, message = std::string(e.what())] { throw RankFailedError(rank, message); };
  } catch (const CollectiveTimeoutError& e) {
    return fresh<CollectiveTimeoutError>(e);
  } catch (const DistributedError& e) {
    return fresh<DistributedError>(e);
  } catch (const ShapeError& e) {
    return fresh<ShapeError>(e);
  } catch (const DTypeError& e) {
    return fresh<DTypeError>(e);
  } catch (const DeviceError& e) {
    return fresh<DeviceError>(e);
  } catch (const OutOfMemoryError& e) {
    return fresh<OutOfMemoryError>(e);
  } catch (const ValueError& e) {
    return fresh<ValueError>(e);
  } catch (const AutogradError& e) {
    return fresh<AutogradError>(e);
  } catch (const Error& e) {
    return fresh<Error>(e);
  } catch (...) {
    return [error] { std::rethrow_exception(error); };  // not rumus's: the object itself
  }
}

std::function<void()> distributed_error(std::string message) {
  return [message = std::move(message)] { throw DistributedError(message); };
}

}  // namespace

void Work::wait() {
  std::function<void()> raise;
  {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return done_; });
    raise = raise_;
  }
  if (raise) raise();
}

bool Work::is_completed() const {
  std::lock_guard lk(mu_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard lk(mu_);
  return done_ && !raise_;
}

Tensor Work::result() {
  wait();
  std::lock_guard lk(mu_);
  return result_;
}

void Work::finish(Tensor result, std::function<void()> raise) {
  {
    std::lock_guard lk(mu_);
    result_ = std::move(result);
    raise_ = std::move(raise);
    done_ = true;
  }
  cv_.notify_all();
}

namespace detail {

std::shared_ptr<Work> CommQueue::submit(Collective op, Task task) {
  auto work = std::make_shared<Work>(op);
  std::lock_guard lk(mu_);
  if (stopping_) {
    work->finish({}, distributed_error(fmt::format("{}: the process group is being destroyed", collective_name(op))));
    return work;
  }
  if (!thread_.joinable()) {
    // The CPU threads of its caller (a rank's share under run_ranks), not the whole machine.
    thread_ = std::thread([this, threads = num_threads()] {
      set_num_threads(threads);
      loop();
    });
  }
  queue_.push_back({work, std::move(task)});
  cv_.notify_all();
  return work;
}

Tensor CommQueue::run(Collective op, const Task& task) {
  {
    std::unique_lock lk(mu_);
    if (!queue_.empty() || busy_ || stopping_) {
      lk.unlock();
      return submit(op, task)->result();  // behind the collectives submitted before
    }
    busy_ = true;
  }
  // Clears busy_ however the task ends, and lets the thread take queued work.
  struct Idle {
    CommQueue& q;
    ~Idle() {
      std::lock_guard lk(q.mu_);
      q.busy_ = false;
      q.cv_.notify_all();
    }
  } idle{*this};
  return task();
}

void CommQueue::loop() {
  for (;;) {
    Item item;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || (!queue_.empty() && !busy_); });
      if (stopping_) return;  // stop() fails what is left
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Tensor result;
    std::function<void()> raise;
    try {
      result = item.task();
    } catch (...) {
      raise = raiser(std::current_exception());
    }
    item.task = nullptr;  // the collective's captures go before the waiter wakes
    {
      std::lock_guard lk(mu_);
      busy_ = false;
    }
    item.work->finish(std::move(result), std::move(raise));
    cv_.notify_all();
  }
}

void CommQueue::close() {
  std::deque<Item> left;
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    left.swap(queue_);
    cv_.notify_all();
  }
  for (Item& item : left)
    item.work->finish({}, distributed_error(fmt::format("{}: the process group was destroyed before this collective ran",
                                                       collective_name(item.work->op()))));
}

void CommQueue::stop() {
  close();
  if (thread_.joinable()) {
    if (thread_.get_id() != std::this_thread::get_id()) thread_.join();
    else thread_.detach();  // the last task destroyed the group: the loop returns next
  }
}

}  // namespace detail
}  // namespace rumus::distributed
