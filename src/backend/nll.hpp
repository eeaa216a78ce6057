#pragma once
// The negative log-likelihood family (src/ops/loss.cpp): cross_entropy and
// nll_loss in one kernel each way for their common case (class indices, no
// class weights, no label smoothing, a mean or a sum) of contiguous
// log-probabilities [rows, cols] and i64 targets [rows]. Rows whose target is
// ignore_index are not counted.
#include "kernel_registry.hpp"

namespace rumus {

// out = the sum over counted rows of -log_probs[i, target[i]], divided by
// their number for a mean (NaN when there are none, as PyTorch's); count =
// that number (log_probs' dtype). A target outside [0, cols) that is not
// ignore_index is an error (on a GPU, at the host's next wait).
struct NllForwardKernel {
  static constexpr std::string_view name = "nll_forward";
  using Fn = void(Backend&, TensorArg out, TensorArg count, TensorArg log_probs, TensorArg target,
                  std::int64_t ignore_index, bool mean);
};

// grad_in[i, c] = s_i (exp(log_probs[i, c]) - [c == target[i]]) when
// `softmax` (the gradient of cross_entropy for the logits), else
// -s_i [c == target[i]] (of nll_loss for the log-probabilities), where
// s_i = grad_out / (mean ? count : 1) on counted rows and 0 on ignored ones.
struct NllBackwardKernel {
  static constexpr std::string_view name = "nll_backward";
  using Fn = void(Backend&, TensorArg grad_in, TensorArg grad_out, TensorArg count, TensorArg log_probs,
                  TensorArg target, std::int64_t ignore_index, bool mean, bool softmax);
};

}  // namespace rumus
