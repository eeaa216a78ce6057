#pragma once
// The handle of a collective started with one of ProcessGroup's *_async calls
// (c10d's Work). The collective runs on the group's communication thread, in
// submission order; wait() blocks until it ran and rethrows its error on the
// waiting rank (the same errors the synchronous call raises).
//
// Until wait() returns, the tensors handed to the collective belong to it:
// reading or writing them races with the communication thread.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

#include "rumus/core/export.hpp"
#include "rumus/core/tensor.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

enum class Collective : std::uint8_t;  // process_group.hpp

class Work {
 public:
  explicit Work(Collective op) : op_(op) {}
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Blocks until the collective ran; rethrows its error, on every call.
  void wait();
  // True once it ran, successfully or not; never blocks.
  bool is_completed() const;
  // True once it ran without an error.
  bool is_success() const;
  // wait(), then the collective's result: the output of reduce_scatter and
  // all_gather, the tensor itself for all_reduce and broadcast, undefined for barrier.
  Tensor result();
  Collective op() const { return op_; }

  // For the communication thread: marks the collective done. `raise`, when
  // set, throws the collective's error: a new exception on each call, so the
  // waiting thread never shares an exception object with the communication
  // thread (whose reference counts ThreadSanitizer cannot see).
  void finish(Tensor result, std::function<void()> raise);

 private:
  const Collective op_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::function<void()> raise_;
  Tensor result_;
};

}  // namespace rumus::distributed

RUMUS_API_END
