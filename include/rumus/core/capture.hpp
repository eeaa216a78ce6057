#pragma once
// Step capture: record the device work of a closure once, then replay it.
//
//   Tensor x = zeros({64, 784}, opts), y = ...;        // static inputs
//   auto step = rumus::capture(device, [&] {
//     Tensor loss = cross_entropy(model.forward(x), y);
//     opt.step(backward(loss));
//   });
//   for (auto& [bx, by] : loader) {
//     x.copy_(bx); y.copy_(by);                         // new batch, outside the capture
//     step.replay();                                    // forward, backward, update
//   }
//
// As with CUDA graphs, capture() runs the closure's host code once but none
// of its device work: kernels are recorded into persistent command buffers,
// and each replay() submits them again, reading and writing the same memory.
// Tensors the closure created and the caller kept (a loss, outputs,
// gradients) show the values of the latest replay; memory the captured work
// uses, temporaries included, stays reserved while the CapturedStep lives.
//
// Rules (each break is a CaptureError naming the op):
// - Shapes are fixed: copy each new batch into the same input tensors before
//   replay(); capture again for a new shape (e.g. a last, partial batch).
// - No host reads inside (item(), to(cpu), to_vector(), synchronize()): the
//   values do not exist before a replay. Read after replay() instead.
// - No uploads inside (from_blob/tensor(...).to(device), copy_ from the CPU):
//   they would replay the same bytes. Copy inputs into static tensors first.
// - Random draws (rand, randn, dropout) take fresh numbers at each replay:
//   the generator advances before each replay as the eager calls would
//   advance it, so replays draw what eager steps draw. The generator must
//   outlive the capture. Attention dropout cannot be captured.
// - No kernels on another GPU, no nested capture, and no kernels or replays
//   on the capturing device from other threads while it records. CPU tensor
//   work inside the closure is host code: it runs once, at capture.
// - One optimizer.step() per capture (a second is a CaptureError); SGD, Adam
//   and AdamW can be captured (their fused f32 updates), RMSprop cannot.
// - Tensors made before the capture that the step uses must stay where they
//   are: a replay after Module::to, or after an input was rebound (x = other,
//   instead of x.copy_(other)) or released, is a CaptureError naming it.
// - Tensors and optimizers the step uses must outlive the CapturedStep.
//   Optimizers advance their step counts and read the current learning rate
//   at each replay, so schedulers that change the lr between replays work;
//   after optimizer.load_state_dict(), capture the step again.
//
// On the CPU, kernels run as soon as they are called, so there is nothing to
// record: capture() keeps the closure without running it, and replay() runs
// it. Code written for capture runs unchanged on every device, and refuses
// the same changes: the first CPU replay notes what the step uses, and the
// later ones check it.
#include <cstddef>
#include <functional>
#include <memory>

#include "rumus/core/device.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

class CapturedWork;

class CapturedStep {
 public:
  CapturedStep();  // empty: replay() throws
  CapturedStep(CapturedStep&&) noexcept;
  CapturedStep& operator=(CapturedStep&&) noexcept;
  ~CapturedStep();

  // Runs the recorded work (queued in order with other work on the device).
  void replay();
  bool valid() const { return impl_ != nullptr; }
  Device device() const;
  std::size_t replays() const;

  struct Impl;

 private:
  explicit CapturedStep(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend CapturedStep capture(Device device, std::function<void()> step);
};

// Records the device work of `step` on `device` (see the rules above).
CapturedStep capture(Device device, std::function<void()> step);

// Whether this thread is inside capture(); the device it records.
bool is_capturing();
Device capturing_device();

// Runs `hook` on the host before each replay of the capture being recorded
// on this thread (optimizers advance their step counts and upload the
// current learning rate this way). Throws CaptureError outside a capture.
void on_replay(std::function<void()> hook);

// Throws CaptureError "{op}: {what} inside a capture ..." when this thread is capturing.
void check_not_capturing(const char* op, const char* what);

// The ops layer calls this for each tensor a kernel reads or writes. Inside a
// capture, a tensor made before capture() began (a parameter, an input, an
// optimizer's state) is remembered with its memory and layout: each replay
// checks that it is still alive and still there, and refuses with a
// CaptureError where it was released, rebound, moved (Module::to) or reshaped,
// since the recorded commands would read and write the old memory.
class Tensor;
void note_captured_tensor(const Tensor& t);

// True the first time `key` is seen inside the capture this thread records,
// false after: an optimizer refuses a second step() in one capture this way.
// Outside a capture, always true.
bool first_in_capture(const void* key);

}  // namespace rumus

RUMUS_API_END
