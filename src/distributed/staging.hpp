#pragma once
// Host staging for collectives: the one place where distributed code moves
// bytes between a device and the host (see staging.cpp for what each
// collective copies). Collectives run on contiguous host memory; CPU tensors
// that are already contiguous are used in place.
#include <cstdint>

#include "rumus/distributed/process_group.hpp"

namespace rumus::distributed::staging {

// Contiguous host memory holding `t`'s elements: `t` itself when it is a
// contiguous CPU tensor, else a copy (one device-to-host read into this
// thread's reusable input buffer for a device tensor, valid until the next call).
struct HostCopy {
  Tensor host;
  bool aliases = false;  // host shares t's memory: no write-back needed
  void* data() const;
};
HostCopy to_host(const Tensor& t);

// Host memory for a result of `shape` and `dtype` that will end on `device`:
// a new tensor for the CPU (it is the result), else a reusable buffer of this
// thread, valid until the next call with the same `slot` (to_host uses `input`).
enum class Slot : std::uint8_t { result, input };
Tensor host_output(const Shape& shape, DType dtype, Device device, Slot slot = Slot::result);
// The result on `device`: `host` itself on the CPU, else one host-to-device write.
Tensor to_device(const Tensor& host, Device device);
// Writes a host copy back into `dst` (in-place collectives); no-op when it aliases.
void write_back(const Tensor& dst, const HostCopy& copy);

// Outside the collectives: checkpoint loads and moves of shards.
// dst.copy_(src) across devices (off the tape).
void copy_into(const Tensor& dst, const Tensor& src);
// t.to(device) (off the tape).
Tensor move(const Tensor& t, Device device);


}  // namespace rumus::distributed::staging
