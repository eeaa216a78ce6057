#pragma once
#include <string>
#include <string_view>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// A loss's reduction: Reduction::mean (the default), Reduction::sum,
// Reduction::none, or PyTorch's strings ("mean", "sum", "none"; "batchmean"
// for kl_div). A string is checked by the loss it is given to, so the error
// names that loss.
class Reduction {
 public:
  enum Kind { none, mean, sum, batchmean, invalid };
  Reduction(Kind kind = mean) : kind_(kind) {}
  Reduction(std::string_view name);
  Reduction(const char* name) : Reduction(std::string_view(name)) {}
  Reduction(const std::string& name) : Reduction(std::string_view(name)) {}
  Kind kind() const { return kind_; }
  std::string name() const;  // as given, for errors
  friend bool operator==(const Reduction& r, Kind k) { return r.kind_ == k; }

 private:
  Kind kind_;
  std::string name_;
};

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// 0.5 (x - y)^2 / beta where |x - y| < beta, else |x - y| - 0.5 beta; beta = 0 is l1_loss.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                      double beta = 1.0);
// 0.5 (x - y)^2 where |x - y| < delta, else delta (|x - y| - 0.5 delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0);

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Tensor weight;  // [C] per-class weights; the mean divides by the targets' total weight
};
// logits [N, C] or [N, C, d...], target i64 [N] or [N, d...].
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});

struct NLLLossOptions {
  Tensor weight;  // [C] per-class weights; the mean divides by the targets' total weight
  std::int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
};
// log_probs [N, C] or [N, C, d...], target i64.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean,
                std::int64_t ignore_index = -100);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const NLLLossOptions& options);

// -w (y log x + (1 - y) log(1 - x)), each log clamped at -100 as PyTorch's;
// input probabilities in [0, 1], weight broadcast to the input.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            Reduction reduction = Reduction::mean);

struct BCEWithLogitsOptions {
  Tensor weight;      // broadcast to the input
  Tensor pos_weight;  // weight of the positive term, broadcast along the last dim (one per class)
  Reduction reduction = Reduction::mean;
};
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const BCEWithLogitsOptions& options);

// input: log-probabilities; target: probabilities (log-probabilities with
// log_target). "batchmean" divides the sum by the batch size, the true KL
// divergence; "mean" (PyTorch's default) divides by the element count.
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
              bool log_target = false);

// max(0, -y (x1 - x2) + margin), y in {1, -1}.
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                           Reduction reduction = Reduction::mean);
// 1 - cos(x1, x2) for y = 1, max(0, cos(x1, x2) - margin) for y = -1; x [N, D] or [D].
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                             Reduction reduction = Reduction::mean);

struct TripletMarginLossOptions {
  double margin = 1.0;
  double p = 2.0;
  double eps = 1e-6;
  bool swap = false;
  Reduction reduction = Reduction::mean;
};
// max(d(a, p) - d(a, n) + margin, 0), d the p-norm distance of the last dim.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossOptions& options = {});

struct PoissonNLLLossOptions {
  bool log_input = true;
  bool full = false;  // adds Stirling's approximation of log(target!) where target > 1
  double eps = 1e-8;
  Reduction reduction = Reduction::mean;
};
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNLLLossOptions& options = {});

struct MultiMarginLossOptions {
  std::int64_t p = 1;  // 1 or 2
  double margin = 1.0;
  Tensor weight;  // [C] per-class weights, read at each row's target
  Reduction reduction = Reduction::mean;
};
// The multi-class hinge loss: per row, sum over classes j != y of
// max(0, margin - x[y] + x[j])^p, over C. input [N, C] or [C], target i64 [N] or [].
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginLossOptions& options = {});

// log(1 + exp(-y x)), y in {1, -1}.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// x for y = 1, max(0, margin - x) for y = -1.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::mean);

}  // namespace rumus

RUMUS_API_END
