#pragma once
// The wait policy rumus chooses for OpenMP (src/runtime/openmp_defaults.cpp).

namespace rumus::detail {

// Takes away the OMP_WAIT_POLICY default rumus set for libgomp, which has read
// it by now, so that child processes see the user's environment. The CPU
// backend calls it when it starts; the call also keeps the defaults library
// linked into every program that uses rumus (linkers drop unreferenced ones).
void settle_openmp_environment();

}  // namespace rumus::detail
