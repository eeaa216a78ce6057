#pragma once
#include <cstdint>
#include <string>
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// A device is a value: kind + index. Several Vulkan devices can coexist.
struct Device {
  enum class Kind : std::uint8_t { cpu, vulkan };
  Kind kind = Kind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {Kind::cpu, 0}; }
  static constexpr Device vulkan(int index = 0) { return {Kind::vulkan, index}; }
  // A real Vulkan GPU if one exists (software rasterisers excluded), else the CPU.
  static Device best();
  // Parses "cpu", "vulkan", "vulkan:1".
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == Kind::cpu; }
  std::string str() const { return is_cpu() ? "cpu" : "vulkan:" + std::to_string(index); }
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace rumus

RUMUS_API_END
