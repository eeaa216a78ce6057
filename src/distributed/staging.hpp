#pragma once
// Host staging for collectives: the one place where distributed code moves
// bytes between a device and the host (see staging.cpp for what each
// collective copies). Collectives run on contiguous host memory; CPU tensors
// that are already contiguous are used in place, device tensors are copied
// into persistent mapped host buffers that the exchange reads in place.
#include <cstdint>
#include <vector>

#include "rumus/distributed/process_group.hpp"

namespace rumus {
class HostBuffer;
}

namespace rumus::distributed::staging {

// Which of this thread's host buffers (one of each per device) to use.
enum class Slot : std::uint8_t { result, input };

// Contiguous host memory for a collective:
// - a CPU tensor's own memory (`aliases`) or a contiguous CPU tensor (`host`);
// - for a device tensor, this thread's host buffer of its `slot`, valid until
//   the next call with that slot on this thread.
struct HostCopy {
  void* data = nullptr;
  Tensor host;                  // CPU: owns `data`
  HostBuffer* buffer = nullptr; // device: holds `data`
  bool aliases = false;         // `data` is the tensor's own memory: no write-back needed
};

// `t`'s elements on the host: `t` itself when it is a contiguous CPU tensor,
// else a copy (for a device tensor one copy into this thread's input buffer,
// waited for: the host may read it).
HostCopy to_host(const Tensor& t);

// For all_gather of a device tensor: `t`'s elements copied straight into
// `out` (a result's host buffer) at `offset` bytes, this rank's block, and
// waited for; returns where they are. The exchange then leaves that block in
// place (no copy to itself).
void* to_host_at(const Tensor& t, const HostCopy& out, std::size_t offset);

// Host memory for a result of `shape` and `dtype` that will end on `device`:
// a new tensor for the CPU (it is the result), else this thread's buffer of
// `slot`, once the copies still reading it are done (the host may write it).
HostCopy host_output(const Shape& shape, DType dtype, Device device, Slot slot = Slot::result);
// The result on `device`: `out.host` on the CPU, else a new tensor that one
// host-to-device copy fills (queued, not waited for).
Tensor to_device(const HostCopy& out, const Shape& shape, DType dtype, Device device);
// Writes a host copy back into `dst` (in-place collectives): nothing when it
// aliases; one host-to-device copy (queued) for a device tensor.
void write_back(const Tensor& dst, const HostCopy& copy);

// A tensor staged piece by piece for an in-place collective (all_reduce):
// every piece's copy to the host is queued at once, and each piece goes
// back as soon as its exchange is done, so the copies to the device overlap
// the copies to the host still running (the two directions of the bus, two
// copy engines). Every rank cuts a tensor the same way, whatever its device,
// so the ranks' exchanges pair up piece by piece.
class Pieces {
 public:
  // How many pieces `t` is cut into: 1 (no pipelining) below two pieces' worth.
  static int count_for(const Tensor& t);
  // Queues the copies to the host (nothing for a contiguous CPU tensor).
  explicit Pieces(const Tensor& t);
  int count() const { return int(offsets_.size()) - 1; }
  std::size_t elements(int k) const { return offsets_[std::size_t(k) + 1] - offsets_[std::size_t(k)]; }
  // Piece k's elements on the host, once its copy is done.
  void* wait(int k);
  // Queues piece k's copy back into the tensor.
  void write_back(int k);
  // After the last write_back: the tensor holds the result.
  void finish();

 private:
  Tensor target_, dense_;             // the tensor, and its contiguous stand-in (itself when contiguous)
  std::vector<std::size_t> offsets_;  // piece k is elements [offsets_[k], offsets_[k + 1])
  std::vector<HostBuffer*> buffers_;  // device: this thread's buffer of each piece
};

// Outside the collectives: checkpoint loads and moves of shards.
// dst.copy_(src) across devices (off the tape).
void copy_into(const Tensor& dst, const Tensor& src);
// t.to(device) (off the tape).
Tensor move(const Tensor& t, Device device);

}  // namespace rumus::distributed::staging
