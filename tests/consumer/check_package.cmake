# Runs as a test (cmake -P, see tests/CMakeLists.txt): builds user projects against rumus.
#
#   MODE=find_package      installs this build (a static librumus.a by default) to a fresh
#                          prefix; the installed CMake files name no absolute path;
#                          find_package(rumus) consumers (plain, CPU-only with MPI and
#                          Vulkan not findable, COMPONENTS mpi vulkan) and pkg-config consumers
#                          (plain --libs, MpiGroup too) build and run.
#   MODE=shared            configures, builds and installs rumus as a shared library
#                          (BUILD_SHARED_LIBS=ON, beside the main build so that its compiler cache makes this
#                          cheap); checks the soname and that no symbol of src/'s internals
#                          (rumus::cpu, rumus::vulkan, anonymous namespaces) is exported;
#                          a find_package consumer and a pkg-config consumer build, link
#                          the shared library and run.
#   MODE=add_subdirectory  the parent's build type survives add_subdirectory(rumus)
#                          (Debug, and unset), and rumus compiles with the parent's flags;
#                          then a Release consumer builds rumus as its subdirectory and runs.
#
# Inputs: SOURCE_DIR, BUILD_DIR, WORK_DIR, MODE, RUMUS_VULKAN, RUMUS_MPI, CXX (compiler), LIBDIR
# (the main build's CMAKE_INSTALL_LIBDIR), PKG_CONFIG (may be empty: that part is skipped).
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
find_program(CCACHE_PROGRAM ccache)
set(ccache "")
if(CCACHE_PROGRAM)
  set(ccache ${CCACHE_PROGRAM})
endif()
# Where a second build of rumus goes: beside the main build, at its depth, so
# that with the main build's CCACHE_BASEDIR every compile command reads the
# same and the objects the main build left in the compiler cache serve it.
set(rumus_build_dir ${BUILD_DIR}-package-${MODE})
file(REMOVE_RECURSE ${rumus_build_dir})
set(ENV{CCACHE_BASEDIR} ${SOURCE_DIR})
set(ENV{CCACHE_NOHASHDIR} 1)

# Runs a command; stops the test with `what` and the command's output if it fails.
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
endfunction()

# Configures, builds and runs tests/consumer in ${WORK_DIR}/${name}.
function(build_and_run_consumer name)
  set(dir ${WORK_DIR}/${name})
  set(launcher "")
  if(ccache)
    set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${ccache})
  endif()
  run("configuring the ${name} consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${dir}
      -DCMAKE_CXX_COMPILER=${CXX} ${launcher} ${ARGN})
  run("building the ${name} consumer" ${CMAKE_COMMAND} --build ${dir} -j2)
  run("running the ${name} consumer (it checks a gradient)" ${dir}/consumer)
  if(EXISTS ${dir}/mpi_consumer)
    run("running the ${name} MpiGroup consumer" ${dir}/mpi_consumer)
  endif()
endfunction()

# The installed CMake package names targets, never a path of this machine.
function(check_relocatable_export)
  file(GLOB files ${prefix}/${libdir}/cmake/rumus/*)
  foreach(f IN LISTS files)
    file(READ ${f} text)
    foreach(path IN ITEMS /usr/lib /usr/include ${SOURCE_DIR} ${BUILD_DIR} ${WORK_DIR})
      string(FIND "${text}" "${path}" at)
      if(NOT at EQUAL -1)
        message(FATAL_ERROR "${f} names the absolute path ${path}")
      endif()
    endforeach()
  endforeach()
  if(NOT EXISTS ${prefix}/${libdir}/pkgconfig/rumus.pc)
    message(FATAL_ERROR "rumus.pc was not installed to ${prefix}/${libdir}/pkgconfig")
  endif()
endfunction()

# Compiles tests/consumer/main.cpp with nothing but `pkg-config --cflags --libs rumus`
# (shared or static alike: no --static, no rpath of our own), runs it, and does
# the same with mpi_main.cpp where rumus has MpiGroup.
function(build_and_run_pkg_config_consumer)
  if(NOT PKG_CONFIG)
    message(WARNING "pkg-config not found: the pkg-config consumer is not checked")
    return()
  endif()
  set(ENV{PKG_CONFIG_PATH} ${prefix}/${libdir}/pkgconfig)
  execute_process(COMMAND ${PKG_CONFIG} ${ARGN} --cflags --libs rumus
                  RESULT_VARIABLE rc OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc)
    message(FATAL_ERROR "pkg-config ${ARGN} --cflags --libs rumus failed:\n${err}")
  endif()
  if(NOT flags MATCHES "-std=c\\+\\+20" OR NOT flags MATCHES "-lrumus")
    message(FATAL_ERROR "pkg-config gave no -std=c++20 or no -lrumus: ${flags}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(exe ${WORK_DIR}/pkg_config_consumer)
  run("building a consumer with pkg-config ${ARGN} (${flags})"
      ${ccache} ${CXX} ${SOURCE_DIR}/tests/consumer/main.cpp ${flags} -o ${exe})
  run("running the pkg-config consumer" ${exe})
  if(RUMUS_MPI)
    set(mpi_exe ${WORK_DIR}/pkg_config_mpi_consumer)
    run("building an MpiGroup consumer with pkg-config ${ARGN} (${flags})"
        ${ccache} ${CXX} ${SOURCE_DIR}/tests/consumer/mpi_main.cpp ${flags} -o ${mpi_exe})
    run("running the MpiGroup consumer" ${mpi_exe})
  endif()
endfunction()

if(MODE STREQUAL "find_package")
  set(libdir ${LIBDIR})
  run("installing rumus" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  check_relocatable_export()
  build_and_run_consumer(find_package -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
  # A CPU-only program on a machine without MPI's and Vulkan's development files.
  build_and_run_consumer(find_package_cpu_only -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
                         -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=ON)
  # A program that asks for what it uses.
  set(components "")
  if(RUMUS_MPI)
    list(APPEND components mpi)
  endif()
  if(RUMUS_VULKAN)
    list(APPEND components vulkan)
  endif()
  if(components)
    build_and_run_consumer(find_package_components -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
                           "-DRUMUS_COMPONENTS=${components}")
  endif()
  build_and_run_pkg_config_consumer()

elseif(MODE STREQUAL "shared")
  # The main build's flags, so the compiler cache it filled serves this build;
  # RUMUS_VULKAN follows it too (its shaders take seconds, its sources come from the cache).
  set(libdir lib)
  run("configuring a shared rumus" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${rumus_build_dir}
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DBUILD_SHARED_LIBS=ON
      -DRUMUS_VULKAN=${RUMUS_VULKAN} -DRUMUS_BUILD_TESTS=OFF -DRUMUS_BUILD_EXAMPLES=OFF -DRUMUS_BUILD_BENCH=OFF
      -DCMAKE_INSTALL_PREFIX=${prefix} -DCMAKE_INSTALL_LIBDIR=${libdir})
  run("building a shared rumus" ${CMAKE_COMMAND} --build ${rumus_build_dir} -j2)
  run("installing a shared rumus" ${CMAKE_COMMAND} --install ${rumus_build_dir})
  check_relocatable_export()

  # librumus.so -> librumus.so.<major>.<minor> (the soname) -> librumus.so.<version>.
  set(so ${prefix}/${libdir}/librumus.so)
  file(GLOB versioned ${so}.*.*.*)
  if(NOT EXISTS ${so} OR NOT versioned)
    message(FATAL_ERROR "no versioned shared library in ${prefix}/${libdir}")
  endif()
  find_program(READELF readelf)
  if(READELF)
    execute_process(COMMAND ${READELF} -d ${so} OUTPUT_VARIABLE dynamic)
    if(NOT dynamic MATCHES "Library soname: \\[librumus\\.so\\.[0-9]+\\.[0-9]+\\]")
      message(FATAL_ERROR "librumus.so has no soname librumus.so.<major>.<minor>:\n${dynamic}")
    endif()
  endif()

  # Exported: the public API. Hidden: everything private to src/.
  find_program(NM nm REQUIRED)
  execute_process(COMMAND ${NM} -DC --defined-only ${so} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "nm -DC --defined-only ${so} failed")
  endif()
  string(REGEX MATCHALL "[^\n]*(rumus::cpu::|rumus::vulkan::|\\(anonymous namespace\\))[^\n]*"
         leaked "${symbols}")
  if(leaked)
    list(LENGTH leaked n)
    list(JOIN leaked "\n" leaked)
    message(FATAL_ERROR "librumus.so exports ${n} internal symbols (declared outside include/rumus?):\n${leaked}")
  endif()
  foreach(api IN ITEMS "rumus::matmul(" "rumus::backward(" "typeinfo for rumus::Error")
    string(FIND "${symbols}" "${api}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "librumus.so does not export ${api}")
    endif()
  endforeach()

  build_and_run_consumer(find_package -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
  if(READELF)
    execute_process(COMMAND ${READELF} -d ${WORK_DIR}/find_package/consumer OUTPUT_VARIABLE dynamic)
    if(NOT dynamic MATCHES "Shared library: \\[librumus\\.so\\.")
      message(FATAL_ERROR "the consumer did not link the shared librumus:\n${dynamic}")
    endif()
  endif()
  build_and_run_pkg_config_consumer()

elseif(MODE STREQUAL "add_subdirectory")
  # The parent owns the build type: rumus neither changes it nor compiles with another.
  foreach(build_type IN ITEMS Debug "")
    set(dir ${WORK_DIR}/build_type_${build_type})
    if(build_type STREQUAL "")
      set(dir ${WORK_DIR}/build_type_unset)
    endif()
    run("configuring a parent with CMAKE_BUILD_TYPE='${build_type}'" ${CMAKE_COMMAND}
        -S ${SOURCE_DIR}/tests/consumer -B ${dir} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${build_type}
        -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DRUMUS_SOURCE_DIR=${SOURCE_DIR} -DRUMUS_VULKAN=OFF)
    file(READ ${dir}/build_type.txt seen)
    file(STRINGS ${dir}/CMakeCache.txt cached REGEX "^CMAKE_BUILD_TYPE:")
    string(REGEX REPLACE "^[^=]*=" "" cached "${cached}")
    if(NOT seen STREQUAL build_type OR NOT cached STREQUAL build_type)
      message(FATAL_ERROR "add_subdirectory(rumus) changed the parent's CMAKE_BUILD_TYPE "
                          "from '${build_type}' to '${seen}' (cache: '${cached}')")
    endif()
    file(READ ${dir}/compile_commands.json commands)
    string(REGEX MATCH "\"command\": \"[^\"]*src/core/tensor\\.cpp\"" command "${commands}")
    if(NOT command)
      message(FATAL_ERROR "no compile command for rumus's src/core/tensor.cpp in ${dir}")
    endif()
    if(build_type STREQUAL "Debug" AND NOT command MATCHES " -g ")
      message(FATAL_ERROR "rumus does not compile with the parent's Debug flags: ${command}")
    endif()
    if(command MATCHES " -O[1-3s] | -DNDEBUG ")
      message(FATAL_ERROR "rumus compiles with optimization the parent did not ask for: ${command}")
    endif()
  endforeach()

  # A Release parent that builds and links rumus (the main build's compiler cache serves it).
  build_and_run_consumer(add_subdirectory -DCMAKE_BUILD_TYPE=Release -DRUMUS_SOURCE_DIR=${SOURCE_DIR}
                         -DRUMUS_BINARY_DIR=${rumus_build_dir} -DRUMUS_VULKAN=${RUMUS_VULKAN})
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
