#pragma once
// NCCL for device tensors, loaded at run time: rumus neither builds nor links
// against CUDA.
//
// make_nccl_group(bootstrap, device) wraps a group that already connects the
// ranks (a ThreadGroup rank, an MpiGroup), one GPU per rank:
// - A tensor on `device` goes through NCCL on the same GPU. The collective
//   copies it on the device into memory that Vulkan exports and CUDA imports,
//   NCCL runs there, and the result is copied back on the device. The two
//   APIs order their work with timeline semaphores: neither waits on the host,
//   and no byte crosses to the host (staging_stats() does not move).
// - CPU tensors, barriers and the error exchange go through the bootstrap
//   group as before. Every rank must pass tensors of the same kind.
//
// libnccl.so.2 and libcudart.so (13, 12 or 11) are opened where the dynamic
// loader finds them (LD_LIBRARY_PATH: a PyTorch wheel ships both under
// site-packages/nvidia/*/lib), or where RUMUS_NCCL_LIBRARY and
// RUMUS_CUDART_LIBRARY name them. The CUDA device used is the one with the
// Vulkan device's UUID.
//
// Exactness: NCCL reduces in its own order (rings, trees), so across more
// than one rank a sum may differ from ThreadGroup's rank-order sum in the
// last bits; f16 and bf16 are summed in their own type.
#include <memory>
#include <string>

#include "rumus/core/device.hpp"
#include "rumus/core/export.hpp"
#include "rumus/distributed/process_group.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

// Whether this process can run NCCL collectives on `device`: a Vulkan device
// that exports memory and timeline semaphores, libcudart and libnccl loaded,
// and a CUDA device with the same UUID. When not, `why` (if given) says why.
bool nccl_available(Device device, std::string* why = nullptr);

// Collective: every rank of `bootstrap` calls it with its own device. Returns
// a NcclGroup over the same ranks when every rank can use NCCL, else nullptr
// (the caller keeps `bootstrap`) and `why` names the ranks that cannot and
// this rank's reason. `bootstrap` must outlive the group.
std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, Device device, std::string* why = nullptr);

}  // namespace rumus::distributed

RUMUS_API_END
