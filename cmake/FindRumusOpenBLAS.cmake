# Finds OpenBLAS with its CBLAS header and provides the imported target
# RumusOpenBLAS::OpenBLAS.
#
# Debian's OpenBLASConfig.cmake sets only variables holding absolute paths;
# linking those would bake this machine's paths into an installed rumusTargets.cmake.
# rumus links this target instead, and rumusConfig.cmake finds it again (this
# file is installed beside it), so the export names a target, never a path.
include(FindPackageHandleStandardArgs)

# Hints only: where the system's OpenBLAS says it lives.
find_package(OpenBLAS CONFIG QUIET)
set(_rumus_openblas_lib_hints "")
foreach(lib IN LISTS OpenBLAS_LIBRARIES)
  if(IS_ABSOLUTE "${lib}")
    get_filename_component(dir "${lib}" DIRECTORY)
    list(APPEND _rumus_openblas_lib_hints "${dir}")
  endif()
endforeach()

find_path(RumusOpenBLAS_INCLUDE_DIR cblas.h
          HINTS ${OpenBLAS_INCLUDE_DIRS}
          PATH_SUFFIXES openblas openblas-pthread openblas-openmp)
find_library(RumusOpenBLAS_LIBRARY NAMES openblas HINTS ${_rumus_openblas_lib_hints})
mark_as_advanced(RumusOpenBLAS_INCLUDE_DIR RumusOpenBLAS_LIBRARY)
unset(_rumus_openblas_lib_hints)

find_package_handle_standard_args(RumusOpenBLAS
  REQUIRED_VARS RumusOpenBLAS_LIBRARY RumusOpenBLAS_INCLUDE_DIR
  VERSION_VAR OpenBLAS_VERSION
  REASON_FAILURE_MESSAGE "rumus needs OpenBLAS: apt-get install libopenblas-dev")

if(RumusOpenBLAS_FOUND AND NOT TARGET RumusOpenBLAS::OpenBLAS)
  add_library(RumusOpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(RumusOpenBLAS::OpenBLAS PROPERTIES
    IMPORTED_LOCATION "${RumusOpenBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${RumusOpenBLAS_INCLUDE_DIR}")
endif()
