/* The runtime's C-facing API (docs/design.md, section 5). The shim resolves the real verbs
 * once and hands them over in unload_real_verbs; every exported wrapper of the shim calls
 * one unload_<object>_<verb> function here, and the shim's ops tables install the engine's
 * entry points below where ibv_post_send, ibv_poll_cq, ibv_create_qp_ex, ibv_create_cq_ex
 * and the ibv_qp_ex / ibv_cq_ex tables dispatch. The runtime never calls libibverbs by
 * symbol (the shim has no DT_NEEDED on it), only through unload_real_verbs and the
 * provider's entry points the shim saved in its records.
 *
 * The unload_<object>_<verb> functions behind the shim's wrappers, and the engine's entry
 * points, follow the verbs convention of what they stand for (ibv_post_send's positive
 * errno, NULL with errno set), because that is what the program sees.
 */
#ifndef UNLOAD_RUNTIME_H
#define UNLOAD_RUNTIME_H

#include <infiniband/verbs.h>
#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

struct unload_real_verbs {
  struct ibv_context* (*open_device)(struct ibv_device*);
  int (*close_device)(struct ibv_context*);
  int (*query_device)(struct ibv_context*, struct ibv_device_attr*);
  int (*query_gid)(struct ibv_context*, uint8_t, int, union ibv_gid*);
  int (*query_port)(struct ibv_context*, uint8_t, struct _compat_ibv_port_attr*);
  struct ibv_qp* (*create_qp)(struct ibv_pd*, struct ibv_qp_init_attr*);
  int (*modify_qp)(struct ibv_qp*, struct ibv_qp_attr*, int);
  int (*query_qp)(struct ibv_qp*, struct ibv_qp_attr*, int, struct ibv_qp_init_attr*);
  int (*destroy_qp)(struct ibv_qp*);
  struct ibv_mr* (*reg_mr)(struct ibv_pd*, void*, size_t, int);
  struct ibv_mr* (*reg_mr_iova)(struct ibv_pd*, void*, size_t, uint64_t, int);
  struct ibv_mr* (*reg_mr_iova2)(struct ibv_pd*, void*, size_t, uint64_t, unsigned int);
  int (*dereg_mr)(struct ibv_mr*);
  struct ibv_cq* (*create_cq)(struct ibv_context*, int, void*, struct ibv_comp_channel*, int);
  int (*destroy_cq)(struct ibv_cq*);
  int (*resize_cq)(struct ibv_cq*, int);
  int (*rereg_mr)(struct ibv_mr*, int, struct ibv_pd*, void*, size_t, int);
  int (*get_cq_event)(struct ibv_comp_channel*, struct ibv_cq**, void**);
  void (*ack_cq_events)(struct ibv_cq*, unsigned int);
  struct ibv_qp_ex* (*qp_to_qp_ex)(struct ibv_qp*);
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd*, uint64_t, size_t, uint64_t, int, int);
};

/* The provider's entry points the runtime replaces in a context's ops (saved at open). */
struct unload_provider_ops {
  int (*post_send)(struct ibv_qp*, struct ibv_send_wr*, struct ibv_send_wr**);
  int (*poll_cq)(struct ibv_cq*, int, struct ibv_wc*);
  int (*req_notify_cq)(struct ibv_cq*, int);
  struct ibv_qp* (*create_qp_ex)(struct ibv_context*, struct ibv_qp_init_attr_ex*);
  struct ibv_cq_ex* (*create_cq_ex)(struct ibv_context*, struct ibv_cq_init_attr_ex*);
  struct ibv_mw* (*alloc_mw)(struct ibv_pd*, enum ibv_mw_type);
  int (*dealloc_mw)(struct ibv_mw*);
  int (*bind_mw)(struct ibv_qp*, struct ibv_mw*, struct ibv_mw_bind*);
};

/* Once, before any other call. Reads the tunables (control page or UNLOAD_* variables). */
void unload_runtime_init(const struct unload_real_verbs* real);

struct ibv_context* unload_context_open(struct ibv_device* dev);
int unload_context_close(struct ibv_context* ctx);
struct ibv_qp* unload_qp_create(struct ibv_pd* pd, struct ibv_qp_init_attr* attr);
int unload_qp_modify(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask);
/* A program reached an object through vendor direct verbs (call: an unload::DvCall):
 * what it names stops being tracked. qp, cq may be NULL. */
void unload_dv_used(int call, struct ibv_context* ctx, struct ibv_qp* qp, struct ibv_cq* cq);
int unload_qp_query(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask, struct ibv_qp_init_attr* init);
int unload_qp_destroy(struct ibv_qp* qp);
struct ibv_mr* unload_mr_reg(struct ibv_pd* pd, void* addr, size_t len, int access);
struct ibv_mr* unload_mr_reg_iova2(struct ibv_pd* pd, void* addr, size_t len, uint64_t iova,
                                   unsigned int access);
/* dma-buf MRs: tracked as NIC only (never a CPU path's source). */
struct ibv_mr* unload_mr_reg_dmabuf(struct ibv_pd* pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                    int access);
int unload_mr_dereg(struct ibv_mr* mr);
int unload_mr_rereg(struct ibv_mr* mr, int flags, struct ibv_pd* pd, void* addr, size_t len, int access);
struct ibv_cq* unload_cq_create(struct ibv_context* ctx, int cqe, void* cq_context,
                                struct ibv_comp_channel* ch, int comp_vector);
int unload_cq_destroy(struct ibv_cq* cq);
int unload_cq_resize(struct ibv_cq* cq, int cqe);
int unload_cq_get_event(struct ibv_comp_channel* ch, struct ibv_cq** cq, void** cq_context);

/*
 * The engine: what the shim installs in the provider's function tables (shim/src/ops.cpp).
 * Contexts: unload_context_provider() is where the shim saves the context's own entry
 * points before it installs these (NULL: the context is not interposed).
 */
struct unload_provider_ops* unload_context_provider(struct ibv_context* ctx);
int unload_qp_post_send(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad);
/*
 * A process whose environment keeps every write on the NIC for its life (UNLOAD_MODE=offload,
 * UNLOAD_PATH=offload, UNLOAD_ENABLED=0; nonzero): the shim installs
 * unload_qp_post_send_pinned, which counts the writes the provider took, and leaves
 * ibv_poll_cq and ibv_req_notify_cq to the provider.
 */
int unload_mode_offload_pinned(void);
int unload_qp_post_send_pinned(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad);
int unload_cq_poll(struct ibv_cq* cq, int n, struct ibv_wc* wc);
int unload_qp_bind_mw(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mw_bind* bind);
int unload_cq_req_notify(struct ibv_cq* cq, int solicited_only);
struct ibv_qp* unload_qp_create_ex(struct ibv_context* ctx, struct ibv_qp_init_attr_ex* attr);
struct ibv_cq_ex* unload_cq_create_ex(struct ibv_context* ctx, struct ibv_cq_init_attr_ex* attr);
/* ibv_alloc_mw / ibv_dealloc_mw: windows are recorded, so that writes naming one take the NIC. */
struct ibv_mw* unload_mw_alloc(struct ibv_pd* pd, enum ibv_mw_type type);
int unload_mw_dealloc(struct ibv_mw* mw);

/* ibv_qp_ex: where the shim saves the QP's own wr_* table (NULL: the QP is not tracked),
 * and the wr_* entry points that take its place. */
struct ibv_qp_ex* unload_qpx_provider(struct ibv_qp* qp);
void unload_qpx_wr_atomic_cmp_swp(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t cmp,
                                  uint64_t swp);
void unload_qpx_wr_atomic_fetch_add(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, uint64_t add);
void unload_qpx_wr_bind_mw(struct ibv_qp_ex* qp, struct ibv_mw* mw, uint32_t rkey,
                           const struct ibv_mw_bind_info* info);
void unload_qpx_wr_local_inv(struct ibv_qp_ex* qp, uint32_t rkey);
void unload_qpx_wr_rdma_read(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t addr);
void unload_qpx_wr_rdma_write(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t addr);
void unload_qpx_wr_rdma_write_imm(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, __be32 imm);
void unload_qpx_wr_send(struct ibv_qp_ex* qp);
void unload_qpx_wr_send_imm(struct ibv_qp_ex* qp, __be32 imm);
void unload_qpx_wr_send_inv(struct ibv_qp_ex* qp, uint32_t rkey);
void unload_qpx_wr_send_tso(struct ibv_qp_ex* qp, void* hdr, uint16_t hdr_sz, uint16_t mss);
void unload_qpx_wr_atomic_write(struct ibv_qp_ex* qp, uint32_t rkey, uint64_t addr, const void* op);
void unload_qpx_wr_set_inline_data(struct ibv_qp_ex* qp, void* addr, size_t length);
void unload_qpx_wr_set_inline_data_list(struct ibv_qp_ex* qp, size_t n, const struct ibv_data_buf* bufs);
void unload_qpx_wr_set_sge(struct ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length);
void unload_qpx_wr_set_sge_list(struct ibv_qp_ex* qp, size_t n, const struct ibv_sge* sg);
void unload_qpx_wr_start(struct ibv_qp_ex* qp);
int unload_qpx_wr_complete(struct ibv_qp_ex* qp);
void unload_qpx_wr_abort(struct ibv_qp_ex* qp);

/* ibv_cq_ex: where the shim saves the CQ's own polling table (NULL: not interposed), and
 * the entry points that take its place. */
struct ibv_cq_ex* unload_cqx_provider(struct ibv_cq_ex* cq);
int unload_cqx_start_poll(struct ibv_cq_ex* cq, struct ibv_poll_cq_attr* attr);
int unload_cqx_next_poll(struct ibv_cq_ex* cq);
void unload_cqx_end_poll(struct ibv_cq_ex* cq);
enum ibv_wc_opcode unload_cqx_read_opcode(struct ibv_cq_ex* cq);
uint32_t unload_cqx_read_vendor_err(struct ibv_cq_ex* cq);
uint32_t unload_cqx_read_byte_len(struct ibv_cq_ex* cq);
__be32 unload_cqx_read_imm_data(struct ibv_cq_ex* cq);
uint32_t unload_cqx_read_qp_num(struct ibv_cq_ex* cq);
uint32_t unload_cqx_read_src_qp(struct ibv_cq_ex* cq);
unsigned int unload_cqx_read_wc_flags(struct ibv_cq_ex* cq);
uint32_t unload_cqx_read_slid(struct ibv_cq_ex* cq);
uint8_t unload_cqx_read_sl(struct ibv_cq_ex* cq);
uint8_t unload_cqx_read_dlid_path_bits(struct ibv_cq_ex* cq);

/* Appends to UNLOAD_STATS_FILE what this process counted since its last block (its first
 * block always), and adds the unsent counts to the module's counters page. Runs at exit and
 * quick_exit; the shim calls it before _exit, _Exit, an exec and abort. Async-signal-safe;
 * does nothing in a process that does not own the counts (a child of vfork). */
void unload_stats_flush(void);

/* The fatal signals the shim can see (libunload/src/signals.hpp): libc's sigaction, given
 * once when the shim loads, before anything else here runs. */
typedef int (*unload_sigaction_fn)(int, const struct sigaction*, struct sigaction*);
void unload_sig_set_real(unload_sigaction_fn real);
/* The disposition calls: each does what libc's `real` does, and shows the program the
 * disposition it set where the runtime's handler stands in for SIG_DFL. */
int unload_sig_action(int sig, const struct sigaction* act, struct sigaction* oact, unload_sigaction_fn real);
/* signal, bsd_signal, ssignal, sysv_signal, sigset (SIG_HOLD: the mask only). */
__sighandler_t unload_sig_replace(int sig, __sighandler_t h, __sighandler_t (*real)(int, __sighandler_t));
int unload_sig_interrupt(int sig, int flag, int (*real)(int, int));

#ifdef __cplusplus
}
#endif

#endif /* UNLOAD_RUNTIME_H */
