// The CPU device: memory (with a cache of large blocks) and transfers.
#include "cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "../../core/openmp_environment.hpp"
#include "rumus/core/error.hpp"

namespace rumus::cpu {

detail::DeviceProvider provider() {
  return {.kind = Device::Kind::cpu,
          .count = [] { return 1; },
          .name = [](int) { return std::string("cpu"); },
          .accelerator = [](int) { return false; },
          .make = [](int) -> std::unique_ptr<DeviceBackend> { return std::make_unique<CpuBackend>(); }};
}

CpuBackend::CpuBackend() { detail::settle_openmp_environment(); }

// Large blocks are kept for reuse by exact size: a training step allocates the
// same buffers every iteration, and fresh pages cost a page fault each (tens of
// milliseconds per step for the CNN's im2col buffers).
namespace {
constexpr std::size_t kCacheMin = std::size_t(1) << 16;     // smaller blocks: malloc's own bins are fast
constexpr std::size_t kCacheLimit = std::size_t(1) << 30;   // most bytes kept idle
std::size_t rounded(std::size_t nbytes) { return (std::max<std::size_t>(nbytes, 1) + 63) & ~std::size_t(63); }
}  // namespace

void* CpuBackend::allocate(std::size_t nbytes) {
  const std::size_t size = rounded(nbytes);
  // Counted before the allocation can fail or come from the cache: the figure is what tensors hold.
  const std::size_t now = in_use_.fetch_add(size) + size;
  for (std::size_t peak = peak_.load(); now > peak && !peak_.compare_exchange_weak(peak, now);) {
  }
  if (size >= kCacheMin) {
    std::lock_guard lk(cache_mu_);
    auto it = cache_.find(size);
    if (it != cache_.end()) {
      void* p = it->second;
      cache_.erase(it);
      cached_bytes_ -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, size);
  if (!p) {
    in_use_.fetch_sub(size);
    throw OutOfMemoryError("cpu: out of memory allocating " + std::to_string(nbytes) + " bytes");
  }
  return p;
}

void CpuBackend::deallocate(void* data, std::size_t nbytes) {
  const std::size_t size = rounded(nbytes);
  in_use_.fetch_sub(size);
  if (size >= kCacheMin) {
    std::lock_guard lk(cache_mu_);
    if (cached_bytes_ + size <= kCacheLimit) {
      cache_.emplace(size, data);
      cached_bytes_ += size;
      return;
    }
  }
  std::free(data);
}

DeviceStats CpuBackend::stats() const {
  DeviceStats s;
  s.bytes_in_use = in_use_.load();
  s.peak_bytes_in_use = peak_.load();
  std::lock_guard lk(cache_mu_);
  s.bytes_reserved = s.bytes_in_use + cached_bytes_;
  s.blocks = cache_.size();
  return s;
}

void CpuBackend::write(Storage& dst, std::size_t off, const void* src, std::size_t n) {
  std::memcpy(static_cast<char*>(dst.data()) + off, src, n);
}

void CpuBackend::read(const Storage& src, std::size_t off, void* dst, std::size_t n) {
  std::memcpy(dst, static_cast<const char*>(src.data()) + off, n);
}

}  // namespace rumus::cpu
