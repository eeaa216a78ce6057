#pragma once
// A process group's communication thread: runs collectives one at a time in
// the order they were submitted, so every rank issues them in the order its
// caller did, asynchronous or not.
//
// A synchronous collective goes through the same queue: when nothing is
// queued or running it runs on the caller's thread at once (no hand-over to
// pay), else it waits behind what was submitted before it.
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <thread>

#include "rumus/distributed/work.hpp"

namespace rumus::distributed::detail {

class CommQueue {
 public:
  using Task = std::function<Tensor()>;
  CommQueue() = default;
  ~CommQueue() { stop(); }
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Queues `task`; the communication thread starts on first use.
  std::shared_ptr<Work> submit(Collective op, Task task);
  // Runs `task` after everything submitted before; its result or its error.
  Tensor run(Collective op, const Task& task);
  // Refuses new tasks and fails the queued ones; the running task goes on.
  void close();
  // close(), then lets the running task finish and joins the thread.
  // The owner calls it before the members its tasks use are destroyed.
  void stop();

 private:
  struct Item {
    std::shared_ptr<Work> work;
    Task task;
  };
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;  // the queue, busy_ and stopping_ changed
  std::deque<Item> queue_;
  bool busy_ = false;  // a task runs (on the thread or inline)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rumus::distributed::detail
