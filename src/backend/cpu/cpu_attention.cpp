// CPU kernels of fused scaled dot-product attention (flash-attention-2
// style). Forward: per block of query rows, keys are visited in tiles with an
// online softmax (running max and sum), so no [lq, lk] buffer exists; only
// the row logsumexp is kept for backward. Backward recomputes each tile's
// scores from q, k and the logsumexp: one sweep parallel over key tiles
// writes dK and dV, a second parallel over query tiles writes dQ, so no two
// threads ever write the same element (no atomics, deterministic sums).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../philox.hpp"
#include "cpu_backend.hpp"
#include "cpu_loops.hpp"
#include "isa.hpp"

namespace rumus::cpu {

namespace {

constexpr std::int64_t kQueryTile = 32;
constexpr std::int64_t kKeyTile = 64;

template <class T>
T* base_of(TensorArg t) { return data_of<T>(t) + t.layout->offset; }

void require_contiguous(TensorArg t) {
  if (!t.layout->is_contiguous()) throw Error("scaled_dot_product_attention: cpu kernel needs contiguous operands");
}

// Reads the optional mask and the causal rule, and the dropout stream, for one (bh, i) row.
struct RowRules {
  const AttentionParams& p;
  TensorArg mask;
  bool has_mask, bool_mask;
  const Shape* ms = nullptr;

  RowRules(const AttentionParams& params, TensorArg m) : p(params), mask(m) {
    has_mask = m.storage != nullptr;
    bool_mask = has_mask && m.dtype == DType::u8;
    if (has_mask) ms = &m.layout->strides;
  }
  // Offset of the mask row (bh, i); stride of its key dim.
  std::int64_t row_offset(std::int64_t bh, std::int64_t i) const {
    const std::int64_t b = bh / p.heads, h = bh % p.heads;
    return mask.layout->offset + b * (*ms)[0] + h * (*ms)[1] + i * (*ms)[2];
  }
  // Last key (exclusive) a causal row may see.
  std::int64_t key_end(std::int64_t i) const { return p.causal ? std::min(p.lk, i + 1) : p.lk; }
};

template <class A>
constexpr A kNegInf = -std::numeric_limits<A>::infinity();

// Key tiles are transposed once into [c][j] (c < d, j < kKeyTile) so that a
// row's scores, and dO . v, run as vector updates over j: a dot product per
// key would be a chain of dependent adds the compiler may not reorder.
template <class T, class A>
RUMUS_INLINE inline void transpose_tile(const T* rows, std::int64_t j0, std::int64_t j1, std::int64_t d, A* t) {
  for (std::int64_t j = j0; j < j1; ++j) {
    const T* r = rows + j * d;
    for (std::int64_t c = 0; c < d; ++c) t[c * kKeyTile + (j - j0)] = A(r[c]);
  }
}

// out[j] = x . t[:, j] for j < n, over a transposed tile t. The sums run over
// the whole tile width, a constant, so they stay in vector registers.
template <class T, class A>
RUMUS_INLINE inline void dots_with_tile(const T* x, const A* t, std::int64_t d, std::int64_t n, A* out) {
  A acc[kKeyTile] = {};
  for (std::int64_t c = 0; c < d; ++c) {
    const A xc = A(x[c]);
    const A* tc = t + c * kKeyTile;
    for (std::int64_t j = 0; j < kKeyTile; ++j) acc[j] += xc * tc[j];
  }
  for (std::int64_t j = 0; j < n; ++j) out[j] = acc[j];
}

// Scaled, masked scores of row i against keys [j0, j1) (transposed in kt) into s; -inf where masked.
template <class T, class A>
RUMUS_INLINE inline void row_scores(const RowRules& r, std::int64_t bh, std::int64_t i, const T* qi, const A* kt,
                                    std::int64_t j0, std::int64_t j1, A* s) {
  const A scale = A(r.p.scale);
  const std::int64_t jend = std::min(j1, r.key_end(i));
  if (jend > j0) {
    dots_with_tile<T, A>(qi, kt, r.p.d, jend - j0, s);
    for (std::int64_t j = 0; j < jend - j0; ++j) s[j] *= scale;
  }
  for (std::int64_t j = std::max(jend, j0); j < j1; ++j) s[j - j0] = kNegInf<A>;
  if (r.has_mask) {
    const std::int64_t off = r.row_offset(bh, i), ks = (*r.ms)[3];
    if (r.bool_mask) {
      const std::uint8_t* m = data_of<std::uint8_t>(r.mask) + off;
      for (std::int64_t j = j0; j < jend; ++j)
        if (!m[j * ks]) s[j - j0] = kNegInf<A>;
    } else {
      RUMUS_DISPATCH_FLOAT(r.mask.dtype, "scaled_dot_product_attention", [&] {
        const scalar_t* m = data_of<scalar_t>(r.mask) + off;
        for (std::int64_t j = j0; j < jend; ++j) s[j - j0] += A(load(m[j * ks]));
      });
    }
  }
}

// Dropout multipliers of row i for keys [j0, j1): 0 or 1 / (1 - p), four
// consecutive weights per Philox draw (see AttentionParams).
template <class A>
RUMUS_INLINE inline void row_dropout(const AttentionParams& p, std::int64_t bh, std::int64_t i, std::int64_t j0,
                                     std::int64_t j1, A* z) {
  const A keep = p.dropout_p >= 1.0 ? A(0) : A(1) / A(1 - p.dropout_p);
  const std::uint32_t threshold = dropout_threshold(p.dropout_p);
  std::uint64_t e = std::uint64_t((bh * p.lq + i) * p.lk + j0);
  for (std::int64_t j = j0; j < j1;) {
    const auto r = philox::draw(p.seed, p.offset + e / 4);
    for (unsigned w = unsigned(e % 4); w < 4 && j < j1; ++w, ++j, ++e)
      z[j - j0] = (r[w] >> 8) >= threshold ? keep : A(0);
  }
}

template <class T>
void forward_impl(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k, TensorArg v,
                  TensorArg mask) {
  using A = T;
  const RowRules rules(p, mask);
  const std::int64_t bh_count = p.batch * p.heads, q_tiles = (p.lq + kQueryTile - 1) / kQueryTile;
  const std::int64_t d = p.d, dv = p.dv;
  const bool dropout = p.dropout_p > 0;
  const T *qb = base_of<T>(q), *kb = base_of<T>(k), *vb = base_of<T>(v);
  T* ob = base_of<T>(out);
  T* lb = base_of<T>(lse);
  const std::int64_t work = bh_count * q_tiles;
  _Pragma("omp parallel if (work > 1 && bh_count * p.lq * p.lk * d > kParallelGrain)")
  {
    std::vector<A> s(kKeyTile), z(kKeyTile), acc(std::size_t(kQueryTile * dv)), kt(std::size_t(d * kKeyTile));
    std::vector<A> mx(kQueryTile), sum(kQueryTile);
    _Pragma("omp for schedule(dynamic, 1)")
    for (std::int64_t w = 0; w < work; ++w) with_isa([&]() RUMUS_INLINE {
      const std::int64_t bh = w / q_tiles, i0 = (w % q_tiles) * kQueryTile, i1 = std::min(p.lq, i0 + kQueryTile);
      const T* kh = kb + bh * p.lk * d;
      const T* vh = vb + bh * p.lk * dv;
      std::fill(acc.begin(), acc.end(), A(0));
      std::fill(mx.begin(), mx.end(), kNegInf<A>);
      std::fill(sum.begin(), sum.end(), A(0));
      const std::int64_t last_key = p.causal ? std::min(p.lk, i1) : p.lk;
      for (std::int64_t j0 = 0; j0 < last_key; j0 += kKeyTile) {
        const std::int64_t j1 = std::min(p.lk, j0 + kKeyTile);
        transpose_tile<T, A>(kh, j0, std::min(j1, last_key), d, kt.data());
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t r = i - i0;
          row_scores<T, A>(rules, bh, i, qb + (bh * p.lq + i) * d, kt.data(), j0, j1, s.data());
          A tile_max = kNegInf<A>;
          for (std::int64_t j = 0; j < j1 - j0; ++j) tile_max = std::max(tile_max, s[j]);
          if (tile_max == kNegInf<A>) continue;  // every key of this tile masked for this row
          const A new_max = std::max(mx[r], tile_max);
          const A rescale = std::exp(mx[r] - new_max);  // exp(-inf) = 0 on the first live tile
          A* ar = acc.data() + r * dv;
          if (rescale != A(1))
            for (std::int64_t c = 0; c < dv; ++c) ar[c] *= rescale;
          sum[r] *= rescale;
          mx[r] = new_max;
          if (dropout) row_dropout<A>(p, bh, i, j0, j1, z.data());
          for (std::int64_t j = 0; j < j1 - j0; ++j) {
            const A e = std::exp(s[j] - new_max);
            sum[r] += e;  // the normaliser counts dropped weights too (dropout acts after softmax)
            const A w8 = dropout ? e * z[j] : e;
            if (w8 == A(0)) continue;
            const T* vj = vh + (j0 + j) * dv;
            for (std::int64_t c = 0; c < dv; ++c) ar[c] += w8 * A(vj[c]);
          }
        }
      }
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t r = i - i0;
        T* orow = ob + (bh * p.lq + i) * dv;
        const A* ar = acc.data() + r * dv;
        if (sum[r] > A(0)) {
          const A inv = A(1) / sum[r];
          for (std::int64_t c = 0; c < dv; ++c) orow[c] = T(ar[c] * inv);
          lb[bh * p.lq + i] = T(mx[r] + std::log(sum[r]));
        } else {
          for (std::int64_t c = 0; c < dv; ++c) orow[c] = T(0);
          lb[bh * p.lq + i] = T(kNegInf<A>);
        }
      }
    });
  }
}

// One (i, j-tile) step of backward shared by both sweeps: probabilities P,
// their dropped form P~ (for dV) and dS = P~' (dP - D) with dP = dO . v.
// kt and vt hold the tile's keys and values transposed (see transpose_tile).
template <class T, class A>
struct TileGrad {
  std::vector<A> s, z, dp, pd, ds;
  TileGrad() : s(kKeyTile), z(kKeyTile), dp(kKeyTile), pd(kKeyTile), ds(kKeyTile) {}

  // Returns false when row i has no live key in this tile.
  RUMUS_INLINE bool compute(const AttentionParams& p, const RowRules& rules, std::int64_t bh, std::int64_t i,
                            const T* qi, const A* kt, const A* vt, const T* doi, A lse_i, A delta_i, std::int64_t j0,
                            std::int64_t j1) {
    if (lse_i == kNegInf<A>) return false;
    row_scores<T, A>(rules, bh, i, qi, kt, j0, j1, s.data());
    const bool dropout = p.dropout_p > 0;
    if (dropout) row_dropout<A>(p, bh, i, j0, j1, z.data());
    const std::int64_t live = std::min(j1, rules.key_end(i)) - j0;
    if (live <= 0) return false;
    dots_with_tile<T, A>(doi, vt, p.dv, live, dp.data());
    bool any = false;
    for (std::int64_t j = 0; j < j1 - j0; ++j) {
      const A pr = j >= live || s[j] == kNegInf<A> ? A(0) : std::exp(s[j] - lse_i);
      if (pr == A(0)) {
        pd[j] = ds[j] = 0;
        continue;
      }
      any = true;
      const A zj = dropout ? z[j] : A(1);
      pd[j] = pr * zj;
      ds[j] = pr * (dp[j] * zj - delta_i);
    }
    return any;
  }
};

template <class T>
void backward_impl(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v, TensorArg grad_out,
                   TensorArg q, TensorArg k, TensorArg v, TensorArg out, TensorArg lse, TensorArg mask) {
  using A = T;
  const RowRules rules(p, mask);
  const std::int64_t bh_count = p.batch * p.heads, d = p.d, dv = p.dv;
  const T *qb = base_of<T>(q), *kb = base_of<T>(k), *vb = base_of<T>(v), *ob = base_of<T>(out);
  const T *gob = base_of<T>(grad_out), *lb = base_of<T>(lse);
  T *gqb = base_of<T>(grad_q), *gkb = base_of<T>(grad_k), *gvb = base_of<T>(grad_v);
  const A scale = A(p.scale);
  const bool parallel = bh_count * p.lq * p.lk * d > kParallelGrain;

  // D_i = dO_i . O_i (equals sum_j P~_ij dP_ij, dropout included): one value per row.
  std::vector<A> delta(std::size_t(bh_count * p.lq));
  const std::int64_t rows = bh_count * p.lq;
  _Pragma("omp parallel for schedule(static) if (parallel)")
  for (std::int64_t r = 0; r < rows; ++r) {
    A acc = 0;
    for (std::int64_t c = 0; c < dv; ++c) acc += A(gob[r * dv + c]) * A(ob[r * dv + c]);
    delta[std::size_t(r)] = acc;
  }

  // Sweep 1: each key tile owns its rows of dK and dV and visits every query.
  const std::int64_t k_tiles = (p.lk + kKeyTile - 1) / kKeyTile;
  _Pragma("omp parallel if (parallel)")
  {
    TileGrad<T, A> tg;
    std::vector<A> kt(std::size_t(d * kKeyTile)), vt(std::size_t(dv * kKeyTile));
    _Pragma("omp for schedule(dynamic, 1)")
    for (std::int64_t w = 0; w < bh_count * k_tiles; ++w) with_isa([&]() RUMUS_INLINE {
      const std::int64_t bh = w / k_tiles, j0 = (w % k_tiles) * kKeyTile, j1 = std::min(p.lk, j0 + kKeyTile);
      const T* kh = kb + bh * p.lk * d;
      const T* vh = vb + bh * p.lk * dv;
      transpose_tile<T, A>(kh, j0, j1, d, kt.data());
      transpose_tile<T, A>(vh, j0, j1, dv, vt.data());
      T* gk = gkb + bh * p.lk * d;
      T* gv = gvb + bh * p.lk * dv;
      std::fill(gk + j0 * d, gk + j1 * d, T(0));
      std::fill(gv + j0 * dv, gv + j1 * dv, T(0));
      const std::int64_t first_query = p.causal ? std::min(p.lq, j0) : 0;
      for (std::int64_t i = first_query; i < p.lq; ++i) {
        const std::int64_t row = bh * p.lq + i;
        const T* qi = qb + row * d;
        const T* doi = gob + row * dv;
        if (!tg.compute(p, rules, bh, i, qi, kt.data(), vt.data(), doi, A(lb[row]), delta[std::size_t(row)], j0, j1))
          continue;
        for (std::int64_t j = 0; j < j1 - j0; ++j) {
          if (tg.pd[j] != A(0)) {
            T* gvj = gv + (j0 + j) * dv;
            for (std::int64_t c = 0; c < dv; ++c) gvj[c] = T(A(gvj[c]) + tg.pd[j] * A(doi[c]));
          }
          if (tg.ds[j] != A(0)) {
            T* gkj = gk + (j0 + j) * d;
            const A f = tg.ds[j] * scale;
            for (std::int64_t c = 0; c < d; ++c) gkj[c] = T(A(gkj[c]) + f * A(qi[c]));
          }
        }
      }
    });
  }

  // Sweep 2: each query tile owns its rows of dQ and visits the keys it sees.
  const std::int64_t q_tiles = (p.lq + kQueryTile - 1) / kQueryTile;
  _Pragma("omp parallel if (parallel)")
  {
    TileGrad<T, A> tg;
    std::vector<A> acc(std::size_t(kQueryTile * d)), kt(std::size_t(d * kKeyTile)), vt(std::size_t(dv * kKeyTile));
    _Pragma("omp for schedule(dynamic, 1)")
    for (std::int64_t w = 0; w < bh_count * q_tiles; ++w) with_isa([&]() RUMUS_INLINE {
      const std::int64_t bh = w / q_tiles, i0 = (w % q_tiles) * kQueryTile, i1 = std::min(p.lq, i0 + kQueryTile);
      const T* kh = kb + bh * p.lk * d;
      const T* vh = vb + bh * p.lk * dv;
      std::fill(acc.begin(), acc.end(), A(0));
      const std::int64_t last_key = p.causal ? std::min(p.lk, i1) : p.lk;
      for (std::int64_t j0 = 0; j0 < last_key; j0 += kKeyTile) {
        const std::int64_t j1 = std::min(p.lk, j0 + kKeyTile);
        transpose_tile<T, A>(kh, j0, std::min(j1, last_key), d, kt.data());
        transpose_tile<T, A>(vh, j0, std::min(j1, last_key), dv, vt.data());
        for (std::int64_t i = i0; i < i1; ++i) {
          const std::int64_t row = bh * p.lq + i;
          if (!tg.compute(p, rules, bh, i, qb + row * d, kt.data(), vt.data(), gob + row * dv, A(lb[row]),
                          delta[std::size_t(row)], j0, j1))
            continue;
          A* ai = acc.data() + (i - i0) * d;
          for (std::int64_t j = 0; j < j1 - j0; ++j) {
            if (tg.ds[j] == A(0)) continue;
            const T* kj = kh + (j0 + j) * d;
            const A f = tg.ds[j];
            for (std::int64_t c = 0; c < d; ++c) ai[c] += f * A(kj[c]);
          }
        }
      }
      for (std::int64_t i = i0; i < i1; ++i) {
        T* gq = gqb + (bh * p.lq + i) * d;
        const A* ai = acc.data() + (i - i0) * d;
        for (std::int64_t c = 0; c < d; ++c) gq[c] = T(ai[c] * scale);
      }
    });
  }
}

}  // namespace

void CpuBackend::attention_forward(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k,
                                   TensorArg v, TensorArg mask) {
  for (TensorArg t : {out, lse, q, k, v}) require_contiguous(t);
  if (q.dtype == DType::f32) return forward_impl<float>(p, out, lse, q, k, v, mask);
  if (q.dtype == DType::f64) return forward_impl<double>(p, out, lse, q, k, v, mask);
  throw DTypeError(std::string("scaled_dot_product_attention: cpu kernel supports f32 and f64, got ") +
                   std::string(dtype_name(q.dtype)));
}

void CpuBackend::attention_backward(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v,
                                    TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out,
                                    TensorArg lse, TensorArg mask) {
  for (TensorArg t : {grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse}) require_contiguous(t);
  if (q.dtype == DType::f32) return backward_impl<float>(p, grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse, mask);
  if (q.dtype == DType::f64)
    return backward_impl<double>(p, grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse, mask);
  throw DTypeError(std::string("scaled_dot_product_attention: cpu kernel supports f32 and f64, got ") +
                   std::string(dtype_name(q.dtype)));
}

}  // namespace rumus::cpu
