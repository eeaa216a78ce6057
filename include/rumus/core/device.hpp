#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

struct DeviceInfo;

// A device is a value: kind + index. Several Vulkan devices can coexist.
struct Device {
  enum class Kind : std::uint8_t { cpu, vulkan };
  Kind kind = Kind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {Kind::cpu, 0}; }
  static constexpr Device vulkan(int index = 0) { return {Kind::vulkan, index}; }
  // Every device this build and machine offer, the CPU first, with its name.
  static std::vector<DeviceInfo> list();
  // A real GPU if one exists (software rasterisers excluded), else the CPU.
  static Device best();
  // Parses "cpu", "vulkan", "vulkan:1" and "best".
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == Kind::cpu; }
  std::string str() const { return is_cpu() ? "cpu" : "vulkan:" + std::to_string(index); }
  friend bool operator==(const Device&, const Device&) = default;
};

struct DeviceInfo {
  Device device;
  std::string name;  // e.g. "NVIDIA H200" or "llvmpipe (LLVM 15.0.6, 256 bits)"
};

}  // namespace rumus

RUMUS_API_END
