#pragma once
// The check a resume makes of a checkpoint's run settings, shared by
// io::load_checkpoint and distributed::load_sharded.
#include <string>

#include "rumus/io/checkpoint.hpp"

namespace rumus::io {

// Throws IoError "{op}: '{where}' was written by a run with other settings ..."
// listing every difference at once, so one failed resume shows all that changed.
void check_settings(const char* op, const std::string& where, const RunSettings& stored, const RunSettings& expected);

}  // namespace rumus::io
