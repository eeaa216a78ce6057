#pragma once
// Loss modules, as torch.nn's: built with the loss's options, called as
// loss(input, target). Class weights are buffers ("weight", "pos_weight"),
// so they move with to() and load from PyTorch state dicts.
#include "rumus/nn/module.hpp"
#include "rumus/ops/loss.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// A loss of (input, target).
class PairLoss : public Module {
 public:
  using Module::forward;
  using Module::operator();
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
};
// A loss of three tensors (two inputs and a target, or anchor, positive, negative).
class TripleLoss : public Module {
 public:
  using Module::forward;
  using Module::operator();
  virtual Tensor forward(const Tensor& a, const Tensor& b, const Tensor& c) = 0;
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) { return forward(a, b, c); }
};

class L1Loss : public PairLoss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return l1_loss(x, y, reduction); }
  std::string type_name() const override { return "L1Loss"; }
  Reduction reduction;
};
class MSELoss : public PairLoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return mse_loss(x, y, reduction); }
  std::string type_name() const override { return "MSELoss"; }
  Reduction reduction;
};
class SmoothL1Loss : public PairLoss {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::mean, double beta = 1.0) : reduction(reduction), beta(beta) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return smooth_l1_loss(x, y, reduction, beta); }
  std::string type_name() const override { return "SmoothL1Loss"; }
  Reduction reduction;
  double beta;
};
class HuberLoss : public PairLoss {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::mean, double delta = 1.0) : reduction(reduction), delta(delta) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return huber_loss(x, y, reduction, delta); }
  std::string type_name() const override { return "HuberLoss"; }
  Reduction reduction;
  double delta;
};
class BCELoss : public PairLoss {
 public:
  explicit BCELoss(Tensor weight = {}, Reduction reduction = Reduction::mean);
  Tensor forward(const Tensor& x, const Tensor& y) override { return binary_cross_entropy(x, y, weight, reduction); }
  std::string type_name() const override { return "BCELoss"; }
  Tensor weight;
  Reduction reduction;
};
class BCEWithLogitsLoss : public PairLoss {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsOptions options = {});
  Tensor forward(const Tensor& x, const Tensor& y) override {
    return binary_cross_entropy_with_logits(x, y, options);
  }
  std::string type_name() const override { return "BCEWithLogitsLoss"; }
  BCEWithLogitsOptions options;
};
class CrossEntropyLoss : public PairLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {});
  Tensor forward(const Tensor& x, const Tensor& y) override { return cross_entropy(x, y, options); }
  std::string type_name() const override { return "CrossEntropyLoss"; }
  CrossEntropyOptions options;
};
class NLLLoss : public PairLoss {
 public:
  explicit NLLLoss(NLLLossOptions options = {});
  Tensor forward(const Tensor& x, const Tensor& y) override { return nll_loss(x, y, options); }
  std::string type_name() const override { return "NLLLoss"; }
  NLLLossOptions options;
};
class KLDivLoss : public PairLoss {
 public:
  explicit KLDivLoss(Reduction reduction = Reduction::mean, bool log_target = false)
      : reduction(reduction), log_target(log_target) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return kl_div(x, y, reduction, log_target); }
  std::string type_name() const override { return "KLDivLoss"; }
  Reduction reduction;
  bool log_target;
};
class PoissonNLLLoss : public PairLoss {
 public:
  explicit PoissonNLLLoss(PoissonNLLLossOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return poisson_nll_loss(x, y, options); }
  std::string type_name() const override { return "PoissonNLLLoss"; }
  PoissonNLLLossOptions options;
};
class SoftMarginLoss : public PairLoss {
 public:
  explicit SoftMarginLoss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return soft_margin_loss(x, y, reduction); }
  std::string type_name() const override { return "SoftMarginLoss"; }
  Reduction reduction;
};
class HingeEmbeddingLoss : public PairLoss {
 public:
  explicit HingeEmbeddingLoss(double margin = 1.0, Reduction reduction = Reduction::mean)
      : margin(margin), reduction(reduction) {}
  Tensor forward(const Tensor& x, const Tensor& y) override { return hinge_embedding_loss(x, y, margin, reduction); }
  std::string type_name() const override { return "HingeEmbeddingLoss"; }
  double margin;
  Reduction reduction;
};
class MultiMarginLoss : public PairLoss {
 public:
  explicit MultiMarginLoss(MultiMarginLossOptions options = {});
  Tensor forward(const Tensor& x, const Tensor& y) override { return multi_margin_loss(x, y, options); }
  std::string type_name() const override { return "MultiMarginLoss"; }
  MultiMarginLossOptions options;
};
class MarginRankingLoss : public TripleLoss {
 public:
  explicit MarginRankingLoss(double margin = 0.0, Reduction reduction = Reduction::mean)
      : margin(margin), reduction(reduction) {}
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& y) override {
    return margin_ranking_loss(x1, x2, y, margin, reduction);
  }
  std::string type_name() const override { return "MarginRankingLoss"; }
  double margin;
  Reduction reduction;
};
class CosineEmbeddingLoss : public TripleLoss {
 public:
  explicit CosineEmbeddingLoss(double margin = 0.0, Reduction reduction = Reduction::mean)
      : margin(margin), reduction(reduction) {}
  Tensor forward(const Tensor& x1, const Tensor& x2, const Tensor& y) override {
    return cosine_embedding_loss(x1, x2, y, margin, reduction);
  }
  std::string type_name() const override { return "CosineEmbeddingLoss"; }
  double margin;
  Reduction reduction;
};
class TripletMarginLoss : public TripleLoss {
 public:
  explicit TripletMarginLoss(TripletMarginLossOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) override {
    return triplet_margin_loss(anchor, positive, negative, options);
  }
  std::string type_name() const override { return "TripletMarginLoss"; }
  TripletMarginLossOptions options;
};

}  // namespace rumus::nn

RUMUS_API_END
