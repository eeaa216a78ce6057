#pragma once
// A kernel table that times each kernel of another one for rumus::Profiler.
#include <string_view>

#include "backend.hpp"

namespace rumus {

// This thread's timing wrapper around `inner`, its rows labelled with `op`.
Backend& profiling_backend(Backend& inner, std::string_view op);

}  // namespace rumus
