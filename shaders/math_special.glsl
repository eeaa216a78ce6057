// Trigonometric, hyperbolic, error-function and logarithm/exponential
// variants of the unary kernels (UNARY_SIN ... UNARY_EXP2), as *_r functions
// of REAL. GLSL has the trigonometric and hyperbolic functions for float only,
// so the f64 variant builds them on math_f64.glsl's exp_d/log_d/erf_d: range
// reduction and series, within a few ulps of the C library for the arguments a
// network meets (sin and cos reduce by pi/2 in three parts: exact for
// |x| < 2^20 * pi/2). Included after erf_of (elementwise.comp).
#ifndef RUMUS_MATH_SPECIAL
#define RUMUS_MATH_SPECIAL

#ifdef RUMUS_F64
const double PI_2_D = 1.57079632679489661923lf;
const double PI_4_D = 0.78539816339744830962lf;
const double LN2_D = 6.93147180559945309417e-01lf;
const double LN2_D_LO = 2.31904681384629955842e-17lf;  // ln 2 - LN2_D
const double LOG10E_D = 0.43429448190325182765lf;

// x = k pi/2 + r, |r| <= pi/4, with pi/2 = P1 + P2 + P3 (33 + 33 + 53 bits: k * P1 and k * P2 exact).
void sincos_d(double x, out double s, out double c) {
  precise double k = floor(x * 0.63661977236758134308lf + 0.5lf);  // 2/pi
  precise double r = x - k * 1.57079632673412561417e+00lf;
  r = r - k * 6.07710050630396597660e-11lf;
  r = r - k * 2.02226624871116645580e-21lf;
  double z = r * r;
  // Taylor series of sin r / r and cos r to z^10 (terms below 2^-60 at |r| = pi/4).
  double ps = 1.0lf, pc = 1.0lf;
  for (int n = 10; n >= 1; --n) {
    ps = 1.0lf - ps * z / double((2 * n) * (2 * n + 1));
    pc = 1.0lf - pc * z / double((2 * n - 1) * (2 * n));
  }
  double sr = r * ps, cr = pc;
  int q = int(mod(k, 4.0lf));
  if (q == 0) { s = sr; c = cr; }
  else if (q == 1) { s = cr; c = -sr; }
  else if (q == 2) { s = -sr; c = -cr; }
  else { s = -cr; c = sr; }
  if (d_isnan(x) || abs(x) == d_inf()) { s = d_nan(); c = d_nan(); }
}

double log1p_d(double x) {
  if (d_isnan(x) || x == d_inf()) return x;
  if (x < -1.0lf) return d_nan();
  if (x == -1.0lf) return -d_inf();
  precise double u = 1.0lf + x;
  if (u == 1.0lf) return x;
  precise double um1 = u - 1.0lf;
  return log_d(u) * (x / um1);  // the rounding of 1 + x corrected (Goldberg)
}

// atan on [0, inf]: 1/t above 1, then pi/4 + atan((t - 1)/(t + 1)) above tan(pi/8): |u| <= 0.4143.
double atan_d(double x) {
  if (d_isnan(x)) return x;
  double t = abs(x);
  bool inverted = t > 1.0lf;
  if (inverted) t = 1.0lf / t;
  double base = 0.0lf;
  if (t > 0.41421356237309504880lf) {
    base = PI_4_D;
    t = (t - 1.0lf) / (t + 1.0lf);
  }
  double z = t * t, p = 0.0lf;
  for (int n = 30; n >= 0; --n) p = 1.0lf / double(2 * n + 1) - z * p;
  double r = base + t * p;
  if (inverted) r = PI_2_D - r;
  return x < 0.0lf ? -r : r;
}

// 1 - erf below 0.5 (no cancellation there); above, the continued fraction
// e^-x^2 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...)))), whose
// error after n terms falls as e^(-2 x sqrt(2 n)): 250 / x^2 terms are enough.
double erfc_d(double x) {
  if (d_isnan(x)) return x;
  if (x < 0.5lf) return 1.0lf - erf_d(x);
  if (x > 27.3lf) return 0.0lf;
  precise double xx = x * x;
  double g = exp_dd(-xx, -two_prod_err(x, x, xx));
  double f = x;
  for (int n = min(int(250.0lf / xx) + 60, 1100); n >= 1; --n) f = x + (0.5lf * double(n)) / f;
  return 0.56418958354775628695lf * g / f;
}

// Giles' approximation, then two Newton steps on erf(r) = y (as the CPU kernel).
double erfinv_d(double y) {
  if (d_isnan(y) || y < -1.0lf || y > 1.0lf) return d_nan();
  // The infinity's bits: a driver that assumes no infinities (NVIDIA's) may fold y * inf.
  if (abs(y) == 1.0lf) return packDouble2x32(uvec2(0u, y > 0.0lf ? 0x7ff00000u : 0xfff00000u));
  double w = -log_d((1.0lf - y) * (1.0lf + y)), p;
  if (w < 5.0lf) {
    w -= 2.5lf;
    p = 2.81022636e-08lf;
    p = 3.43273939e-07lf + p * w;
    p = -3.5233877e-06lf + p * w;
    p = -4.39150654e-06lf + p * w;
    p = 0.00021858087lf + p * w;
    p = -0.00125372503lf + p * w;
    p = -0.00417768164lf + p * w;
    p = 0.246640727lf + p * w;
    p = 1.50140941lf + p * w;
  } else {
    w = sqrt(w) - 3.0lf;
    p = -0.000200214257lf;
    p = 0.000100950558lf + p * w;
    p = 0.00134934322lf + p * w;
    p = -0.00367342844lf + p * w;
    p = 0.00573950773lf + p * w;
    p = -0.0076224613lf + p * w;
    p = 0.00943887047lf + p * w;
    p = 1.00167406lf + p * w;
    p = 2.83297682lf + p * w;
  }
  double r = p * y;
  for (int i = 0; i < 2; ++i) r -= (erf_d(r) - y) / (1.12837916709551257390lf * exp_d(-r * r));
  return r;
}

REAL sin_r(REAL x) { double s, c; sincos_d(x, s, c); return s; }
REAL cos_r(REAL x) { double s, c; sincos_d(x, s, c); return c; }
REAL tan_r(REAL x) { double s, c; sincos_d(x, s, c); return s / c; }
REAL atan_r(REAL x) { return atan_d(x); }
REAL asin_r(REAL x) { return atan_d(x / sqrt((1.0lf - x) * (1.0lf + x))); }
REAL acos_r(REAL x) { return 2.0lf * atan_d(sqrt((1.0lf - x) / (1.0lf + x))); }
// e^x / 2 for x > 22 (e^-x is below half an ulp), as e^(x - ln 2) with the
// subtraction's rounding carried along, so that 2 e^x may pass the overflow.
double half_exp_d(double ax) {
  precise double h = ax - LN2_D;
  precise double err = (ax - h) - LN2_D;  // exact: |ax| > LN2_D
  return exp_dd(h, err - LN2_D_LO);
}
REAL sinh_r(REAL x) {
  double ax = abs(x), r;
  if (ax > 22.0lf) r = half_exp_d(ax);
  else {
    double e = expm1_d(ax);
    r = 0.5lf * e * (e + 2.0lf) / (e + 1.0lf);
  }
  return x < 0.0lf ? -r : r;
}
REAL cosh_r(REAL x) {
  double ax = abs(x);
  if (ax > 22.0lf) return half_exp_d(ax);
  double e = exp_d(ax);
  return 0.5lf * (e + 1.0lf / e);
}
REAL asinh_r(REAL x) {
  double ax = abs(x), r;
  if (ax > 1e8lf) r = log_d(ax) + LN2_D;
  else r = log1p_d(ax + ax * ax / (1.0lf + sqrt(1.0lf + ax * ax)));
  return x < 0.0lf ? -r : r;
}
REAL acosh_r(REAL x) {
  if (x < 1.0lf) return d_nan();
  if (x > 1e8lf) return log_d(x) + LN2_D;
  double t = x - 1.0lf;
  return log1p_d(t + sqrt(2.0lf * t + t * t));
}
REAL atanh_r(REAL x) {
  double ax = abs(x);
  double r = 0.5lf * log1p_d(2.0lf * ax / (1.0lf - ax));
  return x < 0.0lf ? -r : r;
}
REAL erfc_r(REAL x) { return erfc_d(x); }
REAL erfinv_r(REAL x) { return erfinv_d(x); }
REAL log1p_r(REAL x) { return log1p_d(x); }
REAL expm1_r(REAL x) { return expm1_d(x); }
REAL log2_r(REAL x) {  // e + log2(m), m in [sqrt(1/2), sqrt(2)): exact at powers of two
  if (!(x > 0.0lf) || x == d_inf()) return log_d(x);
  int e;
  double sx = x, adj = 0.0lf;
  if (sx < 2.2250738585072014e-308lf) {  // subnormal: normalise first
    sx *= 18014398509481984.0lf;         // 2^54
    adj = 54.0lf;
  }
  double m = frexp(sx, e);
  if (m < SQRT1_2_D) {
    m *= 2.0lf;
    e -= 1;
  }
  return (double(e) - adj) + log_d(m) * LOG2E;
}
REAL log10_r(REAL x) { return log_d(x) * LOG10E_D; }
REAL exp2_r(REAL x) {  // e^(x ln 2), the product carried in two doubles
  precise double h = x * LN2_D;
  return exp_dd(h, two_prod_err(x, LN2_D, h) + x * LN2_D_LO);
}

#else
// float: the built-ins, with the forms that keep relative accuracy near 0.
float log1p_r(float x) {
  precise float u = 1.0 + x;
  if (u == 1.0 || x != x || isinf(x)) return x;
  precise float um1 = u - 1.0;
  return log(u) * (x / um1);
}
float expm1_r(float x) {
  precise float u = exp(x);
  if (u == 1.0 || x != x) return x;
  precise float um1 = u - 1.0;
  if (um1 == -1.0) return -1.0;
  if (isinf(u)) return u;
  return um1 * (x / log(u));
}
float sin_r(float x) { return sin(x); }
float cos_r(float x) { return cos(x); }
float tan_r(float x) { return tan(x); }
// Through atan, as the double versions: some drivers' asin and acos (lavapipe's)
// are off by 1e-4 where their atan is within a few ulps.
// Outside [-1, 1] NaN explicitly: a negative square root is undefined in GLSL.
float asin_r(float x) { return abs(x) > 1.0 ? uintBitsToFloat(0x7fc00000u) : atan(x / sqrt((1.0 - x) * (1.0 + x))); }
float acos_r(float x) { return abs(x) > 1.0 ? uintBitsToFloat(0x7fc00000u) : 2.0 * atan(sqrt((1.0 - x) / (1.0 + x))); }
float atan_r(float x) { return atan(x); }
float sinh_r(float x) {
  float ax = abs(x), r;
  if (ax > 9.0) r = 0.5 * exp(ax);
  else {
    float e = expm1_r(ax);
    r = 0.5 * e * (e + 2.0) / (e + 1.0);
  }
  return x < 0.0 ? -r : r;
}
float cosh_r(float x) {
  float e = exp(abs(x));
  return 0.5 * (e + 1.0 / e);
}
float asinh_r(float x) {
  float ax = abs(x), r;
  if (ax > 1e4) r = log(ax) + 0.69314718055994530942;
  else r = log1p_r(ax + ax * ax / (1.0 + sqrt(1.0 + ax * ax)));
  return x < 0.0 ? -r : r;
}
float acosh_r(float x) {
  if (x < 1.0) return uintBitsToFloat(0x7fc00000u);
  if (x > 1e4) return log(x) + 0.69314718055994530942;
  float t = x - 1.0;
  return log1p_r(t + sqrt(2.0 * t + t * t));
}
float atanh_r(float x) {
  float ax = abs(x);
  float r = 0.5 * log1p_r(2.0 * ax / (1.0 - ax));
  return x < 0.0 ? -r : r;
}
float erfc_r(float x) { return 1.0 - erf_of(x); }
float erfinv_r(float y) {  // Giles' single-precision approximation
  if (y != y || y < -1.0 || y > 1.0) return uintBitsToFloat(0x7fc00000u);
  if (abs(y) == 1.0) return uintBitsToFloat(y > 0.0 ? 0x7f800000u : 0xff800000u);  // as erfinv_d
  float w = -log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  return p * y;
}
float log2_r(float x) { return log2(x); }
float log10_r(float x) { return log2(x) * 0.30102999566398119521; }
float exp2_r(float x) { return exp2(x); }
#endif

#endif
