// A program that uses MpiGroup, built with nothing but pkg-config: it must
// link (MPI's symbols come with rumus's flags) and start. It forms the group
// only when asked to (under mpirun), so a plain run needs no MPI job.
#include <rumus/distributed/distributed.hpp>

#include <string>

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--group") {
    rumus::distributed::MpiGroup group;
    return group.size() >= 1 ? 0 : 1;
  }
  return 0;
}
