// Every byte that distributed code moves between a device and the host goes
// through this file.
//
// A device tensor is staged through persistent host buffers that its backend
// maps (DeviceBackend::allocate_host): one for inputs and one for results,
// per thread and device, kept across calls and grown to the largest tensor.
// A read is one copy_to_host into the input buffer, queued on the device's
// queue of copies to the host behind the kernels that wrote the tensor (not
// behind the whole queue) and waited for alone; the exchange then reads and writes the
// mapped memory in place (ThreadGroup's host reduce, or MPI), with no copy
// in between. A result goes back with one copy_from_host, queued on the
// device in order with the kernels that use the tensor later, and not waited
// for: the next host write into that buffer waits for it (HostBuffer::wait).
// Reuse is safe because every collective ends with a rendezvous after which
// no peer touches this rank's buffers (and MPI's collectives are blocking).
//
// What each collective copies for a device tensor of n bytes on a group of W
// ranks:
//
//   all_reduce      D->H n, reduce on the host in place, H->D n (into the tensor),
//                   in pieces of 1 MiB (Pieces) from 2 MiB on
//   reduce_scatter  D->H n, H->D n / W (the rank's chunk, a new tensor)
//   all_gather      D->H n (straight into its block of the result's buffer),
//                   H->D W * n (a new tensor)
//   broadcast       root: D->H n, no write-back; others: no read, H->D n
//   barrier         nothing
//
// A strided device tensor is packed on its device first (and an in-place
// result unpacked there). CPU tensors: contiguous ones are read and written
// in place (no copy); strided ones are repacked into contiguous host memory
// (and written back for the in-place collectives). Outside the collectives,
// FSDP's checkpoint loads (copy_into) and shard moves (move) also pass
// through here, as plain copies. Between the ranks of a ThreadGroup no
// further copy happens (peers read each other's host buffers); MpiGroup
// hands the host buffers to MPI.
#include "staging.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "../core/env.hpp"
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

namespace {
// This thread's host buffers of one device, by Slot, and one per piece (Pieces).
struct Buffers {
  Device device;
  std::unique_ptr<HostBuffer> slot[2];
  std::vector<std::unique_ptr<HostBuffer>> pieces;
};

Buffers& buffers_of(Device device) {
  thread_local std::vector<Buffers> buffers;
  auto it = std::find_if(buffers.begin(), buffers.end(), [&](const Buffers& b) { return b.device == device; });
  if (it == buffers.end()) it = buffers.insert(buffers.end(), Buffers{device, {}, {}});
  return *it;
}

// `b`, made at least `bytes` long. A larger one replaces it; the old one's
// memory returns to its device once the copies still using it are done.
HostBuffer& at_least(std::unique_ptr<HostBuffer>& b, Device device, std::size_t bytes) {
  if (!b || b->size() < bytes) {
    b.reset();
    b = device_backend(device).allocate_host(bytes);
  }
  return *b;
}

// This thread's buffer of `slot` for `device`, at least `bytes` long.
HostBuffer& buffer(Device device, Slot slot, std::size_t bytes) {
  return at_least(buffers_of(device).slot[static_cast<int>(slot)], device, bytes);
}

// This thread's buffer of piece `k` for `device`, at least `bytes` long.
HostBuffer& piece_buffer(Device device, int k, std::size_t bytes) {
  std::vector<std::unique_ptr<HostBuffer>>& pieces = buffers_of(device).pieces;
  if (pieces.size() <= std::size_t(k)) pieces.resize(std::size_t(k) + 1);
  return at_least(pieces[std::size_t(k)], device, bytes);
}

// The bytes of a piece: 1 MiB, small enough that the last piece's copy back
// (the part no download overlaps) is short, large enough that each copy
// moves at the bus's speed. Benchmark knob: RUMUS_STAGING_PIECE_KIB (0: no pieces).
std::size_t piece_bytes() {
  static const std::size_t bytes = [] {
    const std::int64_t kib = env::integer("RUMUS_STAGING_PIECE_KIB").value_or(1024);
    if (kib < 0) throw ValueError(fmt::format("RUMUS_STAGING_PIECE_KIB: expected a size in KiB >= 0, got {}", kib));
    return std::size_t(kib) * 1024;
  }();
  return bytes;
}
// More pieces would add waits and exchanges without shortening the last copy much.
constexpr std::size_t kMaxPieces = 8;

std::size_t byte_offset(const Tensor& t) { return std::size_t(t.offset()) * dtype_size(t.dtype()); }
}  // namespace

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
    c.data = static_cast<char*>(c.host.storage().data()) + byte_offset(c.host);
    return c;
  }
  // A strided device tensor is packed on its device first; then one copy.
  const Tensor dense = t.contiguous();
  HostBuffer& buf = buffer(t.device(), Slot::input, nbytes(t));
  dense.storage().backend().copy_to_host(dense.storage(), byte_offset(dense), buf, 0, nbytes(t));
  buf.wait();
  c.data = buf.data();
  c.buffer = &buf;
  counters().d2h++;
  counters().d2h_bytes += nbytes(t);
  return c;
}

void* to_host_at(const Tensor& t, const HostCopy& out, std::size_t offset) {
  NoGradGuard no_grad;
  const Tensor dense = t.contiguous();
  dense.storage().backend().copy_to_host(dense.storage(), byte_offset(dense), *out.buffer, offset, nbytes(t));
  out.buffer->wait();
  counters().d2h++;
  counters().d2h_bytes += nbytes(t);
  return static_cast<char*>(out.data) + offset;
}

HostCopy host_output(const Shape& shape, DType dtype, Device device, Slot slot) {
  const std::size_t bytes = std::size_t(numel_of(shape)) * dtype_size(dtype);
  HostCopy c;
  if (device.is_cpu()) {
    c.host = Tensor(std::make_shared<Storage>(Device::cpu(), bytes), Layout::contiguous(shape), dtype);
    c.data = c.host.storage().data();
    return c;
  }
  HostBuffer& buf = buffer(device, slot, bytes);
  buf.wait();  // a copy queued by an earlier collective may still read it
  c.data = buf.data();
  c.buffer = &buf;
  return c;
}

namespace {
// A new device tensor filled from `out`'s buffer by one queued copy.
Tensor upload(const HostCopy& out, const Shape& shape, DType dtype, Device device) {
  const std::size_t bytes = std::size_t(numel_of(shape)) * dtype_size(dtype);
  Tensor t(std::make_shared<Storage>(device, bytes), Layout::contiguous(shape), dtype);
  t.storage().backend().copy_from_host(*out.buffer, 0, t.storage(), 0, bytes);
  counters().h2d++;
  counters().h2d_bytes += bytes;
  return t;
}
}  // namespace

Tensor to_device(const HostCopy& out, const Shape& shape, DType dtype, Device device) {
  if (device.is_cpu()) return out.host;
  return upload(out, shape, dtype, device);
}

void write_back(const Tensor& dst, const HostCopy& copy) {
  if (copy.aliases) {
    dst.storage().bump_version();  // written in place by the collective
    return;
  }
  NoGradGuard no_grad;
  if (dst.device().is_cpu()) {
    Tensor(dst).copy_(copy.host);
    return;
  }
  if (!dst.is_contiguous()) {  // into a dense tensor, then unpacked on the device
    Tensor(dst).copy_(upload(copy, dst.shape(), dst.dtype(), dst.device()));
    return;
  }
  dst.storage().backend().copy_from_host(*copy.buffer, 0, dst.storage(), byte_offset(dst), nbytes(dst));
  dst.storage().bump_version();
  counters().h2d++;
  counters().h2d_bytes += nbytes(dst);
}

int Pieces::count_for(const Tensor& t) {
  const std::size_t piece = piece_bytes();
  if (piece == 0) return 1;
  return int(std::clamp<std::size_t>((nbytes(t) + piece - 1) / piece, 1, kMaxPieces));
}

Pieces::Pieces(const Tensor& t) : target_(t) {
  NoGradGuard no_grad;
  const std::size_t numel = std::size_t(t.numel()), pieces = std::size_t(count_for(t));
  const std::size_t per = ((numel + pieces - 1) / pieces + 63) / 64 * 64;  // whole cache lines
  for (std::size_t at = 0; at < numel || offsets_.empty(); at += per) offsets_.push_back(at);
  offsets_.push_back(numel);
  dense_ = t.is_contiguous() ? t : t.contiguous();  // a strided tensor is packed on its device first
  if (t.device().is_cpu()) {
    if (!t.is_contiguous()) counters().repacks++;
    return;
  }
  const std::size_t esize = dtype_size(t.dtype());
  for (int k = 0; k < count(); ++k) {
    HostBuffer& b = piece_buffer(t.device(), k, per * esize);
    dense_.storage().backend().copy_to_host(dense_.storage(), byte_offset(dense_) + offsets_[std::size_t(k)] * esize, b,
                                            0, elements(k) * esize);
    buffers_.push_back(&b);
  }
  counters().d2h++;  // one staging copy, in pieces
  counters().d2h_bytes += nbytes(t);
}

void* Pieces::wait(int k) {
  const std::size_t at = offsets_[std::size_t(k)] * dtype_size(dense_.dtype());
  if (buffers_.empty()) return static_cast<char*>(dense_.storage().data()) + byte_offset(dense_) + at;
  buffers_[std::size_t(k)]->wait();
  return buffers_[std::size_t(k)]->data();
}

void Pieces::write_back(int k) {
  if (buffers_.empty()) return;  // a CPU tensor: the exchange wrote it in place
  const std::size_t esize = dtype_size(dense_.dtype());
  dense_.storage().backend().copy_from_host(*buffers_[std::size_t(k)], 0, dense_.storage(),
                                            byte_offset(dense_) + offsets_[std::size_t(k)] * esize,
                                            elements(k) * esize);
}

void Pieces::finish() {
  NoGradGuard no_grad;
  if (!buffers_.empty()) {
    counters().h2d++;
    counters().h2d_bytes += nbytes(target_);
  }
  if (dense_.storage_ptr() == target_.storage_ptr()) target_.storage().bump_version();
  else Tensor(target_).copy_(dense_);  // unpacked on its device, or written back into a strided CPU tensor
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
