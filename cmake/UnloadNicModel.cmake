# The NIC model: rdma_rxe rebuilt from the sandbox kernel's own Debian source with a
# translation cache of ours (nicmodel/, docs/testing.md "The NIC model"), for the kernels
# whose series has a patch there. Needs UnloadKmod (the kernels) first.
#
#   unload_add_nic_model(<name> DIR <source dir>)
#       -> target <name>_<flavour> per kernel it builds for, UNLOAD_NIC_MODEL_<flavour> =
#          the .ko path; where it cannot build (no source package, no patch for the
#          series), UNLOAD_NIC_MODEL_WHY_<flavour> says why
function(unload_add_nic_model name)
  cmake_parse_arguments(A "" "DIR" "" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${A_DIR}/*.c ${A_DIR}/*.h ${A_DIR}/*.patch ${A_DIR}/build.sh)
  foreach(flavour IN LISTS UNLOAD_KERNELS)
    unset(UNLOAD_NIC_MODEL_${flavour} CACHE)
    if(NOT EXISTS ${A_DIR}/rxe-${flavour}.patch)
      set(UNLOAD_NIC_MODEL_WHY_${flavour} "no NIC model for the ${flavour} series (nicmodel/ patches 6.1)"
          CACHE INTERNAL "")
      continue()
    endif()
    if(NOT EXISTS /usr/src/linux-source-${flavour}.tar.xz)
      set(UNLOAD_NIC_MODEL_WHY_${flavour} "no /usr/src/linux-source-${flavour}.tar.xz: run scripts/setup"
          CACHE INTERNAL "")
      continue()
    endif()
    set(out ${CMAKE_CURRENT_BINARY_DIR}/${flavour})
    add_custom_command(
      OUTPUT ${out}/rdma_rxe.ko
      COMMAND ${A_DIR}/build.sh ${flavour} ${UNLOAD_KDIR_${flavour}} ${out}
      DEPENDS ${sources}
      COMMENT "NIC model rdma_rxe.ko for kernel ${flavour}"
      VERBATIM)
    add_custom_target(${name}_${flavour} ALL DEPENDS ${out}/rdma_rxe.ko)
    set(UNLOAD_NIC_MODEL_${flavour} ${out}/rdma_rxe.ko CACHE INTERNAL "the NIC model built for ${flavour}")
  endforeach()
endfunction()
