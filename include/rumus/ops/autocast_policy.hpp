#pragma once
// Which dtype each op runs in inside an autocast scope
// (rumus/autograd/autocast.hpp). Ops not listed run in their inputs' dtypes.
#include <string_view>
#include <vector>

#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

enum class AutocastPolicy {
  none,             // not listed: inputs untouched
  lower_precision,  // f32 inputs cast to the scope's 16-bit dtype (f32 accumulation inside the kernel)
  f32,              // 16-bit inputs cast up to f32
};

struct AutocastEntry {
  std::string_view op;
  AutocastPolicy policy;
};

AutocastPolicy autocast_policy(std::string_view op);
// The whole table, for documentation and tests.
const std::vector<AutocastEntry>& autocast_table();

}  // namespace rumus

RUMUS_API_END
