# rumus.pc for pkg-config users:
#   c++ app.cpp $(pkg-config --cflags --libs rumus)   (shared librumus or static librumus.a)
# Cflags carry -std=c++20 (the headers need it); no public header uses OpenMP,
# so -fopenmp is only a static link's business. The paths are
# relative to the .pc file, so an install moved with --prefix or DESTDIR works.
function(rumus_write_pkg_config out)
  set(pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(RUMUS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
    set(RUMUS_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
    set(RUMUS_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
  else()
    # From <prefix>/<libdir>/pkgconfig back up to <prefix>.
    file(RELATIVE_PATH up /p/${pc_dir} /p)
    string(REGEX REPLACE "/$" "" up "${up}")
    set(RUMUS_PC_PREFIX "\${pcfiledir}/${up}")
    set(RUMUS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
    set(RUMUS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
  endif()

  # A shared librumus records its own dependencies. A static one cannot, so
  # they are public (Requires, Libs) rather than private: a static librumus
  # never links without them, and plain `pkg-config --libs` must be enough.
  # Either way librumus_openmp_defaults (and a shared librumus) lives in
  # libdir, which the loader does not search: Libs carries an rpath to it.
  set(RUMUS_PC_REQUIRES "fmt")
  set(RUMUS_PC_LIBS "-L\${libdir} -Wl,-rpath,\${libdir} -lrumus")
  get_target_property(type rumus TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    set(requires fmt zlib openblas)  # no vulkan: its loader is opened at run time
    if(RUMUS_MPI)
      list(APPEND requires ompi-c)  # Open MPI's C library (Debian's openmpi): MpiGroup calls MPI
    endif()
    list(JOIN requires ", " RUMUS_PC_REQUIRES)
    # oneDNN ships no .pc file. libgomp is named before rumus_openmp_defaults
    # so that the loader loads the defaults after it (src/runtime/openmp_defaults.cpp).
    string(APPEND RUMUS_PC_LIBS " -ldnnl ${OpenMP_CXX_FLAGS} -lgomp -lrumus_openmp_defaults ${CMAKE_THREAD_LIBS_INIT}")
    if(CMAKE_DL_LIBS)  # dlopen of the Vulkan loader
      string(APPEND RUMUS_PC_LIBS " -l${CMAKE_DL_LIBS}")
    endif()
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/rumus.pc.in ${out} @ONLY)
endfunction()
