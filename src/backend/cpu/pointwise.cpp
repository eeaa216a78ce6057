// CPU pointwise kernels: unary math, binary math/comparisons, activation gradients.
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

#include "../pointwise.hpp"
#include "cpu_backend.hpp"
#include "cpu_loops.hpp"
#include "isa.hpp"
#include "vector_math.hpp"

namespace rumus::cpu {

namespace {

template <class T, class F>
void map1(TensorArg out, TensorArg in, F f) {
  T* o = data_of<T>(out);
  const T* x = data_of<T>(in);
  for_each_run(make_iter<2>(out.layout->shape, {out.layout, in.layout}), [&](auto off, std::int64_t n, auto st) {
    T* po = o + off[0];
    const T* px = x + off[1];
    if (st[0] == 1 && st[1] == 1) {
      with_isa([&]() RUMUS_INLINE {
        for (std::int64_t i = 0; i < n; ++i) po[i] = store<T>(f(load(px[i])));
      });
    } else {
      for (std::int64_t i = 0; i < n; ++i) po[i * st[0]] = store<T>(f(load(px[i * st[1]])));
    }
  });
}

template <class O, class T, class F>
void map2(TensorArg out, TensorArg a, TensorArg b, F f) {
  O* o = data_of<O>(out);
  const T* pa = data_of<T>(a);
  const T* pb = data_of<T>(b);
  for_each_run(make_iter<3>(out.layout->shape, {out.layout, a.layout, b.layout}),
               [&](auto off, std::int64_t n, auto st) {
                 O* po = o + off[0];
                 const T* xa = pa + off[1];
                 const T* xb = pb + off[2];
                 if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
                   with_isa([&]() RUMUS_INLINE {
                     for (std::int64_t i = 0; i < n; ++i) po[i] = store<O>(f(load(xa[i]), load(xb[i])));
                   });
                 } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
                   const auto vb = load(xb[0]);
                   with_isa([&]() RUMUS_INLINE {
                     for (std::int64_t i = 0; i < n; ++i) po[i] = store<O>(f(load(xa[i]), vb));
                   });
                 } else {
                   for (std::int64_t i = 0; i < n; ++i)
                     po[i * st[0]] = store<O>(f(load(xa[i * st[1]]), load(xb[i * st[2]])));
                 }
               });
}

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

template <class A>
A sigmoid_of(A x) {
  if (x >= A(0)) return A(1) / (A(1) + std::exp(-x));
  A e = std::exp(x);
  return e / (A(1) + e);
}

// erfinv: Giles' single-precision approximation ("Approximating the erfinv
// function", 2010), then two Newton steps on erf(r) = y in double, which take
// its ~1e-7 error to the last bits of a double. The Vulkan f64 kernel runs the
// same steps (shaders/math_special.glsl).
double erfinv_of(double y) {
  if (std::isnan(y) || y < -1.0 || y > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1.0 || y == -1.0) return std::copysign(std::numeric_limits<double>::infinity(), y);
  double w = -std::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      p = c + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = c + p * w;
  }
  double r = p * y;
  for (int i = 0; i < 2; ++i) r -= (std::erf(r) - y) / (1.12837916709551257390 * std::exp(-r * r));  // 2/sqrt(pi)
  return r;
}

}  // namespace

void unary(Backend& be, UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) {
  RUMUS_DISPATCH_FLOAT(in.dtype, "unary", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const A s0 = A(p0), s1 = A(p1);
    switch (op) {
      case UnaryOp::neg: map1<T>(out, in, [](A x) { return -x; }); break;
      case UnaryOp::exp: map1<T>(out, in, [](A x) { return std::exp(x); }); break;
      case UnaryOp::log: map1<T>(out, in, [](A x) { return std::log(x); }); break;
      case UnaryOp::sqrt: map1<T>(out, in, [](A x) { return std::sqrt(x); }); break;
      case UnaryOp::abs: map1<T>(out, in, [](A x) { return std::abs(x); }); break;
      case UnaryOp::relu: map1<T>(out, in, [](A x) { return x > A(0) ? x : A(0); }); break;
      case UnaryOp::sigmoid: map1<T>(out, in, [](A x) { return sigmoid_of(x); }); break;
      case UnaryOp::tanh: map1<T>(out, in, [](A x) { return std::tanh(x); }); break;
      case UnaryOp::gelu:
        map1<T>(out, in, [](A x) { return A(0.5) * x * (A(1) + std::erf(x * A(kSqrt1_2))); });
        break;
      case UnaryOp::gelu_tanh:
        map1<T>(out, in, [](A x) {
          return A(0.5) * x * (A(1) + std::tanh(A(kSqrt2OverPi) * (x + A(0.044715) * x * x * x)));
        });
        break;
      case UnaryOp::silu: map1<T>(out, in, [](A x) { return x * sigmoid_of(x); }); break;
      case UnaryOp::hardswish:  // x * relu6(x + 3) / 6
        map1<T>(out, in, [](A x) { return x <= A(-3) ? A(0) : x >= A(3) ? x : x * (x + A(3)) / A(6); });
        break;
      case UnaryOp::leaky_relu: map1<T>(out, in, [s0](A x) { return x > A(0) ? x : x * s0; }); break;
      case UnaryOp::pow_scalar: map1<T>(out, in, [s0](A x) { return std::pow(x, s0); }); break;
      case UnaryOp::clamp:
        map1<T>(out, in, [s0, s1](A x) {
          if (!std::isnan(s0) && x < s0) x = s0;
          if (!std::isnan(s1) && x > s1) x = s1;
          return x;
        });
        break;
      case UnaryOp::sign: map1<T>(out, in, [](A x) { return A((x > A(0)) - (x < A(0))); }); break;
      case UnaryOp::square: map1<T>(out, in, [](A x) { return x * x; }); break;
      case UnaryOp::reciprocal: map1<T>(out, in, [](A x) { return A(1) / x; }); break;
      case UnaryOp::rsqrt: map1<T>(out, in, [](A x) { return A(1) / std::sqrt(x); }); break;
      case UnaryOp::add_scalar: map1<T>(out, in, [s0](A x) { return x + s0; }); break;
      case UnaryOp::mul_scalar: map1<T>(out, in, [s0](A x) { return x * s0; }); break;
      case UnaryOp::floor: map1<T>(out, in, [](A x) { return std::floor(x); }); break;
      case UnaryOp::ceil: map1<T>(out, in, [](A x) { return std::ceil(x); }); break;
      case UnaryOp::trunc: map1<T>(out, in, [](A x) { return std::trunc(x); }); break;
      case UnaryOp::round: map1<T>(out, in, [](A x) { return std::nearbyint(x); }); break;  // half to even
      case UnaryOp::sin: map1<T>(out, in, [](A x) { return std::sin(x); }); break;
      case UnaryOp::cos: map1<T>(out, in, [](A x) { return std::cos(x); }); break;
      case UnaryOp::tan: map1<T>(out, in, [](A x) { return std::tan(x); }); break;
      case UnaryOp::asin: map1<T>(out, in, [](A x) { return std::asin(x); }); break;
      case UnaryOp::acos: map1<T>(out, in, [](A x) { return std::acos(x); }); break;
      case UnaryOp::atan: map1<T>(out, in, [](A x) { return std::atan(x); }); break;
      case UnaryOp::sinh: map1<T>(out, in, [](A x) { return std::sinh(x); }); break;
      case UnaryOp::cosh: map1<T>(out, in, [](A x) { return std::cosh(x); }); break;
      case UnaryOp::asinh: map1<T>(out, in, [](A x) { return std::asinh(x); }); break;
      case UnaryOp::acosh: map1<T>(out, in, [](A x) { return std::acosh(x); }); break;
      case UnaryOp::atanh: map1<T>(out, in, [](A x) { return std::atanh(x); }); break;
      case UnaryOp::erf: map1<T>(out, in, [](A x) { return std::erf(x); }); break;
      case UnaryOp::erfc: map1<T>(out, in, [](A x) { return std::erfc(x); }); break;
      case UnaryOp::erfinv: map1<T>(out, in, [](A x) { return A(erfinv_of(double(x))); }); break;
      case UnaryOp::log1p: map1<T>(out, in, [](A x) { return std::log1p(x); }); break;
      case UnaryOp::expm1: map1<T>(out, in, [](A x) { return std::expm1(x); }); break;
      case UnaryOp::log2: map1<T>(out, in, [](A x) { return std::log2(x); }); break;
      case UnaryOp::log10: map1<T>(out, in, [](A x) { return std::log10(x); }); break;
      case UnaryOp::exp2: map1<T>(out, in, [](A x) { return std::exp2(x); }); break;
    }
  });
}

namespace {
// Signed integers wrap as in PyTorch (two's complement) instead of overflowing,
// which C++ leaves undefined: the arithmetic is done on the unsigned twin,
// widened to unsigned int where it is narrower (an i16 product of unsigned
// shorts would be promoted to int and overflow it).
template <class A, class F>
A wrapping(A x, A y, F f) {
  if constexpr (std::is_integral_v<A> && std::is_signed_v<A>) {
    using U = std::make_unsigned_t<A>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return A(U(f(W(U(x)), W(U(y)))));
  } else {
    return A(f(x, y));
  }
}

// Division that never traps: see the BinaryOp::div case.
template <class A>
A divide(A x, A y) {
  if constexpr (std::is_integral_v<A>) {
    if (y == A(0)) return A(0);
    if constexpr (std::is_signed_v<A>) {
      using U = std::make_unsigned_t<A>;
      if (y == A(-1)) return A(U(0) - U(x));
    }
  }
  return A(x / y);
}
}  // namespace

void binary(Backend& be, BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) {
  RUMUS_DISPATCH_ALL(a.dtype, "binary", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    auto cmp = [&](auto f) { map2<std::uint8_t, T>(out, a, b, [f](A x, A y) { return std::uint8_t(f(x, y)); }); };
    switch (op) {
      case BinaryOp::add: map2<T, T>(out, a, b, [](A x, A y) { return wrapping(x, y, std::plus<>()); }); return;
      case BinaryOp::sub: map2<T, T>(out, a, b, [](A x, A y) { return wrapping(x, y, std::minus<>()); }); return;
      case BinaryOp::mul: map2<T, T>(out, a, b, [](A x, A y) { return wrapping(x, y, std::multiplies<>()); }); return;
      case BinaryOp::div:
        // The op rejects integer zero divisors; the guards here keep the kernel from
        // trapping regardless: x / 0 gives 0 and INT_MIN / -1 wraps to INT_MIN.
        map2<T, T>(out, a, b, [](A x, A y) { return divide(x, y); });
        return;
      case BinaryOp::maximum: map2<T, T>(out, a, b, [](A x, A y) { return x > y || x != x ? x : y; }); return;
      case BinaryOp::minimum: map2<T, T>(out, a, b, [](A x, A y) { return x < y || x != x ? x : y; }); return;
      case BinaryOp::eq: cmp([](A x, A y) { return x == y; }); return;
      case BinaryOp::ne: cmp([](A x, A y) { return x != y; }); return;
      case BinaryOp::lt: cmp([](A x, A y) { return x < y; }); return;
      case BinaryOp::le: cmp([](A x, A y) { return x <= y; }); return;
      case BinaryOp::gt: cmp([](A x, A y) { return x > y; }); return;
      case BinaryOp::ge: cmp([](A x, A y) { return x >= y; }); return;
      default: break;
    }
    if constexpr (std::is_floating_point_v<A>) {
      const A s0 = A(p0), s1 = A(p1);
      switch (op) {
        case BinaryOp::pow: map2<T, T>(out, a, b, [](A x, A y) { return std::pow(x, y); }); return;
        case BinaryOp::relu_backward: map2<T, T>(out, a, b, [](A g, A x) { return x > A(0) ? g : A(0); }); return;
        case BinaryOp::sigmoid_backward: map2<T, T>(out, a, b, [](A g, A y) { return g * y * (A(1) - y); }); return;
        case BinaryOp::tanh_backward: map2<T, T>(out, a, b, [](A g, A y) { return g * (A(1) - y * y); }); return;
        case BinaryOp::gelu_backward:
          map2<T, T>(out, a, b, [](A g, A x) {
            A cdf = A(0.5) * (A(1) + std::erf(x * A(kSqrt1_2)));
            A pdf = A(kInvSqrt2Pi) * std::exp(A(-0.5) * x * x);
            return g * (cdf + x * pdf);
          });
          return;
        case BinaryOp::gelu_tanh_backward:
          map2<T, T>(out, a, b, [](A g, A x) {
            A inner = A(kSqrt2OverPi) * (x + A(0.044715) * x * x * x);
            A t = std::tanh(inner);
            A dinner = A(kSqrt2OverPi) * (A(1) + A(3 * 0.044715) * x * x);
            return g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * dinner);
          });
          return;
        case BinaryOp::hardswish_backward:  // PyTorch's: 0 below -3, x / 3 + 1/2 up to 3, then 1
          map2<T, T>(out, a, b, [](A g, A x) {
            return x < A(-3) ? A(0) : x <= A(3) ? g * (x / A(3) + A(0.5)) : g;
          });
          return;
        case BinaryOp::silu_backward:
          map2<T, T>(out, a, b, [](A g, A x) {
            A s = sigmoid_of(x);
            return g * s * (A(1) + x * (A(1) - s));
          });
          return;
        case BinaryOp::leaky_relu_backward:
          map2<T, T>(out, a, b, [s0](A g, A x) { return x > A(0) ? g : g * s0; });
          return;
        case BinaryOp::clamp_backward:
          map2<T, T>(out, a, b, [s0, s1](A g, A x) {
            bool in = (std::isnan(s0) || x >= s0) && (std::isnan(s1) || x <= s1);
            return in ? g : A(0);
          });
          return;
        case BinaryOp::abs_backward:
          map2<T, T>(out, a, b, [](A g, A x) { return x > A(0) ? g : (x < A(0) ? -g : A(0)); });
          return;
        default: break;
      }
    }
    throw DTypeError("binary: op not supported for dtype " + std::string(dtype_name(a.dtype)) + " on cpu");
  });
}

void fill(Backend& be, TensorArg out, double value) {
  RUMUS_DISPATCH_ALL(out.dtype, "fill", [&] {
    scalar_t v = store<scalar_t>(value);
    scalar_t* o = data_of<scalar_t>(out);
    for_each_run(make_iter<1>(out.layout->shape, {out.layout}), [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i) o[off[0] + i * st[0]] = v;
    });
  });
}

void copy(Backend& be, TensorArg out, TensorArg in) {
  auto it = make_iter<2>(out.layout->shape, {out.layout, in.layout});
  RUMUS_DISPATCH_ALL(out.dtype, "copy", [&] {
    using out_t = scalar_t;
    out_t* o = data_of<out_t>(out);
    RUMUS_DISPATCH_ALL(in.dtype, "copy", [&] {
      const scalar_t* x = data_of<scalar_t>(in);
      for_each_run(it, [&](auto off, std::int64_t n, auto st) {
        out_t* po = o + off[0];
        const scalar_t* px = x + off[1];
        if constexpr (std::is_same_v<out_t, scalar_t>) {
          if (st[0] == 1 && st[1] == 1) {
            std::memcpy(po, px, n * sizeof(out_t));
            return;
          }
        }
        for (std::int64_t i = 0; i < n; ++i) po[i * st[0]] = store<out_t>(load(px[i * st[1]]));
      });
    });
  });
}

void where(Backend& be, TensorArg out, TensorArg cond, TensorArg a, TensorArg b) {
  auto it = make_iter<4>(out.layout->shape, {out.layout, cond.layout, a.layout, b.layout});
  if (cond.dtype != DType::boolean && cond.dtype != DType::u8)
    throw DTypeError("where: cpu kernel needs a bool or u8 condition");
  const std::uint8_t* c = data_of<std::uint8_t>(cond);
  RUMUS_DISPATCH_ALL(out.dtype, "where", [&] {
    scalar_t* o = data_of<scalar_t>(out);
    const scalar_t* pa = data_of<scalar_t>(a);
    const scalar_t* pb = data_of<scalar_t>(b);
    for_each_run(it, [&](auto off, std::int64_t n, auto st) {
      for (std::int64_t i = 0; i < n; ++i)
        o[off[0] + i * st[0]] = c[off[1] + i * st[1]] ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
    });
  });
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, pointwise) {
  register_kernel<FillKernel>(Device::Kind::cpu, kAllDTypes, &cpu::fill);
  register_kernel<CopyKernel>(Device::Kind::cpu, kAllDTypes, &cpu::copy);
  register_kernel<UnaryKernel>(Device::Kind::cpu, kFloatDTypes, &cpu::unary);
  register_kernel<BinaryKernel>(Device::Kind::cpu, kAllDTypes, &cpu::binary);
  register_kernel<WhereKernel>(Device::Kind::cpu, kAllDTypes, &cpu::where);
}

}  // namespace rumus
