#include "rumus/nn/sequential.hpp"

namespace rumus::nn {

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  layers_.push_back(module);
  register_module(std::to_string(layers_.size() - 1), std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  // Each output is held only here, so a layer may write over it; the
  // layer's forward hooks run around it.
  for (auto& layer : layers_) h = layer->call_owned(std::move(h));
  return h;
}

}  // namespace rumus::nn
