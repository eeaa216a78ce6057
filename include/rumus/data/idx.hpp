#pragma once
// The IDX format of MNIST and Fashion-MNIST: a big-endian header (two zero
// bytes, a type code, the number of dims, each dim as u32), then the data.
#include <string>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::data {

// Reads an IDX file, gzip-compressed or raw (detected from the content).
// Supports u8, i32, f32 and f64 data; any malformed, truncated or
// oversized file is an IoError naming the file and the problem.
Tensor read_idx(const std::string& path);

}  // namespace rumus::data

RUMUS_API_END
