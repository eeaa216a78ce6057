// Double-precision exp, expm1, log, pow, tanh and erf: GLSL has them for float
// only. Cody-Waite range reduction and series, with the steps that lose most
// carried in two doubles, keep them within a few ulps of the C library
// (tests/test_vulkan.cpp sweeps them against std::).
#ifndef RUMUS_MATH_F64
#define RUMUS_MATH_F64

const double LN2_HI = 6.93147180369123816490e-01lf;  // ln 2 in 32 bits: k * LN2_HI is exact
const double LN2_LO = 1.90821492927058770002e-10lf;
const double LOG2E = 1.44269504088896338700lf;
const double SQRT1_2_D = 0.70710678118654752440lf;

bool d_isnan(double x) { return x != x; }
double d_inf() { return packDouble2x32(uvec2(0u, 0x7ff00000u)); }
double d_nan() { return packDouble2x32(uvec2(0u, 0x7ff80000u)); }

// The rounding error of a * b (a * b - round(a * b), exact) by Dekker's split:
// fma would do it in one step, but some drivers lower double fma to a multiply
// and an add. precise keeps the compiler from contracting or reordering.
double two_prod_err(double a, double b, double p) {
  precise double ca = 134217729.0lf * a;  // 2^27 + 1
  precise double ah = ca - (ca - a);
  precise double al = a - ah;
  precise double cb = 134217729.0lf * b;
  precise double bh = cb - (cb - b);
  precise double bl = b - bh;
  precise double err = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
  return err;
}

// x * 2^k for k that may leave the exponent range on one step (subnormal results, 2^1024).
double scale2(double x, int k) {
  int h = k / 2;
  return ldexp(ldexp(x, h), k - h);
}

// e^(xh + xl), xl a small correction of xh (from a two-double product).
double exp_dd(double xh, double xl) {
  if (d_isnan(xh)) return xh;
  if (xh > 709.782712893384lf) return d_inf();
  if (xh < -745.2lf) return 0.0lf;
  double k = floor(xh * LOG2E + 0.5lf);
  // r = x - k ln2, in two steps: xh - k * LN2_HI is exact.
  precise double r = (xh - k * LN2_HI) + (xl - k * LN2_LO);
  // e^r = 1 + r + r^2/2! + ... + r^13/13!, Horner from the top.
  double p = 1.0lf / 6227020800.0lf;  // 1/13!
  p = fma(p, r, 1.0lf / 479001600.0lf);
  p = fma(p, r, 1.0lf / 39916800.0lf);
  p = fma(p, r, 1.0lf / 3628800.0lf);
  p = fma(p, r, 1.0lf / 362880.0lf);
  p = fma(p, r, 1.0lf / 40320.0lf);
  p = fma(p, r, 1.0lf / 5040.0lf);
  p = fma(p, r, 1.0lf / 720.0lf);
  p = fma(p, r, 1.0lf / 120.0lf);
  p = fma(p, r, 1.0lf / 24.0lf);
  p = fma(p, r, 1.0lf / 6.0lf);
  p = fma(p, r, 0.5lf);
  // 1 + (r + r^2 p): the small part summed first keeps the last bit.
  double e = 1.0lf + fma(r * r, p, r);
  return scale2(e, int(k));
}

double exp_d(double x) { return exp_dd(x, 0.0lf); }

// e^x - 1 without the cancellation near 0.
double expm1_d(double x) {
  if (abs(x) >= 0.35lf) return exp_d(x) - 1.0lf;
  // x + x^2/2! + ... + x^16/16!
  double p = 1.0lf / 20922789888000.0lf;  // 1/16!
  double f = 20922789888000.0lf;
  for (int n = 15; n >= 2; --n) {
    f /= double(n + 1);
    p = fma(p, x, 1.0lf / f);
  }
  return fma(x * x, p, x);
}

// log|x| as two doubles (hi + lo), for finite x != 0.
void log_dd(double x, out double hi, out double lo) {
  int e;
  double ax = abs(x);
  int adj = 0;
  if (ax < 2.2250738585072014e-308lf) {  // subnormal: normalise first
    ax *= 18014398509481984.0lf;         // 2^54
    adj = -54;
  }
  double m = frexp(ax, e);  // [0.5, 1)
  e += adj;
  if (m < SQRT1_2_D) {
    m *= 2.0lf;
    e -= 1;
  }
  // log(1 + f) = f - hfsq + s (hfsq + R), s = f / (2 + f), R = 2 s^2/3 + 2 s^4/5 + ...
  double f = m - 1.0lf;  // exact
  double s = f / (2.0lf + f);
  double z = s * s;
  double R = 2.0lf / 25.0lf;
  for (int n = 23; n >= 3; n -= 2) R = fma(R, z, 2.0lf / double(n));
  R *= z;
  precise double hf = 0.5lf * f * f;
  precise double hf_lo = two_prod_err(0.5lf * f, f, hf);
  double c = s * (hf + R);
  // f - hf exactly as two doubles, then the small terms.
  precise double t = f - hf;
  precise double t_lo = (f - t) - hf;
  t_lo += c - hf_lo;
  double de = double(e);
  precise double a = de * LN2_HI;  // exact
  precise double h = a + t;
  precise double bv = h - a;
  precise double l = ((a - (h - bv)) + (t - bv)) + (t_lo + de * LN2_LO);
  precise double h2 = h + l;
  // Through a precise temporary: an out parameter cannot be declared precise,
  // and a compiler free to reassociate l - (h2 - h) loses the low part.
  precise double low = l - (h2 - h);
  hi = h2;
  lo = low;
}

double log_d(double x) {
  if (d_isnan(x)) return x;
  if (x < 0.0lf) return d_nan();
  if (x == 0.0lf) return -d_inf();
  if (x == d_inf()) return x;
  double hi, lo;
  log_dd(x, hi, lo);
  return hi + lo;
}

bool d_is_int(double y) { return floor(y) == y; }
bool d_is_odd(double y) { return d_is_int(y) && abs(y) < 9007199254740992.0lf && mod(abs(y), 2.0lf) == 1.0lf; }

// pow with the C library's rules for signs, zeros, infinities and NaN.
double pow_d(double x, double y) {
  if (y == 0.0lf || x == 1.0lf) return 1.0lf;
  if (d_isnan(x) || d_isnan(y)) return d_nan();
  const double inf = d_inf();
  double ax = abs(x);
  if (abs(y) == inf) {
    if (ax == 1.0lf) return 1.0lf;
    return (ax < 1.0lf) == (y < 0.0lf) ? inf : 0.0lf;
  }
  bool odd = d_is_odd(y);
  if (x == 0.0lf) {
    double r = y < 0.0lf ? inf : 0.0lf;
    return odd && (unpackDouble2x32(x).y & 0x80000000u) != 0u ? -r : r;  // -0 keeps its sign
  }
  if (ax == inf) {
    double r = y < 0.0lf ? 0.0lf : inf;
    return x < 0.0lf && odd ? -r : r;
  }
  if (x < 0.0lf && !d_is_int(y)) return d_nan();
  double lh, ll;
  log_dd(ax, lh, ll);
  // y * log|x| as two doubles.
  precise double ph = y * lh;
  precise double pl = two_prod_err(y, lh, ph) + y * ll;
  double r = exp_dd(ph, pl);
  return x < 0.0lf && odd ? -r : r;
}

double tanh_d(double x) {
  if (d_isnan(x)) return x;
  double ax = abs(x);
  double r;
  if (ax > 22.0lf) r = 1.0lf;
  else if (ax < 3.7252902984e-09lf) r = ax;  // 2^-28: tanh x == x in double
  else {
    double t = expm1_d(2.0lf * ax);
    r = t / (t + 2.0lf);
  }
  return x < 0.0lf ? -r : r;
}

// erf: the series 2/sqrt(pi) e^-x^2 sum 2^n x^(2n+1) / (1 3 5 ... (2n+1)) (all
// terms positive) below 2.5, 1 - erfc by its continued fraction above.
double erf_d(double x) {
  if (d_isnan(x)) return x;
  double ax = abs(x);
  double r;
  if (ax >= 6.0lf) r = 1.0lf;
  else {
    precise double xx = ax * ax;
    precise double xx_lo = two_prod_err(ax, ax, xx);
    double g = exp_dd(-xx, -xx_lo);
    if (ax < 2.5lf) {
      // Term n carries xx^n: the rounding of xx (xx_lo) is put back as
      // n * xx_lo / xx of each term; the sum is compensated (Kahan).
      precise double term = ax, sum = ax, comp = 0.0lf, weighted = 0.0lf;
      for (int n = 1; n < 200; ++n) {
        term *= 2.0lf * xx / double(2 * n + 1);
        weighted += double(n) * term;
        precise double y = term - comp;
        precise double t = sum + y;
        comp = (t - sum) - y;
        sum = t;
        if (term < sum * 1e-17lf) break;
      }
      if (xx > 0.0lf) sum += weighted * (xx_lo / xx);
      sum -= comp;
      r = 1.12837916709551257390lf * g * sum;  // 2 / sqrt(pi)
    } else {
      // erfc x = e^-x^2 / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))
      double f = ax;
      for (int n = 120; n >= 1; --n) f = ax + (0.5lf * double(n)) / f;
      r = 1.0lf - 0.56418958354775628695lf * g / f;  // 1 / sqrt(pi)
    }
  }
  return x < 0.0lf ? -r : r;
}

#endif
