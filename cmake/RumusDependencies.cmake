# Finds what rumus builds against; every one is a Debian package.
# A dependency librumus links must also be found again in rumusConfig.cmake.in
# (a static librumus.a hands it on to consumers) and listed in RumusPkgConfig.cmake.
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)

find_package(fmt REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
# A module of ours (cmake/FindRumusOpenBLAS.cmake): an imported target, not paths.
find_package(RumusOpenBLAS REQUIRED)
# cmake/FindRumusDNNL.cmake: oneDNN runs f32 GEMM and convolution on the CPU.
find_package(RumusDNNL REQUIRED)

if(RUMUS_VULKAN)
  find_package(Vulkan QUIET)
  find_program(GLSLC_EXECUTABLE glslc)
  if(NOT Vulkan_FOUND)
    message(FATAL_ERROR "RUMUS_VULKAN needs the Vulkan headers and loader: apt-get install libvulkan-dev "
                        "(or configure with -DRUMUS_VULKAN=OFF)")
  endif()
  if(NOT GLSLC_EXECUTABLE)
    message(FATAL_ERROR "RUMUS_VULKAN needs glslc to compile shaders: apt-get install glslc "
                        "(or configure with -DRUMUS_VULKAN=OFF)")
  endif()
endif()

# MPI is optional: MpiGroup (one rank per process under mpirun) is built when
# an MPI is found (Debian: libopenmpi-dev); without it MpiGroup says so at run time.
set(MPI_CXX_SKIP_MPICXX ON)  # the C API only, not the deprecated C++ bindings
find_package(MPI QUIET COMPONENTS CXX)
option(RUMUS_MPI "Build MpiGroup on MPI (apt-get install libopenmpi-dev)" ${MPI_CXX_FOUND})
if(RUMUS_MPI AND NOT MPI_CXX_FOUND)
  message(FATAL_ERROR "RUMUS_MPI needs an MPI: apt-get install libopenmpi-dev (or configure with -DRUMUS_MPI=OFF)")
endif()
