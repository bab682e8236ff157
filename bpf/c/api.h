/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Hooked entry points. The Go table in bpf/api.go maps each id to its
 * exported symbols and BPF program; keep both in the same order. */
#ifndef SPECPROF_API_H
#define SPECPROF_API_H

enum sp_api {
	SP_API_NONE = 0,
	/* launches */
	SP_API_LAUNCH_KERNEL = 1,      /* cuLaunchKernel, cuLaunchKernel_ptsz */
	SP_API_LAUNCH_KERNEL_EX = 2,   /* cuLaunchKernelEx, cuLaunchKernelEx_ptsz */
	SP_API_GRAPH_LAUNCH = 3,       /* cuGraphLaunch, cuGraphLaunch_ptsz */
	/* copies and sets that never block the CPU: launches of their phase */
	SP_API_MEMCPY_DTOD_ASYNC = 5,  /* cuMemcpyDtoDAsync(_v2)(_ptsz) */
	SP_API_MEMSET_ASYNC = 6,       /* cuMemsetD{8,16,32}Async(_ptsz) */
	SP_API_MEMCPY_DTOD = 7,        /* cuMemcpyDtoD(_v2)(_ptds): no host synchronisation */
	SP_API_MEMSET = 8,             /* cuMemsetD{8,16,32}(_v2)(_ptds): asynchronous for device memory */
	/* blocking calls */
	SP_API_STREAM_SYNC = 10,       /* cuStreamSynchronize(_ptsz) */
	SP_API_EVENT_SYNC = 11,        /* cuEventSynchronize */
	SP_API_CTX_SYNC = 12,          /* cuCtxSynchronize(_v2) */
	SP_API_MEMCPY_DTOH = 13,       /* cuMemcpyDtoH(_v2)(_ptds) */
	/* copies with host memory on one side: they block the CPU when that memory is
	 * pageable (a DtoH copy returns once it is done, after everything queued before it);
	 * timed like the blocking calls, and launches of their phase too */
	SP_API_MEMCPY_DTOH_ASYNC = 14, /* cuMemcpyDtoHAsync(_v2)(_ptsz) */
	SP_API_MEMCPY_HTOD = 15,       /* cuMemcpyHtoD(_v2)(_ptds) */
	SP_API_MEMCPY_HTOD_ASYNC = 16, /* cuMemcpyHtoDAsync(_v2)(_ptsz) */
	SP_API_MEMCPY = 17,            /* cuMemcpy(_ptds): unified addressing, any direction */
	SP_API_MEMCPY_ASYNC = 18,      /* cuMemcpyAsync(_ptsz) */
	/* capture */
	SP_API_BEGIN_CAPTURE = 20,     /* cuStreamBeginCapture(_v2)(_ptsz) */
	SP_API_END_CAPTURE = 21,       /* cuStreamEndCapture(_ptsz) */
	SP_API_GRAPH_INSTANTIATE = 22, /* cuGraphInstantiate(_v2), cuGraphInstantiateWithFlags */
	/* markers */
	SP_API_EVENT_RECORD = 30,      /* cuEventRecord(_ptsz), cuEventRecordWithFlags(_ptsz) */
	SP_API_STREAM_WAIT_EVENT = 31, /* cuStreamWaitEvent(_ptsz) */
	/* NCCL */
	SP_API_NCCL_ALL_REDUCE = 40,
	SP_API_NCCL_ALL_GATHER = 41,
	SP_API_NCCL_REDUCE_SCATTER = 42,
	SP_API_NCCL_BROADCAST = 43,
	SP_API_NCCL_REDUCE = 44,
	SP_API_NCCL_SEND = 45,
	SP_API_NCCL_RECV = 46,
	SP_API_NCCL_GROUP_START = 47,
	SP_API_NCCL_GROUP_END = 48,
};

#endif
