#include "op_table.hpp"

#include <random>

namespace rumus::testing {

namespace {
// Constants an op needs besides its differentiable inputs live on their device.
TensorOptions like(const Tensor& t) { return {.dtype = t.dtype(), .device = t.device()}; }
Tensor labels(std::vector<std::int64_t> v, const Tensor& like_t) { return tensor(v).to(like_t.device()); }

// A recurrent module with fixed weights (drawn from seed 77, the default
// generator left as it was), on t's dtype and device: the rows below
// differentiate through its gates in the input and the initial states; its
// weights' gradients are checked against PyTorch (test_torch_reference).
template <class M>
M fixed_recurrent(const nn::RNNOptions& options, const Tensor& t) {
  Generator& g = default_generator();
  const std::uint64_t seed = g.seed(), offset = g.offset();
  manual_seed(77);
  M m(options);
  g.set_state(seed, offset);
  m.to(t.device(), t.dtype());
  return m;
}
}  // namespace

const std::vector<OpCase>& op_table() {
  using V = const std::vector<Tensor>&;
  static const std::vector<OpCase> table = {
      // Arithmetic with broadcasting.
      {"add", {{3, 4}, {3, 4}}, [](V x) { return add(x[0], x[1]); }},
      {"add_broadcast", {{3, 4}, {4}}, [](V x) { return add(x[0], x[1]); }},
      {"add_alpha", {{2, 3}, {2, 1}}, [](V x) { return add(x[0], x[1], -2.5); }},
      {"sub_broadcast", {{2, 1, 4}, {3, 1}}, [](V x) { return sub(x[0], x[1]); }},
      {"mul", {{3, 4}, {3, 4}}, [](V x) { return mul(x[0], x[1]); }},
      {"mul_broadcast", {{4, 1}, {1, 5}}, [](V x) { return mul(x[0], x[1]); }},
      {"mul_self", {{3, 3}}, [](V x) { return mul(x[0], x[0]); }},
      {"div", {{3, 4}, {3, 4}}, [](V x) { return div(x[0], x[1]); }, 0.5, 2.0},
      {"div_broadcast", {{3, 4}, {1, 4}}, [](V x) { return div(x[0], x[1]); }, 0.5, 2.0},
      {"scalar_ops", {{3, 4}}, [](V x) { return (2.0 - x[0]) * 3.0 / 4.0 + 1.5; }},
      {"pow_scalar", {{3, 4}}, [](V x) { return pow(x[0], 2.5); }, 0.5, 2.0},
      {"pow_tensor", {{3, 4}, {3, 4}}, [](V x) { return pow(x[0], x[1]); }, 0.5, 2.0},
      {"maximum", {{3, 4}, {4}}, [](V x) { return maximum(x[0], x[1]); }},
      {"minimum", {{3, 4}, {3, 4}}, [](V x) { return minimum(x[0], x[1]); }},
      // Unary math.
      {"neg", {{3, 4}}, [](V x) { return neg(x[0]); }},
      {"exp", {{3, 4}}, [](V x) { return exp(x[0]); }},
      {"log", {{3, 4}}, [](V x) { return log(x[0]); }, 0.5, 2.0},
      {"sqrt", {{3, 4}}, [](V x) { return sqrt(x[0]); }, 0.5, 2.0},
      {"abs", {{3, 4}}, [](V x) { return abs(x[0]); }},
      {"square", {{3, 4}}, [](V x) { return square(x[0]); }},
      {"clamp", {{4, 5}}, [](V x) { return clamp(x[0], -0.5, 0.4); }},
      {"sin", {{3, 4}}, [](V x) { return sin(x[0]); }},
      {"cos", {{3, 4}}, [](V x) { return cos(x[0]); }},
      {"tan", {{3, 4}}, [](V x) { return tan(x[0]); }},
      {"asin", {{3, 4}}, [](V x) { return asin(x[0]); }, -0.9, 0.9},
      {"acos", {{3, 4}}, [](V x) { return acos(x[0]); }, -0.9, 0.9},
      {"atan", {{3, 4}}, [](V x) { return atan(x[0]); }},
      {"sinh", {{3, 4}}, [](V x) { return sinh(x[0]); }},
      {"cosh", {{3, 4}}, [](V x) { return cosh(x[0]); }},
      {"asinh", {{3, 4}}, [](V x) { return asinh(x[0]); }},
      {"acosh", {{3, 4}}, [](V x) { return acosh(x[0]); }, 1.1, 3.0},
      {"atanh", {{3, 4}}, [](V x) { return atanh(x[0]); }, -0.9, 0.9},
      {"erf", {{3, 4}}, [](V x) { return erf(x[0]); }},
      {"erfc", {{3, 4}}, [](V x) { return erfc(x[0]); }},
      {"erfinv", {{3, 4}}, [](V x) { return erfinv(x[0]); }, -0.9, 0.9},
      {"log1p", {{3, 4}}, [](V x) { return log1p(x[0]); }, -0.5, 2.0},
      {"expm1", {{3, 4}}, [](V x) { return expm1(x[0]); }},
      {"log2", {{3, 4}}, [](V x) { return log2(x[0]); }, 0.5, 2.0},
      {"log10", {{3, 4}}, [](V x) { return log10(x[0]); }, 0.5, 2.0},
      {"exp2", {{3, 4}}, [](V x) { return exp2(x[0]); }},
      {"reciprocal", {{3, 4}}, [](V x) { return reciprocal(x[0]); }, 0.5, 2.0},
      {"rsqrt", {{3, 4}}, [](V x) { return rsqrt(x[0]); }, 0.5, 2.0},
      {"sign", {{3, 4}}, [](V x) { return sign(x[0]); }},
      {"logit", {{3, 4}}, [](V x) { return logit(x[0]); }, 0.1, 0.9},
      {"logit_eps", {{3, 4}}, [](V x) { return logit(x[0], 0.25); }, 0.05, 0.95},
      {"frac", {{3, 4}}, [](V x) { return frac(x[0]); }, -3.0, 3.0},
      {"atan2_broadcast", {{3, 4}, {4}}, [](V x) { return atan2(x[0], x[1]); }},
      {"fmod", {{3, 4}, {3, 4}}, [](V x) { return fmod(x[0] * 4.0 - 4.0, x[1]); }, 0.3, 2.0},
      {"remainder_broadcast", {{3, 4}, {3, 1}}, [](V x) { return remainder(x[0] * 4.0 - 4.0, x[1]); }, 0.3, 2.0},
      {"remainder_negative_divisor", {{3, 4}}, [](V x) { return remainder(x[0] * 3.0, -0.7); }},
      {"lerp_tensor_weight", {{3, 4}, {4}, {3, 1}}, [](V x) { return lerp(x[0], x[1], x[2] + 0.5); }},
      {"lerp_scalar_weight", {{3, 4}, {3, 4}}, [](V x) { return lerp(x[0], x[1], 0.3) + lerp(x[0], x[1], 0.8); }},
      {"clamp_tensor_bounds", {{3, 4}, {4}, {3, 1}},
       [](V x) { return clamp(x[0], x[1] * 0.5 - 0.3, x[2] * 0.5 + 0.3); }},
      {"clamp_tensor_min", {{3, 4}, {3, 4}}, [](V x) { return clamp(x[0], x[1], std::nullopt); }},
      {"hypot", {{3, 4}, {3, 4}}, [](V x) { return hypot(x[0], x[1]); }},
      {"xlogy", {{3, 4}, {4}}, [](V x) { return xlogy(x[0], x[1]); }, 0.5, 2.0},
      {"copysign", {{3, 4}, {4}}, [](V x) { return copysign(x[0], x[1]); }},
      {"trig_composed", {{3, 4}}, [](V x) { return atan(sin(x[0]) * cos(x[0]) + tanh(x[0])); }},
      // Activations.
      {"relu", {{4, 5}}, [](V x) { return relu(x[0]); }},
      {"sigmoid", {{4, 5}}, [](V x) { return sigmoid(x[0]); }},
      {"tanh", {{4, 5}}, [](V x) { return tanh(x[0]); }},
      // Over temporaries nothing else holds: written in place.
      {"relu_over_temporary", {{4, 5}}, [](V x) { return relu(x[0] * 2.0); }},
      {"sigmoid_over_temporary", {{4, 5}}, [](V x) { return sigmoid(x[0] * 3.0); }},
      {"tanh_over_temporary", {{4, 5}}, [](V x) { return tanh(x[0] * 2.0); }},
      {"relu_over_conv2d", {{2, 3, 5, 6}, {4, 3, 3, 2}, {4}}, [](V x) { return relu(conv2d(x[0], x[1], x[2])); }},
      {"relu_over_linear", {{3, 5}, {4, 5}, {4}}, [](V x) { return relu(linear(x[0], x[1], x[2])); }},
      {"gelu", {{4, 5}}, [](V x) { return gelu(x[0] * 2.0); }},
      {"gelu_tanh", {{4, 5}}, [](V x) { return gelu(x[0] * 2.0, "tanh"); }},
      {"leaky_relu", {{4, 5}}, [](V x) { return leaky_relu(x[0], 0.1); }},
      {"silu", {{4, 5}}, [](V x) { return silu(x[0] * 2.0); }},
      {"hardswish", {{4, 5}}, [](V x) { return hardswish(x[0] * 4.0); }},
      // Composed activations.
      {"elu", {{4, 5}}, [](V x) { return elu(x[0] * 2.0, 0.7); }},
      {"selu", {{4, 5}}, [](V x) { return selu(x[0] * 2.0); }},
      {"celu", {{4, 5}}, [](V x) { return celu(x[0] * 2.0, 0.5); }},
      {"softplus", {{4, 5}}, [](V x) { return softplus(x[0] * 3.0, 2.0, 4.0); }},
      {"softsign", {{4, 5}}, [](V x) { return softsign(x[0] * 3.0); }},
      {"mish", {{4, 5}}, [](V x) { return mish(x[0] * 3.0); }},
      {"hardtanh", {{4, 5}}, [](V x) { return hardtanh(x[0] * 2.0, -0.5, 1.0); }},
      {"relu6", {{4, 5}}, [](V x) { return relu6(x[0] * 8.0); }},
      {"hardsigmoid", {{4, 5}}, [](V x) { return hardsigmoid(x[0] * 5.0); }},
      {"prelu_per_channel", {{2, 3, 4}, {3}}, [](V x) { return prelu(x[0], x[1]); }},
      {"prelu_shared", {{4, 5}, {1}}, [](V x) { return prelu(x[0], x[1]); }},
      {"glu", {{3, 6}}, [](V x) { return glu(x[0] * 2.0); }},
      {"glu_dim0", {{4, 3}}, [](V x) { return glu(x[0] * 2.0, 0); }},
      {"logsigmoid", {{4, 5}}, [](V x) { return logsigmoid(x[0] * 4.0); }},
      {"softmin", {{3, 5}}, [](V x) { return softmin(x[0] * 3.0, 1); }},
      {"tanhshrink", {{4, 5}}, [](V x) { return tanhshrink(x[0] * 2.0); }},
      {"threshold", {{4, 5}}, [](V x) { return threshold(x[0], 0.1, 20.0); }},
      {"hardshrink", {{4, 5}}, [](V x) { return hardshrink(x[0], 0.3); }},
      {"softshrink", {{4, 5}}, [](V x) { return softshrink(x[0], 0.3); }},
      // Reductions.
      {"sum_all", {{3, 4}}, [](V x) { return sum(x[0]); }},
      {"sum_dim", {{2, 3, 4}}, [](V x) { return sum(x[0], {1}); }},
      {"sum_dims_keepdim", {{2, 3, 4}}, [](V x) { return sum(x[0], {0, 2}, true); }},
      {"mean_all", {{3, 4}}, [](V x) { return mean(x[0]); }},
      {"mean_dim", {{3, 4}}, [](V x) { return mean(x[0], {-1}, true); }},
      {"max_all", {{3, 4}}, [](V x) { return max(x[0]); }},
      {"max_dim", {{3, 4}}, [](V x) { return std::get<0>(max(x[0], 1)); }},
      {"min_dim_keepdim", {{3, 4}}, [](V x) { return std::get<0>(min(x[0], 0, true)); }},
      {"var_all", {{3, 4}}, [](V x) { return var(x[0]); }},
      {"var_dim_keepdim_correction0", {{3, 4}}, [](V x) { return var(x[0], {-1}, 0, true); }},
      {"std_dims", {{2, 3, 4}}, [](V x) { return rumus::std(x[0], {0, 2}); }},
      {"var_mean", {{3, 4}}, [](V x) { auto [v, m] = var_mean(x[0], {1}, 2); return v + m * 2.0; }},
      {"std_mean_keepdim", {{3, 4}}, [](V x) { auto [s, m] = std_mean(x[0], {0}, 1, true); return s * m; }},
      {"norm_2", {{3, 4}}, [](V x) { return norm(x[0]); }},
      {"norm_1_dim", {{3, 4}}, [](V x) { return norm(x[0], 1, {1}); }},
      {"norm_inf_dim", {{3, 4}}, [](V x) { return norm(x[0], std::numeric_limits<double>::infinity(), {0}); }},
      {"norm_3_keepdim", {{3, 4}}, [](V x) { return norm(x[0], 3, {-1}, true); }},
      {"norm_fro", {{2, 3, 2}}, [](V x) { return norm(x[0], "fro", {0, 2}); }},
      {"logsumexp", {{3, 4}}, [](V x) { return logsumexp(x[0] * 3.0, {1}); }},
      {"logsumexp_dims_keepdim", {{2, 3, 4}}, [](V x) { return logsumexp(x[0], {0, -1}, true); }},
      {"prod_all", {{2, 3}}, [](V x) { return prod(x[0]); }},
      {"prod_dim_odd", {{3, 5}}, [](V x) { return prod(x[0], 1); }},
      {"prod_dim_keepdim", {{4, 3}}, [](V x) { return prod(x[0], 0, true); }},
      {"nansum_dim", {{3, 4}}, [](V x) { return nansum(x[0], {1}); }},
      {"nanmean", {{3, 4}}, [](V x) { return nanmean(x[0]); }},
      // Linear algebra.
      {"matmul_2d", {{3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_dot", {{4}, {4}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_vec_mat", {{4}, {4, 3}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_mat_vec", {{3, 4}, {4}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_batched", {{2, 3, 4}, {2, 4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_batch_2d", {{2, 3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul_broadcast_batch", {{2, 1, 3, 4}, {3, 4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
      {"bmm", {{2, 3, 4}, {2, 4, 2}}, [](V x) { return bmm(x[0], x[1]); }},
      // Losses and selection.
      {"mse_loss", {{4, 3}, {4, 3}}, [](V x) { return mse_loss(x[0], x[1]); }},
      {"mse_loss_sum", {{4, 3}, {4, 3}}, [](V x) { return mse_loss(x[0], x[1], Reduction::sum); }},
      {"where", {{3, 4}, {3, 4}}, [](V x) { return where(gt(x[0], 0.0), x[0], x[1]); }},
      // Views recorded on the tape.
      {"transpose", {{3, 4}}, [](V x) { return x[0].transpose(0, 1) * 1.0; }},
      {"permute", {{2, 3, 4}}, [](V x) { return x[0].permute({2, 0, 1}) * 1.0; }},
      {"slice_step", {{6, 4}}, [](V x) { return x[0].slice(0, 1, 6, 2) * 1.0; }},
      {"select", {{3, 4}}, [](V x) { return x[0].select(1, -1) * 1.0; }},
      {"narrow", {{3, 5}}, [](V x) { return x[0].narrow(1, 1, 3) * 1.0; }},
      {"expand", {{3, 1}}, [](V x) { return x[0].expand({2, 3, 4}) * 1.0; }},
      {"reshape", {{3, 4}}, [](V x) { return x[0].reshape({2, 6}) * 1.0; }},
      {"unsqueeze_squeeze", {{3, 4}}, [](V x) { return x[0].unsqueeze(1).squeeze(1) * 1.0; }},
      {"flatten", {{2, 3, 4}}, [](V x) { return x[0].flatten(1) * 1.0; }},
      {"clone", {{3, 4}}, [](V x) { return x[0].clone(); }},
      // Convolution and linear layers.
      {"conv2d", {{2, 3, 5, 6}, {4, 3, 3, 2}, {4}}, [](V x) { return conv2d(x[0], x[1], x[2]); }},
      {"conv2d_stride_pad_dilation", {{2, 2, 7, 6}, {3, 2, 3, 3}},
       [](V x) { return conv2d(x[0], x[1], {}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}}); }},
      {"conv2d_groups", {{2, 4, 5, 5}, {6, 2, 3, 3}, {6}},
       [](V x) { return conv2d(x[0], x[1], x[2], {.padding = {1, 1}, .groups = 2}); }},
      {"conv2d_depthwise", {{1, 3, 4, 4}, {3, 1, 2, 2}},
       [](V x) { return conv2d(x[0], x[1], {}, {.stride = {2, 2}, .groups = 3}); }},
      {"conv2d_relu", {{2, 3, 5, 6}, {4, 3, 3, 2}, {4}}, [](V x) { return conv2d_relu(x[0], x[1], x[2]); }},
      {"conv2d_relu_stride_pad_groups", {{2, 4, 6, 5}, {6, 2, 3, 3}},
       [](V x) { return conv2d_relu(x[0], x[1], {}, {.stride = {2, 1}, .padding = {1, 1}, .groups = 2}); }},
      {"conv2d_relu_strided_input", {{2, 3, 6, 5}, {4, 3, 2, 2}, {4}},
       [](V x) { return conv2d_relu(x[0].transpose(2, 3), x[1], x[2]); }},
      {"im2col", {{2, 2, 4, 5}}, [](V x) { return im2col(x[0], {2, 3}, {.stride = {1, 2}, .padding = {1, 1}}); }},
      {"col2im", {{2, 8, 8}}, [](V x) { return col2im(x[0], {3, 4}, {2, 2}, {.padding = {0, 1}, .dilation = {1, 2}}); }},
      {"linear", {{4, 5}, {3, 5}, {3}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear_3d_no_bias", {{2, 3, 5}, {4, 5}}, [](V x) { return linear(x[0], x[1]); }},
      {"linear_relu", {{4, 5}, {3, 5}, {3}}, [](V x) { return linear_relu(x[0], x[1], x[2]); }},
      {"linear_relu_3d_strided_no_bias", {{2, 5, 3}, {4, 5}},
       [](V x) { return linear_relu(x[0].transpose(1, 2), x[1]); }},
      {"add_channel_bias", {{2, 3, 2, 2}, {3}}, [](V x) { return add_channel_bias(x[0], x[1]); }},
      // Pooling.
      {"max_pool2d", {{2, 3, 4, 6}}, [](V x) { return max_pool2d(x[0], 2); }},
      {"max_pool2d_overlap_pad", {{1, 2, 5, 5}}, [](V x) {
         return max_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
       }},
      {"max_pool2d_dilation_ceil", {{1, 2, 6, 7}}, [](V x) {
         return max_pool2d(x[0], {.kernel = {2, 3}, .stride = {2, 2}, .dilation = {2, 1}, .ceil_mode = true});
       }},
      {"avg_pool2d", {{2, 2, 4, 4}}, [](V x) { return avg_pool2d(x[0], 2); }},
      {"avg_pool2d_pad", {{1, 2, 5, 5}}, [](V x) {
         return avg_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
       }},
      {"avg_pool2d_pad_exclude_ceil", {{1, 2, 5, 6}}, [](V x) {
         return avg_pool2d(x[0], {.kernel = {2, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false,
                                  .ceil_mode = true});
       }},
      {"adaptive_avg_pool2d", {{2, 2, 5, 7}}, [](V x) { return adaptive_avg_pool2d(x[0], {3, 4}); }},
      {"adaptive_avg_pool2d_3d", {{2, 4, 4}}, [](V x) { return adaptive_avg_pool2d(x[0], {1, 1}); }},
      // Normalisation.
      {"batch_norm2d", {{3, 2, 2, 3}, {2}, {2}}, [](V x) {
         return batch_norm2d(x[0], zeros({2}, like(x[0])), ones({2}, like(x[0])), x[1], x[2],
                             true);
       }},
      {"batch_norm2d_no_affine", {{2, 3, 2, 2}}, [](V x) { return batch_norm2d(x[0], {}, {}, {}, {}, true); }},
      // Training with the weight alone and the bias alone (the fused kernels' other affine cases).
      {"batch_norm2d_weight_only", {{2, 3, 3, 2}, {3}}, [](V x) {
         return batch_norm2d(x[0], zeros({3}, like(x[0])), ones({3}, like(x[0])), x[1], {}, true, 0.3);
       }},
      {"batch_norm2d_bias_only", {{4, 2, 1, 3}, {2}}, [](V x) { return batch_norm2d(x[0], {}, {}, {}, x[1], true); }},
      {"batch_norm2d_eval", {{2, 3, 2, 2}, {3}, {3}}, [](V x) {
         Tensor rm = tensor({0.1, -0.2, 0.3}, like(x[0]));
         Tensor rv = tensor({0.5, 1.5, 2.0}, like(x[0]));
         return batch_norm2d(x[0], rm, rv, x[1], x[2], false);
       }},
      {"layer_norm", {{3, 2, 4}, {2, 4}, {2, 4}}, [](V x) { return layer_norm(x[0], {2, 4}, x[1], x[2]); }},
      {"layer_norm_no_affine", {{4, 5}}, [](V x) { return layer_norm(x[0], {5}); }},
      // Softmax and losses.
      {"softmax_last", {{3, 5}}, [](V x) { return softmax(x[0] * 3.0, -1); }},
      {"softmax_dim0", {{4, 3, 2}}, [](V x) { return softmax(x[0] * 3.0, 0); }},
      {"log_softmax", {{3, 5}}, [](V x) { return log_softmax(x[0] * 3.0, 1); }},
      {"log_softmax_mid", {{2, 4, 3}}, [](V x) { return log_softmax(x[0] * 3.0, 1); }},
      {"cross_entropy", {{4, 5}}, [](V x) {
         return cross_entropy(x[0] * 2.0, labels({1, 0, 4, 2}, x[0]));
       }},
      {"cross_entropy_sum_ignore", {{4, 3}}, [](V x) {
         return cross_entropy(x[0] * 2.0, labels({2, -100, 0, 1}, x[0]), {.reduction = Reduction::sum});
       }},
      {"cross_entropy_none_smoothing", {{4, 3}}, [](V x) {
         return cross_entropy(x[0] * 2.0, labels({2, 1, 0, 1}, x[0]),
                              {.reduction = Reduction::none, .ignore_index = 1, .label_smoothing = 0.2});
       }},
      {"cross_entropy_spatial", {{2, 3, 2, 2}}, [](V x) {
         return cross_entropy(x[0] * 2.0, labels({0, 1, 2, 1, 2, 2, 0, 1}, x[0]).reshape({2, 2, 2}),
                              {.label_smoothing = 0.1});
       }},
      {"nll_loss", {{3, 4}}, [](V x) { return nll_loss(x[0], labels({3, 0, 1}, x[0])); }},
      {"mse_loss_none", {{4, 3}, {4, 3}}, [](V x) { return mse_loss(x[0], x[1], Reduction::none); }},
      {"bce_with_logits", {{3, 4}, {3, 4}}, [](V x) { return binary_cross_entropy_with_logits(x[0] * 3.0, x[1]); }, 0.0, 1.0},
      {"bce_with_logits_sum", {{3, 4}}, [](V x) {
         return binary_cross_entropy_with_logits(x[0] * 3.0, full({3, 4}, 0.3, like(x[0])), Reduction::sum);
       }},
      {"bce_with_logits_weight_pos_weight", {{3, 4}, {3, 4}, {4}}, [](V x) {
         Tensor w = tensor({0.5, 2.0, 1.0}, like(x[0])).reshape({3, 1});
         return binary_cross_entropy_with_logits(x[0] * 3.0, x[1], {.weight = w, .pos_weight = x[2] + 1.5});
       }, 0.0, 1.0},
      {"binary_cross_entropy", {{3, 4}, {3, 4}}, [](V x) { return binary_cross_entropy(x[0], x[1]); }, 0.05, 0.95},
      {"binary_cross_entropy_weight_sum", {{3, 4}}, [](V x) {
         Tensor y = tensor({1.0, 0.0, 0.25, 0.75}, like(x[0]));
         return binary_cross_entropy(x[0], y.expand({3, 4}), tensor({2.0, 0.5, 1.0, 1.5}, like(x[0])), "sum");
       }, 0.05, 0.95},
      {"cross_entropy_weight", {{4, 3}}, [](V x) {
         return cross_entropy(x[0] * 2.0, labels({2, 1, -100, 1}, x[0]),
                              {.label_smoothing = 0.1, .weight = tensor({0.3, 2.0, 1.0}, like(x[0]))});
       }},
      {"nll_loss_weight", {{3, 4}}, [](V x) {
         return nll_loss(x[0], labels({3, 0, 3}, x[0]), {.weight = tensor({1.0, 0.5, 2.0, 3.0}, like(x[0]))});
       }},
      {"l1_loss", {{4, 3}, {4, 3}}, [](V x) { return l1_loss(x[0], x[1]); }},
      {"smooth_l1_loss", {{4, 3}, {4, 3}}, [](V x) { return smooth_l1_loss(x[0] * 2.0, x[1], "sum", 0.5); }},
      {"huber_loss", {{4, 3}, {4, 3}}, [](V x) { return huber_loss(x[0] * 2.0, x[1], "none", 0.6); }},
      {"kl_div_batchmean", {{3, 4}, {3, 4}}, [](V x) { return kl_div(log(x[0]), x[1], "batchmean"); }, 0.1, 1.0},
      {"kl_div_log_target", {{3, 4}, {3, 4}}, [](V x) { return kl_div(x[0], x[1], "sum", true); }},
      {"poisson_nll_loss", {{3, 4}, {3, 4}}, [](V x) { return poisson_nll_loss(x[0], x[1]); }, 0.5, 2.0},
      {"poisson_nll_loss_full", {{3, 4}, {3, 4}}, [](V x) {
         return poisson_nll_loss(x[0], x[1] * 2.0, {.log_input = false, .full = true, .reduction = "none"});
       }, 0.5, 2.0},
      {"margin_ranking_loss", {{5}, {5}}, [](V x) {
         return margin_ranking_loss(x[0], x[1], tensor({1.0, -1.0, 1.0, -1.0, 1.0}, like(x[0])), 0.2);
       }},
      {"cosine_embedding_loss", {{3, 4}, {3, 4}}, [](V x) {
         return cosine_embedding_loss(x[0], x[1], tensor({1.0, -1.0, -1.0}, like(x[0])), -0.5, "none");
       }},
      {"triplet_margin_loss", {{3, 4}, {3, 4}, {3, 4}}, [](V x) { return triplet_margin_loss(x[0], x[1], x[2]); }},
      {"triplet_margin_loss_p3_swap", {{4}, {4}, {4}}, [](V x) {
         return triplet_margin_loss(x[0], x[1], x[2], {.margin = 2.0, .p = 3.0, .swap = true});
       }},
      {"soft_margin_loss", {{3, 4}}, [](V x) {
         return soft_margin_loss(x[0] * 2.0, tensor({1.0, -1.0, -1.0, 1.0}, like(x[0])).expand({3, 4}).contiguous());
       }},
      {"hinge_embedding_loss", {{3, 4}}, [](V x) {
         return hinge_embedding_loss(x[0], tensor({1.0, -1.0, -1.0, 1.0}, like(x[0])).expand({3, 4}).contiguous(), 0.5,
                                     "sum");
       }},
      {"multi_margin_loss", {{3, 4}}, [](V x) { return multi_margin_loss(x[0], labels({3, 0, 1}, x[0])); }},
      {"multi_margin_loss_p2_weight", {{4}}, [](V x) {
         return multi_margin_loss(x[0], labels({2}, x[0]).reshape({}),
                                  {.p = 2, .margin = 0.7, .weight = tensor({1.0, 0.5, 2.0, 3.0}, like(x[0]))});
       }},
      // Embedding, dropout, joins.
      {"embedding", {{5, 3}}, [](V x) {
         return embedding(labels({4, 0, 4, 2, 1, 4}, x[0]).reshape({2, 3}), x[0]);
       }},
      {"embedding_padding_idx", {{5, 3}}, [](V x) {
         // Row 4 gets no gradient by definition; masking its uses makes that the true derivative.
         Tensor keep = tensor({0.0, 1.0, 0.0, 1.0}, like(x[0])).reshape({4, 1});
         return mul(embedding(labels({4, 0, 4, 2}, x[0]).to(DType::i32), x[0], 4), keep);
       }},
      // Rounding: zero gradient almost everywhere (no sample lands on a step).
      {"floor_ceil_trunc_round", {{3, 4}}, [](V x) {
         Tensor y = x[0] * 3.0;
         return add(floor(y), add(mul(ceil(y), 2.0), add(mul(trunc(y), 3.0), mul(round(y), 4.0)))) + x[0];
       }},
      // Per-element gathers and scatter-adds (repeated indices add up).
      {"gather_dim1", {{3, 4}}, [](V x) {
         return gather(x[0], 1, labels({3, 0, 0, 1, 2, 2, 0, 1, 3}, x[0]).reshape({3, 3}));
       }},
      {"gather_dim0_smaller_index", {{4, 3, 2}}, [](V x) {
         return gather(x[0], 0, labels({3, 1, 0, 0, 2, 3, 1, 1}, x[0]).reshape({2, 2, 2}));
       }},
      {"gather_negative_dim", {{2, 3, 4}}, [](V x) {
         return gather(x[0], -2, labels({2, 0, 1, 1, 0, 2, 2, 2}, x[0]).reshape({2, 1, 4}));
       }},
      {"scatter_add_repeated", {{3, 4}, {3, 2}}, [](V x) {
         return scatter_add(x[0], 1, labels({1, 1, 0, 3, 2, 2}, x[0]).reshape({3, 2}), x[1]);
       }},
      {"scatter_add_dim0_larger_src", {{3, 2}, {3, 3}}, [](V x) {
         return scatter_add(x[0], 0, labels({2, 0, 2, 2}, x[0]).reshape({2, 2}), x[1]);
       }},
      // Indexing as PyTorch's: index_select, scatter, index_add, masked_select, take_along_dim.
      {"index_select", {{4, 3}}, [](V x) { return index_select(x[0], 0, labels({3, 0, 3, 1}, x[0])); }},
      {"scatter_src", {{3, 4}, {3, 2}}, [](V x) {
         return scatter(x[0], 1, labels({1, 3, 0, 2, 2, 1}, x[0]).reshape({3, 2}), x[1]);
       }},
      {"scatter_value", {{3, 4}}, [](V x) {
         return scatter(x[0], 0, labels({2, 0, 1, 2}, x[0]).reshape({1, 4}), -0.5);
       }},
      {"index_add_repeated", {{4, 3}, {3, 3}}, [](V x) {
         return index_add(x[0], 0, labels({3, 0, 3}, x[0]), x[1], 2.0);
       }},
      {"index_copy", {{3, 4}, {3, 2}}, [](V x) {
         return index_copy(x[0], 1, labels({3, 0}, x[0]), x[1]);
       }},
      {"index_fill", {{4, 3}}, [](V x) { return index_fill(x[0], 0, labels({2, 0}, x[0]), -1.5); }},
      {"masked_select", {{3, 4}}, [](V x) {
         return masked_select(x[0], labels({1, 0, 0, 1}, x[0]).to(DType::u8));
       }},
      {"take_along_dim", {{3, 4}}, [](V x) {
         return take_along_dim(x[0], labels({3, 0, 1, 1, 2, 0}, x[0]).reshape({3, 2}), 1);
       }},
      {"take_along_dim_flat", {{3, 4}}, [](V x) { return take_along_dim(x[0], labels({11, 0, 5, 5}, x[0])); }},
      // Reordering and repeating.
      {"flip", {{2, 3, 4}}, [](V x) { return flip(x[0], {0, -1}); }},
      {"roll", {{3, 4}}, [](V x) { return roll(x[0], {1, -3}, {0, 1}); }},
      {"roll_flat", {{3, 4}}, [](V x) { return roll(x[0], {5}); }},
      {"repeat", {{2, 3}}, [](V x) { return repeat(x[0], {2, 1, 2}); }},
      {"tile", {{2, 3}}, [](V x) { return tile(x[0], {2}); }},
      {"repeat_interleave", {{2, 3}}, [](V x) { return repeat_interleave(x[0], 2, 1); }},
      {"repeat_interleave_flat", {{2, 3}}, [](V x) { return repeat_interleave(x[0], 2); }},
      {"repeat_interleave_tensor", {{3, 2}}, [](V x) { return repeat_interleave(x[0], labels({1, 0, 2}, x[0]), 0); }},
      {"movedim", {{2, 3, 4}}, [](V x) { return movedim(x[0], {0, 1}, {2, 0}) * 1.0; }},
      {"diagonal", {{3, 4}}, [](V x) { return diagonal(x[0], 1) * 1.0; }},
      {"diagonal_3d", {{2, 3, 4}}, [](V x) { return diagonal(x[0], -1, 2, 0) * 1.0; }},
      {"tril", {{2, 3, 4}}, [](V x) { return tril(x[0], -1); }},
      {"triu", {{3, 4}}, [](V x) { return triu(x[0], 1); }},
      {"as_strided", {{3, 4}}, [](V x) { return as_strided(x[0].contiguous(), {2, 3}, {1, 3}, 1) * 1.0; }},
      // Scans and sorting.
      {"cumsum", {{3, 4}}, [](V x) { return cumsum(x[0], 1); }},
      {"cumsum_dim0", {{3, 2, 2}}, [](V x) { return cumsum(x[0], 0); }},
      {"cumprod", {{3, 4}}, [](V x) { return cumprod(x[0], -1); }, 0.5, 2.0},
      {"cumprod_with_zeros", {{3, 5}}, [](V x) {
         Tensor holes = tensor({1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0}, like(x[0]));
         return cumprod(x[0] * holes.reshape({3, 5}), 1);
       }, 0.5, 2.0},
      {"sort", {{3, 5}}, [](V x) { return std::get<0>(sort(x[0], 1)); }},
      {"sort_descending_dim0", {{4, 3}}, [](V x) { return std::get<0>(sort(x[0], 0, true)); }},
      {"topk", {{3, 6}}, [](V x) { return std::get<0>(topk(x[0], 3)); }},
      {"topk_smallest", {{5, 2}}, [](V x) { return std::get<0>(topk(x[0], 2, 0, false)); }},
      {"kthvalue", {{3, 5}}, [](V x) { return std::get<0>(kthvalue(x[0], 2, 1, true)); }},
      {"median", {{4, 3}}, [](V x) { return std::get<0>(median(x[0], 0)) + median(x[0]); }},
      {"cummax", {{3, 5}}, [](V x) { return std::get<0>(cummax(x[0], 1)); }},
      {"cummin_dim0", {{4, 3}}, [](V x) { return std::get<0>(cummin(x[0], 0)); }},
      {"dropout", {{4, 5}}, [](V x) {
         Generator gen(7);  // same mask on every call of this function
         return dropout(x[0], 0.4, true, &gen);
       }},
      {"cat", {{2, 3}, {4, 3}}, [](V x) { return cat({x[0], x[1]}, 0); }},
      {"cat_last", {{2, 3}, {2, 1}, {2, 2}}, [](V x) { return cat({x[0], x[1], x[2]}, -1); }},
      {"stack", {{2, 3}, {2, 3}}, [](V x) { return stack({x[0], x[1]}, 1); }},
      // Fused attention: tile-crossing lengths, masks, causal, dropout (same mask every call).
      {"sdpa", {{2, 2, 5, 3}, {2, 2, 7, 3}, {2, 2, 7, 4}}, [](V x) {
         return scaled_dot_product_attention(x[0] * 2.0, x[1], x[2]);
       }},
      {"sdpa_causal_3d", {{2, 6, 4}, {2, 6, 4}, {2, 6, 3}}, [](V x) {
         return scaled_dot_product_attention(x[0] * 2.0, x[1], x[2], {}, 0.0, true);
       }},
      {"sdpa_bool_mask_scale", {{2, 1, 3, 2}, {2, 1, 4, 2}, {2, 1, 4, 2}}, [](V x) {
         Tensor keep = labels({1, 1, 1, 0, 1, 0, 1, 1}, x[0]).to(DType::u8).reshape({2, 1, 1, 4});
         return scaled_dot_product_attention(x[0], x[1], x[2], keep, 0.0, false, 1.5);
       }},
      {"sdpa_additive_mask", {{1, 2, 3, 2}, {1, 2, 4, 2}, {1, 2, 4, 3}}, [](V x) {
         Tensor bias = tensor({0.5, -1.0, 0.0, 2.0, -0.3, 0.1, 1.0, -2.0, 0.0, 0.7, -0.5, 0.2}, like(x[0]));
         return scaled_dot_product_attention(x[0] * 2.0, x[1], x[2], bias.reshape({3, 4}));
       }},
      {"sdpa_mask_gradient", {{1, 2, 3, 2}, {1, 2, 4, 2}, {1, 2, 4, 3}, {2, 3, 4}}, [](V x) {
         return scaled_dot_product_attention(x[0] * 2.0, x[1], x[2], x[3]);  // the mask is differentiable
       }},
      {"sdpa_dropout", {{1, 2, 4, 3}, {1, 2, 5, 3}, {1, 2, 5, 2}}, [](V x) {
         Generator gen(11);
         return scaled_dot_product_attention(x[0] * 2.0, x[1], x[2], {}, 0.3, false, std::nullopt, &gen);
       }},
      // Heads read where they lie: views of [B, L, H, D], one q/k/v layout copied, one packed projection.
      {"sdpa_heads_in_place", {{2, 5, 2, 4}, {2, 7, 2, 4}, {2, 7, 2, 4}}, [](V x) {
         return scaled_dot_product_attention((x[0] * 2.0).transpose(1, 2), x[1].transpose(1, 2), x[2].transpose(1, 2))
             .transpose(1, 2);
       }},
      {"sdpa_mixed_layouts", {{2, 2, 5, 4}, {2, 6, 2, 4}, {2, 2, 6, 4}}, [](V x) {
         return scaled_dot_product_attention(x[0] * 2.0, x[1].transpose(1, 2), x[2], {}, 0.0, true);
       }},
      {"sdpa_packed_causal", {{2, 6, 12}}, [](V x) {
         return packed_self_attention(x[0] * 2.0, 2, {}, 0.0, true);
       }},
      {"sdpa_packed_mask_dropout", {{2, 5, 24}}, [](V x) {
         Tensor keep = labels({1, 1, 0, 1, 1, 1, 0, 1, 1, 1}, x[0]).to(DType::u8).reshape({2, 1, 1, 5});
         Generator gen(5);
         return packed_self_attention(x[0] * 2.0, 4, keep, 0.3, false, std::nullopt, &gen);
       }},
      // PyTorch-style API: number-first arithmetic, scalar where/masked_fill,
      // values+indices reductions, split/chunk/unbind views, method forms.
      {"sub_div_scalar_left", {{3, 4}}, [](V x) { return (2.0 - x[0]) * div(3.0, x[0]) + 1.5 / x[0]; }, 0.5, 2.0},
      {"where_scalar", {{3, 4}, {3, 4}}, [](V x) {
         // Every input reaches the output (the condition alone carries no gradient).
         return where(gt(x[1], 0.0), x[0], 0.5) + where(le(x[1], 0.2), -1.5, x[0] * 2.0) + x[1];
       }},
      {"masked_fill", {{3, 4}, {4}}, [](V x) {
         return masked_fill(x[0], lt(x[1], 0.0), 0.25).masked_fill(ge(x[0], 0.9), -2.0) * x[1];
       }},
      {"max_dim_indices", {{3, 5}}, [](V x) {
         auto [values, indices] = max(x[0], 1, true);
         return values * indices.to(values.dtype());
       }},
      {"min_dim_method", {{4, 3}}, [](V x) { return std::get<0>(x[0].min(0)); }},
      {"amax_amin", {{2, 3, 4}}, [](V x) { return amax(x[0], {0, 2}) + amin(x[0], {0, 2}, true).squeeze(); }},
      {"split", {{5, 4}}, [](V x) {
         auto p = split(x[0], 2, 0);
         return cat({p[2] * 2.0, p[0], p[1]}, 0);
       }},
      {"chunk", {{3, 7}}, [](V x) {
         auto c = x[0].chunk(3, -1);
         return cat({c[2] * 3.0, c[0], c[1]}, 1);
       }},
      {"unbind", {{3, 4}}, [](V x) {
         auto u = unbind(x[0], 1);
         return u[0] * u[3] + u[1] - u[2];
       }},
      {"conv1d", {{2, 4, 9}, {6, 2, 3}, {6}}, [](V x) {
         return conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .dilation = 2, .groups = 2});
       }},
      {"conv1d_unbatched_no_bias", {{3, 7}, {2, 3, 2}}, [](V x) { return conv1d(x[0], x[1]); }},
      // 1-D pooling and normalisation.
      {"max_pool1d", {{2, 3, 9}}, [](V x) {
         return max_pool1d(x[0], {.kernel = 3, .stride = 2, .padding = 1, .dilation = 2, .ceil_mode = true});
       }},
      {"avg_pool1d_exclude_pad", {{3, 8}}, [](V x) {
         return avg_pool1d(x[0], {.kernel = 3, .stride = 2, .padding = 1, .count_include_pad = false});
       }},
      {"adaptive_avg_pool1d", {{2, 2, 7}}, [](V x) { return adaptive_avg_pool1d(x[0], 3); }},
      {"batch_norm1d", {{4, 3, 5}, {3}, {3}}, [](V x) {
         return batch_norm1d(x[0], zeros({3}, like(x[0])), ones({3}, like(x[0])), x[1], x[2], true);
       }},
      {"batch_norm1d_2d_input", {{5, 2}}, [](V x) { return batch_norm1d(x[0], {}, {}, {}, {}, true); }},
      {"group_norm", {{2, 6, 3, 2}, {6}, {6}}, [](V x) { return group_norm(x[0], 3, x[1], x[2]); }},
      // Transposed convolutions (matmul + col2im) and padding.
      {"conv_transpose2d", {{2, 4, 3, 3}, {4, 3, 3, 2}, {6}}, [](V x) {
         return conv_transpose2d(x[0], x[1], x[2],
                                 {.stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}, .groups = 2,
                                  .dilation = {1, 2}});
       }},
      {"conv_transpose2d_unbatched_output_padding_dilated", {{2, 3, 4}, {2, 3, 2, 2}}, [](V x) {
         return conv_transpose2d(x[0], x[1], {}, {.padding = {1, 0}, .output_padding = 1, .dilation = 2});
       }},
      {"conv_transpose1d", {{2, 4, 5}, {4, 1, 3}, {2}}, [](V x) {
         return conv_transpose1d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
       }},
      {"pad_constant", {{2, 3, 4}}, [](V x) { return pad(x[0], {1, 2, -1, 1}, "constant", 0.5); }},
      {"pad_reflect", {{2, 3, 4}}, [](V x) { return pad(x[0], {3, 2, 2, 1}, "reflect"); }},
      {"pad_replicate", {{1, 2, 3, 3}}, [](V x) { return pad(x[0], {2, 1, 0, 3}, "replicate"); }},
      {"pad_circular", {{2, 2, 4}}, [](V x) { return pad(x[0], {4, 1}, "circular"); }},
      // Convolution padding modes and padding "same" (asymmetric where the total is odd) / "valid".
      {"conv2d_same_reflect", {{2, 2, 4, 5}, {3, 2, 2, 3}, {3}}, [](V x) {
         return conv2d(x[0], x[1], x[2], {.dilation = {1, 2}, .padding_str = "same", .padding_mode = "reflect"});
       }},
      {"conv2d_circular_strided", {{1, 2, 4, 5}, {2, 2, 3, 2}}, [](V x) {
         return conv2d(x[0], x[1], {}, {.stride = 2, .padding = {1, 2}, .padding_mode = "circular"});
       }},
      {"conv1d_same_replicate", {{2, 3, 6}, {4, 3, 4}, {4}}, [](V x) {
         return conv1d(x[0], x[1], x[2], {.padding_str = "same", .padding_mode = "replicate"});
       }},
      {"conv1d_same_zeros_even_kernel", {{2, 2, 5}, {2, 2, 2}}, [](V x) {
         return conv1d(x[0], x[1], {}, {.padding_str = "same"}) + conv1d(x[0], x[1], {}, {.padding_str = "valid"}).sum();
       }},
      {"instance_norm", {{2, 3, 4}, {3}, {3}}, [](V x) { return instance_norm(x[0], {}, {}, x[1], x[2]); }},
      {"instance_norm_running_stats", {{2, 2, 2, 3}}, [](V x) {
         // Training normalises by the batch's statistics and updates the running
         // ones off the tape; eval normalises by running statistics given here
         // (two statements: the order of the operands of + is unspecified, and
         // statistics updated from x would make the function's value depend on
         // x off the tape).
         Tensor m = zeros({2}, like(x[0])), v = ones({2}, like(x[0]));
         Tensor trained = instance_norm(x[0], m, v, {}, {}, true);
         Tensor fixed_mean = full({2}, 0.25, like(x[0])), fixed_var = full({2}, 1.5, like(x[0]));
         return trained + instance_norm(x[0] * 2.0, fixed_mean, fixed_var, {}, {}, false);
       }},
      // Resampling.
      {"interpolate_nearest", {{2, 2, 3, 4}}, [](V x) {
         return interpolate(x[0], {.scale_factor = {2.0, 1.5}});
       }},
      {"interpolate_nearest_1d_size", {{2, 2, 5}}, [](V x) { return interpolate(x[0], {.size = {7}}); }},
      {"interpolate_bilinear", {{1, 2, 3, 4}}, [](V x) {
         return interpolate(x[0], {.size = {5, 7}, .mode = "bilinear"});
       }},
      {"interpolate_bilinear_align_corners", {{1, 2, 4, 3}}, [](V x) {
         return interpolate(x[0], {.scale_factor = {1.5}, .mode = "bilinear", .align_corners = true});
       }},
      {"interpolate_linear_scale", {{2, 3, 5}}, [](V x) {
         return interpolate(x[0], {.scale_factor = {1.7}, .mode = "linear"});
       }},
      {"pixel_shuffle", {{2, 8, 2, 3}}, [](V x) { return pixel_shuffle(x[0], 2); }},
      {"pixel_unshuffle", {{1, 2, 4, 6}}, [](V x) { return pixel_unshuffle(x[0], 2); }},
      {"dropout2d", {{3, 4, 2, 2}}, [](V x) {
         Generator gen(5);
         return dropout2d(x[0], 0.4, true, &gen);
       }},
      {"dropout1d_unbatched", {{4, 3}}, [](V x) {
         Generator gen(6);
         return dropout1d(x[0], 0.5, true, &gen);
       }},
      {"adaptive_max_pool2d", {{2, 2, 5, 7}}, [](V x) { return adaptive_max_pool2d(x[0], {3, 4}); }},
      {"adaptive_max_pool1d_unbatched", {{3, 7}}, [](V x) { return adaptive_max_pool1d(x[0], 3); }},
      {"max_pool2d_with_indices", {{2, 2, 5, 6}}, [](V x) {
         return std::get<0>(max_pool2d_with_indices(x[0], {.kernel = 3, .stride = 2, .padding = 1, .ceil_mode = true}));
       }},
      {"max_unpool2d", {{1, 2, 4, 6}}, [](V x) {
         auto [v, i] = max_pool2d_with_indices(x[0], {.kernel = 2});
         return max_unpool2d(v * 2.0, i, {.kernel = 2});
       }},
      // Recurrent layers, through their gates in the input and the initial states.
      {"lstm_bidirectional_2_layers", {{2, 3, 3}, {4, 2, 3}, {4, 2, 3}}, [](V x) {
         auto m = fixed_recurrent<nn::LSTM>(
             {.input_size = 3, .hidden_size = 3, .num_layers = 2, .batch_first = true, .bidirectional = true}, x[0]);
         auto [out, hc] = m.forward(x[0], {x[1], x[2]});
         return cat({out.flatten(), std::get<0>(hc).flatten(), std::get<1>(hc).flatten()}, 0);
       }},
      {"lstm_proj", {{3, 2, 3}}, [](V x) {
         auto m = fixed_recurrent<nn::LSTM>({.input_size = 3, .hidden_size = 4, .proj_size = 2}, x[0]);
         auto [out, hc] = m.forward(x[0], {});
         return cat({out.flatten(), std::get<0>(hc).flatten(), std::get<1>(hc).flatten()}, 0);
       }},
      // torch::lstm itself, every weight an input: batch-first, two layers, no bias.
      {"lstm_functional", {{2, 2, 2}, {2, 2, 2}, {2, 2, 2}, {8, 2}, {8, 2}, {8, 2}, {8, 2}}, [](V x) {
         auto [out, h, c] = lstm(x[0], {x[1], x[2]}, {x[3], x[4], x[5], x[6]}, false, 2, 0, false, false, true);
         return cat({out.flatten(), h.flatten(), c.flatten()}, 0);
       }},
      // The fused LSTM step (one kernel each way), alone and as libtorch's lstm_cell.
      {"lstm_cell_gates", {{3, 8}, {3, 8}, {3, 2}}, [](V x) {
         auto [h, c] = lstm_cell_gates(x[0] * 2.0, x[1], x[2]);
         return cat({h.flatten(), c.flatten()}, 0);
       }},
      {"lstm_cell", {{2, 3}, {2, 4}, {2, 4}, {16, 3}, {16, 4}, {16}}, [](V x) {
         auto [h, c] = lstm_cell(x[0], {x[1], x[2]}, x[3], x[4], x[5]);
         return cat({h.flatten(), (c * 0.5).flatten()}, 0);
       }},
      {"gru", {{3, 2, 3}, {1, 2, 4}}, [](V x) {
         auto m = fixed_recurrent<nn::GRU>({.input_size = 3, .hidden_size = 4}, x[0]);
         auto [out, h] = m.forward(x[0], x[1]);
         return cat({out.flatten(), h.flatten()}, 0);
       }},
      {"rnn_tanh_unbatched", {{4, 3}, {1, 3}}, [](V x) {
         auto m = fixed_recurrent<nn::RNN>({.input_size = 3, .hidden_size = 3}, x[0]);
         auto [out, h] = m.forward(x[0], x[1]);
         return cat({out.flatten(), h.flatten()}, 0);
       }},
      {"method_forms", {{3, 4}, {4, 2}}, [](V x) {
         Tensor h = x[0].exp().matmul(x[1]).relu() + x[0].abs().sqrt().sum({1}, true) + x[0].pow(2.0).mean();
         return h.log_softmax(1) + h.softmax(0) * x[0].square().sum() + h.tanh() + h.sigmoid().neg();
       }},
  };
  return table;
}

const char* layouting_name(Layouting l) {
  switch (l) {
    case Layouting::contiguous: return "contiguous";
    case Layouting::transposed: return "transposed";
    case Layouting::sliced: return "sliced";
    case Layouting::broadcast: return "broadcast";
  }
  return "?";
}

std::vector<double> sample_values(const Shape& shape, double low, double high, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(low, high);
  std::vector<double> v(std::size_t(numel_of(shape)));
  for (auto& x : v) x = dist(rng);
  return v;
}

Input make_input(const std::vector<double>& values, const Shape& shape, Layouting how, DType dtype, Device device) {
  auto host = [&](const std::vector<double>& v, const Shape& s) { return tensor(v, s).to(dtype).to(device); };
  const auto nd = std::int64_t(shape.size());
  if (how == Layouting::transposed && nd >= 2) {
    // Store with the last two dims swapped, then view them back.
    Shape ts = shape;
    std::swap(ts[nd - 1], ts[nd - 2]);
    Tensor logical = tensor(values, shape);
    std::vector<double> swapped = logical.transpose(-1, -2).contiguous().to_vector<double>();
    Tensor base = host(swapped, ts).requires_grad_();
    return {base, base.transpose(-1, -2)};
  }
  if (how == Layouting::sliced && nd >= 1) {
    // Every other element of a buffer twice as long in the last dim.
    Shape ws = shape;
    ws[nd - 1] *= 2;
    std::vector<double> wide(std::size_t(numel_of(ws)), 1e3);
    const auto inner = shape[nd - 1];
    for (std::size_t i = 0; i < values.size(); ++i) wide[(i / inner) * 2 * inner + (i % inner) * 2 + 1] = values[i];
    Tensor base = host(wide, ws).requires_grad_();
    return {base, base.slice(-1, 1, ws[nd - 1], 2)};
  }
  if (how == Layouting::broadcast && nd >= 1) {
    // Leading dim expanded from 1: only shapes whose rows repeat qualify, so
    // the caller's values are replaced by the first row repeated.
    Shape one = shape;
    one[0] = 1;
    std::vector<double> row(values.begin(), values.begin() + numel_of(one));
    Tensor base = host(row, one).requires_grad_();
    return {base, base.expand(shape)};
  }
  Tensor base = host(values, shape).requires_grad_();
  return {base, base};
}

}  // namespace rumus::testing
