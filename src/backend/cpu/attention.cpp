// CPU kernels of fused scaled dot-product attention (flash-attention-2
// style), in tiles of kQueryTile query rows by kKeyTile keys whose products
// are small matrix products on the calling thread (cpu_gemm.hpp). Forward:
// per block of query rows, key tiles with an online softmax (running max and
// sum), so no [lq, lk] buffer exists; only the row logsumexp is kept for backward.
// Backward recomputes each tile's probabilities from q, k and the logsumexp
// and takes dV, dK and dQ from it in one pass. A work item owns the key tiles
// of one (batch, head), so no two threads write the same dK or dV row; with
// few heads a head's key tiles are split into parts whose dQ are summed in a
// fixed order after, so results do not depend on the number of threads.
#include "../attention.hpp"
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../philox.hpp"
#include "cpu_backend.hpp"
#include "cpu_gemm.hpp"
#include "cpu_loops.hpp"
#include "isa.hpp"
#include "vector_math.hpp"

namespace rumus::cpu {

namespace {

constexpr std::int64_t kQueryTile = 64;
constexpr std::int64_t kKeyTile = 64;
// Backward work items wanted at least: fewer (batch, head) pairs than this
// split their key tiles. A constant, not the thread count: the split decides
// the order of dQ's sums.
constexpr std::int64_t kBackwardWork = 32;

void require_contiguous(TensorArg t) {
  if (!t.layout->is_contiguous())
    throw Error("scaled_dot_product_attention: cpu kernel needs contiguous row logsumexps");
}

// The rows of a [B, H, L, W] operand with unit column stride, wherever its
// heads lie; `ld`, the distance between rows, is the matrix products' leading dim.
template <class T>
struct Rows {
  T* base;
  std::int64_t heads, batch_stride, head_stride, ld;
  Rows(TensorArg t, std::int64_t h) : base(base_of<T>(t)), heads(h) {
    const Shape &n = t.layout->shape, &st = t.layout->strides;
    if (n[3] > 1 && st[3] != 1)
      throw Error("scaled_dot_product_attention: cpu kernel needs operands whose rows are contiguous");
    batch_stride = st[0];
    head_stride = st[1];
    ld = n[2] > 1 ? st[2] : std::max<std::int64_t>(n[3], 1);
  }
  T* head(std::int64_t bh) const { return base + bh / heads * batch_stride + bh % heads * head_stride; }
  T* row(std::int64_t bh, std::int64_t i) const { return head(bh) + i * ld; }
};

// Reads the optional mask and the causal rule for one (bh, i) row.
struct RowRules {
  const AttentionParams& p;
  TensorArg mask;
  bool has_mask, bool_mask;
  const Shape* ms = nullptr;

  RowRules(const AttentionParams& params, TensorArg m) : p(params), mask(m) {
    has_mask = m.storage != nullptr;
    bool_mask = has_mask && (m.dtype == DType::boolean || m.dtype == DType::u8);
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

// Row i's scaled scores s[0, j1 - j0) against keys [j0, j1), as the tile
// product left them, with the causal rule and the mask applied: -inf where a
// key is not seen, the additive mask added.
template <class A>
RUMUS_INLINE inline void mask_row(const RowRules& r, std::int64_t bh, std::int64_t i, std::int64_t j0, std::int64_t j1,
                                  A* s) {
  const std::int64_t jend = std::max(j0, std::min(j1, r.key_end(i)));
  for (std::int64_t j = jend; j < j1; ++j) s[j - j0] = kNegInf<A>;
  if (!r.has_mask) return;
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

// Dropout multipliers of row i for keys [j0, j1) (at most a tile): 0 or
// 1 / (1 - p), four consecutive weights per Philox draw (see
// AttentionParams). The draws go to a buffer first: a loop of independent
// draws vectorises, one interleaved with the row's elements does not.
template <class A>
RUMUS_INLINE inline void row_dropout(const AttentionParams& p, std::int64_t bh, std::int64_t i, std::int64_t j0,
                                     std::int64_t j1, A* z) {
  const A keep = p.dropout_p >= 1.0 ? A(0) : A(1) / A(1 - p.dropout_p);
  const std::uint32_t threshold = dropout_threshold(p.dropout_p);
  const std::uint64_t e0 = std::uint64_t((bh * p.lq + i) * p.lk + j0), first = e0 / 4;
  const std::int64_t quads = std::int64_t((e0 + std::uint64_t(j1 - j0) - 1) / 4 - first + 1);
  std::uint32_t words[4 * (kKeyTile / 4 + 1)];
  for (std::int64_t c = 0; c < quads; ++c) {
    const auto r = philox::draw(p.seed, p.offset + first + std::uint64_t(c));
    for (int w = 0; w < 4; ++w) words[4 * c + w] = r[w];
  }
  const std::uint32_t* row = words + e0 % 4;
  for (std::int64_t j = 0; j < j1 - j0; ++j) z[j] = (row[j] >> 8) >= threshold ? keep : A(0);
}

template <class T>
void forward_impl(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k, TensorArg v,
                  TensorArg mask) {
  const RowRules rules(p, mask);
  const std::int64_t bh_count = p.batch * p.heads, q_tiles = (p.lq + kQueryTile - 1) / kQueryTile;
  const std::int64_t d = p.d, dv = p.dv;
  const bool dropout = p.dropout_p > 0;
  const Rows<const T> qr(q, p.heads), kr(k, p.heads), vr(v, p.heads);
  const Rows<T> orows(out, p.heads);
  T* lb = base_of<T>(lse);
  const std::int64_t work = bh_count * q_tiles;
  _Pragma("omp parallel if (work > 1 && bh_count * p.lq * p.lk * d > kParallelGrain)")
  {
    // s: the tile's scores, then its (dropped) weights; acc: the rows' unnormalised outputs.
    std::vector<T> s(std::size_t(kQueryTile * kKeyTile)), z(kKeyTile), acc(std::size_t(kQueryTile * dv));
    std::vector<T> mx(kQueryTile), sum(kQueryTile);
    _Pragma("omp for schedule(dynamic, 1)")
    for (std::int64_t w = 0; w < work; ++w) {
      const std::int64_t bh = w / q_tiles, i0 = (w % q_tiles) * kQueryTile, i1 = std::min(p.lq, i0 + kQueryTile);
      const std::int64_t rows = i1 - i0;
      const T* qi = qr.row(bh, i0);
      const T* kh = kr.head(bh);
      const T* vh = vr.head(bh);
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(mx.begin(), mx.end(), kNegInf<T>);
      std::fill(sum.begin(), sum.end(), T(0));
      const std::int64_t last_key = p.causal ? std::min(p.lk, i1) : p.lk;
      for (std::int64_t j0 = 0; j0 < last_key; j0 += kKeyTile) {
        const std::int64_t j1 = std::min(p.lk, j0 + kKeyTile), cols = j1 - j0;
        gemm_on_this_thread(false, true, rows, cols, d, T(p.scale), qi, qr.ld, kh + j0 * kr.ld, kr.ld, T(0), s.data(),
                            kKeyTile);
        with_isa([&]() RUMUS_INLINE {
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t i = i0 + r;
            T* sr = s.data() + r * kKeyTile;
            mask_row<T>(rules, bh, i, j0, j1, sr);
            T tile_max = kNegInf<T>;
            _Pragma("omp simd reduction(max : tile_max)")
            for (std::int64_t j = 0; j < cols; ++j) tile_max = std::max(tile_max, sr[j]);
            if (tile_max == kNegInf<T>) {  // every key of this tile masked for this row, or a NaN score
              // std::max passes NaN over: a NaN score (in q, k or the mask) poisons the row, as in PyTorch.
              if (std::any_of(sr, sr + cols, [](T x) { return std::isnan(x); })) sum[r] = std::numeric_limits<T>::quiet_NaN();
              std::fill(sr, sr + cols, T(0));
              continue;
            }
            const T new_max = std::max(mx[r], tile_max);
            const T rescale = std::exp(mx[r] - new_max);  // exp(-inf) = 0 on the first live tile
            T* ar = acc.data() + r * dv;
            if (rescale != T(1))
              for (std::int64_t c = 0; c < dv; ++c) ar[c] *= rescale;
            mx[r] = new_max;
            for (std::int64_t j = 0; j < cols; ++j) sr[j] = std::exp(sr[j] - new_max);
            T tile_sum = 0;  // the normaliser counts dropped weights too (dropout acts after softmax)
            _Pragma("omp simd reduction(+ : tile_sum)")
            for (std::int64_t j = 0; j < cols; ++j) tile_sum += sr[j];
            sum[r] = sum[r] * rescale + tile_sum;
            if (dropout) {
              row_dropout<T>(p, bh, i, j0, j1, z.data());
              for (std::int64_t j = 0; j < cols; ++j) sr[j] *= z[j];
            }
          }
        });
        gemm_on_this_thread(false, false, rows, dv, cols, T(1), s.data(), kKeyTile, vh + j0 * vr.ld, vr.ld, T(1),
                            acc.data(), dv);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t row = bh * p.lq + i0 + r;
        T* orow = orows.row(bh, i0 + r);
        const T* ar = acc.data() + r * dv;
        if (sum[r] != T(0)) {  // NaN too: a NaN anywhere in the row's scores gives a NaN row
          const T inv = T(1) / sum[r];
          for (std::int64_t c = 0; c < dv; ++c) orow[c] = ar[c] * inv;
          lb[row] = mx[r] + std::log(sum[r]);
        } else {
          std::fill(orow, orow + dv, T(0));
          lb[row] = kNegInf<T>;
        }
      }
    }
  }
}

template <class T>
void backward_impl(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v, TensorArg grad_out,
                   TensorArg q, TensorArg k, TensorArg v, TensorArg out, TensorArg lse, TensorArg mask) {
  const RowRules rules(p, mask);
  const std::int64_t bh_count = p.batch * p.heads, d = p.d, dv = p.dv;
  const Rows<const T> qr(q, p.heads), kr(k, p.heads), vr(v, p.heads), orows(out, p.heads), gor(grad_out, p.heads);
  const Rows<T> gqr(grad_q, p.heads), gkr(grad_k, p.heads), gvr(grad_v, p.heads);
  const T* lb = base_of<T>(lse);
  const T scale = T(p.scale);
  const bool dropout = p.dropout_p > 0;
  const bool parallel = bh_count * p.lq * p.lk * d > kParallelGrain;

  // D_i = dO_i . O_i (equals sum_j P~_ij dP_ij, dropout included): one value per row.
  std::vector<T> delta(std::size_t(bh_count * p.lq));
  const std::int64_t rows_total = bh_count * p.lq;
  _Pragma("omp parallel for schedule(static) if (parallel)")
  for (std::int64_t r = 0; r < rows_total; ++r) {
    const T *go = gor.row(r / p.lq, r % p.lq), *o = orows.row(r / p.lq, r % p.lq);
    T acc = 0;
    for (std::int64_t c = 0; c < dv; ++c) acc += go[c] * o[c];
    delta[std::size_t(r)] = acc;
  }

  // Work item: a part of one head's key tiles. With one part the head's dQ is
  // summed in place; with more, each part sums into its own buffer.
  const std::int64_t k_tiles = (p.lk + kKeyTile - 1) / kKeyTile;
  const std::int64_t parts = std::max<std::int64_t>(
      1, std::min(k_tiles, (kBackwardWork + bh_count - 1) / std::max<std::int64_t>(bh_count, 1)));
  const std::int64_t head_q = p.lq * d;
  std::vector<T> dq_parts(parts > 1 ? std::size_t(parts * bh_count * head_q) : 0);
  _Pragma("omp parallel if (parallel && bh_count * parts > 1)")
  {
    // s: scores, then P~ (dropped probabilities); ds: dP, then dS (scaled); gk, gv: the key tile's dK, dV.
    std::vector<T> s(std::size_t(kQueryTile * kKeyTile)), ds(std::size_t(kQueryTile * kKeyTile)), z(kKeyTile);
    std::vector<T> gk(std::size_t(kKeyTile * d)), gv(std::size_t(kKeyTile * dv));
    _Pragma("omp for schedule(dynamic, 1)")
    for (std::int64_t w = 0; w < bh_count * parts; ++w) {
      const std::int64_t bh = w / parts, part = w % parts;
      const T* kh = kr.head(bh);
      const T* vh = vr.head(bh);
      T* gq = parts == 1 ? gqr.head(bh) : dq_parts.data() + (part * bh_count + bh) * head_q;
      const std::int64_t gq_ld = parts == 1 ? gqr.ld : d;
      for (std::int64_t i = 0; i < p.lq; ++i) std::fill(gq + i * gq_ld, gq + i * gq_ld + d, T(0));
      for (std::int64_t kt = k_tiles * part / parts; kt < k_tiles * (part + 1) / parts; ++kt) {
        const std::int64_t j0 = kt * kKeyTile, j1 = std::min(p.lk, j0 + kKeyTile), cols = j1 - j0;
        std::fill(gk.begin(), gk.end(), T(0));
        std::fill(gv.begin(), gv.end(), T(0));
        const std::int64_t first_query = p.causal ? std::min(p.lq, j0) : 0;  // earlier rows see none of these keys
        for (std::int64_t i0 = first_query / kQueryTile * kQueryTile; i0 < p.lq; i0 += kQueryTile) {
          const std::int64_t i1 = std::min(p.lq, i0 + kQueryTile), rows = i1 - i0;
          const T* qi = qr.row(bh, i0);
          const T* doi = gor.row(bh, i0);
          gemm_on_this_thread(false, true, rows, cols, d, scale, qi, qr.ld, kh + j0 * kr.ld, kr.ld, T(0), s.data(),
                              kKeyTile);
          gemm_on_this_thread(false, true, rows, cols, dv, T(1), doi, gor.ld, vh + j0 * vr.ld, vr.ld, T(0), ds.data(),
                              kKeyTile);
          with_isa([&]() RUMUS_INLINE {
            for (std::int64_t r = 0; r < rows; ++r) {
              const std::int64_t i = i0 + r, row = bh * p.lq + i;
              T* sr = s.data() + r * kKeyTile;
              T* dsr = ds.data() + r * kKeyTile;
              const T lse_i = lb[row], delta_i = delta[std::size_t(row)];
              if (lse_i == kNegInf<T>) {  // a row that sees no key
                std::fill(sr, sr + cols, T(0));
                std::fill(dsr, dsr + cols, T(0));
                continue;
              }
              mask_row<T>(rules, bh, i, j0, j1, sr);
              for (std::int64_t j = 0; j < cols; ++j) sr[j] = std::exp(sr[j] - lse_i);  // P; 0 where masked
              if (dropout) {
                row_dropout<T>(p, bh, i, j0, j1, z.data());
                for (std::int64_t j = 0; j < cols; ++j) {
                  dsr[j] = scale * sr[j] * (dsr[j] * z[j] - delta_i);
                  sr[j] *= z[j];
                }
              } else {
                for (std::int64_t j = 0; j < cols; ++j) dsr[j] = scale * sr[j] * (dsr[j] - delta_i);
              }
            }
          });
          gemm_on_this_thread(true, false, cols, dv, rows, T(1), s.data(), kKeyTile, doi, gor.ld, T(1), gv.data(), dv);
          gemm_on_this_thread(true, false, cols, d, rows, T(1), ds.data(), kKeyTile, qi, qr.ld, T(1), gk.data(), d);
          gemm_on_this_thread(false, false, rows, d, cols, T(1), ds.data(), kKeyTile, kh + j0 * kr.ld, kr.ld, T(1),
                              gq + i0 * gq_ld, gq_ld);
        }
        for (std::int64_t r = 0; r < cols; ++r) {
          std::copy_n(gk.data() + r * d, d, gkr.row(bh, j0 + r));
          std::copy_n(gv.data() + r * dv, dv, gvr.row(bh, j0 + r));
        }
      }
    }
  }
  if (parts > 1) {
    const std::int64_t n = bh_count * head_q;
    _Pragma("omp parallel for schedule(static) if (parallel)")
    for (std::int64_t e = 0; e < n; ++e) {
      T acc = 0;
      for (std::int64_t part = 0; part < parts; ++part) acc += dq_parts[std::size_t(part * n + e)];
      gqr.row(e / head_q, e % head_q / d)[e % d] = acc;
    }
  }
}

}  // namespace

void attention_forward(Backend& be, const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k,
                                   TensorArg v, TensorArg mask) {
  require_contiguous(lse);
  if (q.dtype == DType::f32) return forward_impl<float>(p, out, lse, q, k, v, mask);
  if (q.dtype == DType::f64) {
    openblas_single_threaded();
    return forward_impl<double>(p, out, lse, q, k, v, mask);
  }
  throw DTypeError(std::string("scaled_dot_product_attention: cpu kernel supports f32 and f64, got ") +
                   std::string(dtype_name(q.dtype)));
}

void attention_backward(Backend& be, const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v,
                                    TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out,
                                    TensorArg lse, TensorArg mask) {
  require_contiguous(lse);
  if (q.dtype == DType::f32) return backward_impl<float>(p, grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse, mask);
  if (q.dtype == DType::f64) {
    openblas_single_threaded();
    return backward_impl<double>(p, grad_q, grad_k, grad_v, grad_out, q, k, v, out, lse, mask);
  }
  throw DTypeError(std::string("scaled_dot_product_attention: cpu kernel supports f32 and f64, got ") +
                   std::string(dtype_name(q.dtype)));
}

}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, attention) {
  register_kernel<AttentionForwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::attention_forward);
  register_kernel<AttentionBackwardKernel>(Device::Kind::cpu, DTypeSet{DType::f32, DType::f64}, &cpu::attention_backward);
}

}  // namespace rumus
