// capture(): the thread's capture state, the CPU fallback and replay hooks.
#include "rumus/core/capture.hpp"

#include <fmt/format.h>

#include <vector>

#include "rumus/core/device_backend.hpp"
#include "rumus/core/error.hpp"

namespace rumus {

struct CapturedStep::Impl {
  Device device;
  std::function<void()> closure;           // CPU: run at each replay
  std::unique_ptr<CapturedWork> work;      // other devices: the recorded kernels
  std::vector<std::function<void()>> hooks;  // host state each replay advances
  std::size_t replays = 0;
};

namespace {
// The capture this thread is recording, if any.
thread_local CapturedStep::Impl* tl_capture = nullptr;
// Set while a CPU capture's closure runs at replay (a capture inside it is nested too).
thread_local bool tl_cpu_replay = false;
}  // namespace

bool is_capturing() { return tl_capture != nullptr; }

Device capturing_device() {
  if (!tl_capture) throw CaptureError("capturing_device: this thread is not inside capture()");
  return tl_capture->device;
}

void on_replay(std::function<void()> hook) {
  if (!tl_capture) throw CaptureError("on_replay: this thread is not inside capture()");
  tl_capture->hooks.push_back(std::move(hook));
}

void check_not_capturing(const char* op, const char* what) {
  if (!tl_capture) return;
  throw CaptureError(fmt::format("{}: {} inside a capture on {}: {}", op, what, tl_capture->device.str(),
                                 "it would not run again at replay (do it before capture() or after replay())"));
}

CapturedStep::CapturedStep(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CapturedStep::CapturedStep() = default;
CapturedStep::CapturedStep(CapturedStep&&) noexcept = default;
CapturedStep& CapturedStep::operator=(CapturedStep&&) noexcept = default;
CapturedStep::~CapturedStep() = default;

Device CapturedStep::device() const {
  if (!impl_) throw CaptureError("CapturedStep::device: the step is empty (not made by capture())");
  return impl_->device;
}

std::size_t CapturedStep::replays() const { return impl_ ? impl_->replays : 0; }

CapturedStep capture(Device device, std::function<void()> step) {
  if (tl_capture || tl_cpu_replay)
    throw CaptureError(fmt::format("capture: nested capture on {} (a capture on {} is already recording on this thread)",
                                   device.str(), tl_capture ? tl_capture->device.str() : "cpu"));
  if (!step) throw CaptureError("capture: expected a closure, got an empty std::function");
  auto impl = std::make_unique<CapturedStep::Impl>();
  impl->device = device;
  DeviceBackend& be = device_backend(device);
  if (!be.can_capture()) {
    impl->closure = std::move(step);
    return CapturedStep(std::move(impl));
  }
  be.begin_capture();
  tl_capture = impl.get();
  try {
    step();
  } catch (...) {
    tl_capture = nullptr;
    be.abort_capture();
    throw;
  }
  tl_capture = nullptr;
  impl->work = be.end_capture();
  return CapturedStep(std::move(impl));
}

void CapturedStep::replay() {
  if (!impl_) throw CaptureError("CapturedStep::replay: the step is empty (not made by capture())");
  if (tl_capture)
    throw CaptureError(fmt::format("CapturedStep::replay: replaying a step on {} inside a capture on {}",
                                   impl_->device.str(), tl_capture->device.str()));
  if (impl_->closure) {
    tl_cpu_replay = true;
    try {
      impl_->closure();
    } catch (...) {
      tl_cpu_replay = false;
      throw;
    }
    tl_cpu_replay = false;
  } else {
    impl_->work->check_replay();
    for (auto& hook : impl_->hooks) hook();
    impl_->work->replay();
  }
  ++impl_->replays;
}

}  // namespace rumus
