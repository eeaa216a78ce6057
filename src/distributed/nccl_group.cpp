// NcclGroup (rumus/distributed/nccl_group.hpp): NCCL on device memory that
// Vulkan shares with CUDA (backend/device_interop.hpp).
//
// A collective on a device tensor of n bytes, W ranks:
//   1. the tensor (packed first if strided) is copied on the device into the
//      input region of the group's shared buffer; that batch is submitted, and
//      its value on the device timeline is what CUDA waits for;
//   2. on the group's CUDA stream: the wait, the NCCL call from the input
//      region into the output region, then a signal of the peer timeline;
//   3. the output region is copied on the device into the result, in a batch
//      that waits for that signal.
// The host only records: it never waits for the device or for NCCL. Regions:
//
//   all_reduce      in n, out n (copied back into the tensor)
//   reduce_scatter  in n, out n / W (a new tensor)
//   all_gather      in n, out W * n (a new tensor)
//   broadcast       in n, NCCL in place, copied back into the tensor
//
// The shared buffer grows to the largest collective; the CUDA stream and the
// device finish with the old one before it goes. CPU tensors, barriers and
// the error exchange go through the bootstrap group's exchange().
#include "rumus/distributed/nccl_group.hpp"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "../backend/device_interop.hpp"
#include "cuda_library.hpp"
#include "rumus/autograd/grad_mode.hpp"
#include "rumus/core/device_backend.hpp"
#include "rumus/core/storage.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::distributed {

namespace {

// The CUDA device that is the same GPU as `device`, or -1 (and why).
int cuda_device_of(const cuda::Library& lib, const interop::DeviceInterop& interop, Device device, std::string* why) {
  int count = 0;
  if (lib.getDeviceCount(&count) != 0 || count == 0) {
    if (why) *why = "the CUDA runtime sees no device";
    return -1;
  }
  const auto uuid = interop.uuid();
  for (int d = 0; d < count; ++d) {
    alignas(16) unsigned char prop[8192] = {};  // cudaDeviceProp is about 1 KiB: room for later versions
    if (lib.getDeviceProperties(prop, d) != 0) continue;
    if (std::memcmp(prop + 256, uuid.data(), uuid.size()) == 0) return d;
  }
  if (why) *why = fmt::format("none of the {} CUDA devices is the GPU of {}", count, device.str());
  return -1;
}

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

int nccl_dtype(DType d) {
  switch (d) {
    case DType::f32: return cuda::nccl_float32;
    case DType::f64: return cuda::nccl_float64;
    case DType::f16: return cuda::nccl_float16;
    case DType::bf16: return cuda::nccl_bfloat16;
    case DType::i32: return cuda::nccl_int32;
    case DType::i64: return cuda::nccl_int64;
    default: throw DTypeError(fmt::format("NcclGroup: no NCCL reduction for dtype {}", dtype_name(d)));
  }
}

}  // namespace

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(ProcessGroup& bootstrap, Device device, interop::DeviceInterop& interop, const cuda::Library& lib,
            int cuda_device, const cuda::NcclUniqueId& id)
      : bootstrap_(bootstrap), device_(device), interop_(interop), lib_(lib), cuda_device_(cuda_device),
        check_(default_check_requests()) {
    cuda::check(lib_.setDevice(cuda_device_), "cudaSetDevice");
    cuda::check(lib_.streamCreateWithFlags(&stream_, 1 /* cudaStreamNonBlocking */), "cudaStreamCreateWithFlags");
    device_timeline_ = import_timeline(interop_.export_device_timeline());
    peer_ = interop_.create_peer_timeline();
    peer_timeline_ = import_timeline(peer_->export_fd());
    cuda::check_nccl(lib_.ncclCommInitRank(&comm_, bootstrap_.size(), id, bootstrap_.rank()), "ncclCommInitRank");
  }

  ~NcclGroup() override {
    stop_communication();
    lib_.setDevice(cuda_device_);
    lib_.streamSynchronize(stream_);
    if (comm_) lib_.ncclCommDestroy(comm_);
    release_buffer();
    try {
      rumus::synchronize(device_);  // nothing queued waits on the peer timeline any more
    } catch (...) {
    }
    if (device_timeline_) lib_.destroyExternalSemaphore(device_timeline_);
    if (peer_timeline_) lib_.destroyExternalSemaphore(peer_timeline_);
    peer_.reset();
    lib_.streamDestroy(stream_);
  }

  int rank() const override { return bootstrap_.rank(); }
  int size() const override { return bootstrap_.size(); }
  int local_rank() const override { return bootstrap_.local_rank(); }
  int local_size() const override { return bootstrap_.local_size(); }
  std::string name() const override { return "NcclGroup"; }
  void abort(const std::string& reason) override { bootstrap_.abort(reason); }

 protected:
  void exchange(const CollectiveRequest& request, const void* in, void* out, std::size_t count) override {
    bootstrap_.exchange(request, in, out, count);
  }
  bool loopback() const override { return bootstrap_.loopback(); }
  Tensor device_collective(const CollectiveRequest& request, const Tensor& input) override;

 private:
  cuda::ExternalSemaphore import_timeline(int fd) {
    cuda::ExternalSemaphoreHandleDesc desc;
    desc.handle.fd = fd;
    cuda::ExternalSemaphore s = nullptr;
    cuda::check(lib_.importExternalSemaphore(&s, &desc), "cudaImportExternalSemaphore");
    return s;
  }
  // The shared buffer, at least `bytes` long.
  void reserve(std::size_t bytes);
  void release_buffer();
  // With check_requests: every rank's request, compared before NCCL runs
  // (a mismatch would otherwise hang or pair the wrong data).
  void check_across_ranks(const CollectiveRequest& request);

  ProcessGroup& bootstrap_;
  Device device_;
  interop::DeviceInterop& interop_;
  const cuda::Library& lib_;
  int cuda_device_;
  bool check_;
  cuda::Stream stream_ = nullptr;
  cuda::NcclComm comm_ = nullptr;
  cuda::ExternalSemaphore device_timeline_ = nullptr, peer_timeline_ = nullptr;
  std::unique_ptr<interop::PeerTimeline> peer_;
  std::uint64_t peer_value_ = 0;
  std::unique_ptr<interop::SharedBuffer> buffer_;
  cuda::ExternalMemory memory_ = nullptr;
  char* mapped_ = nullptr;  // the buffer in CUDA's address space
};

void NcclGroup::release_buffer() {
  if (!buffer_) return;
  lib_.streamSynchronize(stream_);
  lib_.free(mapped_);
  lib_.destroyExternalMemory(memory_);
  mapped_ = nullptr;
  memory_ = nullptr;
  buffer_.reset();  // once the device's copies of it are done
}

void NcclGroup::reserve(std::size_t bytes) {
  if (buffer_ && buffer_->size() >= bytes) return;
  const std::size_t size = std::max(bytes, buffer_ ? 2 * buffer_->size() : std::size_t(1) << 20);
  release_buffer();
  buffer_ = interop_.allocate(size);
  cuda::ExternalMemoryHandleDesc desc;
  desc.handle.fd = buffer_->export_fd();
  desc.size = buffer_->allocation_size();
  cuda::check(lib_.importExternalMemory(&memory_, &desc), "cudaImportExternalMemory");
  cuda::ExternalMemoryBufferDesc range;
  range.size = buffer_->size();
  void* p = nullptr;
  cuda::check(lib_.externalMemoryGetMappedBuffer(&p, memory_, &range), "cudaExternalMemoryGetMappedBuffer");
  mapped_ = static_cast<char*>(p);
}

void NcclGroup::check_across_ranks(const CollectiveRequest& request) {
  Tensor mine = empty({std::int64_t(sizeof(CollectiveRequest))}, TensorOptions{.dtype = DType::u8});
  std::memcpy(mine.storage().data(), &request, sizeof(request));
  const Tensor all = bootstrap_.all_gather(mine);
  std::vector<CollectiveRequest> requests(static_cast<std::size_t>(size()));
  std::memcpy(requests.data(), all.storage().data(), requests.size() * sizeof(CollectiveRequest));
  check_requests(requests.data(), size());
}

Tensor NcclGroup::device_collective(const CollectiveRequest& request, const Tensor& input) {
  if (input.device() != device_) return {};  // CPU tensors: the bootstrap group's exchange
  if (check_) check_across_ranks(request);
  NoGradGuard no_grad;
  const Collective op = request.op;
  const int w = size();
  const std::size_t element = dtype_size(input.dtype());
  const std::size_t n = std::size_t(input.numel()) * element;
  Shape out_shape = input.shape();
  std::size_t out_bytes = n;
  if (op == Collective::reduce_scatter) {
    out_shape[0] /= w;
    out_bytes = n / std::size_t(w);
  } else if (op == Collective::all_gather) {
    if (out_shape.empty()) out_shape = {w};
    else out_shape[0] *= w;
    out_bytes = n * std::size_t(w);
  }
  const bool in_place = op == Collective::all_reduce || op == Collective::broadcast;
  Tensor result = in_place ? input
                           : Tensor(std::make_shared<Storage>(device_, out_bytes), Layout::contiguous(out_shape),
                                    input.dtype());
  if (n == 0) return result;

  // Regions 256-byte aligned, as NCCL's kernels prefer.
  const std::size_t out_offset = op == Collective::broadcast ? 0 : round_up(n, 256);
  reserve(out_offset + out_bytes);
  const Tensor dense = input.is_contiguous() ? input : input.contiguous();
  const std::uint64_t ready = interop_.copy_to_shared(dense.storage(), std::size_t(dense.offset()) * element, *buffer_,
                                                      0, n);

  cuda::check(lib_.setDevice(cuda_device_), "cudaSetDevice");
  cuda::ExternalSemaphoreParams wait;
  wait.fence_value = ready;
  cuda::check(lib_.waitExternalSemaphoresAsync(&device_timeline_, &wait, 1, stream_), "cudaWaitExternalSemaphoresAsync");
  const char* in = mapped_;
  char* out = mapped_ + out_offset;
  const int reduce = request.reduce == Reduce::average ? cuda::nccl_avg : cuda::nccl_sum;
  switch (op) {
    case Collective::all_reduce:
      cuda::check_nccl(lib_.ncclAllReduce(in, out, std::size_t(input.numel()), nccl_dtype(input.dtype()), reduce, comm_,
                                          stream_),
                       "ncclAllReduce");
      break;
    case Collective::reduce_scatter:
      cuda::check_nccl(lib_.ncclReduceScatter(in, out, std::size_t(input.numel() / w), nccl_dtype(input.dtype()), reduce,
                                              comm_, stream_),
                       "ncclReduceScatter");
      break;
    case Collective::all_gather:  // bytes: any dtype
      cuda::check_nccl(lib_.ncclAllGather(in, out, n, cuda::nccl_uint8, comm_, stream_), "ncclAllGather");
      break;
    case Collective::broadcast:
      cuda::check_nccl(lib_.ncclBroadcast(in, out, n, cuda::nccl_uint8, request.root, comm_, stream_), "ncclBroadcast");
      break;
    case Collective::barrier: break;
  }
  cuda::ExternalSemaphoreParams signal;
  signal.fence_value = ++peer_value_;
  cuda::check(lib_.signalExternalSemaphoresAsync(&peer_timeline_, &signal, 1, stream_),
              "cudaSignalExternalSemaphoresAsync");

  if (in_place && !input.is_contiguous()) {  // into a dense tensor, then unpacked on the device
    Tensor back(std::make_shared<Storage>(device_, n), Layout::contiguous(input.shape()), input.dtype());
    interop_.copy_from_shared(*buffer_, out_offset, back.storage(), 0, n, *peer_, peer_value_);
    Tensor(input).copy_(back);
    return input;
  }
  interop_.copy_from_shared(*buffer_, out_offset, result.storage(), std::size_t(result.offset()) * element, out_bytes,
                            *peer_, peer_value_);
  result.storage().bump_version();
  return result;
}

bool nccl_available(Device device, std::string* why) {
  if (device.is_cpu()) {
    if (why) *why = "NCCL runs on GPUs, got cpu";
    return false;
  }
  interop::DeviceInterop* interop = interop::device_interop(device, why);
  if (!interop) return false;
  const cuda::Library* lib = cuda::library(why);
  if (!lib) return false;
  return cuda_device_of(*lib, *interop, device, why) >= 0;
}

std::unique_ptr<ProcessGroup> make_nccl_group(ProcessGroup& bootstrap, Device device, std::string* why) {
  std::string reason;
  const bool usable = nccl_available(device, &reason);
  const Tensor flags = bootstrap.all_gather(tensor(std::vector<std::int32_t>{usable ? 1 : 0}));
  const std::vector<std::int32_t> every = flags.to_vector<std::int32_t>();
  std::string lacking;
  for (std::size_t r = 0; r < every.size(); ++r)
    if (!every[r]) lacking += (lacking.empty() ? "" : ", ") + std::to_string(r);
  if (!lacking.empty()) {
    if (why)
      *why = fmt::format("NCCL is not usable on rank(s) {}{}", lacking,
                         usable ? "" : fmt::format("; rank {}: {}", bootstrap.rank(), reason));
    return nullptr;
  }
  interop::DeviceInterop& interop = *interop::device_interop(device);
  const cuda::Library& lib = *cuda::library();
  const int cuda_device = cuda_device_of(lib, interop, device, nullptr);

  // Rank 0's id reaches every rank through the bootstrap group.
  Tensor id = zeros({std::int64_t(sizeof(cuda::NcclUniqueId))}, TensorOptions{.dtype = DType::u8});
  cuda::NcclUniqueId unique{};
  if (bootstrap.rank() == 0) {
    cuda::check(lib.setDevice(cuda_device), "cudaSetDevice");
    cuda::check_nccl(lib.ncclGetUniqueId(&unique), "ncclGetUniqueId");
    std::memcpy(id.storage().data(), &unique, sizeof(unique));
  }
  bootstrap.broadcast(id, 0);
  std::memcpy(&unique, id.storage().data(), sizeof(unique));
  return std::make_unique<NcclGroup>(bootstrap, device, interop, lib, cuda_device, unique);
}

}  // namespace rumus::distributed
