/* Stub cuda.h for `run.sh --debian`: just the types CUPTI 11.8's activity and callback headers
 * name, so they compile without NVIDIA's 2.8 GB nvidia-cuda-dev package. Sizes match cuda.h. */
#ifndef LAYOUTCHECK_STUB_CUDA_H
#define LAYOUTCHECK_STUB_CUDA_H
#include <stddef.h>
#include <stdint.h>
#define CUDA_VERSION 11080
typedef int CUdevice;
typedef int CUresult;
typedef int CUdevice_attribute;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUfunc_st *CUfunction;
typedef struct CUmod_st *CUmodule;
typedef unsigned long long CUdeviceptr;
typedef enum CUgraphNodeType_enum { CU_GRAPH_NODE_TYPE_KERNEL = 0 } CUgraphNodeType;
typedef struct CUuuid_st { char bytes[16]; } CUuuid;
typedef struct CUaccessPolicyWindow_st {
    void *base_ptr;
    size_t num_bytes;
    float hitRatio;
    int hitProp;
    int missProp;
} CUaccessPolicyWindow;
#endif
