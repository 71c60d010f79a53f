// The parts of the runtime that keep something of their own per QP, per CQ or per process
// beside the records: the paths' engines and the wr_* and ibv_cq_ex front ends. The
// objects' lifecycles and the fork hook reach them through these calls and name none of
// them. Each part defines its hooks (a Part) in its own file; parts.cpp lists them.
#pragma once

namespace unload::rt {

struct CqRec;
struct QpRec;

// One part's hooks; nullptr where it keeps nothing of that kind.
struct Part {
  void (*qp_track)(QpRec* q) = nullptr;
  void (*qp_settle)(QpRec* q) = nullptr;
  void (*qp_release)(QpRec* q) = nullptr;
  void (*cq_release)(CqRec* c) = nullptr;
  bool (*reclaim_memlock)() = nullptr;
  void (*after_fork)() = nullptr;
};
// Each part's hooks, defined in its own file; parts.cpp lists them in the order they run.
extern const Part g_remote_ring_part;  // remote_ring.cpp
extern const Part g_mapped_part;       // mapped.cpp
extern const Part g_stage_part;        // stage.cpp
extern const Part g_qpx_part;          // qp_ex.cpp
extern const Part g_cqx_part;          // cq_ex.cpp

// q's record is made, and the shim tracks its send queue: each part prepares what it keeps
// for q (allocating nothing before its first use).
void parts_qp_track(QpRec* q);
// Before a change of q's state (a modify) or its destruction: what the CPU still carries
// for it settled, as if it executed before the change. q may be nullptr (not tracked).
void parts_qp_settle(QpRec* q);
// q's record goes (nothing can reach it any more): what each part holds for it freed.
void parts_qp_release(QpRec* q);
// c's record goes.
void parts_cq_release(CqRec* c);
// A registration of the program's failed for RLIMIT_MEMLOCK: what the parts keep pinned
// and can do without, given back. true when something was (the caller tries again).
bool parts_reclaim_memlock();
// In a forked child: what the parent's parts held in the module or mapped, let go of.
void parts_after_fork();

}  // namespace unload::rt
