#pragma once
// Sharded checkpoints of FSDP training (as torch.distributed.checkpoint's
// save/load with a FileSystemWriter/FileSystemReader): every rank writes its
// own shards of the model and of the optimizer state, nothing gathers the
// full model, and a set saved at W ranks loads at any number of ranks.
//
// Layout of `dir`:
//   rank-00000-of-0000W.safetensors ... one file per rank: this rank's rows of
//       every sharded tensor ("model.<name>", "optimizer.state.<g>.<i>.<buf>");
//       rank 0's file also holds every replicated tensor (buffers, the
//       optimizer's hyper-parameters and step counts).
//   index.safetensors   no tensors; its metadata says the format, the world
//       size, the training state (epoch, step, generator, settings) and, for
//       every tensor, "sharded <full shape> <rows per rank>" or "replicated".
//
// Atomic as a set: the files go to a fresh "<dir>.partial", the index last;
// only when every rank's file and the index are complete (and synced, with
// the directory) does rank 0 move the
// previous set aside ("<dir>.previous"), rename the new one into place and
// delete the previous one. load_sharded refuses a directory without an index
// (or with a rank file missing) and, when `dir` itself is absent because a
// save died between its two renames, loads "<dir>.previous".
//
// The directory must be one file system that every rank sees (threads of one
// process, or MPI ranks on a shared file system).
#include <string>

#include "rumus/core/export.hpp"
#include "rumus/core/generator.hpp"
#include "rumus/distributed/fsdp.hpp"
#include "rumus/distributed/process_group.hpp"
#include "rumus/io/checkpoint.hpp"
#include "rumus/optim/optimizer.hpp"

RUMUS_API_BEGIN

namespace rumus::distributed {

// Collective: writes the set described above and returns on every rank once it
// is in place (or throws IoError on every rank, leaving any previous set).
// `optimizer` must be built on module.parameters() (the shards).
void save_sharded(const std::string& dir, fsdp::FullyShardedModule& module, const optim::Optimizer& optimizer,
                  ProcessGroup& group, const io::TrainingState& state = {},
                  const Generator& generator = default_generator());

// Not collective: restores this rank's shards of model and optimizer (any
// world size), the replicated tensors and the generator; returns the training
// state. Reads the index and only the rank files whose rows this rank needs,
// each file whole. Everything is checked (the index, every rank file, names,
// full shapes, dtypes, the optimizer's type) before anything changes; a
// mismatch is an IoError (ShapeError/DTypeError for a tensor) naming the
// checkpoint, what was expected and what was found.
io::TrainingState load_sharded(const std::string& dir, fsdp::FullyShardedModule& module, optim::Optimizer& optimizer,
                               ProcessGroup& group, Generator& generator = default_generator());

// The same, and first the checkpoint's settings must equal `expected`
// (TrainingState::settings at the save): otherwise an IoError naming each
// setting that differs, is missing or is extra, as io::load_checkpoint.
io::TrainingState load_sharded(const std::string& dir, fsdp::FullyShardedModule& module, optim::Optimizer& optimizer,
                               ProcessGroup& group, const io::RunSettings& expected,
                               Generator& generator = default_generator());

// Whether `dir` (or the "<dir>.previous" a save left) holds a complete set.
bool sharded_checkpoint_exists(const std::string& dir);

}  // namespace rumus::distributed

RUMUS_API_END
