#pragma once
// The one list of every code shared by C++ and the GLSL kernels. The C++
// enums below are built from these lists, and cmake/RumusShaderCodes.cmake
// turns the same lists into the shaders' rumus_codes.glsl (UNARY_NEG = 0u,
// ...), so a code added anywhere in a list renumbers both sides together.
// Keep one X(name) per entry and nothing else inside a list.

// UnaryOp: out = f(in). p0/p1 are the op's scalars.
#define RUMUS_UNARY_OPS(X) \
  X(neg)                   \
  X(exp)                   \
  X(log)                   \
  X(sqrt)                  \
  X(abs)                   \
  X(relu)                  \
  X(sigmoid)               \
  X(tanh)                  \
  X(gelu)                  \
  X(gelu_tanh)             \
  X(silu)                  \
  X(hardswish)             \
  X(leaky_relu)            \
  X(pow_scalar)            \
  X(clamp)                 \
  X(sign)                  \
  X(square)                \
  X(reciprocal)            \
  X(rsqrt)                 \
  X(add_scalar)            \
  X(mul_scalar)            \
  X(floor)                 \
  X(ceil)                  \
  X(trunc)                 \
  X(round)                 \
  X(sin)                   \
  X(cos)                   \
  X(tan)                   \
  X(asin)                  \
  X(acos)                  \
  X(atan)                  \
  X(sinh)                  \
  X(cosh)                  \
  X(asinh)                 \
  X(acosh)                 \
  X(atanh)                 \
  X(erf)                   \
  X(erfc)                  \
  X(erfinv)                \
  X(log1p)                 \
  X(expm1)                 \
  X(log2)                  \
  X(log10)                 \
  X(exp2)

// BinaryOp: out = f(a, b). Comparisons write 1 or 0 in the output dtype.
// The *_backward ops take a = upstream gradient, b = saved input x or output y.
#define RUMUS_BINARY_OPS(X) \
  X(add)                    \
  X(sub)                    \
  X(mul)                    \
  X(div)                    \
  X(pow)                    \
  X(maximum)                \
  X(minimum)                \
  X(eq)                     \
  X(ne)                     \
  X(lt)                     \
  X(le)                     \
  X(gt)                     \
  X(ge)                     \
  X(relu_backward)          \
  X(sigmoid_backward)       \
  X(tanh_backward)          \
  X(gelu_backward)          \
  X(gelu_tanh_backward)     \
  X(silu_backward)          \
  X(hardswish_backward)     \
  X(leaky_relu_backward)    \
  X(clamp_backward)         \
  X(abs_backward)

// ReduceOp: arg* write i64 indices.
#define RUMUS_REDUCE_OPS(X) \
  X(sum)                    \
  X(mean)                   \
  X(max)                    \
  X(min)                    \
  X(argmax)                 \
  X(argmin)

// RandomKind: uniform [a, b), normal (mean a, std b), bernoulli (b with
// probability a, else 0), randint (integers in [a, b)). Element i draws
// Philox counter offset + i, except bernoulli: word i % 4 of counter
// offset + i / 4 (four elements per draw, for dropout's masks).
#define RUMUS_RANDOM_KINDS(X) \
  X(uniform)                  \
  X(normal)                   \
  X(bernoulli)                \
  X(randint)

// PoolKind: max (indices receive h * W + w of the argmax within its plane),
// avg (fixed windows), adaptive_avg (window [floor(o*H/OH), ceil((o+1)*H/OH))).
#define RUMUS_POOL_KINDS(X) \
  X(max)                    \
  X(avg)                    \
  X(adaptive_avg)

// PointwiseKind: what one elementwise dispatch does (elementwise.comp).
#define RUMUS_POINTWISE_KINDS(X) \
  X(unary)                       \
  X(binary)                      \
  X(fill)                        \
  X(fill64)                      \
  X(cast)                        \
  X(raw_copy)                    \
  X(where)

// OptimizerKind: the fused update of optim.comp.
#define RUMUS_OPTIMIZER_KINDS(X) \
  X(sgd)                         \
  X(adam)                        \
  X(unscale)                     \
  X(update_scale)
