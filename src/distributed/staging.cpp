// Every byte that distributed code moves between a device and the host goes
// through this file, so the transport can later switch to persistent
// host-visible (mapped) staging buffers without touching the collectives.
//
// It uses only public API: a device-to-host read is one DeviceBackend::read
// of the (contiguous) tensor into a per-thread host buffer reused across
// calls, and a host-to-device write is `host.to(device)` (or `copy_`), which
// the Vulkan backend performs through its own pool of reusable host-visible
// staging blocks. Results bound for a device are assembled in a second
// per-thread host buffer, also reused: no host allocation per collective.
// Reuse is safe because every collective ends with a rendezvous after which
// no peer touches this rank's buffers (and MPI's collectives are blocking). What each collective copies for a device tensor of n bytes on
// a group of W ranks:
//
//   all_reduce      D->H n, reduce on the host, H->D n (copy_ into the tensor)
//   reduce_scatter  D->H n, H->D n / W (the rank's chunk, a new tensor)
//   all_gather      D->H n, H->D W * n (a new tensor)
//   broadcast       root: D->H n, no write-back; others: no read, H->D n
//   barrier         nothing
//
// CPU tensors: contiguous ones are read and written in place (no copy);
// strided ones are repacked into contiguous host memory (and written back for
// the in-place collectives). Outside the collectives, FSDP's checkpoint loads
// (copy_into) and shard moves (move) also pass through here. Between the ranks of a ThreadGroup no further
// copy happens (peers read each other's host buffers); MpiGroup hands the
// host buffers to MPI.
#include "staging.hpp"

#include <atomic>
#include <memory>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/core/storage.hpp"

namespace rumus::distributed {

namespace {
struct Counters {
  std::atomic<std::uint64_t> d2h_bytes{0}, h2d_bytes{0}, d2h{0}, h2d{0}, repacks{0};
};
Counters& counters() {
  static Counters c;
  return c;
}
std::size_t nbytes(const Tensor& t) { return std::size_t(t.numel()) * dtype_size(t.dtype()); }
}  // namespace

StagingStats staging_stats() {
  Counters& c = counters();
  return {c.d2h_bytes.load(), c.h2d_bytes.load(), c.d2h.load(), c.h2d.load(), c.repacks.load()};
}

namespace staging {

void* HostCopy::data() const {
  return static_cast<char*>(host.storage().data()) + std::size_t(host.offset()) * dtype_size(host.dtype());
}

HostCopy to_host(const Tensor& t) {
  NoGradGuard no_grad;
  HostCopy c;
  if (t.device().is_cpu()) {
    if (t.is_contiguous()) {
      c.host = t;
      c.aliases = true;
    } else {
      c.host = t.contiguous();
      counters().repacks++;
    }
    return c;
  }
  // A strided device tensor is packed on its device first; then one read.
  Tensor dense = t.contiguous();
  c.host = host_output(t.shape(), t.dtype(), t.device(), Slot::input);
  if (t.numel() > 0)
    dense.storage().backend().read(dense.storage(), std::size_t(dense.offset()) * dtype_size(t.dtype()), c.data(),
                                   nbytes(t));
  counters().d2h++;
  counters().d2h_bytes += nbytes(t);
  return c;
}

Tensor host_output(const Shape& shape, DType dtype, Device device, Slot slot) {
  const std::size_t bytes = std::size_t(numel_of(shape)) * dtype_size(dtype);
  if (device.is_cpu()) return Tensor(std::make_shared<Storage>(Device::cpu(), bytes), Layout::contiguous(shape), dtype);
  thread_local std::shared_ptr<Storage> buffers[2];
  auto& buf = buffers[static_cast<int>(slot)];
  if (!buf || buf->nbytes() < bytes) buf = std::make_shared<Storage>(Device::cpu(), bytes);
  return Tensor(buf, Layout::contiguous(shape), dtype);
}

Tensor to_device(const Tensor& host, Device device) {
  if (device.is_cpu()) return host;
  NoGradGuard no_grad;
  counters().h2d++;
  counters().h2d_bytes += nbytes(host);
  return host.to(device);
}

void write_back(const Tensor& dst, const HostCopy& copy) {
  if (copy.aliases) {
    dst.storage().bump_version();  // written in place by the collective
    return;
  }
  NoGradGuard no_grad;
  if (!dst.device().is_cpu()) {
    counters().h2d++;
    counters().h2d_bytes += nbytes(dst);
  }
  Tensor(dst).copy_(copy.host);
}

void copy_into(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  if (dst.device() != src.device()) {
    auto& c = counters();
    if (src.device().is_cpu()) c.h2d++, c.h2d_bytes += nbytes(src);
    else c.d2h++, c.d2h_bytes += nbytes(src);
  }
  Tensor(dst).copy_(src);
}

Tensor move(const Tensor& t, Device device) {
  NoGradGuard no_grad;
  if (t.device() != device) {
    auto& c = counters();
    if (t.device().is_cpu()) c.h2d++, c.h2d_bytes += nbytes(t);
    else c.d2h++, c.d2h_bytes += nbytes(t);
  }
  return t.to(device);
}

}  // namespace staging
}  // namespace rumus::distributed
