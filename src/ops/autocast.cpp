// The autocast policy table: the one place that says which op runs in which
// dtype inside an autocast scope (PyTorch's lists, cut to rumus's ops).
#include "autocast.hpp"

#include <optional>

#include "../backend/backend.hpp"
#include "../backend/gemm.hpp"
#include "../backend/attention.hpp"

namespace rumus {

namespace {

struct Rule {
  std::string_view op;
  AutocastPolicy policy;
  // Lower-precision ops: the kernel that must take the 16-bit dtype on the
  // device; where it does not, the op runs in f32 (attention kernels are
  // f32-only today) instead of failing inside a scope the user asked for.
  bool (*needs)(Backend&, DType) = nullptr;
};

constexpr AutocastPolicy lower = AutocastPolicy::lower_precision;
constexpr AutocastPolicy f32 = AutocastPolicy::f32;

const Rule kRules[] = {
    // Matrix products: 16-bit inputs, f32 accumulation in the GEMM.
    {"matmul", lower, &supports<GemmKernel>},
    {"bmm", lower, &supports<GemmKernel>},
    {"linear", lower, &supports<GemmKernel>},
    {"linear_relu", lower, &supports<GemmKernel>},
    {"conv2d", lower, &supports<GemmKernel>},  // lowered to im2col + GEMM where no direct kernel takes 16 bits
    {"conv2d_relu", lower, &supports<GemmKernel>},
    {"conv_transpose1d", lower, &supports<GemmKernel>},  // GEMM + col2im
    {"conv_transpose2d", lower, &supports<GemmKernel>},
    {"scaled_dot_product_attention", lower, &supports<AttentionForwardKernel>},
    // Reductions, normalisations and losses: f32, where 16 bits lose range or precision.
    // (batch_norm2d is not listed, as in PyTorch: a 16-bit input keeps its
    // dtype, normalised with f32 statistics and parameters.)
    {"sum", f32},
    {"mean", f32},
    {"softmax", f32},
    {"log_softmax", f32},
    {"layer_norm", f32},
    {"mse_loss", f32},
    {"cross_entropy", f32},
    {"nll_loss", f32},
    {"binary_cross_entropy_with_logits", f32},
    {"binary_cross_entropy", f32},
    {"l1_loss", f32},
    {"smooth_l1_loss", f32},
    {"huber_loss", f32},
    {"kl_div", f32},
    {"poisson_nll_loss", f32},
    {"margin_ranking_loss", f32},
    {"cosine_embedding_loss", f32},
    {"triplet_margin_loss", f32},
    {"soft_margin_loss", f32},
    {"hinge_embedding_loss", f32},
    // Pointwise math whose range or accuracy 16 bits lose, as PyTorch's list.
    {"acos", f32},
    {"asin", f32},
    {"cosh", f32},
    {"sinh", f32},
    {"tan", f32},
    {"erfinv", f32},
    {"expm1", f32},
    {"log1p", f32},
    {"log2", f32},
    {"log10", f32},
    {"reciprocal", f32},
    {"rsqrt", f32},
    {"norm", f32},
    {"prod", f32},
    {"multi_margin_loss", f32},
};

const Rule* find_rule(std::string_view op) {
  for (const Rule& r : kRules)
    if (r.op == op) return &r;
  return nullptr;
}

}  // namespace

AutocastPolicy autocast_policy(std::string_view op) {
  const Rule* r = find_rule(op);
  return r ? r->policy : AutocastPolicy::none;
}

const std::vector<AutocastEntry>& autocast_table() {
  static const std::vector<AutocastEntry> table = [] {
    std::vector<AutocastEntry> t;
    for (const Rule& r : kRules) t.push_back({r.op, r.policy});
    return t;
  }();
  return table;
}

namespace detail {

Device autocast_device(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && is_floating(t->dtype())) return t->device();
  return Device{};
}

Tensor autocast_cast(AutocastPolicy policy, std::string_view op, const Tensor& t, const Device& device) {
  if (policy == AutocastPolicy::none || !t.defined()) return t;
  const DType dt = t.dtype();
  if (policy == AutocastPolicy::f32)
    return is_16bit_float(dt) ? t.to(DType::f32) : t;
  // lower_precision: only f32 is cast down (f64 stays, as in PyTorch); an
  // input already in another 16-bit dtype is cast to the scope's.
  if (dt != DType::f32 && dt != DType::f16 && dt != DType::bf16) return t;
  const DType low = autocast_dtype(device);
  const Rule* r = find_rule(op);
  if (r->needs && !r->needs(backend(t.device()), low)) return dt == DType::f32 ? t : t.to(DType::f32);
  return dt == low ? t : t.to(low);
}

}  // namespace detail

}  // namespace rumus
