#pragma once
// Helpers the loss files share: reduction, argument checks.
#include <string>

#include "rumus/ops/loss.hpp"

namespace rumus::detail {

// Throws ValueError naming `op` unless `r` is none, mean or sum (or batchmean
// where the loss allows it).
void check_reduction(const char* op, const Reduction& r, bool allow_batchmean = false);
// per reduced by none, mean (over its elements) or sum.
Tensor reduce_loss(const char* op, const Tensor& per, const Reduction& r);
// Same device, floating input, equal shapes ("input" against `what`).
void check_loss_pair(const char* op, const Tensor& input, const Tensor& other, const char* what = "target");
// A broadcast operand (weight, pos_weight) that must not grow `shape`.
void check_broadcasts_to(const char* op, const char* what, const Tensor& t, const Shape& shape);

}  // namespace rumus::detail
