// capture(): the thread's capture state, the CPU fallback and replay hooks.
#include "rumus/core/capture.hpp"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rumus/core/device_backend.hpp"
#include "rumus/core/error.hpp"
#include "rumus/core/tensor.hpp"

namespace rumus {

namespace {
// A tensor from before the capture that the recorded commands use, as it was then.
struct Dependency {
  std::weak_ptr<TensorImpl> impl;
  const Storage* storage;
  Layout layout;
  DType dtype;
};
}  // namespace

struct CapturedStep::Impl {
  Device device;
  std::function<void()> closure;           // CPU: run at each replay
  std::unique_ptr<CapturedWork> work;      // other devices: the recorded kernels
  std::vector<std::function<void()>> hooks;  // host state each replay advances
  std::size_t replays = 0;
  GradId first_inner_id = 0;  // tensors with smaller ids were made before the capture
  std::unordered_map<const TensorImpl*, Dependency> dependencies;
  std::unordered_set<const void*> seen;  // first_in_capture's keys
};

namespace {
// The capture this thread is recording, if any.
thread_local CapturedStep::Impl* tl_capture = nullptr;
// Set while a CPU capture's closure runs at replay (a capture inside it is nested too).
thread_local bool tl_cpu_replay = false;
// The capture whose dependencies are being noted: the one recording on a
// device, or a CPU capture at its first replay (so both refuse the same changes).
thread_local CapturedStep::Impl* tl_noting = nullptr;
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

void note_captured_tensor(const Tensor& t) {
  if (!tl_noting || !t.defined() || t.grad_id() >= tl_noting->first_inner_id) return;
  tl_noting->dependencies.try_emplace(t.impl_ptr().get(),
                                      Dependency{t.impl_ptr(), t.storage_ptr().get(), t.layout(), t.dtype()});
}

bool first_in_capture(const void* key) { return !tl_noting || tl_noting->seen.insert(key).second; }

namespace {
bool same_layout(const Layout& a, const Layout& b) {
  return a.shape == b.shape && a.strides == b.strides && a.offset == b.offset;
}

// Refuses a replay whose recorded commands would use memory that no longer
// belongs to the tensors they were recorded for.
void check_dependencies(const CapturedStep::Impl& impl) {
  for (const auto& [key, dep] : impl.dependencies) {
    const std::shared_ptr<TensorImpl> t = dep.impl.lock();
    if (!t)
      throw CaptureError(fmt::format(
          "CapturedStep::replay: a tensor the captured step uses (shape {}, {}) was released or rebound to another "
          "tensor since capture; copy new values into it with copy_() instead, or capture the step again",
          shape_str(dep.layout.shape), dtype_name(dep.dtype)));
    if (t->storage.get() != dep.storage || t->dtype != dep.dtype || !same_layout(t->layout, dep.layout))
      throw CaptureError(fmt::format(
          "CapturedStep::replay: a tensor the captured step uses (captured as shape {}, {}; now shape {}, {} on {}) "
          "was moved to other memory since capture (Module::to, a new shape or dtype); capture the step again",
          shape_str(dep.layout.shape), dtype_name(dep.dtype), shape_str(t->layout.shape), dtype_name(t->dtype),
          t->storage ? t->storage->device().str() : std::string("no device")));
  }
}
}  // namespace

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
  impl->first_inner_id = next_grad_id();
  DeviceBackend& be = device_backend(device);
  if (!be.can_capture()) {
    impl->closure = std::move(step);
    return CapturedStep(std::move(impl));
  }
  be.begin_capture();
  tl_capture = tl_noting = impl.get();
  try {
    step();
  } catch (...) {
    tl_capture = tl_noting = nullptr;
    be.abort_capture();
    throw;
  }
  tl_capture = tl_noting = nullptr;
  impl->work = be.end_capture();
  return CapturedStep(std::move(impl));
}

void CapturedStep::replay() {
  if (!impl_) throw CaptureError("CapturedStep::replay: the step is empty (not made by capture())");
  if (tl_capture)
    throw CaptureError(fmt::format("CapturedStep::replay: replaying a step on {} inside a capture on {}",
                                   impl_->device.str(), tl_capture->device.str()));
  if (impl_->closure) {
    check_dependencies(*impl_);
    tl_cpu_replay = true;
    if (impl_->replays == 0) tl_noting = impl_.get();
    try {
      impl_->closure();
    } catch (...) {
      tl_cpu_replay = false;
      tl_noting = nullptr;
      if (impl_->replays == 0) impl_->dependencies.clear(), impl_->seen.clear();
      throw;
    }
    tl_cpu_replay = false;
    tl_noting = nullptr;
  } else {
    impl_->work->check_replay();
    check_dependencies(*impl_);
    for (auto& hook : impl_->hooks) hook();
    impl_->work->replay();
  }
  ++impl_->replays;
}

}  // namespace rumus
