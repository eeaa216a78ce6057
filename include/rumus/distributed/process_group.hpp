#pragma once
// Collectives across ranks: one interface, three transports. ThreadGroup runs
// the ranks as threads of one process; MpiGroup (mpi_group.hpp) runs one rank
// per process under mpirun; NcclGroup (nccl_group.hpp), made over either,
// runs device tensors through NCCL. Every collective takes tensors of any device:
// device tensors travel through persistent mapped host buffers, copied on
// the device's transfer queue (src/distributed/staging.cpp says what each
// collective copies).
//
// Every rank must call the same collectives in the same order with matching
// shapes and dtypes. Before any data moves, the ranks exchange what they were
// asked to do (always on ThreadGroup; on MpiGroup when check_requests is on);
// a mismatch, or a bad argument on any one rank, raises the same
// rumus::Error subclass on every rank, naming the op, the rank, what was
// expected and what was given. A rank that fails or stops arriving makes the
// others fail (RankFailedError, CollectiveTimeoutError): never a hang.
//
// Each collective also has an asynchronous form (all_reduce_async, ...) that
// returns a Work handle (work.hpp), as c10d's. A group runs its collectives,
// synchronous or not, one at a time on its communication thread in the order
// they were called, so every rank pairs them as it would the synchronous
// calls; Work::wait() rethrows the errors the synchronous call would raise.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "rumus/core/error.hpp"
#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"
#include "rumus/distributed/work.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

// Base of the errors only distributed code raises. Mismatched shapes and dtypes
// raise ShapeError and DTypeError like the rest of rumus.
class DistributedError : public Error { public: using Error::Error; };
// Another rank threw, aborted, or left the group; `rank` names it.
class RankFailedError : public DistributedError {
 public:
  RankFailedError(int rank, const std::string& message) : DistributedError(message), rank(rank) {}
  int rank;
};
// Some ranks did not reach a collective within the group's timeout; the
// message lists them. The group is unusable afterwards.
class CollectiveTimeoutError : public DistributedError { public: using DistributedError::DistributedError; };

enum class Reduce : std::uint8_t {
  sum,
  average,  // sum / size(); floating dtypes only
};

enum class Collective : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, barrier };
const char* collective_name(Collective c);

// What one rank asked for, exchanged before the data (fixed size so it can
// cross process boundaries as bytes).
struct CollectiveRequest {
  static constexpr int kMaxDims = 8;
  Collective op = Collective::barrier;
  DType dtype = DType::f32;
  Reduce reduce = Reduce::sum;
  std::int32_t root = 0;
  std::int32_t ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  // Which piece of a collective staged in pieces this exchange moves (0: the first, or the whole).
  std::int32_t piece = 0;
  // A rank-local problem found before the exchange: 0 none, 1 Error, 2 ShapeError, 3 DTypeError.
  std::int32_t error_kind = 0;
  char error[240] = {};
};

namespace detail { class CommQueue; }

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's place among the ranks on its host, and how many share the
  // host (PyTorch's LOCAL_RANK and LOCAL_WORLD_SIZE): what a rank picks its
  // GPU and its share of the CPU threads by. Thread ranks share one host.
  virtual int local_rank() const { return rank(); }
  virtual int local_size() const { return size(); }
  virtual std::string name() const = 0;  // "ThreadGroup", "MpiGroup"

  // In place: every rank's `tensor` becomes the element-wise reduction over
  // ranks. Sums run in rank order (ThreadGroup), so every rank gets the same bits.
  // dtypes: f32, f64, f16, bf16, i32, i64 (average: the floating ones); f16
  // and bf16 are summed in float and rounded once.
  void all_reduce(const Tensor& tensor, Reduce op = Reduce::sum);
  // `input` [size() * c, ...] on every rank -> [c, ...]: rows [rank*c, (rank+1)*c)
  // of the element-wise reduction over ranks. The first dim must divide by size().
  Tensor reduce_scatter(const Tensor& input, Reduce op = Reduce::sum);
  // `input` [c, ...] on every rank (same shape) -> [size() * c, ...]: the inputs
  // stacked along dim 0 in rank order (a 0-d input gives [size()]). Any dtype.
  Tensor all_gather(const Tensor& input);
  // In place: every rank's `tensor` becomes root's. Any dtype.
  void broadcast(const Tensor& tensor, int root = 0);
  // Returns once every rank has called it.
  void barrier();

  // The same collectives, started on the communication thread. The tensors
  // belong to the collective until wait(); Work::result() gives the output of
  // reduce_scatter and all_gather.
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, Reduce op = Reduce::sum);
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& input, Reduce op = Reduce::sum);
  std::shared_ptr<Work> all_gather_async(const Tensor& input);
  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root = 0);
  std::shared_ptr<Work> barrier_async();

  // Marks this rank failed: collectives in progress or to come on the other
  // ranks raise RankFailedError naming this rank (ThreadGroup), or the job is
  // aborted (MpiGroup). Call it from a handler before giving up on a step.
  virtual void abort(const std::string& reason) = 0;

 protected:
  ProcessGroup();
  // Lets the running collective finish, fails the queued ones and joins the
  // communication thread. A transport calls it first thing in its destructor:
  // the thread calls exchange(), which must not outlive the transport.
  void stop_communication();
  // The first half of stop_communication: fails the queued collectives and
  // refuses new ones, without waiting for the running one.
  void close_communication();
  // Exchanges `request` with every rank, throws on every rank when the
  // requests disagree (check_requests below), then moves the data:
  //   all_reduce:     in == out, `count` elements, reduced in place
  //   reduce_scatter: in has size*count, out has count elements
  //   all_gather:     in has count, out has size*count elements
  //   broadcast:      in == out, `count` elements
  //   barrier:        nothing
  virtual void exchange(const CollectiveRequest& request, const void* in, void* out, std::size_t count) = 0;
  // A group of one that still stages and exchanges as a rank of a larger
  // group would (ThreadGroupOptions::loopback); by default one rank moves nothing.
  virtual bool loopback() const { return false; }
  // A transport that moves device memory itself (NcclGroup) runs the
  // collectives whose tensor it can reach and returns the result (the tensor
  // itself for the in-place ones); the host staging and exchange() are then
  // skipped. Called once the arguments passed the local checks, even on a
  // group of one. An undefined result (the default) leaves the collective to
  // the host path.
  virtual Tensor device_collective(const CollectiveRequest& request, const Tensor& input) { return {}; }

 private:
  // The whole collective (argument check, staging, exchange) on one thread.
  Tensor run_all_reduce(const Tensor& tensor, Reduce op);
  Tensor run_reduce_scatter(const Tensor& input, Reduce op);
  Tensor run_all_gather(const Tensor& input);
  Tensor run_broadcast(const Tensor& tensor, int root);
  Tensor run_barrier();

  std::unique_ptr<detail::CommQueue> comm_;
  // Runs its host-side collectives (CPU tensors, barriers, the error
  // exchange) through the exchange() of the group it was made from.
  friend class NcclGroup;
};

// Throws, identically on every rank, when the ranks' requests disagree or any
// one of them carries a local error. `requests` holds one per rank, in rank order.
void check_requests(const CollectiveRequest* requests, int size);

// Whether a transport that pays for the request exchange (MpiGroup: one more
// MPI collective per call) does it by default: in a Debug build of rumus, or
// when RUMUS_DISTRIBUTED_DEBUG=1. Without it, a mismatch across ranks is not
// detected (MPI may fail, hang until the timeout, or pair the wrong data).
bool default_check_requests();

// What collectives of this process moved between devices and the host (all
// ranks of a ThreadGroup together), for measurements and tests.
struct StagingStats {
  std::uint64_t device_to_host_bytes = 0, host_to_device_bytes = 0;
  std::uint64_t device_to_host = 0, host_to_device = 0;  // transfers
  std::uint64_t host_repacks = 0;                         // strided CPU tensors copied to contiguous memory
};
StagingStats staging_stats();

// Where collectives of this process spent their wall time (all ranks of a
// ThreadGroup together: divide by the ranks for a rank's share). `exchange`
// is the rendezvous with the other ranks, the host reduction and copies
// between their buffers, so waiting for a late rank counts there; `staging`
// is the device <-> host copies, whose reads first wait for the kernels that
// wrote the tensor.
struct CollectiveStats {
  std::uint64_t calls = 0;
  double exchange_seconds = 0, staging_seconds = 0;
  // Separate exchanges of the requests (MpiGroup with check_requests; a
  // ThreadGroup's check rides along its rendezvous and costs none).
  std::uint64_t request_exchanges = 0;
};
CollectiveStats collective_stats();

// Shards along dim 0: a tensor of `rows` rows is padded with zero rows to
// size * shard_rows(rows, size) rows, and rank r holds rows [r * c, (r + 1) * c).
// Every rank's shard has the same shape, so gathers and reduce-scatters move
// equal pieces; ranks past the end hold only padding (which stays zero).
inline std::int64_t shard_rows(std::int64_t rows, int size) { return (rows + size - 1) / size; }

}  // namespace rumus::distributed

RUMUS_API_END
