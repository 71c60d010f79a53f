# What `cmake --install` puts where, beside the targets' own install() rules:
#
#   unload_install_pkgconfig()        unload.pc: the UAPI header's include dir and the
#                                     shim's path (pkg-config --variable=shim unload)
#   unload_install_udev_rule(<file>)  into UNLOAD_UDEV_RULES_DIR
#   unload_install_dkms(<kmod dir>)   the module's sources and dkms.conf into
#                                     <prefix>/src/unload-<version>, as DKMS expects them
#   unload_add_uninstall()            target `uninstall`: removes what install_manifest.txt
#                                     lists (run `dkms remove` first: docs in README.md)
include(GNUInstallDirs)

set(UNLOAD_UDEV_RULES_DIR "lib/udev/rules.d" CACHE STRING
    "udev rules dir, relative to the prefix or absolute (udev reads /usr/lib/udev/rules.d and /etc/udev/rules.d)")
set(UNLOAD_DKMS_SOURCE_DIR "src" CACHE STRING
    "where the module's DKMS source tree goes, relative to the prefix (DKMS looks in /usr/src)")

function(unload_install_pkgconfig)
  # The prefix relative to the .pc file, so `cmake --install --prefix` anywhere holds.
  file(RELATIVE_PATH UNLOAD_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" UNLOAD_PC_TO_PREFIX "${UNLOAD_PC_TO_PREFIX}")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/unload.pc.in ${PROJECT_BINARY_DIR}/unload.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/unload.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()

function(unload_install_udev_rule file)
  install(FILES ${file} DESTINATION ${UNLOAD_UDEV_RULES_DIR})
endfunction()

function(unload_install_dkms kmod_dir)
  set(dest ${UNLOAD_DKMS_SOURCE_DIR}/unload-${PROJECT_VERSION})
  configure_file(${kmod_dir}/dkms.conf.in ${PROJECT_BINARY_DIR}/dkms.conf @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/dkms.conf DESTINATION ${dest})
  install(DIRECTORY ${kmod_dir}/ DESTINATION ${dest}
          FILES_MATCHING PATTERN "*.c" PATTERN "*.h" PATTERN "Kbuild" PATTERN "udev" EXCLUDE)
endfunction()

function(unload_add_uninstall)
  add_custom_target(uninstall
    COMMAND ${CMAKE_COMMAND} -DMANIFEST=${PROJECT_BINARY_DIR}/install_manifest.txt
            -P ${PROJECT_SOURCE_DIR}/cmake/UnloadUninstall.cmake
    COMMENT "Removing what `cmake --install` installed"
    VERBATIM)
endfunction()
