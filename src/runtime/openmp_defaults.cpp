// librumus_openmp_defaults: makes idle OpenMP threads sleep at once
// (OMP_WAIT_POLICY=passive) unless the environment already chose.
//
// libgomp reads its settings once, in its own constructor, and has no call to
// change the wait policy afterwards. By default its idle threads spin for
// milliseconds after every parallel loop; where other programs share the cores
// those spinning threads take the time the working ones need (a training step
// ran 4-10x slower next to two busy processes on a 2-core machine). The price
// of sleeping on an otherwise idle machine is a wake-up per loop, a few percent.
//
// This library has no dependencies, and librumus lists it after the OpenMP
// runtime, so the dynamic loader loads it later and runs its constructor first,
// before libgomp reads the environment. librumus removes the variable again
// once libgomp has read it (when the CPU backend starts), so child processes see the user's
// environment.
#include <cstdlib>

namespace {
bool applied = false;

__attribute__((constructor)) void sleep_idle_openmp_threads() {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;  // the user chose
  applied = setenv("OMP_WAIT_POLICY", "passive", 0) == 0;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int rumus_openmp_defaults_applied() { return applied ? 1 : 0; }
