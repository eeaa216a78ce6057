#pragma once
// The Vulkan implementation of Backend for one physical device.
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "allocator.hpp"
#include "context.hpp"
#include "gemm_tuner.hpp"
#include "pipelines.hpp"
#include "../../core/device_registry.hpp"
#include "../attention.hpp"
#include "../backend.hpp"
#include "../conv.hpp"
#include "../gather.hpp"
#include "../gemm.hpp"
#include "../layer_norm.hpp"
#include "../optimizer_step.hpp"
#include "../pointwise.hpp"
#include "../pool.hpp"
#include "../random.hpp"
#include "../reduce.hpp"
#include "../softmax.hpp"
#include "../strided.hpp"
#include "stream.hpp"

namespace rumus::vulkan {

namespace push {
struct GemmPush;  // push_constants.hpp
}

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(int index);
  ~VulkanBackend() override;

  Device device() const override { return Device::vulkan(index_); }

  void* allocate(std::size_t nbytes) override;
  void deallocate(void* data, std::size_t nbytes) override;
  void write(Storage& dst, std::size_t byte_offset, const void* src, std::size_t nbytes) override;
  void read(const Storage& src, std::size_t byte_offset, void* dst, std::size_t nbytes) override;
  void synchronize() override;

  // The kernels of the older families, registered from their files
  // (kernels_<family>.cpp) through kernel_of<&VulkanBackend::member>.
  void fill(TensorArg out, double value);
  void copy(TensorArg out, TensorArg in);
  void unary(UnaryOp op, TensorArg out, TensorArg in, double p0, double p1);
  void binary(BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1);
  void where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b);
  void reduce(ReduceOp op, TensorArg out, TensorArg in);
  void gemm(const GemmArgs& args);
  void random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a, double b,
              TensorArg state);
  void dropout_forward(TensorArg out, TensorArg mask, TensorArg in, std::uint64_t seed, std::uint64_t offset,
                       double keep, double scale);
  void sgd_step(const SgdKernelArgs& s, TensorArg param, TensorArg grad, TensorArg momentum_buf);
  void adam_step(const AdamKernelArgs& s, TensorArg param, TensorArg grad, TensorArg m, TensorArg v);
  void amp_unscale(TensorArg out, TensorArg grad, TensorArg found_inf, double inv_scale);

  void im2col(const Conv2dGeometry& g, TensorArg cols, TensorArg in);
  void col2im(const Conv2dGeometry& g, TensorArg out, TensorArg cols);
  void conv2d_forward(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups, TensorArg out,
                      TensorArg in, TensorArg weight, TensorArg bias, bool relu);
  void conv2d_backward_data(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                            TensorArg grad_in, TensorArg grad_out, TensorArg weight);
  void conv2d_backward_weight(const Conv2dGeometry& g, std::int64_t out_channels, std::int64_t groups,
                              TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out, TensorArg in);
  void pool2d_forward(const Pool2dParams& p, TensorArg out, TensorArg indices, TensorArg in);
  void pool2d_backward(const Pool2dParams& p, TensorArg grad_in, TensorArg grad_out, TensorArg indices);
  void softmax_forward(TensorArg out, TensorArg in, bool log);
  void softmax_backward(TensorArg grad_in, TensorArg grad_out, TensorArg out, bool log);
  void layer_norm_forward(TensorArg out, TensorArg mean, TensorArg invstd, TensorArg x, TensorArg weight,
                          TensorArg bias, double eps);
  void layer_norm_backward(TensorArg grad_x, TensorArg grad_weight, TensorArg grad_bias, TensorArg grad_out,
                           TensorArg x, TensorArg mean, TensorArg invstd, TensorArg weight);
  void index_select(TensorArg out, TensorArg src, TensorArg index);
  void index_add(TensorArg out, TensorArg index, TensorArg src);
  void attention_forward(const AttentionParams& p, TensorArg out, TensorArg lse, TensorArg q, TensorArg k, TensorArg v,
                         TensorArg mask);
  void attention_backward(const AttentionParams& p, TensorArg grad_q, TensorArg grad_k, TensorArg grad_v,
                          TensorArg grad_out, TensorArg q, TensorArg k, TensorArg v, TensorArg out, TensorArg lse,
                          TensorArg mask);

  DeviceStats stats() const override;

  // The f32 GEMM's tile tuner (off unless RUMUS_VULKAN_GEMM_TUNE=1).
  GemmTuner& gemm_tuner() { return *tuner_; }
  // Puts another tuner in its place (tests: a cache file of their own); returns the old one.
  std::unique_ptr<GemmTuner> replace_gemm_tuner(std::unique_ptr<GemmTuner> t) {
    std::swap(t, tuner_);
    return t;
  }
  bool can_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<CapturedWork> end_capture() override;
  void abort_capture() override;

 // What kernel family files (vulkan/<family>.cpp, src/backend/kernel_registry.hpp) build on.
  struct Operand {
    TensorArg arg;
    bool written;
  };
  // Records one kernel: pipeline from (shader, spec), operands bound in order.
  void launch(const std::string& shader, const std::vector<std::uint32_t>& spec, std::span<const Operand> operands,
              const void* push, std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy = 1,
              std::uint32_t gz = 1);
  // The device's features (float atomics, f64, subgroups).
  const Context& context() const { return *ctx_; }
  // Gather kernels' fault codes (binding 3 of their shaders).
  enum class IndexKernel : std::uint32_t { index_select = 1, index_add = 2, gather = 3, scatter_add = 4 };
  // The fault record as a kernel operand; marks that a check is due at the next wait.
  TensorArg index_fault_operand();

 private:
  friend class VulkanCapturedWork;
  // The shader to run for arithmetic on `dtype`: its f64 variant (`<name>_f64`,
  // double arithmetic) for f64, and for i64, which float would round above 2^24.
  static std::string shader_for(const char* shader, DType dtype);
  std::string layer_norm_rows_shader(DType dtype) const;
  // One pointwise kernel over out's shape (elementwise.comp).
  void pointwise(const char* op_name, PointwiseKind kind, std::uint32_t op, std::span<const TensorArg> args, double p0, double p1,
                 std::uint32_t elem_bytes = 4, const std::uint32_t* bits = nullptr);
  void release_finished();
  // The tensor-core GEMM (gemm_coopmat.cpp) where coopmat_gemm_applies().
  void coopmat_gemm(const GemmArgs& g);
  // reduce() in one launch (two for one long output), down contiguous
  // columns in column_reduce.comp (reduce_down_columns), or in two passes
  // down other columns (reduce_columns). `serial`: one invocation per output;
  // `no_columns`: the one-launch choices only.
  enum class ReducePlan { any, serial, no_columns };
  void reduce_pass(ReduceOp op, TensorArg out, TensorArg in, ReducePlan plan);
  bool reduce_columns(ReduceOp op, TensorArg out, TensorArg in, const StridedDims<2>& dims);
  bool reduce_down_columns(ReduceOp op, TensorArg out, TensorArg in, const StridedDims<2>& dims);
  // Split-K, for either GEMM kernel: `launch_slices` runs the kernel with `pc`
  // set to write [batch, splits, m, n] f32 slices (alpha applied) into `parts`;
  // the slices are then summed into C with beta (gemm.cpp).
  void gemm_split_k(const GemmArgs& g, push::GemmPush pc, std::uint32_t splits,
                    const std::function<void(TensorArg parts, const push::GemmPush& pc)>& launch_slices);
  // The f32 GEMM's tile from the override or the tuner (gemm_tune.cpp);
  // nothing leaves the choice to the heuristic's tile.
  std::optional<GemmTile> gemm_tile_for(const GemmArgs& g, const GemmTile& heuristic);
  // One candidate's best time of a few runs on a scratch C, by GPU timestamps;
  // nothing when the queue has no timestamps.
  std::optional<double> time_gemm_tile(const GemmArgs& g, const GemmTile& tile);
  // With mu_ held: throws CaptureError when `op` cannot run now because a
  // capture is recording on this device (host transfers; other threads).
  void check_capture(const char* op, const char* what);
  // With mu_ held: releases `a` unless a capture pins it.
  void release(Allocation* a);
  void unpin(const std::vector<Allocation*>& used);

  // The record a gather kernel leaves when it meets an index outside [0, n)
  // (binding 3 of index_select.comp and index_add.comp, and their
  // per-element variants gather and scatter_add).
  struct IndexFault {
    std::uint32_t seen;    // nonzero once a kernel met a bad index
    std::int32_t index;    // the first one recorded
    std::uint32_t n;       // the size of the dim it indexed
    std::uint32_t kernel;  // an IndexKernel
  };
  static inline const Layout kIndexFaultLayout = Layout::contiguous({4});
  // With mu_ held: queue a read of the record if a gather ran since the last
  // wait, and raise its error once the wait is over.
  Allocation* queue_index_fault_read();
  void raise_index_fault(Allocation* stage);

  int index_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Allocator> memory_, staging_;
  std::unique_ptr<Pipelines> pipelines_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<GemmTuner> tuner_;
  mutable std::mutex mu_;  // one recording stream per device; callers may be on any thread
  std::uint64_t uploads_ = 0, downloads_ = 0;
  bool profiling_ = false;  // RUMUS_VULKAN_PROFILE: label dispatches for the stream's timestamps
  std::shared_ptr<Storage> index_fault_;
  bool index_kernels_pending_ = false;
  // Capture: the recording thread; allocations the capture binds or creates
  // (recording_used_), and how many live captures pin each allocation. A
  // pinned allocation freed by its tensor waits in orphans_ until unpinned.
  bool capturing_ = false;
  std::thread::id capture_thread_;
  std::unordered_set<Allocation*> recording_used_;
  bool recording_gathers_ = false;
  std::unordered_map<Allocation*, int> pins_;
  std::unordered_set<Allocation*> orphans_;
};

// A VulkanBackend member function as a registered kernel (kernel_registry.hpp):
// the registry passes the Backend, the member gets the other arguments.
template <auto Member>
struct MemberKernel;
template <class... A, void (VulkanBackend::*Member)(A...)>
struct MemberKernel<Member> {
  static void run(Backend& be, A... args) { (static_cast<VulkanBackend&>(be).*Member)(args...); }
};
template <auto Member>
inline constexpr auto* kernel_of = &MemberKernel<Member>::run;

// Conditions a registration adds to its dtypes: f64 only where the device
// computes in double.
bool runs_f64(Backend& be, DType dtype);

// The Vulkan provider: the instance's physical devices in rumus order.
detail::DeviceProvider provider();

// Workgroup count for a grid-stride loop over n elements.
std::uint32_t groups_for(std::int64_t n, std::uint32_t local);

}  // namespace rumus::vulkan
