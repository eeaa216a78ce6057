// ResNet-18 for small images (CIFAR's layout): a 3x3 stem without pooling,
// four stages of two BasicBlocks (widths w, 2w, 4w, 8w; strides 1, 2, 2, 2;
// a 1x1 stride-2 projection where the shape changes), global average pool
// and a linear head. Its state-dict names are torchvision's resnet18's
// ("layer2.0.downsample.0.weight", "fc.bias", ...), so an identical PyTorch
// module loads its safetensors file. examples/resnet and bench_vulkan_resnet use it.
#pragma once
#include <rumus/rumus.hpp>

#include <cstdint>
#include <memory>

namespace example {

inline rumus::nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return rumus::nn::Conv2d(in, out, 3, {.stride = {stride, stride}, .padding = {1, 1}}, /*bias=*/false);
}

struct BasicBlock : rumus::nn::Module {
  rumus::nn::Conv2d conv1, conv2;
  rumus::nn::BatchNorm2d bn1, bn2;
  std::shared_ptr<rumus::nn::Sequential> downsample;  // null where the block keeps its input's shape

  BasicBlock(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1(conv3x3(in, out, stride)), conv2(conv3x3(out, out, 1)), bn1(out), bn2(out) {
    register_modules({{"conv1", conv1}, {"bn1", bn1}, {"conv2", conv2}, {"bn2", bn2}});
    if (stride != 1 || in != out) {
      downsample = std::make_shared<rumus::nn::Sequential>(
          rumus::nn::Conv2d(in, out, 1, {.stride = {stride, stride}}, /*bias=*/false), rumus::nn::BatchNorm2d(out));
      register_module("downsample", downsample);
    }
  }
  rumus::Tensor forward(const rumus::Tensor& x) override {
    rumus::Tensor h = rumus::relu(bn1(conv1(x)));
    h = bn2(conv2(h));
    return rumus::relu(h + (downsample ? downsample->forward(x) : x));
  }
  std::string type_name() const override { return "BasicBlock"; }
};

struct ResNet18 : rumus::nn::Module {
  rumus::nn::Conv2d conv1;
  rumus::nn::BatchNorm2d bn1;
  rumus::nn::Sequential layer1, layer2, layer3, layer4;
  rumus::nn::Linear fc;

  explicit ResNet18(std::int64_t in_channels = 3, std::int64_t classes = 10, std::int64_t width = 64)
      : conv1(conv3x3(in_channels, width, 1)), bn1(width), fc(8 * width, classes) {
    rumus::nn::Sequential* stages[] = {&layer1, &layer2, &layer3, &layer4};
    std::int64_t in = width;
    for (int s = 0; s < 4; ++s) {
      const std::int64_t out = width << s, stride = s == 0 ? 1 : 2;
      stages[s]->push_back(std::make_shared<BasicBlock>(in, out, stride));
      stages[s]->push_back(std::make_shared<BasicBlock>(out, out, 1));
      in = out;
    }
    register_modules({{"conv1", conv1}, {"bn1", bn1}, {"layer1", layer1}, {"layer2", layer2}, {"layer3", layer3},
                      {"layer4", layer4}, {"fc", fc}});
  }
  rumus::Tensor forward(const rumus::Tensor& x) override {
    rumus::Tensor h = rumus::relu(bn1(conv1(x)));
    h = layer4.forward(layer3.forward(layer2.forward(layer1.forward(h))));
    return fc(rumus::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }
  std::string type_name() const override { return "ResNet18"; }
};

}  // namespace example
