#pragma once
// The parts of the CUDA runtime and NCCL that NcclGroup calls, opened at run
// time (dlopen): rumus has no build dependency on either. The declarations
// below follow the libraries' documented C ABI (cuda_runtime_api.h,
// driver_types.h and nccl.h); only the fields rumus sets are named.
#include <cstddef>
#include <cstdint>
#include <string>

namespace rumus::distributed::cuda {

using Error = int;  // cudaError_t: 0 is success
using Stream = void*;
using ExternalMemory = void*;
using ExternalSemaphore = void*;

// The handle of an external memory or semaphore: an fd here (the win32 pair sizes the union).
union ExternalHandle {
  int fd;
  struct {
    void* handle;
    const void* name;
  } win32;
};
struct ExternalMemoryHandleDesc {  // cudaExternalMemoryHandleDesc
  int type = 1;                    // cudaExternalMemoryHandleTypeOpaqueFd
  ExternalHandle handle{};
  unsigned long long size = 0;
  unsigned flags = 1;  // cudaExternalMemoryDedicated
  unsigned reserved[16] = {};  // zeros past the end of older layouts
};
struct ExternalMemoryBufferDesc {  // cudaExternalMemoryBufferDesc
  unsigned long long offset = 0, size = 0;
  unsigned flags = 0;
  unsigned reserved[16] = {};
};
struct ExternalSemaphoreHandleDesc {  // cudaExternalSemaphoreHandleDesc
  int type = 9;                       // cudaExternalSemaphoreHandleTypeTimelineSemaphoreFd
  ExternalHandle handle{};
  unsigned flags = 0;
  unsigned reserved[16] = {};
};
// cudaExternalSemaphoreSignalParams and ...WaitParams (the _v2 layout, 144
// bytes): the fence value comes first; the rest stays zero.
struct ExternalSemaphoreParams {
  unsigned long long fence_value = 0;
  unsigned char rest[136] = {};
};
static_assert(sizeof(ExternalSemaphoreParams) == 144);

// ncclUniqueId: passed by value between the ranks.
struct NcclUniqueId {
  char internal[128];
};
using NcclComm = void*;
using NcclResult = int;  // 0: ncclSuccess
enum NcclDataType : int { nccl_int32 = 2, nccl_uint8 = 1, nccl_int64 = 4, nccl_float16 = 6, nccl_float32 = 7,
                          nccl_float64 = 8, nccl_bfloat16 = 9 };
enum NcclRedOp : int { nccl_sum = 0, nccl_avg = 4 };

struct Library {
  // cudart
  Error (*getDeviceCount)(int*);
  Error (*setDevice)(int);
  Error (*getDeviceProperties)(void* prop, int device);  // cudaDeviceProp: name[256], then the 16-byte UUID
  const char* (*getErrorString)(Error);
  Error (*streamCreateWithFlags)(Stream*, unsigned);
  Error (*streamDestroy)(Stream);
  Error (*streamSynchronize)(Stream);
  Error (*importExternalMemory)(ExternalMemory*, const ExternalMemoryHandleDesc*);
  Error (*externalMemoryGetMappedBuffer)(void**, ExternalMemory, const ExternalMemoryBufferDesc*);
  Error (*destroyExternalMemory)(ExternalMemory);
  Error (*free)(void*);
  Error (*importExternalSemaphore)(ExternalSemaphore*, const ExternalSemaphoreHandleDesc*);
  Error (*destroyExternalSemaphore)(ExternalSemaphore);
  Error (*signalExternalSemaphoresAsync)(const ExternalSemaphore*, const ExternalSemaphoreParams*, unsigned, Stream);
  Error (*waitExternalSemaphoresAsync)(const ExternalSemaphore*, const ExternalSemaphoreParams*, unsigned, Stream);
  // nccl
  NcclResult (*ncclGetUniqueId)(NcclUniqueId*);
  NcclResult (*ncclCommInitRank)(NcclComm*, int nranks, NcclUniqueId id, int rank);
  NcclResult (*ncclCommDestroy)(NcclComm);
  NcclResult (*ncclCommAbort)(NcclComm);
  const char* (*ncclGetErrorString)(NcclResult);
  NcclResult (*ncclAllReduce)(const void*, void*, std::size_t, int, int, NcclComm, Stream);
  NcclResult (*ncclReduceScatter)(const void*, void*, std::size_t, int, int, NcclComm, Stream);
  NcclResult (*ncclAllGather)(const void*, void*, std::size_t, int, NcclComm, Stream);
  NcclResult (*ncclBroadcast)(const void*, void*, std::size_t, int, int root, NcclComm, Stream);
};

// The libraries, loaded once per process; nullptr when either is missing
// (then `why` says which and where it was looked for).
const Library* library(std::string* why = nullptr);

// Throws DistributedError naming `what` when a CUDA or NCCL call failed.
void check(Error e, const char* what);
void check_nccl(NcclResult r, const char* what);

}  // namespace rumus::distributed::cuda
