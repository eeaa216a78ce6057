#pragma once
// The push-constant structs of every shader, from the one list in
// shaders/push_constants.h that the shaders include too.
#include <cstdint>
#include <cstring>

#include "pipelines.hpp"

namespace rumus::vulkan::push {

using uint = std::uint32_t;

#define PUSH_POINTWISE
#define PUSH_REDUCE
#define PUSH_COLUMN_REDUCE
#define PUSH_GEMM
#define PUSH_GEMM_F64
#define PUSH_RANDOM
#define PUSH_OPTIM
#define PUSH_OPTIM_FOREACH
#define PUSH_CONV
#define PUSH_CONV_IGEMM
#define PUSH_CONV_WINOGRAD
#define PUSH_POOL
#define PUSH_SOFTMAX
#define PUSH_LAYER_NORM
#define PUSH_BATCH_NORM
#define PUSH_INDEX
#define PUSH_NLL
#define PUSH_SCAN
#define PUSH_LSTM
#define PUSH_SORT
#define PUSH_ATTENTION
#include "push_constants.h"

static_assert(sizeof(PointwisePush) <= kPushBytes && sizeof(ReducePush) <= kPushBytes && sizeof(ColumnReducePush) <= kPushBytes &&
              sizeof(GemmPush) <= kPushBytes && sizeof(GemmF64Push) <= kPushBytes && sizeof(RandomPush) <= kPushBytes && sizeof(OptimPush) <= kPushBytes &&
              sizeof(ConvPush) <= kPushBytes && sizeof(ConvIgemmPush) <= kPushBytes && sizeof(ConvWinogradPush) <= kPushBytes && sizeof(PoolPush) <= kPushBytes && sizeof(SoftmaxPush) <= kPushBytes && sizeof(LayerNormPush) <= kPushBytes && sizeof(BatchNormPush) <= kPushBytes &&
              sizeof(IndexPush) <= kPushBytes && sizeof(ScanPush) <= kPushBytes && sizeof(LstmPush) <= kPushBytes && sizeof(SortPush) <= kPushBytes && sizeof(AttentionPush) <= kPushBytes);

// The two words of a double, for the f64 kernels' push constants.
inline void split_double(double v, uint& lo, uint& hi) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, 8);
  lo = uint(bits);
  hi = uint(bits >> 32);
}

}  // namespace rumus::vulkan::push
