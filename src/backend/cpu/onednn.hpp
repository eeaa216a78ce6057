// The CPU backend's use of oneDNN: one engine, a stream per thread, and its
// errors turned into rumus errors. oneDNN runs on the same OpenMP runtime as
// rumus's own loops (Debian builds it on libgomp), so there is one thread pool.
#pragma once
#include <oneapi/dnnl/dnnl.hpp>

#include <mutex>
#include <string>

#include "rumus/core/error.hpp"

namespace rumus::cpu::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // this thread's

// Held while creating primitives. Running them is thread-safe; creating them
// goes through oneDNN's global primitive cache, whose synchronisation is
// invisible to ThreadSanitizer (the library is not instrumented). Creation
// happens once per shape and thread, so the lock costs nothing in a step.
std::mutex& creation_mutex();

[[noreturn]] void rethrow(const char* op, const dnnl::error& e);

// Runs `fn`, reporting oneDNN's failures as errors naming `op`.
template <class F>
decltype(auto) checked(const char* op, F&& fn) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    rethrow(op, e);
  }
}

}  // namespace rumus::cpu::onednn
