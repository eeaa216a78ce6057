// Linked into every test executable: the process ends with no device work in
// flight. Work left queued at exit runs while the driver's libraries are torn
// down, and lavapipe's JIT crashed so (a test that passed, then a segfault at
// exit, about one run in ten under load).
#include <gtest/gtest.h>

#include <rumus/core/device_backend.hpp>

namespace {
class DrainDevices : public ::testing::Environment {
 public:
  void TearDown() override { rumus::synchronize_all(); }
};
[[maybe_unused]] const ::testing::Environment* const drain = ::testing::AddGlobalTestEnvironment(new DrainDevices);
}  // namespace
