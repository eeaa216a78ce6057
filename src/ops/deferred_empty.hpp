#pragma once
// empty() under an nn::DeferredInit: tensors with no bytes yet (Storage::Unallocated),
// so that the parameters a module's constructor makes never take memory
// (src/nn/deferred_init.cpp sets this for the thread while it lives).
namespace rumus::detail {
bool& deferring_empty();
}  // namespace rumus::detail
