// The remembered answers of the provider to QP capacity requests (caps.hpp).
#include "caps.hpp"

#include <mutex>

namespace unload::rt {

namespace {

// Programs make many QPs with few distinct requests: a small table, the oldest replaced.
constexpr unsigned kEntries = 32;
struct Entry {
  bool used = false;
  CapsAsk ask;
  CapsShown shown;
};
Entry g_entries[kEntries];
unsigned g_next = 0;
std::mutex g_mu;  // guards g_entries and g_next (QP creation only)

bool same(const CapsAsk& a, const CapsAsk& b) {
  return a.ctx_id == b.ctx_id && a.qp_type == b.qp_type && a.cap.max_send_wr == b.cap.max_send_wr &&
         a.cap.max_recv_wr == b.cap.max_recv_wr && a.cap.max_send_sge == b.cap.max_send_sge &&
         a.cap.max_recv_sge == b.cap.max_recv_sge && a.cap.max_inline_data == b.cap.max_inline_data &&
         a.sig_all == b.sig_all && a.comp_mask == b.comp_mask && a.send_ops == b.send_ops &&
         a.create_flags == b.create_flags;
}

}  // namespace

bool caps_lookup(const CapsAsk& k, CapsShown* shown) {
  std::lock_guard<std::mutex> g(g_mu);
  for (const Entry& e : g_entries)
    if (e.used && same(e.ask, k)) {
      *shown = e.shown;
      return true;
    }
  return false;
}

void caps_remember(const CapsAsk& k, const CapsShown& shown) {
  std::lock_guard<std::mutex> g(g_mu);
  Entry& e = g_entries[g_next];
  g_next = (g_next + 1) % kEntries;
  e = Entry{true, k, shown};
}

}  // namespace unload::rt
