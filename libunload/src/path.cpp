// The choice of a write's path: what the QP and the request make eligible, then the mode, a
// forced path (UNLOAD_PATH) or the thread's policy.
#include "internal.hpp"

#include "unload.h"

#include <unistd.h>

#include <cstdlib>
#include <new>

namespace unload::rt {

constinit thread_local policy::Policy* t_policy = nullptr;

namespace {

policy::Policy& thread_policy() {
  if (__builtin_expect(t_policy != nullptr, 1)) return *t_policy;
  t_policy = new (std::nothrow) policy::Policy(static_cast<uint64_t>(gettid()) * 0x9E3779B97F4A7C15ull + 1);
  if (!t_policy) std::abort();
  return *t_policy;
}

}  // namespace

// Do the request's SGEs lie inside regions registered through the shim on the QP's PD,
// with iova == address (the provider's inline copy reads process addresses)?
bool sges_valid(const QpRec* q, const ibv_sge* sg, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    if (sg[i].length == 0) continue;
    const MrRec* m = g_mrs.find(lkey_key(q->c, sg[i].lkey));
    if (!m || m->pd != q->qp->pd || m->iova != m->addr) return false;
    if (sg[i].addr < m->iova || sg[i].addr + sg[i].length > m->iova + m->length ||
        sg[i].addr + sg[i].length < sg[i].addr)
      return false;
  }
  return true;
}

policy::WriteFeatures features_of(const QpRec* q, const WriteRequest& r, PathSet eligible, bool adaptive) {
  policy::WriteFeatures f{};
  f.length = r.length;
  f.sge_count = r.sge_count;
  f.rkey = r.rkey;
  f.remote_addr = r.remote_addr;
  f.now_ns = adaptive ? now_ns() : 0;
  f.eligible = eligible;
  f.peer_local = q->peer_local;
  f.nic_outstanding = q->ring.nic_outstanding() != 0;
  return f;
}

bool all_offload(const Tunables& t) {
  Path forced;
  if (forced_path(forced)) return !t.enabled || forced == Path::offload;
  return !t.enabled || t.mode == static_cast<uint32_t>(Mode::offload);
}

// The path of one write. offload when the shim is off or the mode says so, without
// looking at anything else.
Path choose_path(const QpRec* q, const WriteRequest& r, const ibv_sge* sg, const Tunables& t,
                 SqEntry* e, bool direct_ok) {
  Path forced;
  const bool is_forced = forced_path(forced);
  if (!t.enabled || (!is_forced && t.mode == static_cast<uint32_t>(Mode::offload)) ||
      !r.is_write || r.user_inline)
    return Path::offload;
  PathContext pc;
  pc.max_inline = q->max_inline;
  pc.direct_available = direct_ok && r.length != 0 && r.sge_count <= UNLOAD_MAX_IOV;
  pc.stage_available = q->stage_base && r.length != 0 && r.length <= q->stage_size / 4;
  pc.sges_valid = (r.length <= q->max_inline || pc.direct_available || pc.stage_available) &&
                  sges_valid(q, sg, r.sge_count);
  const PathSet eligible = eligible_paths(r, pc);
  if (eligible == PathSet(Path::offload)) return Path::offload;
  if (is_forced) return eligible.contains(forced) ? forced : Path::offload;
  const bool adaptive = t.mode == static_cast<uint32_t>(Mode::adaptive);
  const policy::WriteFeatures f = features_of(q, r, eligible, adaptive);
  const Path p = thread_policy().decide(f, t);
  if (adaptive && e) e->post_ns = f.now_ns;
  return p;
}

void fill_entry(SqEntry* e, const WriteRequest& r, uint64_t user_wr_id) {
  e->user_wr_id = user_wr_id;
  e->post_ns = 0;
  e->remote_addr = r.remote_addr;
  e->length = r.length;
  e->rkey = r.rkey;
  e->byte_len = 0;
  e->sge_count = static_cast<uint16_t>(r.sge_count);
  e->path = 0;
  e->flags = static_cast<uint8_t>((r.signaled ? kSignaled : 0) | (r.is_write ? kWrite : 0));
  e->opcode = 0;
  e->status = 0;
}

}  // namespace unload::rt
