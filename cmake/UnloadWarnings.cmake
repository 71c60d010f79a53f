# Warning flags for every userspace target: unload_target_warnings(<target>).
function(unload_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wformat=2 -Wundef)
  if(UNLOAD_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
