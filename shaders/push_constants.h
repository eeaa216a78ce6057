// Push-constant layouts, one per kernel family, written once for both sides:
// the shaders (GLSL, which sees only its own block, chosen by defining
// PUSH_<FAMILY> before including this file) and their hosts (C++, which sees
// every block as a struct in rumus::vulkan::push). Members are 4-byte scalars
// and arrays of them, so std430 and C++ lay them out alike.
#ifdef __cplusplus
#define RUMUS_PUSH_BLOCK(name) struct name
#define RUMUS_PUSH_END ;
#else
#define RUMUS_PUSH_BLOCK(name) layout(push_constant) uniform name
#define RUMUS_PUSH_END pc;
#endif

#define PW_DIMS 4      // dims per pointwise dispatch; the host loops over outer ones
#define REDUCE_DIMS 6  // non-trivial dims a reduction takes

#ifdef PUSH_POINTWISE
RUMUS_PUSH_BLOCK(PointwisePush) {
  uint n, rank;
  float p0, p1;
  uint shape[PW_DIMS];
  int offset[4];
  int stride[4 * PW_DIMS];  // operand k, dim d at k * PW_DIMS + d
  uint p0_lo, p0_hi, p1_lo, p1_hi;  // p0, p1 as doubles (the f64 variant reads these)
} RUMUS_PUSH_END
#endif

#ifdef PUSH_REDUCE
RUMUS_PUSH_BLOCK(ReducePush) {
  uint n_out, n_red, rank, reduced_mask;
  int offset_out, offset_in;
  uint shape[REDUCE_DIMS];      // input shape
  int stride_in[REDUCE_DIMS];
  int stride_out[REDUCE_DIMS];  // 0 in reduced dims
} RUMUS_PUSH_END
#endif

// column_reduce.comp: [batch, rows, columns] with contiguous columns (units
// of 4 floats when aligned); workgroup y reduces rows [y run, (y + 1) run)
// into out row y (part_stride apart); divide_by != 0 divides the result (a mean).
#ifdef PUSH_COLUMN_REDUCE
RUMUS_PUSH_BLOCK(ColumnReducePush) {
  uint rows, units, run, divide_by;
  int offset_in, row_stride, batch_stride_in;
  int offset_out, part_stride, batch_stride_out;
} RUMUS_PUSH_END
#endif

// Split-K: z = batch * splits + split; each split sums its K chunk and writes
// its own C slice (batch_c apart); the host adds the slices.
#ifdef PUSH_GEMM
RUMUS_PUSH_BLOCK(GemmPush) {
  uint M, N, K, lda, ldb, ldc;
  uint offset_a, offset_b, offset_c, batch_a, batch_b, batch_c;
  float alpha, beta;
  uint splits, k_chunk;
  uint offset_bias;  // gemm.comp with HAS_BIAS: where the [N] bias starts in binding 3
} RUMUS_PUSH_END
#endif

// The f64 GEMM (gemm_f64.comp): alpha and beta as the words of doubles.
#ifdef PUSH_GEMM_F64
RUMUS_PUSH_BLOCK(GemmF64Push) {
  uint M, N, K, lda, ldb, ldc;
  uint offset_a, offset_b, offset_c, batch_a, batch_b, batch_c;
  uint alpha_lo, alpha_hi, beta_lo, beta_hi;
} RUMUS_PUSH_END
#endif

#ifdef PUSH_RANDOM
RUMUS_PUSH_BLOCK(RandomPush) {
  uint n, offset_out;
  uint seed_lo, seed_hi, counter_lo, counter_hi;
  float a, b;
  uint range_lo, range_hi;  // randint: b - a as a 64-bit integer; bernoulli: 24-bit threshold
  int low_lo, low_hi;       // randint: a as a 64-bit integer
  uint a_lo, a_hi, b_lo, b_hi;  // a, b as doubles (the f64 variant reads these)
  uint offset_in, offset_result;  // DROPOUT: x (binding 2) and x * mask (binding 3)
} RUMUS_PUSH_END
#endif

#ifdef PUSH_OPTIM
RUMUS_PUSH_BLOCK(OptimPush) {
  uint n;
  int off_p, off_g, off_m, off_v, off_s;  // off_s: the per-step scalars (SCALARS)
  float lr, momentum, dampening, weight_decay, beta1, beta2, eps, c1, c2;  // c1, c2: bias corrections
} RUMUS_PUSH_END
#endif

#ifdef PUSH_OPTIM_FOREACH
// optim_foreach.comp: slot k has n[k] elements and workgroups from first[k]
// on. SGD takes 6 slots of 4 bindings, Adam 4 of 5.
#define OPTIM_FOREACH_SLOTS 6
#define OPTIM_FOREACH_ADAM_SLOTS 4
RUMUS_PUSH_BLOCK(OptimForeachPush) {
  uint n[OPTIM_FOREACH_SLOTS];
  uint first[OPTIM_FOREACH_SLOTS];
  float lr, momentum, dampening, weight_decay, beta1, beta2, eps, c1, c2;  // c1, c2: bias corrections
} RUMUS_PUSH_END
#endif

#ifdef PUSH_CONV
RUMUS_PUSH_BLOCK(ConvPush) {
  uint batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w;
  int pad_h, pad_w;
  uint dilation_h, dilation_w, out_h, out_w;
  int in_offset, cols_offset;
  int in_stride[4];  // im2col: input strides; col2im: unused (output is contiguous)
  int cols_stride[3];
  uint total;
} RUMUS_PUSH_END
#endif

// Implicit-GEMM convolution (conv_igemm.comp): the geometry, the GEMM of one
// group (M x N, reduction K), element offsets of bindings 0-3, split-K
// (backward weight): z = group * splits + split sums K-range
// [split * k_chunk, (split + 1) * k_chunk), and the first column tile of this
// dispatch (grids wider than a device allows are cut into several).
#ifdef PUSH_CONV_IGEMM
RUMUS_PUSH_BLOCK(ConvIgemmPush) {
  uint batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w;
  int pad_h, pad_w;
  uint dilation_h, dilation_w, out_h, out_w, out_channels, groups;
  uint M, N, K;
  uint off0, off1, off2, off3;
  uint splits, k_chunk, tile_n0;
} RUMUS_PUSH_END
#endif

// Winograd F(2x2, 3x3) convolution (conv_winograd.comp). The product it
// feeds: [16, rows, P] = U [16, rows, reduction] @ V [16, reduction, P] over
// P = batch * tiles_h * tiles_w output tiles of 2 x 2. The image the input
// transform reads is [batch, reduction, height, width]; the result the output
// transform writes is [batch, rows, out_h, out_w]. The weight transform reads
// [rows, reduction, 3, 3], or with flip [reduction, rows, 3, 3] turned 180
// degrees (the data gradient's kernel). off_src, off_dst, off_bias: element
// offsets of bindings 1, 0, 2; total: the items of this dispatch.
#ifdef PUSH_CONV_WINOGRAD
RUMUS_PUSH_BLOCK(ConvWinogradPush) {
  uint batch, reduction, height, width;
  int pad_h, pad_w;
  uint rows, out_h, out_w, tiles_h, tiles_w, tiles;
  uint off_src, off_dst, off_bias;
  uint total, flip;
} RUMUS_PUSH_END
#endif

#ifdef PUSH_POOL
RUMUS_PUSH_BLOCK(PoolPush) {  // the planes' sizes, kernel and stride are pool.comp's specialisation constants
  uint planes;
  int pad_h, pad_w;
  uint dilation_h, dilation_w, count_include_pad;
  int off0, off1, off2;
  uint total;
} RUMUS_PUSH_END
#endif

#ifdef PUSH_SOFTMAX
RUMUS_PUSH_BLOCK(SoftmaxPush) {
  uint rows, cols;
  int off0, off1, off2;
} RUMUS_PUSH_END
#endif

// layer_norm: eps as the bits of a float (eps_lo) or of a double (the f64 variant).
#ifdef PUSH_LAYER_NORM
RUMUS_PUSH_BLOCK(LayerNormPush) {
  uint rows, d, block;
  uint off0, off1, off2, off3, off4, off5;
  uint eps_lo, eps_hi;
} RUMUS_PUSH_END
#endif

// batch_norm.comp: x is [n, c, hw]; each channel's m = n * hw values are
// summed in `parts` chunks of `chunk` (the last may be short); off[] are the
// operands' element offsets in binding order (src/backend/vulkan/batch_norm.cpp);
// eps and momentum as the bits of a float (lo) or of a double (the f64 variant).
#ifdef PUSH_BATCH_NORM
RUMUS_PUSH_BLOCK(BatchNormPush) {
  uint n, c, hw, parts, chunk;
  uint off[8];
  uint eps_lo, eps_hi, momentum_lo, momentum_hi;
} RUMUS_PUSH_END
#endif

// index_select and index_add.
// nll.comp: ignore_index as the two halves of an i64.
#ifdef PUSH_NLL
RUMUS_PUSH_BLOCK(NllPush) {
  uint rows, cols, ignore_lo, ignore_hi;
  int off[5];  // bindings 0-4 (binding 3 of the forward is the fault record)
} RUMUS_PUSH_END
#endif

#ifdef PUSH_INDEX
RUMUS_PUSH_BLOCK(IndexPush) {
  uint outer, n, m, inner, index_outer;
  int off_big, off_small, off_index;
  uint total;  // outer * m * inner
} RUMUS_PUSH_END
#endif

// Prefix sums and products (shaders/scan.comp) along the middle dim of
// contiguous [outer, n, inner] views; op is ScanOp (0 sum, 1 product), or
// ExtremeOp (0 max, 1 min) in the cumextreme variant, which writes indices too.
// lstm_cell.comp: one LSTM step over [batch, hidden] units; off[] are the
// operands' element offsets in binding order (src/backend/vulkan/lstm.cpp).
#ifdef PUSH_LSTM
RUMUS_PUSH_BLOCK(LstmPush) {
  uint batch, hidden, has_dc;
  int off[7];
} RUMUS_PUSH_END
#endif

#ifdef PUSH_SCAN
RUMUS_PUSH_BLOCK(ScanPush) {
  uint outer, n, inner, op;
  int off_out, off_in, off_indices;
} RUMUS_PUSH_END
#endif

// Bitonic sort of the rows of [rows, n] (shaders/sort.comp): stage 1 is one
// compare-exchange pass over pairs `j` apart within blocks of `k` (the block's
// mirror pairs when flip is set), 2 writes the values, 3 sorts blocks of 512
// positions in shared memory, 4 ends the merge of blocks of `k` there.
#ifdef PUSH_SORT
RUMUS_PUSH_BLOCK(SortPush) {
  uint rows, n, padded, stage, k, j, flip, descending;
  int off_values, off_indices, off_in;
} RUMUS_PUSH_END
#endif

// Fused attention (shaders/attention.comp). Bindings: 0 q, 1 k, 2 v, 3 out,
// 4 lse, 5 mask, 6 grad_out, 7 grad_q, 8 grad_k, 9 grad_v; off[b] is binding
// b's element offset.
#ifdef PUSH_ATTENTION
RUMUS_PUSH_BLOCK(AttentionPush) {
  uint bh, heads, lq, lk, d, dv;
  float scale;
  uint flags;                       // bit 0 causal; bits 1-2 the mask's kind; bits 8-15 its dtype code
  int mask_off;
  int mask_stride[4];
  uint dropout_threshold;           // keep when the draw's top 24 bits are >= this; 0 = no dropout
  float keep_scale;
  uint seed_lo, seed_hi, counter_lo, counter_hi;
  int off[9];                       // bindings 0-4 and 6-9 (the mask's is mask_off)
  uint qkv_slots, out_slots, grad_slots;  // how q/k/v, out/grad_out and the grads lie: head_slots()
} RUMUS_PUSH_END
#ifndef __cplusplus
// Mask kinds: 0 none, 1 keep where nonzero, 2 additive.
#define ATT_CAUSAL ((pc.flags & 1u) != 0u)
#define ATT_MASK_KIND ((pc.flags >> 1) & 3u)
#define ATT_MASK_DT (pc.flags >> 8)
// Where head bh's rows of an operand `len` rows long and `width` wide start,
// and how far apart they lie: heads one after another (slots 0), or
// interleaved along rows `slots` head widths apart (a view of [B, L, slots, W]).
int head_base(uint slots, uint bh, uint len, uint width) {
  return int(slots == 0u ? bh * len * width : ((bh / pc.heads) * len * slots + bh % pc.heads) * width);
}
uint row_stride(uint slots, uint width) { return slots == 0u ? width : slots * width; }
// Element offset of row i of head bh, per operand.
#define ATT_ROW(b, slots, len, width, bh, i) (pc.off[b] + head_base(slots, bh, len, width) + int((i) * row_stride(slots, width)))
#define Q_ROW(bh, i) ATT_ROW(0, pc.qkv_slots, pc.lq, pc.d, bh, i)
#define K_ROW(bh, j) ATT_ROW(1, pc.qkv_slots, pc.lk, pc.d, bh, j)
#define V_ROW(bh, j) ATT_ROW(2, pc.qkv_slots, pc.lk, pc.dv, bh, j)
#define O_ROW(bh, i) ATT_ROW(3, pc.out_slots, pc.lq, pc.dv, bh, i)
#define GO_ROW(bh, i) ATT_ROW(5, pc.out_slots, pc.lq, pc.dv, bh, i)
#define GQ_ROW(bh, i) ATT_ROW(6, pc.grad_slots, pc.lq, pc.d, bh, i)
#define GK_ROW(bh, j) ATT_ROW(7, pc.grad_slots, pc.lk, pc.d, bh, j)
#define GV_ROW(bh, j) ATT_ROW(8, pc.grad_slots, pc.lk, pc.dv, bh, j)
#endif
#endif
