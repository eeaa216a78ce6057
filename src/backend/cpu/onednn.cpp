#include "onednn.hpp"

#include <new>

namespace rumus::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

std::mutex& creation_mutex() {
  static std::mutex m;
  return m;
}

void rethrow(const char* op, const dnnl::error& e) {
  if (e.status == dnnl_out_of_memory) throw std::bad_alloc();
  throw DeviceError(std::string(op) + ": oneDNN failed: " + e.what());
}

}  // namespace rumus::cpu::onednn
