#pragma once
// Kernels registered where they are written, per (kernel, device kind).
//
// A kernel is a tag type declared once in its family's header,
// src/backend/<family>.hpp, with its name and typed signature:
//
//   struct GatherKernel {
//     static constexpr std::string_view name = "gather";
//     using Fn = void(Backend&, TensorArg out, TensorArg src, TensorArg index);
//   };
//
// Each backend's family file (cpu/<family>.cpp, vulkan/<family>.cpp) defines
// the kernel as a free function and registers it with the dtypes it runs:
//
//   RUMUS_KERNEL_FAMILY(cpu, gather) {
//     register_kernel<GatherKernel>(Device::Kind::cpu, kAllDTypes, &gather);
//   }
//
// cmake/RumusKernelFamilies.cmake finds every RUMUS_KERNEL_FAMILY and calls it
// once before the first device is made, so nothing lists kernels by hand.
// supports<K>() follows from what was registered; ops reach a kernel through
// detail::kernel<K>() (src/ops/op_util.hpp), which checks it and times it
// under the Profiler.
#include <array>
#include <chrono>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "backend.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/profiler.hpp"

namespace rumus {

// The dtypes a kernel computes in, as a set.
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes) bits_ |= 1u << unsigned(d);
  }
  constexpr bool has(DType d) const { return (bits_ >> unsigned(d)) & 1u; }

 private:
  std::uint32_t bits_ = 0;
};

inline constexpr DTypeSet kFloatDTypes{DType::f32, DType::f64, DType::f16, DType::bf16};
inline constexpr DTypeSet kAllDTypes{DType::f32,     DType::f64, DType::f16, DType::bf16, DType::i32,
                                     DType::i64,     DType::u8,  DType::i8,  DType::i16,  DType::boolean};

// One kernel's registration on one device kind. `available`, when set, is a
// further condition the device decides at run time (a feature it may lack).
template <class K>
struct KernelEntry {
  typename K::Fn* fn = nullptr;
  DTypeSet dtypes;
  bool (*available)(Backend&, DType) = nullptr;
};

namespace detail {
inline constexpr std::size_t kDeviceKinds = 2;  // Device::Kind's entries

template <class K>
std::array<KernelEntry<K>, kDeviceKinds>& kernel_entries() {
  static std::array<KernelEntry<K>, kDeviceKinds> entries;
  return entries;
}

template <class K>
const KernelEntry<K>& kernel_entry(const Backend& be) {
  return kernel_entries<K>()[std::size_t(be.device().kind)];
}
}  // namespace detail

template <class K>
bool supports(Backend& be, DType dtype) {
  const KernelEntry<K>& e = detail::kernel_entry<K>(be);
  return e.fn && e.dtypes.has(dtype) && (!e.available || e.available(be, dtype));
}

// A kernel registered on some device, for listings (what a device lacks).
struct RegisteredKernel {
  std::string_view name;
  bool (*supports)(Backend&, DType);
};
// Every kernel registered on any device, each once, in registration order.
const std::vector<RegisteredKernel>& registered_kernels();

namespace detail {
void list_kernel(RegisteredKernel kernel);
}  // namespace detail

template <class K>
void register_kernel(Device::Kind kind, DTypeSet dtypes, typename K::Fn* fn,
                     bool (*available)(Backend&, DType) = nullptr) {
  detail::kernel_entries<K>()[std::size_t(kind)] = {fn, dtypes, available};
  detail::list_kernel({K::name, &supports<K>});
}

// The variant a profile row names after its kernel: the code of a pointwise
// or reduction kernel ("unary:exp"), nothing for the others.
inline std::string_view kernel_variant(UnaryOp op) { return name_of(op); }
inline std::string_view kernel_variant(BinaryOp op) { return name_of(op); }
inline std::string_view kernel_variant(ReduceOp op) { return name_of(op); }
template <class A>
std::string_view kernel_variant(const A&) {
  return {};
}

// A kernel bound to a device and to the op that asked for it: calling it runs
// the registered function, timed under the op while a Profiler records.
template <class K>
class BoundKernel {
 public:
  BoundKernel(Backend& be, std::string_view op, bool profile) : be_(be), op_(op), profile_(profile) {}

  template <class... Args>
  void operator()(Args&&... args) const {
    const KernelEntry<K>& e = detail::kernel_entry<K>(be_);
    if (!e.fn) throw DeviceError(std::string(op_) + ": device " + be_.device().str() + " has no " +
                                 std::string(K::name) + " kernel");
    if (!profile_) return e.fn(be_, std::forward<Args>(args)...);
    const std::string_view variant = variant_of(args...);
    const auto start = std::chrono::steady_clock::now();
    {
      detail::ProfileKernel running(op_, K::name, variant);
      e.fn(be_, std::forward<Args>(args)...);
    }
    detail::profile_record(op_, K::name, variant, std::chrono::steady_clock::now() - start);
  }

 private:
  template <class First, class... Rest>
  static std::string_view variant_of(const First& first, const Rest&...) {
    return kernel_variant(first);
  }
  static std::string_view variant_of() { return {}; }

  Backend& be_;
  std::string_view op_;
  bool profile_;
};

// Runs `K` on `be` from inside another kernel: no profiling row of its own.
template <class K, class... Args>
void run_kernel(Backend& be, Args&&... args) {
  const KernelEntry<K>& e = detail::kernel_entry<K>(be);
  if (!e.fn) throw DeviceError("device " + be.device().str() + " has no " + std::string(K::name) + " kernel");
  e.fn(be, std::forward<Args>(args)...);
}

// Runs every RUMUS_KERNEL_FAMILY of this build once (generated by CMake).
void register_kernel_families();

}  // namespace rumus

// Defines the function that registers one family's kernels on one device
// kind. Write it at namespace rumus scope (not in a nested namespace).
#define RUMUS_KERNEL_FAMILY(kind, family) void register_##kind##_##family##_kernels()
