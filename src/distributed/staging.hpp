#pragma once
// Host staging for collectives: the one place where distributed code moves
// bytes between a device and the host (see staging.cpp for what each
// collective copies). Collectives run on contiguous host memory; CPU tensors
// that are already contiguous are used in place, device tensors are copied
// into persistent mapped host buffers that the exchange reads in place.
#include <cstdint>

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

// Outside the collectives: checkpoint loads and moves of shards.
// dst.copy_(src) across devices (off the tape).
void copy_into(const Tensor& dst, const Tensor& src);
// t.to(device) (off the tape).
Tensor move(const Tensor& t, Device device);

}  // namespace rumus::distributed::staging
