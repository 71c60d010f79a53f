// The thread's id (tls.hpp).
#include "tls.hpp"

#include <unistd.h>

namespace unload::rt {

UNLOAD_TLS_HOT constinit thread_local uint32_t t_tid = 0;

uint32_t fetch_tid() {
  t_tid = static_cast<uint32_t>(gettid());
  return t_tid;
}

}  // namespace unload::rt
