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
