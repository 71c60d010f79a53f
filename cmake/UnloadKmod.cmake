# Out-of-tree kernel modules, built with Kbuild.
#
# Which kernels: -DUNLOAD_KDIR=<build dir> builds against that one (flavour "host", e.g.
# /lib/modules/$(uname -r)/build on a real RDMA host); otherwise against every sandbox
# kernel scripts/setup installed (flavours 6.1 and 6.12). Sets, in the parent scope:
#   UNLOAD_KERNELS             the flavours built
#   UNLOAD_KDIR_<flavour>      their Kbuild dirs
#   UNLOAD_SANDBOX_KERNEL_DEFAULT  the flavour sandbox tests use unless they name others
#
#   unload_add_kmod(<name> DIR <source dir>)  -> target <name>_<flavour> per kernel,
#                                               and UNLOAD_KMOD_<flavour> = the .ko path
set(UNLOAD_KERNELS "")
if(UNLOAD_KDIR)
  set(UNLOAD_KERNELS host)
  set(UNLOAD_KDIR_host ${UNLOAD_KDIR})
else()
  execute_process(
    COMMAND bash -c ". '${PROJECT_SOURCE_DIR}/scripts/lib/host/kernels.sh' && for f in $UNLOAD_KERNEL_FLAVOURS; do d=$(kernel_build_dir $f 2>/dev/null) && [ -d \"$d\" ] && echo \"$f=$d\"; done; true"
    OUTPUT_VARIABLE found OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REPLACE "\n" ";" found "${found}")
  foreach(entry IN LISTS found)
    string(REPLACE "=" ";" kv "${entry}")
    list(GET kv 0 flavour)
    list(GET kv 1 dir)
    list(APPEND UNLOAD_KERNELS ${flavour})
    set(UNLOAD_KDIR_${flavour} ${dir})
  endforeach()
endif()
if(NOT UNLOAD_KERNELS)
  message(WARNING "No kernel build dir: run scripts/setup, or pass -DUNLOAD_KDIR=. "
                  "The kernel module and sandbox tests are left out.")
endif()
list(GET UNLOAD_KERNELS 0 UNLOAD_SANDBOX_KERNEL_DEFAULT)
message(STATUS "unload: kernels ${UNLOAD_KERNELS}")

function(unload_add_kmod name)
  cmake_parse_arguments(A "" "DIR" "" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${A_DIR}/*.c ${A_DIR}/*.h ${A_DIR}/Kbuild)
  foreach(flavour IN LISTS UNLOAD_KERNELS)
    set(out ${CMAKE_CURRENT_BINARY_DIR}/${flavour})
    set(ko ${out}/${name}.ko)
    # Kbuild builds external modules in the directory that holds their sources, so the
    # sources are mirrored into one directory per kernel.
    add_custom_command(
      OUTPUT ${ko}
      COMMAND ${CMAKE_COMMAND} -E copy_directory ${A_DIR} ${out}
      COMMAND ${CMAKE_COMMAND} -E remove -f ${out}/CMakeLists.txt
      COMMAND make -s -C ${UNLOAD_KDIR_${flavour}} M=${out} UNLOAD_KMOD_WERROR=1 modules
      DEPENDS ${sources}
      COMMENT "Kbuild ${name}.ko for kernel ${flavour}"
      VERBATIM)
    add_custom_target(${name}_${flavour} ALL DEPENDS ${ko})
    set(UNLOAD_KMOD_${flavour} ${ko} CACHE INTERNAL "the ${name}.ko built for ${flavour}")
  endforeach()
endfunction()
