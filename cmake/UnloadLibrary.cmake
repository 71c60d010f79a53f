# Libraries and executables of the project, with the project's warnings.
#
#   unload_add_library(<name> [STATIC|SHARED] [LTO] SOURCES ... [INCLUDE dir...] [LIBS ...])
#
# LTO: link-time optimisation where the toolchain has it, for the libraries on the post
# and poll fast paths (their small files call each other across translation units).
#   unload_add_executable(<name> SOURCES ... [LIBS ...])
include(CheckIPOSupported)
check_ipo_supported(RESULT UNLOAD_HAVE_IPO LANGUAGES CXX)

function(unload_add_library name)
  cmake_parse_arguments(A "STATIC;SHARED;LTO" "" "SOURCES;INCLUDE;LIBS" ${ARGN})
  set(kind STATIC)
  if(A_SHARED)
    set(kind SHARED)
  endif()
  add_library(${name} ${kind} ${A_SOURCES})
  target_include_directories(${name} PUBLIC ${A_INCLUDE})
  target_link_libraries(${name} PUBLIC ${A_LIBS})
  unload_target_warnings(${name})
  if(A_LTO AND UNLOAD_HAVE_IPO AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
    set_property(TARGET ${name} PROPERTY INTERPROCEDURAL_OPTIMIZATION TRUE)
  endif()
endfunction()

function(unload_add_executable name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS})
  unload_target_warnings(${name})
endfunction()
