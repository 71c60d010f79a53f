# Google Benchmark binaries: unload_add_benchmark(<name> SOURCES ... [LIBS ...]).
function(unload_add_benchmark name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS} benchmark::benchmark)
  unload_target_warnings(${name})
endfunction()
