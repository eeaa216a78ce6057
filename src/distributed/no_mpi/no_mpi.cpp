// MpiGroup in a build without MPI: constructing one says how to get it.
#include "rumus/distributed/mpi_group.hpp"
#include "../../core/env.hpp"

#include <cstdlib>

namespace rumus::distributed {

struct MpiGroup::Impl {};

bool mpi_available() { return false; }

bool launched_by_mpi() {
  return env::is_set("OMPI_COMM_WORLD_SIZE") || env::is_set("PMI_SIZE") || env::is_set("PMIX_RANK");
}

MpiGroup::MpiGroup(MpiGroupOptions) {
  throw DistributedError(
      "MpiGroup: this build of rumus has no MPI; install an MPI (apt-get install libopenmpi-dev) and reconfigure "
      "with -DRUMUS_MPI=ON");
}
MpiGroup::~MpiGroup() = default;
int MpiGroup::rank() const { return 0; }
int MpiGroup::size() const { return 1; }
int MpiGroup::local_rank() const { return 0; }
int MpiGroup::local_size() const { return 1; }
void MpiGroup::abort(const std::string&) { std::abort(); }
int MpiGroup::thread_level() { return 0; }
void MpiGroup::exchange(const CollectiveRequest&, const void*, void*, std::size_t) {}

}  // namespace rumus::distributed
