#pragma once
// Gradient clipping on a GradientStore. The clipped gradients replace the
// stored ones (never scaled in place: one tensor may be the gradient of two leaves).
#include <vector>

#include "rumus/autograd/engine.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::optim {

// Scales the gradients of `params` so their joint norm is at most max_norm;
// returns the norm before clipping. norm_type is p >= 1 or infinity.
double clip_grad_norm_(GradientStore& grads, const std::vector<Tensor>& params, double max_norm,
                       double norm_type = 2.0);
// The two halves of clip_grad_norm_, for norms that span several processes
// (fsdp::clip_grad_norm_): the sum of |g|^p over the gradients of `params`
// (max |g| for p = infinity), not yet rooted; and the clipping itself.
double grad_norm_term(const GradientStore& grads, const std::vector<Tensor>& params, double norm_type, const char* op);
double norm_from_term(double term, double norm_type);
void scale_grads_to_norm(GradientStore& grads, const std::vector<Tensor>& params, double total_norm, double max_norm);
void check_clip_arguments(const char* op, double max_norm, double norm_type);

// Clamps every gradient of `params` into [-clip_value, clip_value].
void clip_grad_value_(GradientStore& grads, const std::vector<Tensor>& params, double clip_value);

}  // namespace rumus::optim

RUMUS_API_END
