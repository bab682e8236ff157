// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* specprof BPF programs: uprobes on the CUDA driver API and NCCL that report
 * each call with the Python phase of the calling thread, plus process
 * lifecycle tracepoints that let user space follow a process tree and attach
 * to libraries as they are loaded. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "events.h"
#include "api.h"

#ifndef PT_REGS_PARM6
/* libbpf < 1.2 stops at the fifth argument; the sixth is in r9 (SysV). */
#define PT_REGS_PARM6(x) ((x)->r9)
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Force the generator to emit Go types for these. */
const struct api_event *unused_api_event __attribute__((unused));
const struct api_event_full *unused_api_event_full __attribute__((unused));
const struct sync_exit_event *unused_sync_exit __attribute__((unused));
const struct lib_event *unused_lib_event __attribute__((unused));
const struct proc_event *unused_proc_event __attribute__((unused));
const enum sp_api *unused_sp_api __attribute__((unused));
const enum sp_event_type *unused_sp_event_type __attribute__((unused));
const enum sp_py_flags *unused_sp_py_flags __attribute__((unused));
const enum sp_cfg_flags *unused_sp_cfg_flags __attribute__((unused));
const enum sp_track_flags *unused_sp_track_flags __attribute__((unused));
const enum sp_class_flags *unused_sp_class_flags __attribute__((unused));
const enum sp_lost *unused_sp_lost __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

/* Processes we follow (tgid -> sp_track_flags). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} tracked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct py_config);
} py_configs SEC(".maps");

/* tid -> PyThreadState*, validated on every use. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} tstates SEC(".maps");

/* (pid, code object) -> classification published by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, struct code_key);
	__type(value, struct code_class);
} code_classes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SP_LOST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct api_event_full);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lib_event);
} lib_scratch SEC(".maps");

/* openat in flight: tid -> filename pointer. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} openat_args SEC(".maps");

/* Waking the reader for every record costs the traced thread an IPI and a
 * context switch on the hot path; wake it only once a batch is pending (the
 * reader also polls on a short timer). */
#define SP_WAKEUP_BYTES (256 << 10)

static __always_inline __u64 wakeup_flags(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= SP_WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
										 : BPF_RB_NO_WAKEUP;
}

static __always_inline void count_lost(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&lost, &idx);
	if (v)
		*v += 1;
}

static __always_inline __u64 rd64(__u64 addr, int *err)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		*err = 1;
	return v;
}

static __always_inline __u32 rd32(__u64 addr, int *err)
{
	__u32 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		*err = 1;
	return v;
}

static __always_inline int tstate_is(const struct py_config *cfg, __u64 ts, __u32 tid)
{
	int err = 0;
	if (cfg->flags & SP_CFG_PTHREAD_TID) {
		__u64 pt = rd64(ts + cfg->ts_thread_id, &err);
		if (err || !pt)
			return 0;
		return rd32(pt + cfg->pthread_tid, &err) == tid && !err;
	}
	return rd64(ts + cfg->ts_native_tid, &err) == tid && !err;
}

#define SP_MAX_THREADS 128

static __always_inline __u64 find_tstate(const struct py_config *cfg, __u32 tid)
{
	__u64 *cached = bpf_map_lookup_elem(&tstates, &tid);
	if (cached && *cached && tstate_is(cfg, *cached, tid))
		return *cached;

	int err = 0;
	__u64 interp = rd64(cfg->runtime + cfg->interp_head, &err);
	if (err || !interp)
		return 0;
	__u64 ts = rd64(interp + cfg->interp_threads_head, &err);
	for (int i = 0; i < SP_MAX_THREADS && ts && !err; i++) {
		if (tstate_is(cfg, ts, tid)) {
			bpf_map_update_elem(&tstates, &tid, &ts, BPF_ANY);
			return ts;
		}
		ts = rd64(ts + cfg->ts_next, &err);
	}
	return 0;
}

/* Walk state lives in map memory rather than registers: the verifier then
 * sees unknown scalars instead of a product of branch outcomes, and the
 * bounded loop verifies in linear time. */
struct walk_state {
	__u64 f;
	__u64 prev;
	__u32 n;
	__u32 match;
	__u16 phase;
	__u16 flags;
	__u32 marker;
	__u32 extra;
	__u32 done;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct walk_state);
} walk_scratch SEC(".maps");

#define SP_FRAME_WINDOW 80

struct walk_ctx {
	struct api_event_full *full;
	struct py_config *cfg;
	struct walk_state *w;
	__u32 pid;
	__u32 ci; /* frame_code / 8, < SP_FRAME_WINDOW / 8 */
	__u32 pi; /* frame_prev / 8 */
	__u32 oi; /* frame_owner (byte), < SP_FRAME_WINDOW */
};

/* One frame of the walk; bpf_loop verifies it once whatever the depth. */
static int walk_step(__u32 i, struct walk_ctx *c)
{
	struct walk_state *w = c->w;
	struct py_config *cfg = c->cfg;
	struct api_event_full *full = c->full;
	if (w->done || !w->f)
		return 1;
	__u64 fr = w->f;
	/* One read covers code, previous and owner of every supported layout
	 * (all within the first 80 bytes of a frame): helper calls dominate the
	 * per-frame cost. The offsets were checked against the window when the
	 * process was configured (c->ci, c->pi, c->oi). */
	__u32 ci = c->ci, pi = c->pi, oi = c->oi;
	if (ci >= SP_FRAME_WINDOW / 8 || pi >= SP_FRAME_WINDOW / 8)
		return 1;
	__u64 buf[SP_FRAME_WINDOW / 8];
	if (bpf_probe_read_user(buf, sizeof(buf), (void *)fr)) {
		/* The window may run into an unmapped page: exact reads. */
		if (bpf_probe_read_user(&buf[ci], 8, (void *)(fr + ci * 8)) ||
		    bpf_probe_read_user(&buf[pi], 8, (void *)(fr + pi * 8))) {
			w->flags |= SP_PY_READ_ERR;
			return 1;
		}
		if (oi < SP_FRAME_WINDOW)
			bpf_probe_read_user((__u8 *)buf + oi, 1, (void *)(fr + oi));
	}
	__u64 code = buf[ci];
	__u64 prev = buf[pi];
	w->f = prev;
	if ((cfg->flags & SP_CFG_SKIP_OWNER) && oi < SP_FRAME_WINDOW && ((__u8 *)buf)[oi] >= 3)
		return 0;
	if (cfg->flags & SP_CFG_TAGGED_EXEC)
		code &= ~3ull;
	struct sp_py *py = &full->e.py;
	__u32 n = w->n;
	if (n >= SP_MAX_FRAMES)
		return 1;
	if (n == 0) {
		py->leaf_code = code;
		__u64 instr = 0;
		if (cfg->flags & SP_CFG_FRAME_OBJECT)
			bpf_probe_read_user(&instr, 4, (void *)(fr + cfg->frame_instr));
		else
			bpf_probe_read_user(&instr, 8, (void *)(fr + cfg->frame_instr));
		py->leaf_instr = instr;
	}
	full->frames[n & (SP_MAX_FRAMES - 1)] = code;
	full->frame_addrs[n & (SP_MAX_FRAMES - 1)] = fr;
	w->n = n + 1;

	struct code_key key = {.pid = c->pid, .code = code};
	struct code_class *cls = bpf_map_lookup_elem(&code_classes, &key);
	if (!cls) {
		w->flags |= SP_PY_UNKNOWN;
		return 0;
	}
	if (w->phase) {
		/* Past the match: only looking for the cycle frame. */
		if (cls->flags & SP_CLASS_CYCLE) {
			py->cycle_frame = fr;
			return 1;
		}
	} else if (cls->phase) {
		w->phase = (cls->alt_phase && w->marker) ? cls->alt_phase : cls->phase;
		w->match = n;
		py->phase_code = code;
		/* A reused address would carry another qualname pointer. */
		if (cfg->code_qualname && cls->qualname) {
			__u64 qn = 0;
			bpf_probe_read_user(&qn, 8, (void *)(code + cfg->code_qualname));
			if (qn != cls->qualname)
				w->flags |= SP_PY_STALE;
		}
		if (cls->flags & SP_CLASS_CYCLE) {
			py->cycle_frame = fr;
			return 1;
		}
	} else if (cls->flags & SP_CLASS_CYCLE) {
		py->cycle_frame = fr;
	}
	if (cls->flags & SP_CLASS_MARKER)
		w->marker = 1;
	if (w->phase && ++w->extra > SP_CYCLE_SEARCH)
		return 1;
	return 0;
}

/* Walks the calling thread's Python frames innermost-out and fills e->py.
 * Global (not inlined) so the verifier checks the loop once for all hooks. */
__noinline int sp_walk(struct api_event_full *full, __u32 pid, __u32 tid)
{
	if (!full)
		return 0;
	struct sp_py *py = &full->e.py;
	py->phase = 0;
	py->flags = 0;
	py->nframes = 0;
	py->depth = 0;
	py->match = ~0u;
	py->phase_code = 0;
	py->cycle_frame = 0;
	py->leaf_code = 0;
	py->leaf_instr = 0;

	struct py_config *cfg = bpf_map_lookup_elem(&py_configs, &pid);
	if (!cfg) {
		py->flags = SP_PY_NO_CONFIG;
		return 0;
	}
	__u64 ts = find_tstate(cfg, tid);
	if (!ts) {
		py->flags = SP_PY_NO_TSTATE;
		return 0;
	}
	__u32 zero = 0;
	struct walk_state *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w)
		return 0;
	int err = 0;
	__u64 f = rd64(ts + cfg->ts_frame, &err);
	if (cfg->flags & SP_CFG_CFRAME && f)
		f = rd64(f + cfg->cframe_current, &err);
	w->f = f;
	w->n = 0;
	w->match = ~0u;
	w->phase = 0;
	w->flags = SP_PY_WALKED | (err ? SP_PY_READ_ERR : 0);
	w->marker = 0;
	w->extra = 0;
	w->done = err;

	struct walk_ctx wc = {.full = full, .cfg = cfg, .w = w, .pid = pid};
	/* Layouts whose fields fall outside the read window are refused. */
	if (cfg->frame_code % 8 || cfg->frame_prev % 8 || cfg->frame_code > SP_FRAME_WINDOW - 8 ||
	    cfg->frame_prev > SP_FRAME_WINDOW - 8) {
		py->flags = SP_PY_NO_CONFIG;
		return 0;
	}
	wc.ci = cfg->frame_code / 8;
	wc.pi = cfg->frame_prev / 8;
	wc.oi = cfg->frame_owner < SP_FRAME_WINDOW ? cfg->frame_owner : SP_FRAME_WINDOW;
	bpf_loop(SP_MAX_FRAMES, walk_step, &wc, 0);
	__u16 flags = w->flags;
	if (w->f && w->n >= SP_MAX_FRAMES)
		flags |= SP_PY_TRUNCATED;
	py->phase = w->phase;
	py->match = w->match;
	py->depth = w->n;
	py->nframes = (flags & SP_PY_UNKNOWN) ? w->n : 0;
	py->flags = flags;
	return 0;
}

static __always_inline struct api_event_full *begin(__u32 type, __u32 api)
{
	__u32 zero = 0;
	struct api_event_full *full = bpf_map_lookup_elem(&scratch, &zero);
	if (!full) {
		count_lost(SP_LOST_SCRATCH);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	full->e.h.type = type;
	full->e.h.pid = id >> 32;
	full->e.h.tid = (__u32)id;
	full->e.h.cpu = bpf_get_smp_processor_id();
	full->e.h.ktime = bpf_ktime_get_ns();
	full->e.api = api;
	full->e.stream = 0;
	full->e.handle = 0;
	full->e.arg0 = 0;
	full->e.arg1 = 0;
	return full;
}

static __always_inline int submit(struct api_event_full *full)
{
	sp_walk(full, full->e.h.pid, full->e.h.tid);
	/* Frames travel only while user space has not classified them yet
	 * (warm-up); the common record is the fixed part alone. */
	__u64 size = full->e.py.nframes ? sizeof(struct api_event_full) : sizeof(struct api_event);
	if (bpf_ringbuf_output(&events, full, size, wakeup_flags()))
		count_lost(SP_LOST_RINGBUF);
	return 0;
}

static __always_inline __u64 stack_arg(struct pt_regs *ctx, int slot)
{
	/* At function entry rsp points at the return address; argument 7 is at
	 * rsp+8, argument 8 at rsp+16 and so on (SysV x86-64). */
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)(PT_REGS_SP(ctx) + 8 * slot));
	return v;
}

static __always_inline __u64 pack3(__u64 x, __u64 y, __u64 z)
{
	return (x & 0x1fffff) | ((y & 0x1fffff) << 21) | ((z & 0x1fffff) << 42);
}

/* CUresult cuLaunchKernel(CUfunction f, gx, gy, gz, bx, by, bz, shmem, CUstream, void**, void**) */
static __always_inline int do_launch_kernel(struct pt_regs *ctx)
{
	struct api_event_full *full = begin(SP_EV_LAUNCH, SP_API_LAUNCH_KERNEL);
	if (!full)
		return 0;
	full->e.handle = PT_REGS_PARM1(ctx);
	full->e.arg0 = pack3(PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx));
	full->e.arg1 = pack3(PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx), stack_arg(ctx, 1));
	full->e.stream = stack_arg(ctx, 3);
	return submit(full);
}

SEC("uprobe") int sp_launch_kernel(struct pt_regs *ctx) { return do_launch_kernel(ctx); }

/* CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void**, void**) */
struct launch_config {
	__u32 grid[3];
	__u32 block[3];
	__u32 shmem;
	__u32 _pad;
	__u64 stream;
};

SEC("uprobe") int sp_launch_kernel_ex(struct pt_regs *ctx)
{
	struct api_event_full *full = begin(SP_EV_LAUNCH, SP_API_LAUNCH_KERNEL_EX);
	if (!full)
		return 0;
	struct launch_config lc = {};
	bpf_probe_read_user(&lc, sizeof(lc), (void *)PT_REGS_PARM1(ctx));
	full->e.handle = PT_REGS_PARM2(ctx);
	full->e.arg0 = pack3(lc.grid[0], lc.grid[1], lc.grid[2]);
	full->e.arg1 = pack3(lc.block[0], lc.block[1], lc.block[2]);
	full->e.stream = lc.stream;
	return submit(full);
}

/* CUresult cuGraphLaunch(CUgraphExec, CUstream) */
SEC("uprobe") int sp_graph_launch(struct pt_regs *ctx)
{
	struct api_event_full *full = begin(SP_EV_LAUNCH, SP_API_GRAPH_LAUNCH);
	if (!full)
		return 0;
	full->e.handle = PT_REGS_PARM1(ctx);
	full->e.stream = PT_REGS_PARM2(ctx);
	return submit(full);
}

/* An empty program: the baseline "uprobe alone" cost in benchmarks. */
SEC("uprobe") int sp_empty(struct pt_regs *ctx) { return 0; }

/* Blocking calls: entry with the phase, exit with the time. */
#define SYNC_ENTRY(prog, apiid, handle_expr, stream_expr, arg0_expr)          \
	SEC("uprobe") int prog(struct pt_regs *ctx)                           \
	{                                                                     \
		struct api_event_full *full = begin(SP_EV_SYNC_ENTER, apiid);  \
		if (!full)                                                    \
			return 0;                                             \
		full->e.handle = (handle_expr);                               \
		full->e.stream = (stream_expr);                               \
		full->e.arg0 = (arg0_expr);                                   \
		return submit(full);                                          \
	}

SYNC_ENTRY(sp_stream_sync, SP_API_STREAM_SYNC, 0, PT_REGS_PARM1(ctx), 0)
SYNC_ENTRY(sp_event_sync, SP_API_EVENT_SYNC, PT_REGS_PARM1(ctx), 0, 0)
SYNC_ENTRY(sp_ctx_sync, SP_API_CTX_SYNC, 0, 0, 0)
/* CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) */
SYNC_ENTRY(sp_memcpy_dtoh, SP_API_MEMCPY_DTOH, 0, 0, PT_REGS_PARM3(ctx))

static __always_inline int sync_exit(struct pt_regs *ctx, __u32 api)
{
	struct sync_exit_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost(SP_LOST_RINGBUF);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	e->h.type = SP_EV_SYNC_EXIT;
	e->h.pid = id >> 32;
	e->h.tid = (__u32)id;
	e->h.cpu = bpf_get_smp_processor_id();
	e->h.ktime = bpf_ktime_get_ns();
	e->api = api;
	e->ret = (__s32)PT_REGS_RC(ctx);
	bpf_ringbuf_submit(e, wakeup_flags());
	return 0;
}

SEC("uretprobe") int sp_stream_sync_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_STREAM_SYNC); }
SEC("uretprobe") int sp_event_sync_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_EVENT_SYNC); }
SEC("uretprobe") int sp_ctx_sync_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_CTX_SYNC); }
SEC("uretprobe") int sp_memcpy_dtoh_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_MEMCPY_DTOH); }

#define SIMPLE(prog, type, apiid, handle_expr, stream_expr, arg0_expr, arg1_expr) \
	SEC("uprobe") int prog(struct pt_regs *ctx)                               \
	{                                                                         \
		struct api_event_full *full = begin(type, apiid);                  \
		if (!full)                                                        \
			return 0;                                                 \
		full->e.handle = (handle_expr);                                   \
		full->e.stream = (stream_expr);                                   \
		full->e.arg0 = (arg0_expr);                                       \
		full->e.arg1 = (arg1_expr);                                       \
		return submit(full);                                              \
	}

/* cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream) */
SIMPLE(sp_memcpy_dtoh_async, SP_EV_MARK, SP_API_MEMCPY_DTOH_ASYNC, 0, PT_REGS_PARM4(ctx), PT_REGS_PARM3(ctx), 0)
/* cuEventRecord(CUevent, CUstream) */
SIMPLE(sp_event_record, SP_EV_MARK, SP_API_EVENT_RECORD, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0, 0)
/* cuStreamWaitEvent(CUstream, CUevent, flags) */
SIMPLE(sp_stream_wait_event, SP_EV_MARK, SP_API_STREAM_WAIT_EVENT, PT_REGS_PARM2(ctx), PT_REGS_PARM1(ctx), 0, 0)
/* cuStreamBeginCapture_v2(CUstream, mode) */
SIMPLE(sp_begin_capture, SP_EV_CAPTURE, SP_API_BEGIN_CAPTURE, 0, PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), 0)
/* cuStreamEndCapture(CUstream, CUgraph *out) */
SIMPLE(sp_end_capture, SP_EV_CAPTURE, SP_API_END_CAPTURE, PT_REGS_PARM2(ctx), PT_REGS_PARM1(ctx), 0, 0)
/* cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph, flags) */
SIMPLE(sp_graph_instantiate, SP_EV_CAPTURE, SP_API_GRAPH_INSTANTIATE, PT_REGS_PARM2(ctx), 0, PT_REGS_PARM1(ctx), 0)

/* NCCL. arg0 = count, arg1 = datatype | op << 8 | (root or peer + 1) << 16. */
#define NCCL_ARG1(dt, op, rp) (((dt) & 0xff) | (((op) & 0xff) << 8) | ((((__u64)(rp)) + 1) & 0xffffffff) << 16)
/* ncclAllReduce(send, recv, count, datatype, op, comm, stream) */
SIMPLE(sp_nccl_all_reduce, SP_EV_COLL, SP_API_NCCL_ALL_REDUCE, PT_REGS_PARM6(ctx), stack_arg(ctx, 1),
       PT_REGS_PARM3(ctx), NCCL_ARG1(PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), -1))
/* ncclAllGather(send, recv, sendcount, datatype, comm, stream) */
SIMPLE(sp_nccl_all_gather, SP_EV_COLL, SP_API_NCCL_ALL_GATHER, PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx),
       PT_REGS_PARM3(ctx), NCCL_ARG1(PT_REGS_PARM4(ctx), 0xff, -1))
/* ncclReduceScatter(send, recv, recvcount, datatype, op, comm, stream) */
SIMPLE(sp_nccl_reduce_scatter, SP_EV_COLL, SP_API_NCCL_REDUCE_SCATTER, PT_REGS_PARM6(ctx), stack_arg(ctx, 1),
       PT_REGS_PARM3(ctx), NCCL_ARG1(PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), -1))
/* ncclBroadcast(send, recv, count, datatype, root, comm, stream) */
SIMPLE(sp_nccl_broadcast, SP_EV_COLL, SP_API_NCCL_BROADCAST, PT_REGS_PARM6(ctx), stack_arg(ctx, 1),
       PT_REGS_PARM3(ctx), NCCL_ARG1(PT_REGS_PARM4(ctx), 0xff, PT_REGS_PARM5(ctx)))
/* ncclReduce(send, recv, count, datatype, op, root, comm, stream) */
SIMPLE(sp_nccl_reduce, SP_EV_COLL, SP_API_NCCL_REDUCE, stack_arg(ctx, 1), stack_arg(ctx, 2),
       PT_REGS_PARM3(ctx), NCCL_ARG1(PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx)))
/* ncclSend(send, count, datatype, peer, comm, stream) */
SIMPLE(sp_nccl_send, SP_EV_COLL, SP_API_NCCL_SEND, PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx),
       PT_REGS_PARM2(ctx), NCCL_ARG1(PT_REGS_PARM3(ctx), 0xff, PT_REGS_PARM4(ctx)))
/* ncclRecv(recv, count, datatype, peer, comm, stream) */
SIMPLE(sp_nccl_recv, SP_EV_COLL, SP_API_NCCL_RECV, PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx),
       PT_REGS_PARM2(ctx), NCCL_ARG1(PT_REGS_PARM3(ctx), 0xff, PT_REGS_PARM4(ctx)))
SIMPLE(sp_nccl_group_start, SP_EV_COLL, SP_API_NCCL_GROUP_START, 0, 0, 0, 0)
SIMPLE(sp_nccl_group_end, SP_EV_COLL, SP_API_NCCL_GROUP_END, 0, 0, 0, 0)

/* ---- process lifecycle and library discovery ---- */

struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sp_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 cpid = BPF_CORE_READ(child, pid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	if (cpid != ctgid) /* a new thread, not a process */
		return 0;
	__u32 *flags = bpf_map_lookup_elem(&tracked, &ptgid);
	if (!flags)
		return 0;
	__u32 f = *flags;
	bpf_map_update_elem(&tracked, &ctgid, &f, BPF_ANY);
	struct proc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost(SP_LOST_RINGBUF);
		return 0;
	}
	e->h.type = SP_EV_FORK;
	e->h.pid = ptgid;
	e->h.tid = (__u32)bpf_get_current_pid_tgid();
	e->h.cpu = bpf_get_smp_processor_id();
	e->h.ktime = bpf_ktime_get_ns();
	e->child = ctgid;
	e->_pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

static __always_inline int proc_event(__u32 type)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!bpf_map_lookup_elem(&tracked, &tgid))
		return 0;
	if (type == SP_EV_EXIT) {
		if ((__u32)id != tgid) /* a thread, not the process */
			return 0;
		bpf_map_delete_elem(&tracked, &tgid);
		bpf_map_delete_elem(&py_configs, &tgid);
	}
	if (type == SP_EV_EXEC) /* the old interpreter is gone */
		bpf_map_delete_elem(&py_configs, &tgid);
	struct proc_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost(SP_LOST_RINGBUF);
		return 0;
	}
	e->h.type = type;
	e->h.pid = tgid;
	e->h.tid = (__u32)id;
	e->h.cpu = bpf_get_smp_processor_id();
	e->h.ktime = bpf_ktime_get_ns();
	e->child = tgid;
	e->_pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tracepoint/sched/sched_process_exec") int sp_exec(void *ctx) { return proc_event(SP_EV_EXEC); }
SEC("tracepoint/sched/sched_process_exit") int sp_exit(void *ctx) { return proc_event(SP_EV_EXIT); }

struct sys_enter_openat_args {
	__u64 common;
	__s64 nr;
	__u64 dfd;
	__u64 filename;
	__u64 flags;
	__u64 mode;
};

struct sys_exit_args {
	__u64 common;
	__s64 nr;
	__s64 ret;
};

SEC("tracepoint/syscalls/sys_enter_openat")
int sp_openat_enter(struct sys_enter_openat_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (!bpf_map_lookup_elem(&tracked, &tgid))
		return 0;
	__u64 fn = ctx->filename;
	if (bpf_map_update_elem(&openat_args, &tid, &fn, BPF_ANY))
		count_lost(SP_LOST_OPENAT);
	return 0;
}

/* Library base names that need probes attached before first use. */
static __always_inline int interesting(const char *b)
{
	if (b[0] != 'l' || b[1] != 'i' || b[2] != 'b')
		return 0;
	if (b[3] == 'c' && b[4] == 'u' && b[5] == 'd' && b[6] == 'a' && b[7] == '.' && b[8] == 's' && b[9] == 'o')
		return 1;
	if (b[3] == 'n' && b[4] == 'c' && b[5] == 'c' && b[6] == 'l' && b[7] == '.' && b[8] == 's' && b[9] == 'o')
		return 1;
	return 0;
}

struct base_ctx {
	struct lib_event *e;
	__u32 base;
};

/* Finds the start of the base name (after the last '/'). */
static int find_base(__u32 i, struct base_ctx *c)
{
	if (i >= SP_PATH_MAX)
		return 1;
	char ch = c->e->path[i];
	if (ch == 0)
		return 1;
	if (ch == '/')
		c->base = i + 1;
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_openat")
int sp_openat_exit(struct sys_exit_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	__u64 *fnp = bpf_map_lookup_elem(&openat_args, &tid);
	if (!fnp)
		return 0;
	__u64 fn = *fnp;
	bpf_map_delete_elem(&openat_args, &tid);
	if (ctx->ret < 0)
		return 0;
	__u32 *flags = bpf_map_lookup_elem(&tracked, &tgid);
	if (!flags)
		return 0;
	__u32 zero = 0;
	struct lib_event *e = bpf_map_lookup_elem(&lib_scratch, &zero);
	if (!e)
		return 0;
	long len = bpf_probe_read_user_str(e->path, sizeof(e->path), (void *)fn);
	if (len <= 0)
		return 0;
	struct base_ctx bc = {.e = e, .base = 0};
	bpf_loop(SP_PATH_MAX - 1, find_base, &bc, 0);
	__u32 base = bc.base;
	base &= SP_PATH_MAX - 1;
	if (base > SP_PATH_MAX - 16)
		return 0;
	char b[12] = {};
	bpf_probe_read_kernel(b, sizeof(b), &e->path[base]);
	if (!interesting(b))
		return 0;
	e->h.type = SP_EV_LIB_OPEN;
	e->h.pid = tgid;
	e->h.tid = tid;
	e->h.cpu = bpf_get_smp_processor_id();
	e->h.ktime = bpf_ktime_get_ns();
	e->fd = (__s32)ctx->ret;
	e->stopped = 0;
	if (*flags & SP_TRACK_STOP_ON_LIB) {
		/* Delivered on return to user space, before the library is mapped:
		 * user space attaches its probes, then sends SIGCONT. */
		if (!bpf_send_signal(19 /* SIGSTOP */))
			e->stopped = 1;
	}
	if (bpf_ringbuf_output(&events, e, sizeof(*e), 0))
		count_lost(SP_LOST_RINGBUF);
	return 0;
}
