#pragma once
// N ranks as N threads of one process. The ranks meet at a mutex + condition
// variable rendezvous with a generation counter: a rank waits for "the
// generation after the one I arrived in", so a fast rank that enters the next
// collective can neither satisfy nor disturb the current one, and the group is
// reusable for any number of steps. Peers read each other's host buffers
// directly (no shared result buffer to clear).
//
// Each rank's handle is a process group of its own with its own
// communication thread (started by its first asynchronous collective).
//
// A rank that throws (run_ranks catches it), calls abort(), returns while
// others still wait for it, or does not arrive within `timeout` makes every
// other rank's collective raise a rumus::Error that names it.
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "rumus/distributed/process_group.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

namespace detail { struct ThreadShared; }

struct ThreadGroupOptions {
  // How long a rank waits at a collective for the others before it gives up.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  // For benchmarks: every collective with data first sleeps this long on the
  // thread that runs it, as a slow link would take, so that overlapping
  // communication with computation can be measured on one machine.
  std::chrono::microseconds collective_delay{0};
  // For benchmarks and tests: a group of one rank still moves device tensors
  // through host staging and runs its exchange (a loopback copy), as a rank
  // of a larger group would; without it one rank stages and copies nothing.
  bool loopback = false;
};

class ThreadGroup {
 public:
  // size >= 1.
  explicit ThreadGroup(int size, ThreadGroupOptions options = {});
  ~ThreadGroup();
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;

  int size() const;
  // The handle rank `r`'s thread uses; 0 <= r < size().
  ProcessGroup& rank(int r);
  // True once a rank failed, left early or timed out; the group then stays failed.
  bool failed() const;
  // Marks rank `r` as gone: collectives that still wait for it fail at once.
  // run_ranks calls it when a rank's function returns.
  void leave(int r);

 private:
  std::shared_ptr<detail::ThreadShared> shared_;
  std::vector<std::unique_ptr<ProcessGroup>> ranks_;
};

struct RunOptions {
  // CPU threads (OpenMP, OpenBLAS) for each rank; 0: the machine's hardware
  // threads divided by the number of ranks, at least 1.
  int threads_per_rank = 0;
};

// Runs fn(group.rank(r)) on one new thread per rank and joins them all. A rank
// that throws aborts the group, so the others fail fast instead of waiting; a
// rank that returns leaves it. Afterwards the root cause is rethrown: the
// exception of the first rank that failed, not the others' RankFailedError.
void run_ranks(ThreadGroup& group, const std::function<void(ProcessGroup&)>& fn, RunOptions options = {});
// A ThreadGroup of `size` ranks for one run_ranks.
void run_threads(int size, const std::function<void(ProcessGroup&)>& fn, ThreadGroupOptions group_options = {},
                 RunOptions options = {});

}  // namespace rumus::distributed

RUMUS_API_END
