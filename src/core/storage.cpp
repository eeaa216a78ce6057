#include "rumus/core/storage.hpp"


namespace rumus {

Storage::Storage(Device device, std::size_t nbytes)
    : device_(device), nbytes_(nbytes), backend_(&device_backend(device)), data_(backend_->allocate(nbytes)) {}

Storage::~Storage() { backend_->deallocate(data_, nbytes_); }

}  // namespace rumus
