#pragma once
// The push-constant structs of every shader, from the one list in
// shaders/push_constants.h that the shaders include too.
#include <cstdint>

#include "pipelines.hpp"

namespace rumus::vulkan::push {

using uint = std::uint32_t;

#define PUSH_POINTWISE
#define PUSH_REDUCE
#define PUSH_GEMM
#define PUSH_RANDOM
#define PUSH_OPTIM
#define PUSH_CONV
#define PUSH_CONV_IGEMM
#define PUSH_POOL
#define PUSH_SOFTMAX
#define PUSH_INDEX
#define PUSH_ATTENTION
#include "push_constants.h"

static_assert(sizeof(PointwisePush) <= kPushBytes && sizeof(ReducePush) <= kPushBytes &&
              sizeof(GemmPush) <= kPushBytes && sizeof(RandomPush) <= kPushBytes && sizeof(OptimPush) <= kPushBytes &&
              sizeof(ConvPush) <= kPushBytes && sizeof(ConvIgemmPush) <= kPushBytes && sizeof(PoolPush) <= kPushBytes && sizeof(SoftmaxPush) <= kPushBytes &&
              sizeof(IndexPush) <= kPushBytes && sizeof(AttentionPush) <= kPushBytes);

}  // namespace rumus::vulkan::push
