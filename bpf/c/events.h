/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Wire layouts shared by the BPF programs and the Go reader (bpf2go mirrors
 * them as specprof* types). Keep every field naturally aligned: the Go side
 * decodes records by these exact offsets. */
#ifndef SPECPROF_EVENTS_H
#define SPECPROF_EVENTS_H

#define SP_MAX_FRAMES 256   /* frames walked per event (stack depth limit) */
#define SP_CYCLE_SEARCH 16  /* frames walked past the phase frame to find the cycle frame */
#define SP_PATH_MAX 256

enum sp_event_type {
	SP_EV_LAUNCH = 1,     /* kernel / graph launch entry */
	SP_EV_SYNC_ENTER = 2, /* blocking call entry */
	SP_EV_SYNC_EXIT = 3,  /* blocking call return */
	SP_EV_COLL = 4,       /* NCCL collective / group call entry */
	SP_EV_CAPTURE = 5,    /* stream capture begin/end, graph instantiate */
	SP_EV_MARK = 6,       /* event record and other cheap markers */
	SP_EV_LIB_OPEN = 7,   /* a tracked process opened a library of interest */
	SP_EV_FORK = 8,       /* a tracked process forked a new process */
	SP_EV_EXEC = 9,       /* a tracked process exec'd */
	SP_EV_EXIT = 10,      /* a tracked process exited */
	SP_EV_SAMPLE = 11,    /* CPU sample of a tracked thread (perf_event) */
};

/* Python walk outcome flags (sp_py.flags). */
enum sp_py_flags {
	SP_PY_WALKED = 1 << 0,    /* a frame walk ran */
	SP_PY_UNKNOWN = 1 << 1,   /* unknown code objects: frames[] is attached */
	SP_PY_TRUNCATED = 1 << 2, /* stack deeper than SP_MAX_FRAMES */
	SP_PY_NO_CONFIG = 1 << 3, /* no Python runtime configured for the process */
	SP_PY_NO_TSTATE = 1 << 4, /* the thread has no Python thread state */
	SP_PY_READ_ERR = 1 << 5,  /* a pointer read failed (torn frame) */
	SP_PY_STALE = 1 << 6,     /* matched code object failed validation */
};

/* py_config.flags: how to walk this interpreter. */
enum sp_cfg_flags {
	SP_CFG_CFRAME = 1 << 0,        /* 3.11/3.12: tstate->cframe->current_frame */
	SP_CFG_SKIP_OWNER = 1 << 1,    /* 3.12+: skip frames with owner >= 3 */
	SP_CFG_TAGGED_EXEC = 1 << 2,   /* 3.14: f_executable is a tagged stackref */
	SP_CFG_PTHREAD_TID = 1 << 3,   /* 3.10: match threads via pthread_t->tid */
	SP_CFG_FRAME_OBJECT = 1 << 4,  /* 3.10: frames are PyFrameObject */
};

/* tracked.flags */
enum sp_track_flags {
	SP_TRACK_STOP_ON_LIB = 1 << 0, /* SIGSTOP the process when it opens a library of interest */
};

/* code_class.flags */
enum sp_class_flags {
	SP_CLASS_MARKER = 1 << 0, /* satisfies a requires_below condition of an outer frame */
	SP_CLASS_CYCLE = 1 << 1,  /* the preset's cycle function */
	/* A code object that dies while the process runs (a module body, code
	 * from exec or eval): its qualname is checked on every new frame, as a
	 * phase's is, and it never counts as plain. */
	SP_CLASS_VOLATILE = 1 << 2,
};

/* lost counters (per-CPU array indexes) */
enum sp_lost {
	SP_LOST_RINGBUF = 0,  /* ring buffer full: record dropped */
	SP_LOST_SCRATCH = 1,  /* internal scratch unavailable */
	SP_LOST_OPENAT = 2,   /* openat bookkeeping map full */
	SP_LOST_SAMPLE = 3,   /* ring buffer full: CPU sample dropped */
	SP_LOST_LIB_OPEN = 4, /* ring buffer full: a library-open record dropped (counted in RINGBUF too) */
	SP_LOST_MAX = 5,
};

struct sp_header {
	__u32 type;
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u64 ktime; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
};

/* Per-process description of the interpreter, written by user space. Offsets
 * come from agent/python (with provenance there); BPF only follows pointers. */
struct py_config {
	__u64 runtime; /* address of _PyRuntime */
	__u32 interp_head;
	__u32 interp_threads_head;
	__u32 ts_next;
	__u32 ts_native_tid;
	__u32 ts_thread_id;
	__u32 ts_frame;
	__u32 cframe_current;
	__u32 frame_code;
	__u32 frame_prev;
	__u32 frame_owner;
	__u32 frame_instr;
	__u32 pthread_tid;
	__u32 code_qualname; /* validation of phase and volatile hits */
	__u32 flags;
	/* Phase id that begins a cycle when it comes back after other phases
	 * within one cycle-function call (the per-thread cycle count); 0 none. */
	__u32 cycle_start;
	__u32 cycle_flags; /* SP_CYCCFG_* */
};

/* py_config.cycle_flags: how the cycle rule opens cycles. */
enum sp_cyccfg {
	/* A call of the cycle function opens a cycle only at its first entry
	 * into the start phase; its calls before that are outside cycles
	 * (phase.Cycle.BeforeStart "outside": HF's setup before the loop). */
	SP_CYCCFG_AT_START = 1 << 0,
};

struct code_key {
	__u32 pid;
	__u32 _pad;
	__u64 code;
};

struct code_class {
	__u16 phase;     /* phase id when this frame is the innermost match; 0 none */
	__u16 alt_phase; /* phase when a marker frame lies below; 0 none */
	__u16 flags;     /* SP_CLASS_* */
	__u16 _pad;
	__u64 qualname;  /* co_qualname pointer when classified (validation) */
};

struct sp_py {
	__u16 phase;
	__u16 flags;
	__u16 nframes; /* entries in frames[] / frame_addrs[] that follow */
	__u16 depth;   /* Python frames walked */
	__u32 match;   /* index of the matching frame in the walk, or ~0 */
	/* The thread's cycle number as BPF counts it (the agent's cycle rule,
	 * over the calls BPF classified itself), counted whether or not the
	 * record reaches user space: a jump tells user space how many cycles
	 * were lost whole. 0: not known for this call (unclassified frames,
	 * no cycle frame, no per-thread storage). */
	__u32 cycle_no;
	__u64 phase_code;  /* code object of the matching frame */
	__u64 cycle_frame; /* address of the innermost cycle frame above the match */
	__u64 leaf_code;   /* innermost Python frame: code object */
	__u64 leaf_instr;  /* and its instruction pointer (line numbers) */
};

/* API events (LAUNCH, SYNC_ENTER, COLL, CAPTURE, MARK). When py.flags has
 * SP_PY_UNKNOWN, py.nframes code addresses follow, then as many frame
 * addresses, so user space can resolve the phase itself. */
struct api_event {
	struct sp_header h;
	__u32 api;
	/* Call and sync-exit records lost to a full ring buffer so far (all
	 * CPUs), read when this one was submitted: a change tells user space
	 * that records went missing before this one. */
	__u32 lost_seq;
	__u64 stream;
	__u64 handle; /* CUfunction, CUgraphExec, CUevent, ncclComm_t */
	__u64 arg0;   /* grid (x|y<<21|z<<42), bytes, count */
	__u64 arg1;   /* block, datatype | op<<8 | root/peer<<16 */
	struct sp_py py;
};

struct api_event_full {
	struct api_event e;
	__u64 frames[SP_MAX_FRAMES];
	__u64 frame_addrs[SP_MAX_FRAMES];
};

struct sync_exit_event {
	struct sp_header h;
	__u32 api;
	__s32 ret;
};

struct lib_event {
	struct sp_header h;
	__s32 fd;
	__u32 stopped; /* 1 if the process was sent SIGSTOP */
	char path[SP_PATH_MAX];
};

struct proc_event {
	struct sp_header h;
	__u32 child; /* FORK: new process; EXEC/EXIT: the process itself */
	__u32 _pad;
};

/* ---- CPU sampler (perf_event) ---- */

/* sample_event.flags */
enum sp_sample_flags {
	SP_SAMPLE_KERNEL = 1 << 0,  /* the sample hit kernel mode: user_ip is where the thread entered it */
	SP_SAMPLE_NO_USER = 1 << 1, /* no user registers (user_ip is 0) */
};

/* A CPU sample (SP_EV_SAMPLE). Up to py it has the size of struct
 * api_event and py lies where api_event's does, so the frame walker fills
 * it as it fills an api_event_full (the sampler passes it as one; see the
 * _Static_asserts in specprof.bpf.c). Every walked frame is recorded
 * (py.nframes of them) and the record is sent compacted: py.nframes code
 * objects in stack[0..n), then their frame addresses in stack[n..2n). */
struct sample_event {
	struct sp_header h;
	__u64 user_ip;   /* native leaf: the user-mode instruction pointer */
	__u64 kernel_ip; /* with SP_SAMPLE_KERNEL: the kernel instruction pointer */
	__u64 period_ns; /* CPU time the sample stands for (the perf period of cpu-clock) */
	__u32 flags;     /* SP_SAMPLE_* */
	__u32 _pad;
	__u64 _reserved;
	struct sp_py py;
	__u64 stack[2 * SP_MAX_FRAMES];
};

#endif
