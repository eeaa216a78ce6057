#pragma once
#include "rumus/nn/module.hpp"
#include "rumus/ops/resampling.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus::nn {

// torch::nn::Upsample: interpolate() with fixed options (no parameters).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options) : options(std::move(options)) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, options); }
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;
  InterpolateOptions options;
};

// torch::nn::PixelShuffle / PixelUnshuffle (no parameters).
class PixelShuffle : public Module {
 public:
  explicit PixelShuffle(std::int64_t upscale_factor) : upscale_factor(upscale_factor) {}
  Tensor forward(const Tensor& x) override { return pixel_shuffle(x, upscale_factor); }
  std::string type_name() const override { return "PixelShuffle"; }
  std::string extra_repr() const override;
  std::int64_t upscale_factor;
};

class PixelUnshuffle : public Module {
 public:
  explicit PixelUnshuffle(std::int64_t downscale_factor) : downscale_factor(downscale_factor) {}
  Tensor forward(const Tensor& x) override { return pixel_unshuffle(x, downscale_factor); }
  std::string type_name() const override { return "PixelUnshuffle"; }
  std::string extra_repr() const override;
  std::int64_t downscale_factor;
};

}  // namespace rumus::nn

RUMUS_API_END
