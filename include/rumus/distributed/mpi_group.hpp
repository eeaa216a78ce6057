#pragma once
// One rank per process, over MPI (OpenMPI on Debian: libopenmpi-dev). The same
// program runs as N processes under `mpirun -np N`; each constructs one
// MpiGroup over MPI_COMM_WORLD. Built only when CMake finds MPI
// (RUMUS_MPI); otherwise constructing one raises an Error saying so.
//
// Thread level: MPI is initialised with MPI_THREAD_SERIALIZED. A collective
// may be issued from any thread (autograd runs a reduce-scatter on whichever
// thread calls backward; a program may build the group on one thread and train
// on another), which FUNNELED forbids; but MpiGroup never calls MPI from two
// threads at once (a mutex serialises its calls), so MULTIPLE, which makes
// OpenMPI lock around every call, is not needed. When the library offers less
// than SERIALIZED, calls from a thread other than the initialising one raise
// a DistributedError instead of misbehaving.
//
// Waiting: collectives are started non-blocking and polled, busily for
// `busy_poll`, then with 20 us pauses, so a rank that waits long for a slower
// one leaves its core to the work of others (ranks that only busy-polled
// starved the computing ones on a machine with more ranks than cores).
//
// Failures: with check_requests, mismatched requests raise the same error on
// every rank, as with ThreadGroup; without it a rank-local argument error
// raises on that rank only (the others wait for it until the timeout). A rank whose exception leaves main() ends the job (mpirun stops
// the other processes); abort() calls MPI_Abort. A collective that does not
// complete within `timeout` prints which one and aborts the job: MPI cannot
// cancel a collective, so the waiting ranks cannot safely return an error.
#include <chrono>
#include <memory>
#include <string>

#include "rumus/distributed/process_group.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

// Whether this build of rumus includes MpiGroup.
bool mpi_available();
// Whether this process was started by mpirun/mpiexec (OpenMPI, or a PMI/PMIx launcher).
bool launched_by_mpi();

struct MpiGroupOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // How long a waiting rank polls without pause before it starts pausing 20 us
  // between polls. Polling moves a large message's fragments along (shared
  // memory needs both sides to poll); pausing frees the core when the peer is
  // still computing. Longer suits a core per rank, shorter an oversubscribed machine.
  std::chrono::microseconds busy_poll{1000};
  // Exchange every rank's request (op, dtype, shape, root) before the data,
  // so a mismatch raises the same error on every rank: one more MPI
  // collective per call. Off, a collective is one MPI call, and a mismatch
  // is undetected: MPI may fail, pair the wrong data, or wait until `timeout`.
  // Default: on in a Debug build of rumus or with RUMUS_DISTRIBUTED_DEBUG=1.
  bool check_requests = default_check_requests();
};

class MpiGroup final : public ProcessGroup {
 public:
  // Every rank of MPI_COMM_WORLD (duplicated, so rumus's traffic never mixes
  // with the program's own). Initialises MPI when nobody has yet, and then
  // finalises it at exit.
  explicit MpiGroup(MpiGroupOptions options = {});
  ~MpiGroup() override;

  int rank() const override;
  int size() const override;
  // The ranks on this host: those MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts together.
  int local_rank() const override;
  int local_size() const override;
  std::string name() const override { return "MpiGroup"; }
  void abort(const std::string& reason) override;

  // The thread level MPI granted (MPI_THREAD_* value).
  static int thread_level();

 protected:
  void exchange(const CollectiveRequest& request, const void* in, void* out, std::size_t count) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rumus::distributed

RUMUS_API_END
