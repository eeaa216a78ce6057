// The transport-independent half of ProcessGroup: argument checks, the
// cross-rank agreement check, staging, host reductions, and the queue that
// runs every collective (comm_queue.hpp).
#include "rumus/distributed/process_group.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

#include "../core/env.hpp"
#include "collective_stats.hpp"
#include "comm_queue.hpp"
#include "host_reduce.hpp"
#include "staging.hpp"

namespace rumus::distributed {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_gather: return "all_gather";
    case Collective::broadcast: return "broadcast";
    case Collective::barrier: return "barrier";
  }
  return "?";
}

namespace {

struct TimeCounters {
  std::atomic<std::uint64_t> calls{0}, exchange_ns{0}, staging_ns{0}, request_exchanges{0};
};
TimeCounters& time_counters() {
  static TimeCounters c;
  return c;
}
// Adds the wall time of one scope to a counter of time_counters().
class Timed {
 public:
  explicit Timed(std::atomic<std::uint64_t>& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    total_ += std::uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  std::atomic<std::uint64_t>& total_;
  std::chrono::steady_clock::time_point start_;
};
// f() timed as a collective's exchange between ranks, or as its device <-> host staging.
template <class F>
auto exchanged(F&& f) {
  Timed t(time_counters().exchange_ns);
  return f();
}
template <class F>
auto staged(F&& f) {
  Timed t(time_counters().staging_ns);
  return f();
}

const char* reduce_name(Reduce op) { return op == Reduce::sum ? "sum" : "average"; }

Shape request_shape(const CollectiveRequest& r) { return Shape(r.shape, r.shape + r.ndim); }

void set_error(CollectiveRequest& r, int kind, const std::string& message) {
  if (r.error_kind) return;  // keep the first
  r.error_kind = kind;
  std::size_t n = std::min(message.size(), sizeof(r.error) - 1);
  std::memcpy(r.error, message.data(), n);
  r.error[n] = '\0';
}

CollectiveRequest make_request(Collective op, const Tensor* t, Reduce reduce, int root, int size) {
  CollectiveRequest r;
  r.op = op;
  r.reduce = reduce;
  r.root = root;
  const char* name = collective_name(op);
  if (op == Collective::barrier) return r;
  if (!t->defined()) {
    set_error(r, 1, fmt::format("{}: expected a defined tensor, got an undefined one", name));
    return r;
  }
  r.dtype = t->dtype();
  if (t->dim() > CollectiveRequest::kMaxDims) {
    set_error(r, 2, fmt::format("{}: expected at most {} dims, got shape {}", name, CollectiveRequest::kMaxDims,
                                shape_str(t->shape())));
    return r;
  }
  r.ndim = std::int32_t(t->dim());
  for (int i = 0; i < r.ndim; ++i) r.shape[i] = t->shape()[std::size_t(i)];
  if (op == Collective::all_reduce || op == Collective::reduce_scatter) {
    const DType d = t->dtype();
    if (d != DType::f32 && d != DType::f64 && d != DType::f16 && d != DType::bf16 && d != DType::i32 && d != DType::i64)
      set_error(r, 3,
                fmt::format("{}: expected dtype f32, f64, f16, bf16, i32 or i64, got {}", name, dtype_name(d)));
    else if (reduce == Reduce::average && !is_floating(d))
      set_error(r, 3,
                fmt::format("{}: average expects a floating dtype (f32, f64, f16, bf16), got {}", name, dtype_name(d)));
  }
  if (op == Collective::reduce_scatter) {
    if (t->dim() == 0)
      set_error(r, 2, fmt::format("reduce_scatter: expected a tensor with at least 1 dim, got shape []"));
    else if (t->size(0) % size != 0)
      set_error(r, 2, fmt::format("reduce_scatter: expected a first dim divisible by the group size {}, got shape {}",
                                  size, shape_str(t->shape())));
  }
  if (op == Collective::broadcast && (root < 0 || root >= size))
    set_error(r, 1, fmt::format("broadcast: root {} is out of range: expected 0 <= root < {} (the group size)", root,
                                size));
  return r;
}

[[noreturn]] void throw_kind(int kind, const std::string& message) {
  if (kind == 2) throw ShapeError(message);
  if (kind == 3) throw DTypeError(message);
  throw Error(message);
}

}  // namespace

void check_requests(const CollectiveRequest* reqs, int size) {
  const CollectiveRequest& first = reqs[0];
  for (int k = 1; k < size; ++k)
    if (reqs[k].op != first.op)
      throw DistributedError(fmt::format("collective mismatch: rank 0 called {}, rank {} called {}",
                                         collective_name(first.op), k, collective_name(reqs[k].op)));
  for (int k = 0; k < size; ++k)
    if (reqs[k].error_kind) throw_kind(reqs[k].error_kind, fmt::format("rank {}: {}", k, reqs[k].error));
  const char* name = collective_name(first.op);
  if (first.op == Collective::barrier) return;
  for (int k = 1; k < size; ++k) {
    const CollectiveRequest& r = reqs[k];
    if (r.dtype != first.dtype)
      throw DTypeError(fmt::format("{}: dtypes differ across ranks: expected {} (as on rank 0), got {} on rank {}",
                                   name, dtype_name(first.dtype), dtype_name(r.dtype), k));
    if (request_shape(r) != request_shape(first))
      throw ShapeError(fmt::format("{}: shapes differ across ranks: expected {} (as on rank 0), got {} on rank {}",
                                   name, shape_str(request_shape(first)), shape_str(request_shape(r)), k));
    if (r.reduce != first.reduce && (first.op == Collective::all_reduce || first.op == Collective::reduce_scatter))
      throw DistributedError(fmt::format("{}: reduce ops differ across ranks: expected {} (as on rank 0), got {} on "
                                         "rank {}",
                                         name, reduce_name(first.reduce), reduce_name(r.reduce), k));
    if (r.root != first.root && first.op == Collective::broadcast)
      throw DistributedError(fmt::format("broadcast: roots differ across ranks: expected {} (as on rank 0), got {} "
                                         "on rank {}",
                                         first.root, r.root, k));
  }
}

ProcessGroup::ProcessGroup() : comm_(std::make_unique<detail::CommQueue>()) {}

ProcessGroup::~ProcessGroup() { stop_communication(); }

void ProcessGroup::stop_communication() { comm_->stop(); }
void ProcessGroup::close_communication() { comm_->close(); }

// Every collective, synchronous or not, is one task on the group's queue.
void ProcessGroup::all_reduce(const Tensor& tensor, Reduce op) {
  comm_->run(Collective::all_reduce, [&] { return run_all_reduce(tensor, op); });
}
Tensor ProcessGroup::reduce_scatter(const Tensor& input, Reduce op) {
  return comm_->run(Collective::reduce_scatter, [&] { return run_reduce_scatter(input, op); });
}
Tensor ProcessGroup::all_gather(const Tensor& input) {
  return comm_->run(Collective::all_gather, [&] { return run_all_gather(input); });
}
void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  comm_->run(Collective::broadcast, [&] { return run_broadcast(tensor, root); });
}
void ProcessGroup::barrier() {
  comm_->run(Collective::barrier, [&] { return run_barrier(); });
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& tensor, Reduce op) {
  return comm_->submit(Collective::all_reduce, [this, tensor, op] { return run_all_reduce(tensor, op); });
}
std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const Tensor& input, Reduce op) {
  return comm_->submit(Collective::reduce_scatter, [this, input, op] { return run_reduce_scatter(input, op); });
}
std::shared_ptr<Work> ProcessGroup::all_gather_async(const Tensor& input) {
  return comm_->submit(Collective::all_gather, [this, input] { return run_all_gather(input); });
}
std::shared_ptr<Work> ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  return comm_->submit(Collective::broadcast, [this, tensor, root] { return run_broadcast(tensor, root); });
}
std::shared_ptr<Work> ProcessGroup::barrier_async() {
  return comm_->submit(Collective::barrier, [this] { return run_barrier(); });
}

Tensor ProcessGroup::run_all_reduce(const Tensor& tensor, Reduce op) {
  CollectiveRequest req = make_request(Collective::all_reduce, &tensor, op, 0, size());
  if (req.error_kind) {
    exchange(req, nullptr, nullptr, 0);  // throws on every rank (on this one only for an unchecked MpiGroup)
    throw_kind(req.error_kind, req.error);
  }
  ++time_counters().calls;
  if (Tensor done = device_collective(req, tensor); done.defined()) return done;
  if (size() == 1 && !loopback()) return tensor;  // one rank: the sum and the average are the tensor itself
  if (staging::Pieces::count_for(tensor) > 1) {  // each piece goes back while the next ones come to the host
    staging::Pieces pieces = staged([&] { return staging::Pieces(tensor); });
    for (int k = 0; k < pieces.count(); ++k) {
      void* data = staged([&] { return pieces.wait(k); });
      CollectiveRequest piece = req;
      piece.piece = k;
      exchanged([&] { exchange(piece, data, data, pieces.elements(k)); });
      staged([&] { pieces.write_back(k); });
    }
    staged([&] { pieces.finish(); });
    return tensor;
  }
  staging::HostCopy h = staged([&] { return staging::to_host(tensor); });
  exchanged([&] { exchange(req, h.data, h.data, std::size_t(tensor.numel())); });
  staged([&] { staging::write_back(tensor, h); });
  return tensor;
}

Tensor ProcessGroup::run_reduce_scatter(const Tensor& input, Reduce op) {
  CollectiveRequest req = make_request(Collective::reduce_scatter, &input, op, 0, size());
  if (req.error_kind) {
    exchange(req, nullptr, nullptr, 0);
    throw_kind(req.error_kind, req.error);
  }
  ++time_counters().calls;
  if (Tensor done = device_collective(req, input); done.defined()) return done;
  if (size() == 1 && !loopback()) return input.detach().clone();  // stays on its device: nothing to exchange
  staging::HostCopy h = staged([&] { return staging::to_host(input); });
  Shape out_shape = input.shape();
  out_shape[0] /= size();
  staging::HostCopy out = staged([&] { return staging::host_output(out_shape, input.dtype(), input.device()); });
  exchanged([&] { exchange(req, h.data, out.data, std::size_t(numel_of(out_shape))); });
  return staged([&] { return staging::to_device(out, out_shape, input.dtype(), input.device()); });
}

Tensor ProcessGroup::run_all_gather(const Tensor& input) {
  CollectiveRequest req = make_request(Collective::all_gather, &input, Reduce::sum, 0, size());
  if (req.error_kind) {
    exchange(req, nullptr, nullptr, 0);
    throw_kind(req.error_kind, req.error);
  }
  ++time_counters().calls;
  if (Tensor done = device_collective(req, input); done.defined()) return done;
  if (size() == 1 && !loopback())
    return input.detach().reshape(input.dim() == 0 ? Shape{1} : input.shape()).clone();
  Shape out_shape = input.shape();
  if (out_shape.empty()) out_shape = {size()};
  else out_shape[0] *= size();
  const std::size_t count = std::size_t(input.numel());
  if (!input.device().is_cpu()) {  // this rank's block is copied to the host straight into its place
    staging::HostCopy out = staged([&] { return staging::host_output(out_shape, input.dtype(), input.device()); });
    const void* mine = staged([&] {
      return staging::to_host_at(input, out, std::size_t(rank()) * count * dtype_size(input.dtype()));
    });
    exchanged([&] { exchange(req, mine, out.data, count); });
    return staged([&] { return staging::to_device(out, out_shape, input.dtype(), input.device()); });
  }
  staging::HostCopy h = staged([&] { return staging::to_host(input); });
  staging::HostCopy out = staged([&] { return staging::host_output(out_shape, input.dtype(), input.device()); });
  exchanged([&] { exchange(req, h.data, out.data, count); });
  return staged([&] { return staging::to_device(out, out_shape, input.dtype(), input.device()); });
}

Tensor ProcessGroup::run_broadcast(const Tensor& tensor, int root) {
  CollectiveRequest req = make_request(Collective::broadcast, &tensor, Reduce::sum, root, size());
  if (req.error_kind) {
    exchange(req, nullptr, nullptr, 0);
    throw_kind(req.error_kind, req.error);
  }
  ++time_counters().calls;
  if (Tensor done = device_collective(req, tensor); done.defined()) return done;
  if (size() == 1 && !loopback()) return tensor;  // the root's tensor is already everyone's
  staging::HostCopy h;
  if (rank() == root || (tensor.device().is_cpu() && tensor.is_contiguous()))
    h = staged([&] { return staging::to_host(tensor); });
  else  // its old values are not needed: no read
    h = staged([&] { return staging::host_output(tensor.shape(), tensor.dtype(), tensor.device()); });
  exchanged([&] { exchange(req, h.data, h.data, std::size_t(tensor.numel())); });
  if (rank() != root) staged([&] { staging::write_back(tensor, h); });
  return tensor;
}

Tensor ProcessGroup::run_barrier() {
  CollectiveRequest req = make_request(Collective::barrier, nullptr, Reduce::sum, 0, size());
  ++time_counters().calls;
  exchanged([&] { exchange(req, nullptr, nullptr, 0); });
  return {};
}

bool default_check_requests() {
#ifdef NDEBUG
  static const bool on = env::on("RUMUS_DISTRIBUTED_DEBUG");
#else
  static const bool on = true;  // a Debug build of rumus
#endif
  return on;
}

void detail::count_request_exchange() { ++time_counters().request_exchanges; }

CollectiveStats collective_stats() {
  const TimeCounters& c = time_counters();
  return {c.calls.load(), double(c.exchange_ns.load()) * 1e-9, double(c.staging_ns.load()) * 1e-9,
          c.request_exchanges.load()};
}

namespace detail {

namespace {
template <class T>
void reduce_typed(T* out, const void* const* inputs, int n, std::size_t begin, std::size_t end, Reduce op) {
  const T* first = static_cast<const T*>(inputs[0]);
  if (out != first)
    for (std::size_t i = begin; i < end; ++i) out[i] = first[i];
  for (int k = 1; k < n; ++k) {
    const T* in = static_cast<const T*>(inputs[k]);
    for (std::size_t i = begin; i < end; ++i) out[i] += in[i];
  }
  if constexpr (std::is_floating_point_v<T>)
    if (op == Reduce::average && n > 1)  // x / 1 is x: no pass
      for (std::size_t i = begin; i < end; ++i) out[i] /= T(n);
}
// 16-bit floats: each element is summed in float over the ranks in rank
// order and rounded once, so every rank gets the same bits.
template <class T>
void reduce_16(T* out, const void* const* inputs, int n, std::size_t begin, std::size_t end, Reduce op) {
  for (std::size_t i = begin; i < end; ++i) {
    float sum = float(static_cast<const T*>(inputs[0])[i]);
    for (int k = 1; k < n; ++k) sum += float(static_cast<const T*>(inputs[k])[i]);
    out[i] = T(op == Reduce::average ? sum / float(n) : sum);
  }
}
template <class T>
void divide_typed(T* data, std::size_t count, int divisor) {
  for (std::size_t i = 0; i < count; ++i) data[i] /= T(divisor);
}
}  // namespace

void reduce_host(void* out, const void* const* inputs, int n, std::size_t begin, std::size_t end, DType dtype,
                 Reduce op) {
  switch (dtype) {
    case DType::f32: return reduce_typed(static_cast<float*>(out), inputs, n, begin, end, op);
    case DType::f64: return reduce_typed(static_cast<double*>(out), inputs, n, begin, end, op);
    case DType::i32: return reduce_typed(static_cast<std::int32_t*>(out), inputs, n, begin, end, op);
    case DType::i64: return reduce_typed(static_cast<std::int64_t*>(out), inputs, n, begin, end, op);
    case DType::f16: return reduce_16(static_cast<Half*>(out), inputs, n, begin, end, op);
    case DType::bf16: return reduce_16(static_cast<BFloat16*>(out), inputs, n, begin, end, op);
    default: throw DTypeError(fmt::format("reduce: unsupported dtype {}", dtype_name(dtype)));
  }
}

void divide_host(void* data, std::size_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::f32: return divide_typed(static_cast<float*>(data), count, divisor);
    case DType::f64: return divide_typed(static_cast<double*>(data), count, divisor);
    default: throw DTypeError(fmt::format("average: unsupported dtype {}", dtype_name(dtype)));
  }
}

}  // namespace detail
}  // namespace rumus::distributed
