/*
 * wire.h — specprof's CUPTI wire format: the single source for the injected library
 * (cupti/lib) and the Go receiver (cupti/wire_linux_amd64.go, generated from this file with
 * `go tool cgo -godefs`).
 *
 * A connection is a byte stream (AF_UNIX, SOCK_STREAM) from the library to the agent. It is a
 * sequence of records; each starts with a spw_header and its payload follows. Every record length
 * is a multiple of 8 and includes the header, so records stay 8-byte aligned. The first record is
 * SPW_HELLO. All integers are little-endian (the library and the agent share a host). Times are
 * CLOCK_MONOTONIC nanoseconds (design §4); 0 means "unknown" (CUPTI reports 0 for records it could
 * not time).
 *
 * Compatibility: a reader skips unknown record types and accepts payloads longer than the struct
 * it knows (fields are only ever appended); SPW_WIRE_VERSION changes when a field changes meaning.
 *
 * The agent may write one-byte commands on the same socket: SPW_CMD_FLUSH asks the library to
 * flush CUPTI's buffers and answer with a STATS record flagged SPW_FLAG_FLUSH_ACK once everything
 * CUPTI handed over has been written. SPW_CMD_WINDOW says that the process is running decode
 * cycles now: a library whose duty windows wait for that (SPECPROF_CUPTI_DUTY_START=cycles) opens its
 * next window, no sooner than a period after the last one opened; others ignore it.
 *
 * Field names are camelCase with ID/TID capitalised so the generated Go fields read naturally.
 */
#ifndef SPECPROF_CUPTI_WIRE_H
#define SPECPROF_CUPTI_WIRE_H

#include <stdint.h>

#define SPW_MAGIC "SPCUPTI1"
#define SPW_WIRE_VERSION 1
/* Largest record a reader accepts (header included); longer lengths mean a broken stream. */
#define SPW_MAX_RECORD 65536
/* Longest kernel name sent; longer names are truncated. */
#define SPW_MAX_NAME 16384

enum spw_type {
    SPW_HELLO = 1,
    SPW_KERNEL = 2,
    SPW_MEMCPY = 3,
    SPW_MEMSET = 4,
    SPW_API = 5,
    SPW_SYNC = 6,
    SPW_GRAPH_NODE = 7,
    SPW_NAME = 8,
    SPW_OVERHEAD = 9,
    SPW_STATS = 10,
    SPW_WINDOW = 11,
    SPW_GRAPH_EXEC = 12,
    SPW_NUM_TYPES = 13 /* one past the largest type */
};

/* spw_header.flags */
enum spw_flag {
    SPW_FLAG_FLUSH_ACK = 1, /* STATS: answers the agent's SPW_CMD_FLUSH */
    SPW_FLAG_FINAL = 2      /* STATS: the process is exiting */
};

/* Commands from the agent (single bytes). */
enum spw_cmd { SPW_CMD_FLUSH = 'F', SPW_CMD_WINDOW = 'W' };

/* spw_hello.clockSource */
enum spw_clock {
    SPW_CLOCK_CALLBACK = 1, /* CUPTI timestamp callback returns CLOCK_MONOTONIC: exact */
    SPW_CLOCK_OFFSET = 2    /* CUPTI's own clock minus a measured offset (clockOffset) */
};

/* spw_graph_node.op */
enum spw_graph_op {
    SPW_GRAPH_NODE_CREATED = 1, /* created (captured, or added) by the API call correlationID */
    SPW_GRAPH_NODE_CLONED = 2   /* cloned from originalNodeID (e.g. by graph instantiation) */
};

/* spw_api.domain */
enum spw_api_domain { SPW_DOMAIN_DRIVER = 1, SPW_DOMAIN_RUNTIME = 2 };

struct spw_header {
    uint32_t len;   /* bytes, header included, multiple of 8 */
    uint16_t type;  /* enum spw_type */
    uint16_t flags; /* enum spw_flag */
};

struct spw_hello {
    uint8_t magic[8];      /* SPW_MAGIC, no terminator */
    uint32_t wireVersion;  /* SPW_WIRE_VERSION */
    uint32_t pid;
    uint32_t cuptiVersion; /* cuptiGetVersion: 18..28 for CUDA 11.8-12.9, 130000+ for 13.x */
    int32_t driverVersion; /* cuDriverGetVersion, e.g. 13000; 0 when unknown */
    uint32_t clockSource;  /* enum spw_clock */
    uint32_t types;        /* bit (1 << spw_type) for each record type this connection carries */
    int64_t clockOffset;   /* SPW_CLOCK_OFFSET: CUPTI time minus CLOCK_MONOTONIC at connect */
    uint64_t connectTime;  /* CLOCK_MONOTONIC ns when this connection was made */
};

struct spw_kernel {
    uint64_t start;
    uint64_t end;
    uint64_t graphNodeID;   /* 0 outside graph launches */
    uint32_t graphID;       /* 0 outside graph launches */
    uint32_t device;
    uint32_t context;       /* CUPTI context id */
    uint32_t stream;        /* CUPTI stream id */
    uint32_t correlationID; /* of the launching driver call (cuGraphLaunch for graph kernels) */
    uint32_t nameID;        /* SPW_NAME id; 0 when unknown */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t registers;     /* per thread */
    uint32_t staticShared;  /* bytes per block */
    uint32_t dynamicShared; /* bytes per block */
    uint32_t reserved;
};

struct spw_memcpy {
    uint64_t start;
    uint64_t end;
    uint64_t bytes;
    uint64_t graphNodeID;
    uint32_t graphID;
    uint32_t device;
    uint32_t context;
    uint32_t stream;
    uint32_t correlationID;
    uint8_t copyKind; /* CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, ... */
    uint8_t srcKind;  /* CUpti_ActivityMemoryKind: 1 pageable, 2 pinned, 3 device, ... */
    uint8_t dstKind;
    uint8_t flags;    /* CUpti_ActivityFlag bits (1: asynchronous) */
};

struct spw_memset {
    uint64_t start;
    uint64_t end;
    uint64_t bytes;
    uint64_t graphNodeID;
    uint32_t graphID;
    uint32_t device;
    uint32_t context;
    uint32_t stream;
    uint32_t correlationID;
    uint32_t value;
    uint16_t memoryKind; /* CUpti_ActivityMemoryKind */
    uint16_t flags;
    uint32_t reserved;
};

struct spw_api {
    uint64_t start;
    uint64_t end;
    uint32_t cbid;   /* CUPTI callback id (cupti_driver_cbid.h for the driver domain) */
    uint32_t pid;
    uint32_t tid;
    uint32_t correlationID;
    uint32_t result; /* CUresult returned */
    uint16_t domain; /* enum spw_api_domain */
    uint16_t reserved;
};

struct spw_sync {
    uint64_t start;
    uint64_t end;
    uint32_t kind;    /* CUpti_ActivitySynchronizationType: 1 event sync, 2 stream wait event,
                         3 stream sync, 4 context sync */
    uint32_t context;
    uint32_t stream;  /* CUPTI stream id; 0xffffffff when not applicable */
    uint32_t event;   /* CUDA event id; 0xffffffff when not applicable */
    uint32_t correlationID;
    uint32_t reserved;
};

struct spw_graph_node {
    uint64_t nodeID;
    uint64_t originalNodeID; /* SPW_GRAPH_NODE_CLONED: the node it was cloned from; else 0 */
    uint32_t graphID;
    uint32_t correlationID;  /* the driver call during which the callback ran (0: not tracked) */
    uint32_t cbid;           /* that call's driver cbid (0: not tracked) */
    uint32_t nodeType;       /* CUgraphNodeType: 0 kernel, 1 memcpy, 2 memset, ... */
    uint32_t op;             /* enum spw_graph_op */
    uint32_t tid;            /* thread that created or cloned the node */
    uint64_t timestamp;      /* CLOCK_MONOTONIC ns at the callback, inside the call that made the node */
};

/* Followed by len bytes of the name (no terminator), zero-padded to a multiple of 8. */
struct spw_name {
    uint32_t id;
    uint32_t len;
};

struct spw_overhead {
    uint64_t start;
    uint64_t end;
    uint32_t kind;        /* CUpti_ActivityOverheadKind */
    uint32_t objectKind;  /* CUpti_ActivityObjectKind: 1 process, 2 thread, 3 device, ... */
    uint32_t objectID[3]; /* process/thread, or device/context/stream, by objectKind */
    uint32_t reserved;
};

/* A window of GPU activity tracing (SPECPROF_CUPTI_DUTY): kernels, copies and sets are recorded
 * only while one is open. Sent when it opens (close 0), every 100 ms while it stays open (close 0,
 * openAsOf set: the agent need not wait for the close of a window that an idle process keeps open
 * to know that its cycles were traced), and when it closes. */
struct spw_window {
    uint64_t open;     /* CLOCK_MONOTONIC ns, after the kinds were enabled */
    uint64_t close;    /* before they were disabled; 0 while open */
    uint64_t openAsOf; /* close 0: the window was still open at this time (0: not said) */
};

/* One execution of a CUDA graph as a whole (graph-level tracing, SPECPROF_CUPTI_KINDS=...,graph:
 * CUPTI's GRAPH_TRACE, which replaces the per-node kernel, copy and set records of graph launches
 * with this one record per launch). */
struct spw_graph_exec {
    uint64_t start; /* the graph's first node starts */
    uint64_t end;   /* its last node ends */
    uint32_t graphID;
    uint32_t device;
    uint32_t context;
    uint32_t stream;        /* where it was launched */
    uint32_t correlationID; /* of the launching call (cuGraphLaunch) */
    uint32_t reserved;
};

/* Cumulative counters of the library since the process started (every connection included). */
struct spw_stats {
    uint64_t recordsDelivered;  /* records (not HELLO/STATS) fully written to an agent */
    uint64_t droppedCUPTI;      /* cuptiActivityGetNumDroppedRecords, summed */
    uint64_t droppedNoAgent;    /* records CUPTI handed over while no agent was connected */
    uint64_t droppedBackpressure; /* records dropped because the agent did not read fast enough */
    uint64_t droppedDisconnect; /* records queued for an agent that went away */
    uint64_t droppedGraphNodes; /* graph-node events beyond the retained table */
    uint64_t buffersCompleted;  /* activity buffers CUPTI handed back */
    uint64_t buffersRefused;    /* buffer requests answered with none (pool empty / no agent) */
    uint64_t bytesSent;
    uint64_t recordsUnknown;    /* CUPTI records of kinds we do not convert */
    uint64_t connects;          /* successful connections so far */
    uint64_t namesDropped;      /* kernels sent with nameID 0 because the name table was full */
    /* SPECPROF_CUPTI_DETACH: CUPTI detached once nothing more was to be traced. */
    uint64_t detaches;          /* cuptiFinalize completed: 0 or 1 (the detach is final) */
    uint64_t detachStallNs;     /* its time: what the application thread that ran it waited */
    uint64_t detachRefused;     /* 1: a detach was due, but the process had built CUDA graphs under
                                   CUPTI, whose launches fail after cuptiFinalize: not finalized */
    /* The GPU activity kinds are switched on by application threads, in a driver call's exit callback
     * (never from the sender while a graph launch may be in progress): */
    uint64_t gpuSwitches;       /* switches applied (on or off; per window, connection, disconnection) */
    uint64_t gpuSwitchNs;       /* the application threads' time in them, in all */
    uint64_t gpuSwitchMaxNs;    /* and the longest one */
    uint64_t dutyStopped;       /* 1: duty-cycled windows stopped once the process had built CUDA graphs
                                   (switching CUPTI's tracing crashed graph processes on the H200) */
    uint64_t detachQuiet;       /* with detachRefused: instead of the finalize, every CUPTI callback went
                                   off (1), and the subscription too (2, SPECPROF_CUPTI_GRAPH_DETACH) */
};

#endif /* SPECPROF_CUPTI_WIRE_H */
