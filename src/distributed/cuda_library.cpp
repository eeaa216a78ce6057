// Opens libcudart and libnccl at run time (cuda_library.hpp).
#include "cuda_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <initializer_list>

#include "../core/env.hpp"
#include "rumus/distributed/process_group.hpp"

namespace rumus::distributed::cuda {

namespace {

// The first of `names` that opens, or the one RUMUS_<variable> names.
void* open_first(const char* variable, std::initializer_list<const char*> names, std::string& tried) {
  if (auto path = env::text(variable)) {
    tried = *path + " (" + variable + ")";
    return dlopen(path->c_str(), RTLD_NOW | RTLD_GLOBAL);
  }
  tried.clear();
  for (const char* name : names) {
    tried += (tried.empty() ? "" : ", ") + std::string(name);
    if (void* h = dlopen(name, RTLD_NOW | RTLD_GLOBAL)) return h;
  }
  return nullptr;
}

// Fills `fn` from the first of `symbols` the library has; false when none.
template <class F>
bool bind(void* lib, F& fn, std::initializer_list<const char*> symbols, std::string& missing) {
  for (const char* s : symbols)
    if (void* p = dlsym(lib, s)) {
      fn = reinterpret_cast<F>(p);
      return true;
    }
  missing = *symbols.begin();
  return false;
}

struct Loaded {
  Library lib{};
  bool ok = false;
  std::string why;
};

Loaded load() {
  Loaded l;
  std::string tried;
  void* rt = open_first("RUMUS_CUDART_LIBRARY", {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}, tried);
  if (!rt) {
    l.why = "libcudart not found (tried " + tried + ")";
    return l;
  }
  void* nccl = open_first("RUMUS_NCCL_LIBRARY", {"libnccl.so.2", "libnccl.so"}, tried);
  if (!nccl) {
    l.why = "libnccl not found (tried " + tried + ")";
    return l;
  }
  Library& f = l.lib;
  std::string missing;
  // CUDA 11.2 to 12 name the entry points of the current layouts _v2 (the
  // plain names keep the old ones); CUDA 13 gives them the plain names. The
  // semaphore parameters rumus passes (a fence value, then zeros) read the
  // same in either layout.
  const bool all =
      bind(rt, f.getDeviceCount, {"cudaGetDeviceCount"}, missing) && bind(rt, f.setDevice, {"cudaSetDevice"}, missing) &&
      bind(rt, f.getDeviceProperties, {"cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"}, missing) &&
      bind(rt, f.getErrorString, {"cudaGetErrorString"}, missing) &&
      bind(rt, f.streamCreateWithFlags, {"cudaStreamCreateWithFlags"}, missing) &&
      bind(rt, f.streamDestroy, {"cudaStreamDestroy"}, missing) &&
      bind(rt, f.streamSynchronize, {"cudaStreamSynchronize"}, missing) &&
      bind(rt, f.importExternalMemory, {"cudaImportExternalMemory"}, missing) &&
      bind(rt, f.externalMemoryGetMappedBuffer, {"cudaExternalMemoryGetMappedBuffer"}, missing) &&
      bind(rt, f.destroyExternalMemory, {"cudaDestroyExternalMemory"}, missing) && bind(rt, f.free, {"cudaFree"}, missing) &&
      bind(rt, f.importExternalSemaphore, {"cudaImportExternalSemaphore"}, missing) &&
      bind(rt, f.destroyExternalSemaphore, {"cudaDestroyExternalSemaphore"}, missing) &&
      bind(rt, f.signalExternalSemaphoresAsync, {"cudaSignalExternalSemaphoresAsync_v2", "cudaSignalExternalSemaphoresAsync"}, missing) &&
      bind(rt, f.waitExternalSemaphoresAsync, {"cudaWaitExternalSemaphoresAsync_v2", "cudaWaitExternalSemaphoresAsync"}, missing) &&
      bind(nccl, f.ncclGetUniqueId, {"ncclGetUniqueId"}, missing) &&
      bind(nccl, f.ncclCommInitRank, {"ncclCommInitRank"}, missing) &&
      bind(nccl, f.ncclCommDestroy, {"ncclCommDestroy"}, missing) &&
      bind(nccl, f.ncclCommAbort, {"ncclCommAbort"}, missing) &&
      bind(nccl, f.ncclGetErrorString, {"ncclGetErrorString"}, missing) &&
      bind(nccl, f.ncclAllReduce, {"ncclAllReduce"}, missing) &&
      bind(nccl, f.ncclReduceScatter, {"ncclReduceScatter"}, missing) &&
      bind(nccl, f.ncclAllGather, {"ncclAllGather"}, missing) && bind(nccl, f.ncclBroadcast, {"ncclBroadcast"}, missing);
  if (!all) {
    l.why = fmt::format("the CUDA runtime or NCCL found lacks {} (CUDA 11.2 and NCCL 2.10 or later are needed)", missing);
    return l;
  }
  l.ok = true;
  return l;
}

}  // namespace

const Library* library(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.ok && why) *why = loaded.why;
  return loaded.ok ? &loaded.lib : nullptr;
}

void check(Error e, const char* what) {
  if (e == 0) return;
  const Library* lib = library();
  throw DistributedError(fmt::format("NcclGroup: {} failed: CUDA error {} ({})", what, e,
                                     lib ? lib->getErrorString(e) : "?"));
}

void check_nccl(NcclResult r, const char* what) {
  if (r == 0) return;
  const Library* lib = library();
  throw DistributedError(fmt::format("NcclGroup: {} failed: NCCL error {} ({})", what, r,
                                     lib ? lib->ncclGetErrorString(r) : "?"));
}

}  // namespace rumus::distributed::cuda
