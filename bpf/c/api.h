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
	/* blocking calls */
	SP_API_STREAM_SYNC = 10,       /* cuStreamSynchronize(_ptsz) */
	SP_API_EVENT_SYNC = 11,        /* cuEventSynchronize */
	SP_API_CTX_SYNC = 12,          /* cuCtxSynchronize(_v2) */
	SP_API_MEMCPY_DTOH = 13,       /* cuMemcpyDtoH(_v2)(_ptds) */
	SP_API_MEMCPY_DTOH_ASYNC = 14, /* cuMemcpyDtoHAsync(_v2)(_ptsz): not blocking, kept as a marker */
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
