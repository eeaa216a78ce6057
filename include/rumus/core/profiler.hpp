#pragma once
// Where a training step's time goes: while a Profiler lives, every kernel this
// thread's ops launch is timed and summed per (phase, op, kernel) row, like
// torch::autograd::profiler's table. Phases are "forward" (anything outside
// the two below), "backward" (inside backward()) and "step" (inside an
// optimizer's step()). On the CPU the figures are the kernels' run times; on
// an asynchronous device (Vulkan) they are the host's time to queue them (set
// RUMUS_VULKAN_PROFILE=1 for the GPU's own per-kernel times).
//
//   Profiler prof;
//   for (...) { loss = ...; grads = backward(loss); opt.step(grads); }
//   std::cout << prof.table();
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

struct ProfileRow {
  std::string name;  // "<phase> <op> <kernel>[:<variant>]", e.g. "backward relu binary:relu_backward"
  std::uint64_t calls = 0;
  double milliseconds = 0;
};

class Profiler {
 public:
  // Starts recording this thread's kernels. One Profiler per thread at a time.
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Rows so far, the most expensive first.
  std::vector<ProfileRow> rows() const;
  // Wall time since the Profiler started (or was reset).
  double elapsed_ms() const;
  // The rows with their share of the elapsed time, and the time spent outside
  // kernels (op dispatch, allocation, the tape, the caller's own work).
  std::string table(std::size_t max_rows = 30) const;
  void reset();
};

namespace detail {
// For the kernel table and the autograd/optimizer layers.
bool profiling();
void profile_record(std::string_view op, std::string_view kernel, std::string_view variant,
                    std::chrono::nanoseconds time);
// Names the kernel this thread is running while it lives ("<phase> <op>
// <kernel>[:<variant>]", a row's name), so that a device's own per-dispatch
// timings (RUMUS_VULKAN_PROFILE) can say which op and pass launched them.
class ProfileKernel {
 public:
  ProfileKernel(std::string_view op, std::string_view kernel, std::string_view variant);
  ~ProfileKernel();
  ProfileKernel(const ProfileKernel&) = delete;
  ProfileKernel& operator=(const ProfileKernel&) = delete;

 private:
  std::string outer_;  // a kernel may run another op's kernel inside it
};
// The row of the kernel running now on this thread, empty outside one.
std::string_view profile_kernel_row();
// Names the phase of the kernels launched while it lives (nests; restores the outer one).
class ProfilePhase {
 public:
  explicit ProfilePhase(const char* phase);
  ~ProfilePhase();
  ProfilePhase(const ProfilePhase&) = delete;
  ProfilePhase& operator=(const ProfilePhase&) = delete;

 private:
  const char* outer_;
};
}  // namespace detail

}  // namespace rumus

RUMUS_API_END
