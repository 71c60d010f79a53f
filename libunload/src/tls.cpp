// The thread's id (tls.hpp).
#include "tls.hpp"

#include <unistd.h>

namespace unload::rt {

UNLOAD_TLS_HOT constinit thread_local ThreadHot t_hot;

uint32_t fetch_tid() {
  t_hot.tid = static_cast<uint32_t>(gettid());
  return t_hot.tid;
}

}  // namespace unload::rt
