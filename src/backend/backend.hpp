#pragma once
// What every kernel family shares, private to the library: the buffer view a
// kernel takes (TensorArg), the codes of the pointwise and reduction kernels,
// and the Backend a kernel runs on. Kernels know buffers, sizes and strides
// only: shape rules, broadcasting, index checks and error messages live in
// ops/. Each family declares its kernels in src/backend/<family>.hpp.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "kernel_codes.hpp"
#include "rumus/core/device_backend.hpp"
#include "rumus/core/dtype.hpp"
#include "rumus/core/layout.hpp"
#include "rumus/core/storage.hpp"

namespace rumus {

// A non-owning view of a tensor's buffer for kernels.
struct TensorArg {
  Storage* storage;
  DType dtype;
  const Layout* layout;
};

#define RUMUS_ENUM_ENTRY(name) name,
enum class UnaryOp : std::uint8_t { RUMUS_UNARY_OPS(RUMUS_ENUM_ENTRY) };
enum class BinaryOp : std::uint8_t { RUMUS_BINARY_OPS(RUMUS_ENUM_ENTRY) };
enum class ReduceOp : std::uint8_t { RUMUS_REDUCE_OPS(RUMUS_ENUM_ENTRY) };
enum class RandomKind : std::uint8_t { RUMUS_RANDOM_KINDS(RUMUS_ENUM_ENTRY) };
enum class PoolKind : std::uint8_t { RUMUS_POOL_KINDS(RUMUS_ENUM_ENTRY) };
enum class PointwiseKind : std::uint8_t { RUMUS_POINTWISE_KINDS(RUMUS_ENUM_ENTRY) };
enum class OptimizerKind : std::uint8_t { RUMUS_OPTIMIZER_KINDS(RUMUS_ENUM_ENTRY) };
#undef RUMUS_ENUM_ENTRY

// Names as written in the lists (for messages and test listings).
std::string_view name_of(UnaryOp op);
std::string_view name_of(BinaryOp op);
std::string_view name_of(ReduceOp op);

// Entry counts, for loops over every code.
#define RUMUS_COUNT_ENTRY(name) +1
constexpr int kUnaryOpCount = 0 RUMUS_UNARY_OPS(RUMUS_COUNT_ENTRY);
constexpr int kBinaryOpCount = 0 RUMUS_BINARY_OPS(RUMUS_COUNT_ENTRY);
constexpr int kReduceOpCount = 0 RUMUS_REDUCE_OPS(RUMUS_COUNT_ENTRY);
#undef RUMUS_COUNT_ENTRY

// A device's backend. Its kernels are free functions registered per family
// (kernel_registry.hpp, src/backend/<family>.hpp); the class itself is the
// device: memory, transfers, the stream, capture (DeviceBackend).
class Backend : public DeviceBackend {};

// The kernel table of `device`'s backend (every built-in provider makes a Backend).
inline Backend& backend(Device device) { return static_cast<Backend&>(device_backend(device)); }

}  // namespace rumus

