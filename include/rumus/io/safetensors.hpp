#pragma once
// The safetensors format (as written and read by Python's `safetensors`):
// an 8-byte little-endian header length, a JSON header mapping each name to
// {dtype, shape, data_offsets} plus an optional "__metadata__" of strings,
// padded with spaces to 8 bytes, then the raw little-endian data.
#include <map>
#include <string>

#include "rumus/core/state_dict.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::io {

using Metadata = std::map<std::string, std::string>;

// Writes atomically: a temporary file beside `path`, then a rename, so an
// existing file is never left half-written.
void save_safetensors(const StateDict& tensors, const std::string& path, const Metadata& metadata = {});
// Host tensors. A malformed file is an IoError naming the file and the problem.
StateDict load_safetensors(const std::string& path, Metadata* metadata = nullptr);

// Replaces `path` with `bytes` through a temporary file and a rename.
void write_file_atomic(const std::string& path, const std::string& bytes);
// Removes the temporaries of `path` ("<path>.tmp.<pid>...") whose process is
// gone: what a save killed midway (kill -9) leaves. Saves and
// load_checkpoint call it; the temporaries of live processes stay.
void remove_stale_temporaries(const std::string& path);

}  // namespace rumus::io

RUMUS_API_END
