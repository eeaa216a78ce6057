// CPU kernels of the sort family (../sort.hpp), the rows spread over threads;
// topk selects its k by a heap instead of sorting the row.
// A row of at least kRadixMin elements is sorted by an LSD radix sort of
// order-preserving unsigned keys (linear in n, and stable by construction);
// shorter rows by a stable comparison sort of their positions.
#include "../sort.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "cpu_backend.hpp"
#include "cpu_loops.hpp"

namespace rumus::cpu {
namespace {

// Below this a row's comparison sort beats the radix sort's fixed cost (a
// histogram of 256 buckets per key byte). f32 rows on one thread: the
// comparison sort took 0.7x the radix sort's time at 16, 1.4x at 32, 6x at 512.
constexpr std::int64_t kRadixMin = 32;

template <class A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return std::isnan(v);
  else return false;
}

// The unsigned key of a value's place in ascending order: floats by their
// bits with negatives reversed, -0 as +0 (equal, so they keep their order)
// and every NaN above +inf; signed integers with the sign bit flipped.
inline std::uint32_t key_of(float v) {
  if (std::isnan(v)) return std::numeric_limits<std::uint32_t>::max();
  if (v == 0.0f) v = 0.0f;
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
inline std::uint64_t key_of(double v) {
  if (std::isnan(v)) return std::numeric_limits<std::uint64_t>::max();
  if (v == 0.0) v = 0.0;
  std::uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u >> 63) ? ~u : (u | (std::uint64_t(1) << 63));
}
inline std::uint32_t key_of(std::int32_t v) { return std::uint32_t(v) ^ 0x80000000u; }
inline std::uint64_t key_of(std::int64_t v) { return std::uint64_t(v) ^ (std::uint64_t(1) << 63); }
inline std::uint8_t key_of(std::uint8_t v) { return v; }
inline std::uint8_t key_of(std::int8_t v) { return std::uint8_t(v) ^ 0x80u; }
inline std::uint16_t key_of(std::int16_t v) { return std::uint16_t(std::uint16_t(v) ^ 0x8000u); }

// Stable LSD radix sort of n (key, position) pairs by key, one byte a pass;
// a byte every key shares costs no pass. tmp_* are scratch of the same size;
// the sorted pairs end in key and pos (the pointers are swapped).
template <class K>
void radix_sort(std::size_t n, K*& key, std::uint32_t*& pos, K*& tmp_key, std::uint32_t*& tmp_pos) {
  constexpr int kPasses = int(sizeof(K));
  std::array<std::array<std::uint32_t, 256>, kPasses> count{};
  for (std::size_t i = 0; i < n; ++i)
    for (int p = 0; p < kPasses; ++p) ++count[p][(key[i] >> (8 * p)) & 0xff];
  for (int p = 0; p < kPasses; ++p) {
    std::array<std::uint32_t, 256>& c = count[p];
    if (c[(key[0] >> (8 * p)) & 0xff] == n) continue;
    std::uint32_t start = 0;
    for (std::uint32_t& b : c) {
      const std::uint32_t size = b;
      b = start;
      start += size;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t at = c[(key[i] >> (8 * p)) & 0xff]++;
      tmp_key[at] = key[i];
      tmp_pos[at] = pos[i];
    }
    std::swap(key, tmp_key);
    std::swap(pos, tmp_pos);
  }
}

// One thread's radix scratch for rows of n, from the backend's block cache:
// fresh pages would cost a page fault each on every call (most of a 1M sort).
template <class K>
struct RadixScratch {
  Backend& be;
  std::size_t bytes;
  void* block;
  RadixScratch(Backend& b, std::int64_t n)
      : be(b), bytes(std::size_t(n) * 2 * (sizeof(K) + sizeof(std::uint32_t))), block(b.allocate(bytes)) {}
  RadixScratch(const RadixScratch&) = delete;
  RadixScratch& operator=(const RadixScratch&) = delete;
  ~RadixScratch() { be.deallocate(block, bytes); }
};

template <class T, class K>
void radix_sort_row(const T* row, T* y, std::int64_t* order, std::int64_t n, bool descending, RadixScratch<K>& s) {
  // The 32-bit positions first: their 2 * n words take 8 * n bytes, which
  // keeps the keys after them aligned (K's alignment is at most 8).
  std::uint32_t* pos = static_cast<std::uint32_t*>(s.block);
  std::uint32_t* tmp_pos = pos + n;
  K* key = reinterpret_cast<K*>(tmp_pos + n);
  K* tmp_key = key + n;
  for (std::int64_t j = 0; j < n; ++j) {
    // Half types sort by their float value; descending order reverses the keys
    // and keeps equal keys in place, so ties stay in order and NaN comes first.
    const K k = key_of(load(row[j]));
    key[j] = descending ? K(~k) : k;
    pos[j] = std::uint32_t(j);
  }
  radix_sort(std::size_t(n), key, pos, tmp_key, tmp_pos);
  for (std::int64_t j = 0; j < n; ++j) {
    const std::uint32_t at = pos[j];
    order[j] = at;
    y[j] = row[at];
  }
}

template <class T>
void comparison_sort_row(const T* row, T* y, std::int64_t* order, std::int64_t n, bool descending) {
  std::iota(order, order + n, std::int64_t(0));
  // NaN is the largest value; stable_sort keeps equal values in order.
  auto before = [&](std::int64_t a, std::int64_t b) {
    const acc_t<T> va = load(row[a]), vb = load(row[b]);
    const bool na = is_nan(va), nb = is_nan(vb);
    if (na || nb) return descending ? na && !nb : nb && !na;
    return descending ? va > vb : va < vb;
  };
  std::stable_sort(order, order + n, before);
  for (std::int64_t j = 0; j < n; ++j) y[j] = row[order[j]];
}

void sort(Backend& be, TensorArg values, TensorArg indices, TensorArg in, bool descending) {
  for (TensorArg t : {values, indices, in}) require_contiguous("sort", t);
  const Shape& s = in.layout->shape;
  if (s.size() != 2 || values.layout->shape != s || indices.layout->shape != s || indices.dtype != DType::i64)
    throw Error("sort: cpu kernel needs equal 2-D views and i64 indices");
  const std::int64_t rows = s[0], n = s[1];
  std::int64_t* ix = base_of<std::int64_t>(indices);
  // Positions are kept in 32 bits by the radix sort.
  const bool radix = n >= kRadixMin && n <= std::int64_t(std::numeric_limits<std::uint32_t>::max());
  RUMUS_DISPATCH_ALL(in.dtype, "sort", [&] {
    using T = scalar_t;
    const T* x = base_of<T>(in);
    T* y = base_of<T>(values);
    _Pragma("omp parallel if (rows * n > kParallelGrain && rows > 1)") {
      // Each thread's scratch, kept across its rows.
      RadixScratch<decltype(key_of(load(T())))> scratch(be, radix ? n + 1 : 0);
      _Pragma("omp for schedule(dynamic)")
      for (std::int64_t r = 0; r < rows; ++r) {
        if (radix) radix_sort_row(x + r * n, y + r * n, ix + r * n, n, descending, scratch);
        else comparison_sort_row(x + r * n, y + r * n, ix + r * n, n, descending);
      }
    }
  });
}

// Whether element a of `row` comes before element b in the sort's order:
// by value (NaN the largest), then by position, so a strict total order and
// the selection below picks exactly the sort's first k.
template <class T>
struct Before {
  const T* row;
  bool largest;
  bool operator()(std::int64_t a, std::int64_t b) const {
    const acc_t<T> va = load(row[a]), vb = load(row[b]);
    const bool na = is_nan(va), nb = is_nan(vb);
    if (na || nb) {
      if (na != nb) return largest ? na : nb;
    } else if (va != vb) {
      return largest ? va > vb : va < vb;
    }
    return a < b;
  }
};

// The k first positions of [begin, end) under `before`, in no order: a heap
// whose top is the last one kept, so most elements cost one comparison.
template <class T>
void select_range(const Before<T>& before, std::int64_t begin, std::int64_t end, std::int64_t k,
                  std::vector<std::int64_t>& kept) {
  kept.clear();
  for (std::int64_t e = begin; e < end; ++e) {
    if (std::int64_t(kept.size()) < k) {
      kept.push_back(e);
      std::push_heap(kept.begin(), kept.end(), before);
    } else if (before(e, kept.front())) {
      std::pop_heap(kept.begin(), kept.end(), before);
      kept.back() = e;
      std::push_heap(kept.begin(), kept.end(), before);
    }
  }
}

// Rows spread over threads; a row longer than kChunk elements is also split
// into chunks (for one long row, every thread takes a part), whose selections
// are merged.
constexpr std::int64_t kChunk = std::int64_t(1) << 16;

void topk(Backend&, TensorArg values, TensorArg indices, TensorArg in, std::int64_t k, bool largest) {
  for (TensorArg t : {values, indices, in}) require_contiguous("topk", t);
  const Shape& s = in.layout->shape;
  if (s.size() != 2 || values.layout->shape != Shape{s[0], k} || indices.layout->shape != Shape{s[0], k} ||
      indices.dtype != DType::i64 || k < 0 || k > s[1])
    throw Error("topk: cpu kernel needs a 2-D input, [rows, k] outputs and i64 indices");
  const std::int64_t rows = s[0], n = s[1];
  if (rows == 0 || k == 0) return;
  const std::int64_t chunks = std::max<std::int64_t>(1, std::min<std::int64_t>(omp_get_max_threads(), n / kChunk));
  std::int64_t* ix = base_of<std::int64_t>(indices);
  RUMUS_DISPATCH_ALL(in.dtype, "topk", [&] {
    using T = scalar_t;
    const T* x = base_of<T>(in);
    T* y = base_of<T>(values);
    std::vector<std::vector<std::int64_t>> kept(std::size_t(rows * chunks));
    _Pragma("omp parallel for schedule(dynamic) if (rows * n > kParallelGrain)")
    for (std::int64_t job = 0; job < rows * chunks; ++job) {
      const std::int64_t r = job / chunks, c = job % chunks;
      select_range(Before<T>{x + r * n, largest}, n * c / chunks, n * (c + 1) / chunks, k, kept[std::size_t(job)]);
    }
    _Pragma("omp parallel for schedule(dynamic) if (rows > 1 && rows * k > kParallelGrain)")
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<std::int64_t> order;
      for (std::int64_t c = 0; c < chunks; ++c) {
        const auto& part = kept[std::size_t(r * chunks + c)];
        order.insert(order.end(), part.begin(), part.end());
      }
      const Before<T> before{x + r * n, largest};
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (std::int64_t j = 0; j < k; ++j) {
        ix[r * k + j] = order[std::size_t(j)];
        y[r * k + j] = x[r * n + order[std::size_t(j)]];
      }
    }
  });
}

}  // namespace
}  // namespace rumus::cpu

namespace rumus {

RUMUS_KERNEL_FAMILY(cpu, sort) {
  register_kernel<SortKernel>(Device::Kind::cpu, kAllDTypes, &cpu::sort);
  register_kernel<TopkKernel>(Device::Kind::cpu, kAllDTypes, &cpu::topk);
}

}  // namespace rumus
