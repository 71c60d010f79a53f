/* The runtime's C-facing API (DESIGN.md section 5). The shim resolves the real verbs
 * once and hands them over in unload_real_verbs; every exported wrapper of the shim calls
 * one unload_<object>_<verb> function here. The runtime never calls libibverbs by symbol
 * (the shim has no DT_NEEDED on it), only through this table and the objects' own
 * function pointers, which it replaces where ibv_post_send, ibv_poll_cq, ibv_create_qp_ex,
 * ibv_create_cq_ex and the ibv_qp_ex / ibv_cq_ex tables dispatch.
 *
 * Functions returning int return 0 or -errno; those returning objects follow the verbs
 * convention of their wrapper (NULL and errno set), because that is what the program sees.
 */
#ifndef UNLOAD_RUNTIME_H
#define UNLOAD_RUNTIME_H

#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

struct unload_real_verbs {
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
	int (*dereg_mr)(struct ibv_mr *);
	int (*rereg_mr)(struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	int (*get_cq_event)(struct ibv_comp_channel *, struct ibv_cq **, void **);
	void (*ack_cq_events)(struct ibv_cq *, unsigned int);
	struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *);
};

/* Once, before any other call. Reads the tunables (control page or UNLOAD_* variables). */
void unload_runtime_init(const struct unload_real_verbs *real);

struct ibv_context *unload_context_open(struct ibv_device *dev);
int unload_context_close(struct ibv_context *ctx);
struct ibv_qp *unload_qp_create(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int unload_qp_modify(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int unload_qp_destroy(struct ibv_qp *qp);
struct ibv_mr *unload_mr_reg(struct ibv_pd *pd, void *addr, size_t len, int access);
struct ibv_mr *unload_mr_reg_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				   unsigned int access);
int unload_mr_dereg(struct ibv_mr *mr);
int unload_mr_rereg(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
		    int access);
struct ibv_cq *unload_cq_create(struct ibv_context *ctx, int cqe, void *cq_context,
				struct ibv_comp_channel *ch, int comp_vector);
int unload_cq_destroy(struct ibv_cq *cq);
int unload_cq_get_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);

/* Writes the statistics (UNLOAD_STATS_FILE) now; also runs at exit. */
void unload_stats_flush(void);

#ifdef __cplusplus
}
#endif

#endif /* UNLOAD_RUNTIME_H */
