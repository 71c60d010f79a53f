# Tests. Host tests are GoogleTest binaries (label "host"); sandbox tests are programs or
# scripts run inside the QEMU + Soft-RoCE guest by scripts/sandbox (label "sandbox", plus
# "kernel-<flavour>"), so `ctest -L host` and `ctest -L sandbox` run either half alone.
#
#   unload_add_gtest(<name> SOURCES ... [LIBS ...])
#   unload_add_sandbox_test(<name> COMMAND cmd... [KMOD] [NIC_MODEL] [KERNELS 6.1 6.12]
#                           [RXE n] [SMP n] [TIMEOUT s])
#   SMP gives the guest n CPUs (default 1, UNLOAD_SANDBOX_ENV) and the test n of ctest's
#   processors: for a test whose subject is concurrency, which then runs alone.
#   NIC_MODEL boots with the NIC model (UnloadNicModel) in place of rxe; where it is not
#   built, the test is a skip that says why.
include(GoogleTest)

function(unload_add_gtest name)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_LIBS} GTest::gtest_main)
  unload_target_warnings(${name})
  gtest_discover_tests(${name} TEST_PREFIX "host." PROPERTIES LABELS host
                       DISCOVERY_TIMEOUT 60)
endfunction()

set(UNLOAD_SANDBOX ${PROJECT_SOURCE_DIR}/scripts/sandbox)
# What every sandbox test passes scripts/sandbox. One CPU a guest: ctest runs two tests side
# by side on a two-core machine, and two one-CPU guests there finish in the time one
# two-CPU guest takes (docs/testing.md, "Budget"). Two-host tests boot two such guests.
set(UNLOAD_SANDBOX_ENV
    "UNLOAD_BUILD_DIR=${PROJECT_BINARY_DIR};UNLOAD_SOURCE_DIR=${PROJECT_SOURCE_DIR};UNLOAD_SANDBOX_SMP=1")

function(unload_add_sandbox_test name)
  cmake_parse_arguments(A "KMOD;NIC_MODEL" "RXE;SMP;TIMEOUT" "COMMAND;KERNELS;DEPENDS" ${ARGN})
  if(NOT A_KERNELS)
    set(A_KERNELS ${UNLOAD_SANDBOX_KERNEL_DEFAULT})
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  if(NOT A_SMP)
    set(A_SMP 1)
  endif()
  set(env ${UNLOAD_SANDBOX_ENV})
  list(TRANSFORM env REPLACE "^UNLOAD_SANDBOX_SMP=.*" "UNLOAD_SANDBOX_SMP=${A_SMP}")
  foreach(flavour IN LISTS A_KERNELS)
    if(NOT flavour IN_LIST UNLOAD_KERNELS)
      continue()
    endif()
    # The sandbox's own limit ends first, so a hang ends with its report, not ctest's kill.
    math(EXPR guest_timeout "${A_TIMEOUT} - 30")
    set(args --kernel ${flavour} --timeout ${guest_timeout})
    if(A_RXE)
      list(APPEND args --rxe ${A_RXE})
    endif()
    if(A_KMOD)
      if(NOT UNLOAD_KMOD_${flavour})
        message(WARNING "sandbox test ${name} needs the kernel module: not registered")
        continue()
      endif()
      list(APPEND args --kmod ${UNLOAD_KMOD_${flavour}})
    endif()
    if(A_NIC_MODEL AND NOT UNLOAD_NIC_MODEL_${flavour})
      add_test(NAME sandbox.${flavour}.${name}
               COMMAND sh -c "echo 'skip: ${UNLOAD_NIC_MODEL_WHY_${flavour}}'; exit 77")
    else()
      if(A_NIC_MODEL)
        list(APPEND args --nic-model ${UNLOAD_NIC_MODEL_${flavour}})
      endif()
      add_test(NAME sandbox.${flavour}.${name}
               COMMAND ${UNLOAD_SANDBOX} ${args} -- ${A_COMMAND})
    endif()
    # COST: ctest -j starts the dearest first (a clean clone has no timings of its own), so
    # a long test does not begin last and run alone; the limit is a fair guess at the cost.
    set_tests_properties(sandbox.${flavour}.${name} PROPERTIES
      LABELS "sandbox;kernel-${flavour}"
      TIMEOUT ${A_TIMEOUT} COST ${A_TIMEOUT} PROCESSORS ${A_SMP} SKIP_RETURN_CODE 77
      ENVIRONMENT "${env}")
  endforeach()
endfunction()
