#include "rumus/autograd/hooks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "rumus/core/device_backend.hpp"
#include "rumus/core/error.hpp"

namespace rumus::autograd {

namespace {
struct Hook {
  std::uint64_t id;
  std::weak_ptr<TensorImpl> owner;  // entries of dead tensors are dropped
  GradHook fn;
};

// Hooks are registered from any thread (a DDP rank's, say) and read by the
// thread running backward; `registered` spares the lookup when there are none.
struct Registry {
  std::mutex mu;
  std::unordered_map<GradId, std::vector<Hook>> hooks;
  std::unordered_map<GradId, std::weak_ptr<TensorImpl>> retained;
  std::uint64_t next_id = 1;
  std::atomic<std::size_t> registered{0};

  void recount() { registered = hooks.size() + retained.size(); }
  void drop_dead() {
    for (auto it = hooks.begin(); it != hooks.end();) {
      std::erase_if(it->second, [](const Hook& h) { return h.owner.expired(); });
      it = it->second.empty() ? hooks.erase(it) : std::next(it);
    }
    std::erase_if(retained, [](const auto& kv) { return kv.second.expired(); });
  }
};
Registry& registry() {
  static Registry* r = new Registry();  // outlives static destructors
  return *r;
}

thread_local int tl_anomaly = 0;
thread_local std::vector<GradId> tl_deferred;  // HooksDeferredGuard's ids, innermost last

void check_tensor(const char* op, const Tensor& t) {
  if (!t.defined())
    throw AutogradError(fmt::format("{}: expected a defined tensor, got an undefined one", op));
}
}  // namespace

HookHandle register_hook(const Tensor& t, GradHook hook) {
  check_tensor("register_hook", t);
  if (!hook) throw AutogradError("register_hook: expected a hook, got an empty std::function");
  if (!t.requires_grad())
    throw AutogradError(fmt::format("register_hook: the tensor of shape {} does not require grad, so no gradient "
                                    "reaches it (call requires_grad_() first)",
                                    shape_str(t.shape())));
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.drop_dead();
  const std::uint64_t id = r.next_id++;
  r.hooks[t.grad_id()].push_back({id, t.impl_ptr(), std::move(hook)});
  r.recount();
  return HookHandle(id);
}

void HookHandle::remove() {
  if (id_ == 0) return;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  for (auto it = r.hooks.begin(); it != r.hooks.end(); ++it) {
    std::erase_if(it->second, [&](const Hook& h) { return h.id == id_; });
    if (it->second.empty()) {
      r.hooks.erase(it);
      break;
    }
  }
  r.recount();
  id_ = 0;
}

bool HookHandle::active() const {
  if (id_ == 0) return false;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  for (const auto& [gid, list] : r.hooks)
    for (const Hook& h : list)
      if (h.id == id_) return true;
  return false;
}

void retain_grad(const Tensor& t) {
  check_tensor("retain_grad", t);
  if (!t.requires_grad())
    throw AutogradError(fmt::format("retain_grad: the tensor of shape {} does not require grad", shape_str(t.shape())));
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.drop_dead();
  r.retained[t.grad_id()] = t.impl_ptr();
  r.recount();
}

bool has_hooks_or_retained() { return registry().registered.load(std::memory_order_relaxed) != 0; }

Tensor run_hooks(GradId id, Tensor grad) {
  if (std::find(tl_deferred.begin(), tl_deferred.end(), id) != tl_deferred.end()) return grad;
  std::vector<GradHook> fns;
  {
    Registry& r = registry();
    std::lock_guard lk(r.mu);
    auto it = r.hooks.find(id);
    if (it == r.hooks.end()) return grad;
    for (const Hook& h : it->second)
      if (!h.owner.expired()) fns.push_back(h.fn);
  }
  for (const GradHook& fn : fns) {  // outside the lock: a hook may register another
    Tensor replaced = fn(grad);
    if (!replaced.defined()) continue;
    if (replaced.shape() != grad.shape())
      throw AutogradError(fmt::format("a gradient hook returned shape {} for a gradient of shape {}",
                                      shape_str(replaced.shape()), shape_str(grad.shape())));
    grad = std::move(replaced);
  }
  return grad;
}

bool is_retained(GradId id) {
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  auto it = r.retained.find(id);
  return it != r.retained.end() && !it->second.expired();
}

HooksDeferredGuard::HooksDeferredGuard(std::vector<GradId> ids) : restore_size_(tl_deferred.size()) {
  tl_deferred.insert(tl_deferred.end(), ids.begin(), ids.end());
}
HooksDeferredGuard::~HooksDeferredGuard() { tl_deferred.resize(restore_size_); }

DetectAnomalyGuard::DetectAnomalyGuard() { ++tl_anomaly; }
DetectAnomalyGuard::~DetectAnomalyGuard() { --tl_anomaly; }
bool anomaly_mode_enabled() { return tl_anomaly > 0; }

bool has_non_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0 || !is_floating(t.dtype())) return false;
  // The bytes the layout spans, read once; then its elements, in any strides.
  const Layout& l = t.layout();
  const std::size_t item = dtype_size(t.dtype());
  std::vector<unsigned char> bytes(std::size_t(l.max_extent() - l.offset) * item);
  device_backend(t.device()).read(t.storage(), std::size_t(l.offset) * item, bytes.data(), bytes.size());
  auto value = [&](std::int64_t at) -> double {
    const unsigned char* p = bytes.data() + std::size_t(at) * item;
    switch (t.dtype()) {
      case DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
      case DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
      case DType::f16: { Half v; std::memcpy(&v, p, 2); return float(v); }
      case DType::bf16: { BFloat16 v; std::memcpy(&v, p, 2); return float(v); }
      default: return 0;
    }
  };
  std::vector<std::int64_t> index(l.shape.size(), 0);
  for (std::int64_t n = 0; n < l.numel(); ++n) {
    std::int64_t at = 0;
    for (std::size_t d = 0; d < index.size(); ++d) at += index[d] * l.strides[d];
    if (!std::isfinite(value(at))) return true;
    for (std::size_t d = index.size(); d-- > 0;) {
      if (++index[d] < l.shape[d]) break;
      index[d] = 0;
    }
  }
  return false;
}

}  // namespace rumus::autograd
