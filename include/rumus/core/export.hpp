#pragma once
// Symbol visibility. The library is compiled with -fvisibility=hidden, so only
// what a public header declares is exported from a shared librumus; kernels,
// backends and helpers private to src/ stay out of its symbol table.
//
// The rule: every public header under include/rumus/ that declares anything
// includes this file and wraps its declarations, after its own #includes, in
//
//   #include "rumus/core/export.hpp"
//
//   RUMUS_API_BEGIN
//   namespace rumus { ... }
//   RUMUS_API_END
//
// A header that moves to src/ drops the two lines and so becomes private.

#if defined(__GNUC__) || defined(__clang__)
#define RUMUS_API_BEGIN _Pragma("GCC visibility push(default)")
#define RUMUS_API_END _Pragma("GCC visibility pop")
#else
#define RUMUS_API_BEGIN
#define RUMUS_API_END
#endif
