// MpiGroup: the ProcessGroup collectives on MPI. With check_requests, each
// collective first all-gathers every rank's request (a few hundred bytes) so
// a mismatch raises the same error on every rank before any data moves; then
// it calls the one MPI collective that does the job on the staged host buffers.
#include "rumus/distributed/mpi_group.hpp"

#include <mpi.h>

#include <fmt/format.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "../../core/env.hpp"
#include "../collective_stats.hpp"
#include "../deadline.hpp"
#include "../host_reduce.hpp"

namespace rumus::distributed {

namespace {

struct MpiRuntime {
  std::mutex mu;
  int level = -1;
  bool we_initialised = false;
  std::thread::id init_thread;
  int live_groups = 0;
};
MpiRuntime& runtime() {
  static MpiRuntime* r = new MpiRuntime();  // outlives static destructors
  return *r;
}

// A process that exits while one of its groups is alive (exit() inside the
// group's scope: a rank giving up mid-job) must not finalize: MPI_Finalize
// would wait for the other ranks, which wait in a collective for this one,
// until the job's time runs out. Leaving without it ends the job at once, as
// Open MPI's launcher does for any rank that exits without finalizing.
void finalize_at_exit() {
  if (runtime().live_groups > 0) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw DistributedError(fmt::format("MpiGroup: {} failed: {}", what, std::string(text, std::size_t(len))));
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    default: throw DTypeError(fmt::format("MpiGroup: no MPI reduction for dtype {}", dtype_name(d)));
  }
}

int as_count(std::size_t n, const char* op) {
  if (n > std::size_t(INT_MAX))
    throw DistributedError(fmt::format("{}: {} elements exceed what one MPI call moves ({}); split the tensor", op, n,
                                       INT_MAX));
  return int(n);
}

}  // namespace

struct MpiGroup::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  std::chrono::milliseconds timeout{0};
  // Busy polling moves a large message's fragments along (shared memory
  // transports need both sides to poll); past this a waiter pauses between polls.
  std::chrono::microseconds busy_poll{0};
  bool check_requests = true;
  std::mutex mu;  // serialises this group's MPI calls (MPI_THREAD_SERIALIZED)

  // Completes `request`: polls, first busily, then with short pauses. A
  // collective that has not completed by the deadline ends the job: MPI
  // cannot cancel a collective, so returning would leave MPI free to write
  // into buffers the caller has since released, should the missing rank come.
  void wait(MPI_Request& request, const char* op, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    using Clock = std::chrono::steady_clock;
    const auto deadline = detail::saturating_deadline<Clock>(start, timeout),
               busy_until = detail::saturating_deadline<Clock>(start, busy_poll);
    for (unsigned polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (polls % 64 != 63) continue;
      const auto now = std::chrono::steady_clock::now();
      if (now < busy_until) continue;
      if (now > deadline) {
        std::fprintf(stderr,
                     "rank %d: MpiGroup %s: not every rank arrived within %lld ms; aborting the job (an MPI "
                     "collective cannot be cancelled)\n",
                     rank, op, (long long)timeout.count());
        std::fflush(stderr);
        MPI_Abort(comm, 1);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
};

bool mpi_available() { return true; }

bool launched_by_mpi() {
  return env::is_set("OMPI_COMM_WORLD_SIZE") || env::is_set("PMI_SIZE") || env::is_set("PMIX_RANK");
}

int MpiGroup::thread_level() { return runtime().level; }

MpiGroup::MpiGroup(MpiGroupOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.timeout.count() <= 0)
    throw Error(fmt::format("MpiGroup: expected a positive timeout, got {} ms", options.timeout.count()));
  impl_->timeout = options.timeout;
  impl_->busy_poll = options.busy_poll;
  impl_->check_requests = options.check_requests;
  MpiRuntime& rt = runtime();
  {
    std::lock_guard lk(rt.mu);
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      rt.level = provided;
      rt.we_initialised = true;
      rt.init_thread = std::this_thread::get_id();
      std::atexit(finalize_at_exit);
    } else if (rt.level < 0) {
      MPI_Query_thread(&rt.level);
      rt.init_thread = std::this_thread::get_id();
    }
  }
  check(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm), "MPI_Comm_dup");
  MPI_Comm_rank(impl_->comm, &impl_->rank);
  MPI_Comm_size(impl_->comm, &impl_->size);
  // The ranks that share this host's memory are this host's ranks.
  MPI_Comm host = MPI_COMM_NULL;
  check(MPI_Comm_split_type(impl_->comm, MPI_COMM_TYPE_SHARED, impl_->rank, MPI_INFO_NULL, &host),
        "MPI_Comm_split_type");
  MPI_Comm_rank(host, &impl_->local_rank);
  MPI_Comm_size(host, &impl_->local_size);
  MPI_Comm_free(&host);
  std::lock_guard lk(rt.mu);
  ++rt.live_groups;
}

MpiGroup::~MpiGroup() {
  stop_communication();  // its thread calls exchange(), which needs impl_
  {
    MpiRuntime& rt = runtime();
    std::lock_guard lk(rt.mu);
    --rt.live_groups;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (impl_ && impl_->comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&impl_->comm);
}

int MpiGroup::rank() const { return impl_->rank; }
int MpiGroup::size() const { return impl_->size; }
int MpiGroup::local_rank() const { return impl_->local_rank; }
int MpiGroup::local_size() const { return impl_->local_size; }

void MpiGroup::abort(const std::string& reason) {
  std::fprintf(stderr, "rank %d aborts the MPI job: %s\n", impl_->rank, reason.c_str());
  std::fflush(stderr);
  MPI_Abort(impl_->comm, 1);
}

void MpiGroup::exchange(const CollectiveRequest& request, const void* in, void* out, std::size_t count) {
  std::lock_guard lk(impl_->mu);
  const MpiRuntime& rt = runtime();
  if (rt.level < MPI_THREAD_SERIALIZED && std::this_thread::get_id() != rt.init_thread)
    throw DistributedError(fmt::format(
        "MpiGroup {}: called from a thread other than the one that initialised MPI, but MPI granted only thread "
        "level {} (rumus needs MPI_THREAD_SERIALIZED for that)",
        collective_name(request.op), rt.level));
  const int n = impl_->size;
  MPI_Comm comm = impl_->comm;
  const char* op = collective_name(request.op);
  MPI_Request pending = MPI_REQUEST_NULL;
  if (impl_->check_requests) {
    std::vector<CollectiveRequest> requests(static_cast<std::size_t>(n));
    check(MPI_Iallgather(&request, int(sizeof(CollectiveRequest)), MPI_BYTE, requests.data(),
                         int(sizeof(CollectiveRequest)), MPI_BYTE, comm, &pending),
          "MPI_Iallgather (requests)");
    impl_->wait(pending, op, "MPI_Iallgather (requests)");
    detail::count_request_exchange();
    check_requests(requests.data(), n);
    if (request.op == Collective::barrier) return;  // the exchange above already met every rank
  } else {
    check_requests(&request, 1);  // a local error raises here, on this rank only
  }

  const std::size_t esize = dtype_size(request.dtype);
  if (count == 0 && request.op != Collective::barrier) return;
  // MPI has no 16-bit float sum: every rank receives the pieces it reduces
  // (all of `in` for all_reduce, its own chunk of each rank's for
  // reduce_scatter) and sums them in float in rank order, as ThreadGroup does.
  // `stride` is 0 when rank k sends its chunk k (alltoall), else each rank sends all.
  auto reduce_16bit = [&](const void* src, void* dst, std::size_t elems, std::size_t all) {
    std::vector<char> pieces(std::size_t(n) * elems * esize);
    const int bytes = as_count(elems * esize, op);
    if (all) check(MPI_Iallgather(src, bytes, MPI_BYTE, pieces.data(), bytes, MPI_BYTE, comm, &pending), "MPI_Iallgather");
    else check(MPI_Ialltoall(src, bytes, MPI_BYTE, pieces.data(), bytes, MPI_BYTE, comm, &pending), "MPI_Ialltoall");
    impl_->wait(pending, op, all ? "MPI_Iallgather" : "MPI_Ialltoall");
    std::vector<const void*> ins(static_cast<std::size_t>(n));
    for (int k = 0; k < n; ++k) ins[std::size_t(k)] = pieces.data() + std::size_t(k) * elems * esize;
    detail::reduce_host(dst, ins.data(), n, 0, elems, request.dtype, request.reduce);
  };
  switch (request.op) {
    case Collective::barrier:
      check(MPI_Ibarrier(comm, &pending), "MPI_Ibarrier");
      impl_->wait(pending, op, "MPI_Ibarrier");
      return;
    case Collective::all_reduce:
      if (is_16bit_float(request.dtype)) return reduce_16bit(out, out, count, count);
      check(MPI_Iallreduce(MPI_IN_PLACE, out, as_count(count, op), mpi_type(request.dtype), MPI_SUM, comm, &pending),
            "MPI_Iallreduce");
      impl_->wait(pending, op, "MPI_Iallreduce");
      if (request.reduce == Reduce::average) detail::divide_host(out, count, request.dtype, n);
      return;
    case Collective::reduce_scatter:
      if (is_16bit_float(request.dtype)) return reduce_16bit(in, out, count, 0);
      check(MPI_Ireduce_scatter_block(in, out, as_count(count, op), mpi_type(request.dtype), MPI_SUM, comm, &pending),
            "MPI_Ireduce_scatter_block");
      impl_->wait(pending, op, "MPI_Ireduce_scatter_block");
      if (request.reduce == Reduce::average) detail::divide_host(out, count, request.dtype, n);
      return;
    case Collective::all_gather: {
      const int bytes = as_count(count * esize, op);
      // Staging may have put this rank's block in its place already.
      const bool in_place = in == static_cast<const char*>(out) + std::size_t(impl_->rank) * count * esize;
      check(MPI_Iallgather(in_place ? MPI_IN_PLACE : in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, comm, &pending),
            "MPI_Iallgather");
      impl_->wait(pending, op, "MPI_Iallgather");
      return;
    }
    case Collective::broadcast:
      check(MPI_Ibcast(out, as_count(count * esize, op), MPI_BYTE, request.root, comm, &pending), "MPI_Ibcast");
      impl_->wait(pending, op, "MPI_Ibcast");
      return;
  }
}

}  // namespace rumus::distributed
