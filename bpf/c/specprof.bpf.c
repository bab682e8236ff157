// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* specprof BPF programs: uprobes on the CUDA driver API and NCCL that report
 * each call with the Python phase of the calling thread, plus process
 * lifecycle tracepoints that let user space follow a process tree and attach
 * to libraries as they are loaded. */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "events.h"
#include "api.h"

#ifndef PT_REGS_PARM6
/* libbpf < 1.2 stops at the fifth argument; the sixth is in r9 (SysV). */
#define PT_REGS_PARM6(x) ((x)->r9)
#endif

/* Only what the programs read; CO-RE relocates the offsets. */
struct upid {
	int nr;
} __attribute__((preserve_access_index));

struct pid {
	unsigned int level;
	struct upid numbers[1];
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct pid *thread_pid;
} __attribute__((preserve_access_index));

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
const enum sp_cyccfg *unused_sp_cyccfg __attribute__((unused));
const enum sp_class_flags *unused_sp_class_flags __attribute__((unused));
const enum sp_lost *unused_sp_lost __attribute__((unused));
const struct sample_event *unused_sample_event __attribute__((unused));
const enum sp_sample_flags *unused_sp_sample_flags __attribute__((unused));

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

/* Each thread's cycle count (sp_py.cycle_no) as of its last new cycle, by
 * tid: the count of the cycles at the end of a thread, whose records may all
 * have been lost, is read here. */
struct thread_cycle {
	__u32 pid;
	__u32 cycles;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct thread_cycle);
} thread_cycles SEC(".maps");

/* Processes the library-open gate stopped (tgid -> ktime of the stop). An
 * entry is written before the SIGSTOP, and whoever resumes the process
 * deletes it: the agent once its probes are in, or the gate watchdog (a
 * process of its own, holding this map) when the agent is gone or too slow.
 * A stop that no one could undo is never sent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} gated SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct py_config);
} py_configs SEC(".maps");

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

#define SP_WAKEUP_EVERY 16

/* Forced wakeups for records with unknown code objects, per CPU, at most one
 * in this many ns (submit). */
#define SP_UNKNOWN_WAKE_NS 1000000ull

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

/* Call and sync-exit records lost to a full ring buffer (api_event.lost_seq). */
__u32 ringbuf_lost_seq = 0;

static __always_inline void lost_record(void)
{
	count_lost(SP_LOST_RINGBUF);
	__sync_fetch_and_add(&ringbuf_lost_seq, 1);
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

/* Scans the interpreter's thread list for tid's thread state. Global, so
 * that the verifier checks the loop once rather than on every path to it. */
__noinline __u64 scan_tstate(const struct py_config *cfg, __u32 tid)
{
	if (!cfg)
		return 0;
	int err = 0;
	__u64 interp = rd64(cfg->runtime + cfg->interp_head, &err);
	if (err || !interp)
		return 0;
	__u64 ts = rd64(interp + cfg->interp_threads_head, &err);
	for (int i = 0; i < SP_MAX_THREADS && ts && !err; i++) {
		if (tstate_is(cfg, ts, tid))
			return ts;
		ts = rd64(ts + cfg->ts_next, &err);
	}
	return 0;
}

#define SP_TS_WINDOW 256   /* thread identity and frame pointer, read together */
#define SP_FRAME_WINDOW 80 /* the bytes of a frame the walk needs (code, previous, owner) */
#define SP_UP_NEED SP_FRAME_WINDOW
/* Frame windows (see sp_frame_at). The down window: frames of one call chain
 * (3.11+) lie close together in the thread's data stack, callers below, so
 * one read ending at a frame usually covers many of its callers. */
#define SP_WIN (16 << 10)
/* The up window: entry frames and the CFrame on the C stack, callers above. */
#define SP_UWIN (8 << 10)
#define SP_UMAX (256 << 10) /* the up window's hinted span, read SP_UWIN at a time */
#define SP_HINT_SLACK 256   /* read below where the previous walk went */
#define SP_HINTS 4          /* stretches of the data stack remembered per thread */
#define SP_FLOORS 4         /* unmapped pages remembered per thread */
#define SP_PAGE 4096ull

/* Walk state lives in map memory rather than registers: the verifier then
 * sees unknown scalars instead of a product of branch outcomes, and the
 * bounded loop verifies in linear time. */
struct walk_state {
	__u64 f;    /* next frame */
	__u64 leaf; /* innermost frame, where a second pass starts */
	__u32 n;
	__u32 match;
	__u16 phase;
	__u16 flags;
	__u32 marker;
	__u32 done;
	__u32 record;  /* second pass: every frame goes to frames[] */
	__u32 exact;   /* the last frame's fields were read one by one */
	__u32 records; /* API records submitted on this CPU (wakeup checks) */
	__u32 all;     /* the sampler's walk: record every frame to the end */
	__u32 settled; /* all: phase and cycle frame are final, only recording */
	__u32 nmax;    /* walk_fast stops at this frame count (cycle search) */
	__u32 _pad0;
	__u64 last_wake; /* this CPU's last forced wakeup for unknown code objects (ktime) */
	/* The phase frame whose code object's qualname was last checked, and
	 * that code object (tstate_cache.v_frame, v_code): while that frame
	 * lives it holds its code object, which then cannot be reused. */
	__u64 v_frame, v_code;
	__u64 cmask;   /* code pointer mask (3.14 tags it) */
	/* The down window: buf holds [win_lo, win_lo + win_len). */
	__u64 win_lo;
	__u64 win_len;
	__u32 stretches; /* stretches of contiguous windows read so far */
	__u32 win_floor; /* 1 + the floor that bounded the window, or 0 */
	__u64 low;             /* lowest frame visited in the current stretch */
	__u64 lows[SP_HINTS];  /* low of each stretch so far (the next hints) */
	__u64 hints[SP_HINTS]; /* the thread's previous walk's lows */
	__u64 floor[SP_FLOORS]; /* tstate_cache.floor, copied for sp_frame_at */
	__u32 next_floor;
	__u32 floors_dirty; /* floor changed: copy it back */
	/* The up window: ubuf holds [u_lo, u_lo + u_len). */
	__u64 u_lo;
	__u64 u_len;
	__u64 s_addr;           /* last frame outside the down window; 0 once back */
	__u64 anchor;           /* first address the walk took from ubuf, or 0 */
	__u64 u_below, u_above; /* extent it used around the anchor */
	__u64 h_below, h_above; /* the thread's previous walk's */
	__u64 t_lo, t_hi;       /* sp_frame_at's scratch (see there) */
	__u32 t_wf;
	__u32 _pad;
	__u8 tsbuf[SP_TS_WINDOW];
	__u8 buf[SP_WIN];   /* the down window */
	__u8 ubuf[SP_UWIN]; /* the up window; must follow buf */
	__u8 _slack[128];   /* walk_fast's owner byte reads may reach past ubuf */
};

/* Slot 0 serves the probes, slot 1 the CPU sampler: a sample can interrupt
 * a probe's walk on the same CPU (uprobe programs may be preempted by the
 * sampler's timer interrupt), so the two never share one. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct walk_state);
} walk_scratch SEC(".maps");

/* Reads the thread identity and the frame pointer of tstate ts in one helper
 * call when they lie within SP_TS_WINDOW bytes. Returns 1 with *frame set
 * when ts belongs to tid. */
static __always_inline int tstate_frame(const struct py_config *cfg, struct walk_state *w, __u64 ts, __u32 tid,
					__u64 *frame)
{
	__u64 idoff = (cfg->flags & SP_CFG_PTHREAD_TID) ? cfg->ts_thread_id : cfg->ts_native_tid;
	__u64 foff = cfg->ts_frame;
	__u64 lo = idoff < foff ? idoff : foff;
	__u64 hi = idoff < foff ? foff : idoff;
	__u64 a = idoff - lo, b = foff - lo;
	__u64 span = hi - lo + 8;
	if (hi - lo > SP_TS_WINDOW - 8 || a > SP_TS_WINDOW - 8 || b > SP_TS_WINDOW - 8) {
		int err = 0;
		if (!tstate_is(cfg, ts, tid))
			return 0;
		*frame = rd64(ts + foff, &err);
		return !err;
	}
	if (bpf_probe_read_user(w->tsbuf, span, (void *)(ts + lo)))
		return 0;
	__u64 id = *(__u64 *)(w->tsbuf + a);
	if (cfg->flags & SP_CFG_PTHREAD_TID) {
		int err = 0;
		if (!id || rd32(id + cfg->pthread_tid, &err) != tid || err)
			return 0;
	} else if (id != tid) {
		return 0;
	}
	*frame = *(__u64 *)(w->tsbuf + b);
	return 1;
}

/* Per-thread PyThreadState cache, validated on every use: task storage costs
 * a few loads where a hash keyed by tid costs a hash and a bucket walk. */

struct tstate_cache {
	__u64 ts;
	__u64 runtime; /* the _PyRuntime it belongs to (exec, another config) */
	/* Page addresses where a frame window read ran into an unmapped page
	 * below (data stack chunks are separate mappings): later windows of
	 * this thread start there instead of faulting again. A stale entry
	 * only makes a window smaller. */
	__u64 floor[SP_FLOORS];
	/* Lowest frame the last walk visited in each of its first stretches
	 * (windows read one below the other). */
	__u64 low[SP_HINTS];
	/* Extent the last walk used around its up window's anchor. */
	__u64 u_below, u_above;
	/* See walk_state.v_frame. */
	__u64 v_frame, v_code;
	__u32 next_floor;
	/* The agent's cycle rule over the calls BPF classified (sp_py.cycle_no):
	 * the cycle frame of the open cycle, the count, and SP_CYC_* bits. */
	__u32 cyc_no;
	__u64 cyc_frame;
	__u32 cyc_bits;
	/* own_ns_tid's answer for the task while its host tid is ns_host. */
	__u32 ns_host;
	__u32 ns_tid;
	__u32 _pad;
};

enum {
	SP_CYC_IN = 1 << 0,        /* a cycle is open */
	SP_CYC_SAW_START = 1 << 1, /* its start phase was seen */
	SP_CYC_SAW_AFTER = 1 << 2, /* and another phase after it */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tstate_cache);
} tstates SEC(".maps");

/* Deepest pid namespace level walked (the kernel's MAX_PID_NS_LEVEL). */
#define SP_MAX_PID_NS_LEVEL 32

/* The calling thread's id in its own pid namespace: what gettid() returns
 * there, so what CPython stores as PyThreadState.native_thread_id and glibc
 * as struct pthread's tid. bpf_get_current_pid_tgid gives the id in the
 * initial namespace, which differs for a target in a container (docker,
 * Kubernetes, unshare -p). The id the task's struct pid holds at its own
 * level (pid->numbers[pid->level]) is the one its namespace sees. The answer
 * is kept in the task's cache, keyed by the host tid (an exec by a thread
 * other than the leader gives the task the leader's ids). */
static __always_inline __u32 own_ns_tid(struct tstate_cache *tc, __u32 tid)
{
	if (tc && tc->ns_host == tid && tc->ns_tid)
		return tc->ns_tid;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct pid *p = BPF_CORE_READ(task, thread_pid);
	if (!p)
		return tid;
	unsigned int level = BPF_CORE_READ(p, level);
	__u32 nr = tid;
	if (level) {
		if (level > SP_MAX_PID_NS_LEVEL)
			return tid;
		__u64 at = (__u64)p + bpf_core_field_offset(struct pid, numbers) +
			   (__u64)level * bpf_core_type_size(struct upid) + bpf_core_field_offset(struct upid, nr);
		int v = 0;
		if (bpf_probe_read_kernel(&v, sizeof(v), (void *)at) || v <= 0)
			return tid;
		nr = v;
	}
	if (tc) {
		tc->ns_host = tid;
		tc->ns_tid = nr;
	}
	return nr;
}

/* Finds the calling thread's PyThreadState and its innermost frame pointer
 * (before the cframe hop). Returns 0 without a thread state, -1 when the
 * frame pointer cannot be read, 1 otherwise. */
static __always_inline int find_frame(const struct py_config *cfg, struct walk_state *w, struct tstate_cache *tc,
				      __u32 tid, __u64 *frame)
{
	if (tc && tc->ts && tc->runtime == cfg->runtime && tstate_frame(cfg, w, tc->ts, tid, frame))
		return 1;
	__u64 ts = scan_tstate(cfg, tid);
	if (!ts)
		return 0;
	if (tc) {
		tc->ts = ts;
		tc->runtime = cfg->runtime;
	}
	int err = 0;
	*frame = rd64(ts + cfg->ts_frame, &err);
	return err ? -1 : 1;
}

/* ---- code object classes ---- */

/* Bumped by user space after it changes or deletes code_classes entries:
 * cache entries of an older generation are ignored. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} code_gen SEC(".maps");

/* Direct-mapped cache in front of code_classes: an array slot costs an index
 * computation where the hash map costs a jhash of the key, a bucket walk and
 * a key compare. Shared by all CPUs (a per-CPU copy would cost memory per
 * CPU); entries are published under a per-slot sequence count, so a reader
 * never uses a torn entry. */
#define SP_CACHE_BITS 16
#define SP_CACHE_SLOTS (1 << SP_CACHE_BITS)

struct code_cache_ent {
	__u64 seq;  /* odd while being written */
	__u64 code;
	__u64 tag;  /* pid | generation << 32 */
	__u64 word; /* phase | alt_phase << 16 | flags << 32: 0 for a frame that matches nothing */
	__u64 qualname;
};

/* A global rather than an array map: indexing it needs no helper call, so
 * the walk's registers survive the lookup. */
struct code_cache_ent code_cache[SP_CACHE_SLOTS];

#define sp_barrier() asm volatile("" ::: "memory")
#define READ_ONCE64(x) (*(volatile __u64 *)&(x))
/* Hides a value from the compiler, so that a mask it could prove redundant
 * stays for the verifier. */
#define sp_opaque(x) asm volatile("" : "+r"(x))

static __always_inline __u32 cache_slot(__u32 pid, __u64 code)
{
	return ((code ^ ((__u64)pid << 48)) * 0x9E3779B97F4A7C15ull) >> (64 - SP_CACHE_BITS);
}

/* The walk's hot loop asks one question of most frames: is this code object
 * known to match nothing? plain_sig answers it with one load and compare:
 * a slot holds the signature (code ^ tmix) * SP_SIG_MUL of a code object
 * classified plain, where tmix mixes pid and generation (a generation bump
 * retires every signature). For one pid and generation the multiplication
 * by an odd constant is a bijection, so two code objects never share a
 * signature; across pids a false match needs 64 bits to agree by chance. */
#define SP_PLAIN_BITS 15
#define SP_SIG_MUL 0x9E3779B97F4A7C15ull
#define SP_TAG_MUL 0xD6E8FEB86659FD93ull
__u64 plain_sig[1 << SP_PLAIN_BITS];

static __always_inline __u64 plain_sig_of(__u64 code, __u64 tmix) { return (code ^ tmix) * SP_SIG_MUL; }

struct walk_ctx {
	struct api_event_full *full;
	struct py_config *cfg;
	struct walk_state *w;
	__u64 tag; /* pid | generation << 32, see code_cache_ent */
	__u64 tmix; /* tag * SP_TAG_MUL, see plain_sig */
	__u32 pid;
	__u32 cfg_flags;
	__u32 ci; /* frame_code / 8, < SP_FRAME_WINDOW / 8 */
	__u32 pi; /* frame_prev / 8 */
	__u32 oi; /* frame_owner (byte), < SP_FRAME_WINDOW */
	__u64 layout; /* for sp_frame_at */
};

/* Publishes code's signature in plain_sig when its class word says it
 * matches nothing (only then: the hot loop skips such frames). A slot is
 * written only when it changes, so warm lookups leave its line clean. */
static __always_inline void note_plain(struct walk_ctx *c, __u64 code, __u64 word)
{
	if (word)
		return;
	__u64 sig = plain_sig_of(code, c->tmix);
	__u64 *slot = &plain_sig[sig >> (64 - SP_PLAIN_BITS)];
	if (*slot != sig)
		*slot = sig;
}

/* The class of (c->pid, code) into *out; 0 when user space has not
 * classified it. The seqcount protocol relies on x86's ordering of loads with
 * loads and stores with stores (the JIT keeps program order; sp_barrier keeps
 * the compiler's): a reader that sees the same even count before and after
 * copying saw no write in between. Writers claim a slot with cmpxchg, so they
 * never interleave. */
static __always_inline int code_class_of(struct walk_ctx *c, __u64 code, struct code_class *out)
{
	struct code_cache_ent *e = &code_cache[cache_slot(c->pid, code)];
	{
		__u64 s = READ_ONCE64(e->seq);
		sp_barrier();
		if (!(s & 1) && e->code == code && e->tag == c->tag) {
			__u64 word = e->word;
			__u64 qn = e->qualname;
			sp_barrier();
			if (READ_ONCE64(e->seq) == s) {
				out->phase = word;
				out->alt_phase = word >> 16;
				out->flags = word >> 32;
				out->qualname = qn;
				note_plain(c, code, word);
				return 1;
			}
		}
	}
	struct code_key key = {.pid = c->pid, .code = code};
	struct code_class *cls = bpf_map_lookup_elem(&code_classes, &key);
	if (!cls)
		return 0;
	*out = *cls;
	note_plain(c, code, out->phase | (__u64)out->alt_phase << 16 | (__u64)out->flags << 32);
	{
		__u64 s = READ_ONCE64(e->seq);
		if (!(s & 1) && __sync_val_compare_and_swap(&e->seq, s, s + 1) == s) {
			e->code = code;
			e->tag = c->tag;
			e->word = out->phase | (__u64)out->alt_phase << 16 | (__u64)out->flags << 32;
			e->qualname = out->qualname;
			sp_barrier();
			READ_ONCE64(e->seq) = s + 2;
		}
	}
	return 1;
}


/* Closes the current stretch's record of its lowest frame. */
static __always_inline void sp_new_stretch(struct walk_state *w)
{
	__u32 si = w->stretches;
	if (si && si <= SP_HINTS)
		w->lows[(si - 1) % SP_HINTS] = w->low;
	w->low = ~0ull;
	w->stretches = si + 1;
}

/* sp_frame_at's layout argument: cfg flags | ci << 32 | pi << 40 | oi << 48. */
#define SP_AT_UP (1ull << 63) /* from the up window only */

/* Makes the SP_FRAME_WINDOW bytes at frame fr available at w->buf + the
 * returned offset, or returns -1 when even the exact fields cannot be read.
 * Global, so that the verifier checks it once rather than on every path
 * that reaches it.
 *
 * Frames come from two windows, each filled by one read and consulted
 * before anything is read again:
 *
 * - The down window (buf), for 3.11+ frames in the thread's data stack,
 *   where the frames of one call chain lie close together, callers below.
 *   It is read at the first frame and where the walk enters a new stretch of
 *   frames: two frames in a row outside both windows, the second just below
 *   the first (the previous data stack chunk, say). It ends with the frame's
 *   window and reaches down SP_WIN bytes, or only as far as the thread's
 *   previous walk went in this stretch, or to a page that faulted before.
 *
 * - The up window (ubuf), for anything else: 3.12+ entry frames and the
 *   3.11/3.12 CFrame on the C stack (callers at higher addresses), frames of
 *   generators on the heap, 3.10's frame objects. The first address a walk
 *   takes from it is the anchor; the read there spans what the thread's
 *   previous walk used around its anchor, SP_UWIN at a time, so that the
 *   entry frames of a whole walk usually come from one or two reads. */
__noinline long sp_frame_at(struct walk_state *w, __u64 fr, __u64 layout)
{
	if (!w)
		return -1;
	__u32 flags = (__u32)layout;
	__u32 ci = (layout >> 32) & 0xff, pi = (layout >> 40) & 0xff, oi = (layout >> 48) & 0xff;
	if (ci >= SP_FRAME_WINDOW / 8 || pi >= SP_FRAME_WINDOW / 8)
		return -1;
	w->exact = 0;
	if (layout & SP_AT_UP)
		goto up;
	__u64 off = fr - w->win_lo;
	if (w->win_len >= SP_FRAME_WINDOW && off <= w->win_len - SP_FRAME_WINDOW) {
		w->s_addr = 0;
		return off & (SP_WIN - 1);
	}
	__u64 x = fr - w->u_lo;
	if (w->u_len >= SP_UP_NEED && x <= w->u_len - SP_UP_NEED)
		goto up_hit;
	if (w->win_floor && fr < w->win_lo && w->win_lo - fr < SP_WIN) {
		/* The walk goes on just below a window that a remembered
		 * unmapped page cut short: that page is mapped now (the thread's
		 * data stack was rearranged), so forget it. */
		w->floor[(w->win_floor - 1) % SP_FLOORS] = 0;
		w->floors_dirty = 1;
		w->win_floor = 0;
	}
	__u64 sa = w->s_addr;
	if (!(flags & SP_CFG_FRAME_OBJECT) && fr >= SP_WIN && (!w->win_len || (fr < sa && sa - fr < SP_WIN))) {
		__u64 lo = fr + SP_FRAME_WINDOW - SP_WIN;
		/* The walk continues a stretch when it went on just below the
		 * window. */
		int cont = w->win_len && sa < w->win_lo && w->win_lo - sa < SP_WIN;
		__u32 si = w->stretches - cont;
		__u64 h = si < SP_HINTS ? w->hints[si] : 0;
		if (h > lo + SP_HINT_SLACK && h <= fr)
			lo = h - SP_HINT_SLACK;
		__u32 wf = 0;
#pragma unroll
		for (int i = 0; i < SP_FLOORS; i++) {
			__u64 b = w->floor[i];
			if (b > lo && b <= fr) {
				lo = b;
				wf = i + 1;
			}
		}
		/* Through memory: the verifier then forgets which way the
		 * choices above went and checks what follows once. */
		w->t_lo = lo;
		w->t_wf = wf;
		sp_barrier();
		lo = READ_ONCE64(w->t_lo);
		wf = *(volatile __u32 *)&w->t_wf;
		__u64 len = fr + SP_FRAME_WINDOW - lo;
		sp_opaque(len);
		if (len > SP_WIN)
			goto up;
		if (!bpf_probe_read_user(w->buf, len, (void *)lo)) {
			if (!cont)
				sp_new_stretch(w);
			w->win_lo = lo;
			w->win_len = len;
			w->win_floor = wf;
			w->s_addr = 0;
			return (fr - lo) & (SP_WIN - 1);
		}
		/* It ran into an unmapped page (below a data stack chunk):
		 * from this frame's page only, and remember that page. */
		__u64 plo = fr & ~(SP_PAGE - 1);
		len = fr + SP_FRAME_WINDOW - plo;
		sp_opaque(len);
		if (plo > lo && len <= SP_WIN && !bpf_probe_read_user(w->buf, len, (void *)plo)) {
			if (!cont)
				sp_new_stretch(w);
			w->win_lo = plo;
			w->win_len = len;
			w->win_floor = 0;
			w->s_addr = 0;
			w->floor[w->next_floor++ % SP_FLOORS] = plo;
			w->floors_dirty = 1;
			return (fr - plo) & (SP_WIN - 1);
		}
		/* The window is gone (a failed read clears it). */
		w->win_len = 0;
	}
up:
	x = fr - w->u_lo;
	if (!(w->u_len >= SP_UP_NEED && x <= w->u_len - SP_UP_NEED)) {
		__u64 lo = fr, hi = fr + SP_UP_NEED;
		__u64 a = w->anchor;
		if (flags & SP_CFG_FRAME_OBJECT) {
			/* 3.10's frame objects lie anywhere on the heap: the
			 * frame alone. */
		} else if (!a) {
			w->anchor = fr;
			lo = fr - w->h_below;
			hi = fr + w->h_above;
		} else if (fr >= a - w->h_below && fr < a + w->h_above) {
			hi = a + w->h_above;
		}
		if (hi < fr + SP_UP_NEED)
			hi = fr + SP_UP_NEED;
		if (hi - lo > SP_UWIN) {
			lo = fr;
			if (hi - lo > SP_UWIN)
				hi = lo + SP_UWIN;
		}
		w->t_lo = lo;
		w->t_hi = hi;
		sp_barrier();
		lo = READ_ONCE64(w->t_lo);
		hi = READ_ONCE64(w->t_hi);
		__u64 len = hi - lo;
		sp_opaque(len);
		if (len > SP_UWIN)
			return -1;
		if (bpf_probe_read_user(w->ubuf, len, (void *)lo)) {
			/* The hinted span runs into an unmapped page: this walk
			 * goes without hints, and the next learns new ones. */
			w->h_below = 0;
			w->h_above = 0;
			int again = lo != fr || len != SP_UP_NEED;
			lo = fr;
			len = SP_UP_NEED;
			if (!again || bpf_probe_read_user(w->ubuf, SP_UP_NEED, (void *)fr)) {
				/* The frame itself may run into an unmapped
				 * page: exact fields. */
				if (bpf_probe_read_user(&w->ubuf[ci * 8], 8, (void *)(fr + ci * 8)) ||
				    bpf_probe_read_user(&w->ubuf[pi * 8], 8, (void *)(fr + pi * 8))) {
					w->u_len = 0;
					return -1;
				}
				if (oi < SP_FRAME_WINDOW)
					bpf_probe_read_user(&w->ubuf[oi], 1, (void *)(fr + oi));
				w->exact = 1;
			}
		}
		w->u_lo = lo;
		w->u_len = len;
		x = fr - lo;
	}
up_hit:;
	/* What this walk used around the anchor: the next walk's span. */
	__u64 a = w->anchor;
	if (fr < a) {
		if (a - fr <= SP_UWIN / 2 && a - fr > w->u_below)
			w->u_below = a - fr;
	} else if (fr + SP_UP_NEED - a <= SP_UMAX && fr + SP_UP_NEED - a > w->u_above) {
		w->u_above = fr + SP_UP_NEED - a;
	}
	if (x > SP_UWIN - SP_UP_NEED)
		return -1;
	/* The last frame outside the down window, for the new-stretch rule:
	 * entry frames on the C stack don't count, so that a data stack
	 * chunk whose frames alternate with them still makes a stretch. */
	if (!(flags & SP_CFG_SKIP_OWNER) || oi >= SP_FRAME_WINDOW || w->ubuf[x + oi] < 3)
		w->s_addr = fr;
	return SP_WIN + x;
}

#define SP_FAST_FRAMES 32

struct fast_out {
	__u64 fr, last, umax;
	__u32 n;
};

/* The loop of walk_fast; skip (a constant) says whether 3.12+ entry frames
 * can occur. Written for the verifier: nothing in it indexes by the frame
 * count and no known constant feeds it, so the ways around it meet in
 * equivalent states and it verifies in time linear in SP_FAST_FRAMES. */
static __always_inline int walk_fast_loop(struct walk_state *w, struct fast_out *o, __u64 lo, __u64 lim, __u64 ulo,
					  __u64 ulim, __u32 ci, __u32 pi, __u32 ob, __u64 tmix, const int skip)
{
	__u64 fr = o->fr, last = ~0ull, umax = 0;
	__u32 n = o->n, nmax = w->nmax;
	int k;
	for (k = 0; k < SP_FAST_FRAMES; k++) {
		if (n >= nmax)
			break;
		__u64 off = fr - lo;
		if (off > lim) {
			if (!skip)
				break;
			/* A 3.12+ entry frame in the up window: skip it. */
			__u64 uoff = fr - ulo;
			if (uoff > ulim)
				break;
			__u8 *up = &w->ubuf[uoff];
			if (up[ob] < 3)
				break;
			/* Entry frames come outward, at rising addresses. */
			umax = fr;
			fr = *(__u64 *)(up + pi * 8);
			continue;
		}
		__u8 *fp = &w->buf[off];
		/* cmask comes from map memory: as a known constant it would
		 * split the verifier's view of the loop in two. */
		__u64 code = *(__u64 *)(fp + ci * 8) & w->cmask;
		__u64 prev = *(__u64 *)(fp + pi * 8);
		if (skip && fp[ob] >= 3) {
			fr = prev;
			continue;
		}
		__u64 sig = plain_sig_of(code, tmix);
		if (plain_sig[sig >> (64 - SP_PLAIN_BITS)] != sig)
			break;
		n++;
		last = fr;
		fr = prev;
	}
	o->fr = fr;
	o->last = last;
	o->umax = umax;
	o->n = n;
	return k;
}

/* The common case in a tight loop: frames in the down window whose code
 * objects are cached as matching nothing (no phase, marker or cycle), below
 * the phase frame or between it and the cycle frame (up to w->nmax), and
 * entry frames in the up window. It records no frame
 * (frames[] travels only with an unknown code object, and the walk then
 * starts over recording them all). Returns how many frames it consumed; it
 * stops, for walk_step to take over, at anything else. */
static __always_inline int walk_fast(struct walk_ctx *c, struct walk_state *w)
{
	__u64 lo = w->win_lo, len = w->win_len;
	__u64 ulo = w->u_lo, ulen = w->u_len;
	__u32 ci = c->ci, pi = c->pi, oi = c->oi, flags = c->cfg_flags;
	struct fast_out o = {.fr = w->f, .n = w->n};
	int k;
	if (o.n == 0 || o.n > SP_MAX_FRAMES - SP_FAST_FRAMES || len < SP_FRAME_WINDOW || ci >= SP_FRAME_WINDOW / 8 ||
	    pi >= SP_FRAME_WINDOW / 8)
		return 0;
	/* Frames at offsets up to lim of buf, entry frames up to ulim of ubuf.
	 * No clamping here (it would split the verifier's view of the loop in
	 * two): the windows never exceed their buffers. */
	__u64 lim = len - SP_FRAME_WINDOW;
	__u64 ulim = ulen - SP_UP_NEED; /* wraps above the bound without one */
	sp_opaque(lim);
	sp_opaque(ulim);
	if (lim > SP_WIN - SP_FRAME_WINDOW)
		return 0;
	__u32 ob = oi & 127; /* == oi where used: oi < SP_FRAME_WINDOW */
	if ((flags & SP_CFG_SKIP_OWNER) && oi < SP_FRAME_WINDOW && ulim <= SP_UWIN - SP_UP_NEED)
		k = walk_fast_loop(w, &o, lo, lim, ulo, ulim, ci, pi, ob, c->tmix, 1);
	else
		k = walk_fast_loop(w, &o, lo, lim, ulo, ulim, ci, pi, ob, c->tmix, 0);
	if (k) {
		if (o.n != w->n) /* back in the down window */
			w->s_addr = 0;
		if (o.last < w->low)
			w->low = o.last;
		__u64 a = w->anchor;
		__u64 umax = o.umax;
		if (umax >= a && umax + SP_UP_NEED - a <= SP_UMAX && umax + SP_UP_NEED - a > w->u_above)
			w->u_above = umax + SP_UP_NEED - a;
	}
	w->f = o.fr;
	w->n = o.n;
	return k;
}

/* Where a probe's walk ends (phase and cycle frame found, or given up):
 * the sampler's walk goes on recording the remaining frames. */
static __always_inline int walk_settle(struct walk_state *w)
{
	w->settled = 1;
	return !w->all;
}

/* One frame of the walk (or a run of plain ones, walk_fast); bpf_loop
 * verifies it once whatever the depth. */
/* Starts the walk over from the leaf, recording every frame in frames[]. */
static __always_inline void walk_record_again(struct walk_state *w, struct sp_py *py)
{
	w->record = 1;
	w->f = w->leaf;
	w->n = 0;
	w->match = ~0u;
	w->phase = 0;
	w->marker = 0;
	w->nmax = ~0u;
	w->flags &= ~SP_PY_STALE;
	py->phase_code = 0;
	py->cycle_frame = 0;
}

/* Whether code's qualname pointer differs from the one its class was
 * published with: the address now holds another code object. */
static __always_inline int qualname_moved(const struct py_config *cfg, __u64 code, __u64 qualname)
{
	__u64 qn = 0;
	bpf_probe_read_user(&qn, 8, (void *)(code + cfg->code_qualname));
	return qn != qualname;
}

/* A walk that met a reused address: without frames recorded it starts over
 * recording them (returns 1), so that the agent classifies the new code
 * object and still attributes the call; with them it is marked stale. */
static __always_inline int walk_reused(struct walk_state *w, struct sp_py *py)
{
	if (!w->record) {
		walk_record_again(w, py);
		return 1;
	}
	w->flags |= SP_PY_STALE;
	return 0;
}

static int walk_step(__u32 i, struct walk_ctx *c)
{
	struct walk_state *w = c->w;
	struct py_config *cfg = c->cfg;
	struct api_event_full *full = c->full;
	if (w->done || !w->f)
		return 1;
	if (!w->record && !w->settled && walk_fast(c, w))
		return 0;
	if (!w->f)
		return 1;
	__u64 fr = w->f;
	/* The offsets were checked against the window when the process was
	 * configured (c->ci, c->pi, c->oi). */
	__u32 ci = c->ci, pi = c->pi, oi = c->oi;
	if (ci >= SP_FRAME_WINDOW / 8 || pi >= SP_FRAME_WINDOW / 8)
		return 1;
	long at = sp_frame_at(w, fr, c->layout);
	sp_opaque(at);
	if (at < 0) {
		w->flags |= SP_PY_READ_ERR;
		return 1;
	}
	__u64 off = at;
	if (off > SP_WIN + SP_UWIN - SP_FRAME_WINDOW)
		return 1;
	__u8 *fp = &w->buf[off];
	__u64 code = *(__u64 *)(fp + ci * 8);
	__u64 prev = *(__u64 *)(fp + pi * 8);
	w->f = prev;
	if (off < SP_WIN && fr < w->low)
		w->low = fr;
	if ((c->cfg_flags & SP_CFG_SKIP_OWNER) && oi < SP_FRAME_WINDOW && fp[oi] >= 3)
		return 0;
	if (c->cfg_flags & SP_CFG_TAGGED_EXEC)
		code &= ~3ull;
	struct sp_py *py = &full->e.py;
	__u32 n = w->n;
	if (n >= SP_MAX_FRAMES)
		return 1;
	if (n == 0) {
		py->leaf_code = code;
		__u64 instr = 0;
		__u32 ii = cfg->frame_instr;
		if (c->cfg_flags & SP_CFG_FRAME_OBJECT)
			bpf_probe_read_user(&instr, 4, (void *)(fr + ii));
		else if (ii <= SP_FRAME_WINDOW - 8 && !w->exact)
			instr = *(__u64 *)(fp + ii);
		else
			bpf_probe_read_user(&instr, 8, (void *)(fr + ii));
		py->leaf_instr = instr;
	}
	full->frames[n & (SP_MAX_FRAMES - 1)] = code;
	full->frame_addrs[n & (SP_MAX_FRAMES - 1)] = fr;
	w->n = n + 1;
	if (w->settled)
		return 0;

	struct code_class cls;
	if (!code_class_of(c, code, &cls)) {
		if (!w->record) {
			/* frames[] must hold the whole walk, and walk_fast
			 * records nothing: start over, recording. */
			walk_record_again(w, py);
			return 0;
		}
		w->flags |= SP_PY_UNKNOWN;
		return 0;
	}
	/* A volatile code object's address is taken by another one once it is
	 * freed: a module body's by a function imported after it. Without
	 * this check that function would stay classified as the module. It is
	 * made on every visit: a frame at the same address proves nothing here,
	 * as the new code object can run at the depth where the freed one ran
	 * (an exec from the same function), and volatile frames are few on a
	 * server's steady-state stacks (the script's module body at the bottom,
	 * which calls inside a cycle never reach). */
	if ((cls.flags & SP_CLASS_VOLATILE) && cfg->code_qualname && cls.qualname &&
	    qualname_moved(cfg, code, cls.qualname) && walk_reused(w, py))
		return 0;
	if (w->phase) {
		/* Past the match: only looking for the cycle frame. */
		if (cls.flags & SP_CLASS_CYCLE) {
			py->cycle_frame = fr;
			return walk_settle(w);
		}
	} else if (cls.phase) {
		w->phase = (cls.alt_phase && w->marker) ? cls.alt_phase : cls.phase;
		w->match = n;
		w->nmax = n + SP_CYCLE_SEARCH;
		py->phase_code = code;
		/* A reused address would carry another qualname pointer. The
		 * frame that this thread's last check passed on holds its code
		 * object alive: while it is still there, no check is needed.
		 * (Missed only if that frame returned, its code object was
		 * freed and reallocated as another phase's, and a frame of it
		 * took the same address.) */
		if (cfg->code_qualname && cls.qualname && (fr != w->v_frame || code != w->v_code)) {
			if (!qualname_moved(cfg, code, cls.qualname)) {
				w->v_frame = fr;
				w->v_code = code;
			} else if (walk_reused(w, py)) {
				return 0;
			}
		}
		if (cls.flags & SP_CLASS_CYCLE) {
			py->cycle_frame = fr;
			return walk_settle(w);
		}
	} else if (cls.flags & SP_CLASS_CYCLE) {
		py->cycle_frame = fr;
	}
	if (cls.flags & SP_CLASS_MARKER)
		w->marker = 1;
	if (w->phase && n >= w->match + SP_CYCLE_SEARCH)
		return walk_settle(w);
	return 0;
}

/* Applies the agent's cycle rule (agent.advanceCycle) to a call whose frames
 * BPF classified: a cycle is one call of the cycle function, told apart by
 * its frame address and, for loops inside one call, by the start phase
 * coming back after other phases; a call outside any cycle closes it. The
 * count goes up whether or not the record reaches user space. */
static __always_inline void count_cycle(struct tstate_cache *tc, struct sp_py *py, __u32 start, __u32 cflags,
					__u32 pid, __u32 tid)
{
	__u64 cyc = py->cycle_frame;
	if (!cyc) {
		tc->cyc_bits = 0;
		return;
	}
	__u32 b = tc->cyc_bits;
	__u32 ph = py->phase;
	if (!(b & SP_CYC_IN) || cyc != tc->cyc_frame || (start && ph == start && (b & SP_CYC_SAW_AFTER))) {
		if ((cflags & SP_CYCCFG_AT_START) && ph != start) {
			tc->cyc_bits = 0; /* before the call's first start phase: outside */
			return;
		}
		tc->cyc_no++;
		if (!tc->cyc_no) /* 0 means unknown */
			tc->cyc_no = 1;
		tc->cyc_frame = cyc;
		b = SP_CYC_IN;
		struct thread_cycle tcy = {.pid = pid, .cycles = tc->cyc_no};
		bpf_map_update_elem(&thread_cycles, &tid, &tcy, BPF_ANY);
	}
	if (start && ph == start)
		b |= SP_CYC_SAW_START;
	else if (b & SP_CYC_SAW_START)
		b |= SP_CYC_SAW_AFTER;
	tc->cyc_bits = b;
	py->cycle_no = tc->cyc_no;
}

/* Walks the calling thread's Python frames innermost-out and fills e->py.
 * Global (not inlined) so the verifier checks the loop once for all hooks.
 * With all (the CPU sampler) every frame is recorded, to the end of the
 * stack or SP_MAX_FRAMES; phase and cycle frame are found as without. */
__noinline int sp_walk(struct api_event_full *full, __u32 pid, __u32 tid, __u32 all)
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
	/* Layouts whose fields fall outside the read window are refused. */
	if (cfg->frame_code % 8 || cfg->frame_prev % 8 || cfg->frame_code > SP_FRAME_WINDOW - 8 ||
	    cfg->frame_prev > SP_FRAME_WINDOW - 8) {
		py->flags = SP_PY_NO_CONFIG;
		return 0;
	}
	__u32 zero = 0, slot = all ? 1 : 0;
	struct walk_state *w = bpf_map_lookup_elem(&walk_scratch, &slot);
	__u64 *gen = bpf_map_lookup_elem(&code_gen, &zero);
	if (!w || !gen)
		return 0;
	/* Read before any code_classes lookup: user space bumps it after
	 * changing the map. */
	__u32 g = (__u32)READ_ONCE64(*gen);
	sp_barrier();
	__u64 f = 0;
	struct tstate_cache *tc = bpf_task_storage_get(&tstates, bpf_get_current_task_btf(), 0,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	int found = find_frame(cfg, w, tc, own_ns_tid(tc, tid), &f);
	if (!found) {
		py->flags = SP_PY_NO_TSTATE;
		return 0;
	}
	int err = found < 0;
	w->u_lo = 0;
	w->u_len = 0;
	w->anchor = 0;
	w->u_below = 0;
	w->u_above = 0;
	w->h_below = tc ? tc->u_below : 0;
	w->h_above = tc ? tc->u_above : 0;
	w->stretches = 0;
	w->win_floor = 0;
	w->low = ~0ull;
#pragma unroll
	for (int i = 0; i < SP_HINTS; i++) {
		w->hints[i] = tc ? tc->low[i] : 0;
		w->lows[i] = 0;
	}
	w->record = all != 0;
	w->all = all != 0;
	w->settled = 0;
	w->nmax = ~0u;
	w->v_frame = tc ? tc->v_frame : 0;
	w->v_code = tc ? tc->v_code : 0;
	w->cmask = (cfg->flags & SP_CFG_TAGGED_EXEC) ? ~3ull : ~0ull;
	w->win_lo = 0;
	w->win_len = 0;
	w->exact = 0;
	w->n = 0;
	w->match = ~0u;
	w->phase = 0;
	w->marker = 0;

	struct walk_ctx wc = {.full = full, .cfg = cfg, .w = w, .pid = pid, .tag = pid | (__u64)g << 32,
			      .tmix = (pid | (__u64)g << 32) * SP_TAG_MUL,
			      .cfg_flags = cfg->flags};
	wc.ci = cfg->frame_code / 8;
	wc.pi = cfg->frame_prev / 8;
	wc.oi = cfg->frame_owner < SP_FRAME_WINDOW ? cfg->frame_owner : SP_FRAME_WINDOW;
	wc.layout = wc.cfg_flags | (__u64)wc.ci << 32 | (__u64)wc.pi << 40 | (__u64)wc.oi << 48;
	w->floors_dirty = 0;
	w->next_floor = tc ? tc->next_floor : 0;
#pragma unroll
	for (int i = 0; i < SP_FLOORS; i++)
		w->floor[i] = tc ? tc->floor[i] : 0;
	if (cfg->flags & SP_CFG_CFRAME && f && !err) {
		/* The CFrame is on the C stack, below the entry frames of
		 * 3.12: it anchors the up window. */
		__u64 cc = cfg->cframe_current;
		long at = sp_frame_at(w, f, wc.layout | SP_AT_UP);
		sp_opaque(at);
		__u64 off = at;
		sp_opaque(off);
		sp_opaque(cc);
		if (at >= 0 && !w->exact && off <= SP_WIN + SP_UWIN - SP_UP_NEED && cc <= SP_UP_NEED - 8)
			f = *(__u64 *)(&w->buf[off] + cc);
		else
			f = rd64(f + cc, &err);
		w->exact = 0;
	}
	w->s_addr = 0;
	w->f = f;
	w->leaf = f;
	w->flags = SP_PY_WALKED | (err ? SP_PY_READ_ERR : 0);
	w->done = err;
	/* Room for two passes (a walk that meets an unknown code object starts
	 * over, walk_step) and for skipped entry frames. */
	bpf_loop(3 * SP_MAX_FRAMES, walk_step, &wc, 0);
	if (tc) {
		sp_new_stretch(w);
#pragma unroll
		for (int i = 0; i < SP_HINTS; i++)
			tc->low[i] = w->lows[i];
		tc->u_below = w->u_below;
		tc->u_above = w->u_above;
		tc->v_frame = w->v_frame;
		tc->v_code = w->v_code;
		if (w->floors_dirty) {
			tc->next_floor = w->next_floor;
#pragma unroll
			for (int i = 0; i < SP_FLOORS; i++)
				tc->floor[i] = w->floor[i];
		}
	}
	__u16 flags = w->flags;
	if (w->f && w->n >= SP_MAX_FRAMES)
		flags |= SP_PY_TRUNCATED;
	py->phase = w->phase;
	py->match = w->match;
	py->depth = w->n;
	/* The agent classifies unknown and reused code objects from frames[]
	 * and applies the cycle rule to those calls itself. */
	py->nframes = (w->all || (flags & (SP_PY_UNKNOWN | SP_PY_STALE))) ? w->n : 0;
	py->flags = flags;
	py->cycle_no = 0;
	if (!all && tc && !(flags & (SP_PY_UNKNOWN | SP_PY_STALE)))
		count_cycle(tc, py, cfg->cycle_start, cfg->cycle_flags, pid, tid);
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
	sp_walk(full, full->e.h.pid, full->e.h.tid, 0);
	/* Frames travel only while user space has not classified them yet
	 * (warm-up); the common record is the fixed part alone. With frames
	 * the record is compacted as a sample's is: the n code objects, then
	 * their n frame addresses (a 40-frame stack takes 640 bytes, not 4 KB:
	 * while the agent learns, the ring buffer holds six times as many). */
	__u64 size = sizeof(struct api_event);
	__u32 n = full->e.py.nframes;
	if (n) {
		if (n > SP_MAX_FRAMES)
			n = SP_MAX_FRAMES;
		__u64 *st = full->frames;
		for (__u32 i = 0; i < SP_MAX_FRAMES; i++) {
			if (i >= n)
				break;
			st[(n + i) & (2 * SP_MAX_FRAMES - 1)] = st[SP_MAX_FRAMES + i];
		}
		size += 16 * (__u64)n;
	}
	/* Whether to wake the reader is only asked every SP_WAKEUP_EVERY
	 * records: the query reads the consumer position, a cache line the
	 * reader keeps writing. A wakeup is due only with SP_WAKEUP_BYTES
	 * pending, so it comes at most that many records late. */
	__u64 flags = BPF_RB_NO_WAKEUP;
	__u32 zero = 0;
	struct walk_state *w = bpf_map_lookup_elem(&walk_scratch, &zero);
	if (!w || !(w->records++ % SP_WAKEUP_EVERY))
		flags = wakeup_flags();
	/* Unknown code objects must be symbolized while the process lives:
	 * wake the reader for them, but at most once per SP_UNKNOWN_WAKE_NS on
	 * a CPU. A forced wakeup costs the launching thread about 17 µs in a
	 * VM (an interprocessor interrupt; BenchmarkLearningLaunchCost), and
	 * while the agent learns every launch has unknown frames; meanwhile the
	 * agent polls every few milliseconds (agent.Run). */
	if ((full->e.py.flags & SP_PY_UNKNOWN) && (!w || full->e.h.ktime - w->last_wake >= SP_UNKNOWN_WAKE_NS)) {
		flags = BPF_RB_FORCE_WAKEUP;
		if (w)
			w->last_wake = full->e.h.ktime;
	}
	full->e.lost_seq = ringbuf_lost_seq;
	if (bpf_ringbuf_output(&events, full, size, flags))
		lost_record();
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
	/* Arguments 7 (blockDimZ), 8 (sharedMemBytes) and 9 (hStream): one read. */
	__u64 st[3] = {};
	bpf_probe_read_user(st, sizeof(st), (void *)(PT_REGS_SP(ctx) + 8));
	full->e.handle = PT_REGS_PARM1(ctx);
	full->e.arg0 = pack3(PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx), PT_REGS_PARM4(ctx));
	full->e.arg1 = pack3(PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx), st[0]);
	full->e.stream = st[2];
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
/* Copies that can block: (dst, src, bytes[, stream]); arg0 = bytes. */
SYNC_ENTRY(sp_memcpy_dtoh_async, SP_API_MEMCPY_DTOH_ASYNC, 0, PT_REGS_PARM4(ctx), PT_REGS_PARM3(ctx))
SYNC_ENTRY(sp_memcpy_htod, SP_API_MEMCPY_HTOD, 0, 0, PT_REGS_PARM3(ctx))
SYNC_ENTRY(sp_memcpy_htod_async, SP_API_MEMCPY_HTOD_ASYNC, 0, PT_REGS_PARM4(ctx), PT_REGS_PARM3(ctx))
SYNC_ENTRY(sp_memcpy, SP_API_MEMCPY, 0, 0, PT_REGS_PARM3(ctx))
SYNC_ENTRY(sp_memcpy_async, SP_API_MEMCPY_ASYNC, 0, PT_REGS_PARM4(ctx), PT_REGS_PARM3(ctx))

static __always_inline int sync_exit(struct pt_regs *ctx, __u32 api)
{
	struct sync_exit_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		lost_record();
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
SEC("uretprobe") int sp_memcpy_dtoh_async_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_MEMCPY_DTOH_ASYNC); }
SEC("uretprobe") int sp_memcpy_htod_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_MEMCPY_HTOD); }
SEC("uretprobe") int sp_memcpy_htod_async_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_MEMCPY_HTOD_ASYNC); }
SEC("uretprobe") int sp_memcpy_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_MEMCPY); }
SEC("uretprobe") int sp_memcpy_async_ret(struct pt_regs *ctx) { return sync_exit(ctx, SP_API_MEMCPY_ASYNC); }

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

/* Copies and sets that do not block: launches of their phase (SP_EV_MARK, counted as
 * copies). cuMemcpyDtoDAsync_v2(dst, src, bytes, CUstream): arg0 = bytes;
 * cuMemsetD8Async(dst, value, count, CUstream): arg0 = elements. */
SIMPLE(sp_memcpy_dtod_async, SP_EV_MARK, SP_API_MEMCPY_DTOD_ASYNC, 0, PT_REGS_PARM4(ctx), PT_REGS_PARM3(ctx), 0)
SIMPLE(sp_memset_async, SP_EV_MARK, SP_API_MEMSET_ASYNC, 0, PT_REGS_PARM4(ctx), PT_REGS_PARM3(ctx), 0)
SIMPLE(sp_memcpy_dtod, SP_EV_MARK, SP_API_MEMCPY_DTOD, 0, 0, PT_REGS_PARM3(ctx), 0)
SIMPLE(sp_memset, SP_EV_MARK, SP_API_MEMSET, 0, 0, PT_REGS_PARM3(ctx), 0)
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
		/* Its pid may come back. An entry the watchdog marked released
		 * stays for the agent to count (bpf.Tracer.Ungate). */
		__u64 *g = bpf_map_lookup_elem(&gated, &tgid);
		if (g && *g != ~0ull)
			bpf_map_delete_elem(&gated, &tgid);
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
	/* The record's room comes first: a process stopped for an event that
	 * never reaches user space would wait for a SIGCONT no one sends. */
	struct lib_event *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count_lost(SP_LOST_RINGBUF);
		count_lost(SP_LOST_LIB_OPEN);
		return 0;
	}
	if (*flags & SP_TRACK_STOP_ON_LIB) {
		/* Delivered on return to user space, before the library is mapped:
		 * user space attaches its probes, then sends SIGCONT. The gated
		 * entry comes first, so the watchdog can always undo the stop. */
		__u64 now = e->h.ktime;
		if (!bpf_map_update_elem(&gated, &tgid, &now, BPF_ANY)) {
			if (!bpf_send_signal(19 /* SIGSTOP */))
				e->stopped = 1;
			else
				bpf_map_delete_elem(&gated, &tgid);
		}
	}
	bpf_probe_read_kernel(r, sizeof(*r), e);
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* ---- CPU sampler ----
 *
 * sp_sample runs on every CPU's cpu-clock perf event (Tracer.StartSampler)
 * and reports the thread it interrupted when that thread belongs to a
 * tracked process: its Python stack (every frame, walked by sp_walk in its
 * recording mode, with the phase found as for a probe), the native leaf
 * (the user instruction pointer) and the CPU time the sample stands for.
 * Other threads cost one hash lookup. */

_Static_assert(sizeof(struct sample_event) == sizeof(struct api_event_full),
	       "sample_event must be walkable as an api_event_full");
_Static_assert(__builtin_offsetof(struct sample_event, py) == __builtin_offsetof(struct api_event_full, e.py),
	       "sample_event.py must lie where api_event's does");
_Static_assert(__builtin_offsetof(struct sample_event, stack) == __builtin_offsetof(struct api_event_full, frames),
	       "sample_event.stack must lie where api_event_full.frames does");

/* Its own scratch: a sample can interrupt a probe that is filling scratch. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_event);
} sample_scratch SEC(".maps");

SEC("perf_event")
int sp_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	if (!tgid || !bpf_map_lookup_elem(&tracked, &tgid))
		return 0;
	__u32 zero = 0;
	struct sample_event *s = bpf_map_lookup_elem(&sample_scratch, &zero);
	if (!s) {
		count_lost(SP_LOST_SCRATCH);
		return 0;
	}
	s->h.type = SP_EV_SAMPLE;
	s->h.pid = tgid;
	s->h.tid = tid;
	s->h.cpu = bpf_get_smp_processor_id();
	s->h.ktime = bpf_ktime_get_ns();
	s->period_ns = ctx->sample_period;
	s->flags = 0;
	s->_pad = 0;
	s->_reserved = 0;
	s->user_ip = 0;
	s->kernel_ip = 0;
	if ((ctx->regs.cs & 3) == 3) {
		s->user_ip = PT_REGS_IP(&ctx->regs);
	} else {
		/* In the kernel on the thread's behalf (a syscall, a fault): its
		 * user registers are saved at the top of its kernel stack. */
		s->kernel_ip = PT_REGS_IP(&ctx->regs);
		s->flags |= SP_SAMPLE_KERNEL;
		struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		if (!u || bpf_probe_read_kernel(&s->user_ip, sizeof(s->user_ip), &PT_REGS_IP(u)))
			s->flags |= SP_SAMPLE_NO_USER;
	}
	sp_walk((struct api_event_full *)s, tgid, tid, 1);
	/* Compact: the frame addresses follow the n code objects. Element by
	 * element upwards is safe where the ranges overlap (destination below
	 * source). */
	__u32 n = s->py.nframes;
	if (n > SP_MAX_FRAMES)
		n = SP_MAX_FRAMES;
	for (__u32 i = 0; i < SP_MAX_FRAMES; i++) {
		if (i >= n)
			break;
		s->stack[(n + i) & (2 * SP_MAX_FRAMES - 1)] = s->stack[SP_MAX_FRAMES + i];
	}
	__u64 size = __builtin_offsetof(struct sample_event, stack) + 16 * (__u64)n;
	/* Unknown code objects must be symbolized while the process lives. */
	__u64 flags = (s->py.flags & SP_PY_UNKNOWN) ? BPF_RB_FORCE_WAKEUP : wakeup_flags();
	if (size > sizeof(*s) || bpf_ringbuf_output(&events, s, size, flags))
		count_lost(SP_LOST_SAMPLE);
	return 0;
}
