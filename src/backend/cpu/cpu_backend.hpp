#pragma once
#include "rumus/backend/backend.hpp"

namespace rumus::cpu {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(std::size_t nbytes) override;
  void deallocate(void* data, std::size_t nbytes) override;
  void write(Storage& dst, std::size_t byte_offset, const void* src, std::size_t nbytes) override;
  void read(const Storage& src, std::size_t byte_offset, void* dst, std::size_t nbytes) override;

  void fill(TensorArg out, double value) override;
  void copy(TensorArg out, TensorArg in) override;
  void unary(UnaryOp op, TensorArg out, TensorArg in, double p0, double p1) override;
  void binary(BinaryOp op, TensorArg out, TensorArg a, TensorArg b, double p0, double p1) override;
  void where(TensorArg out, TensorArg cond, TensorArg a, TensorArg b) override;
  void reduce(ReduceOp op, TensorArg out, TensorArg in) override;
  void gemm(const GemmArgs& args) override;
  void random(RandomKind kind, TensorArg out, std::uint64_t seed, std::uint64_t offset, double a,
              double b) override;
};

}  // namespace rumus::cpu
