/* The driver and runtime API calls whose activity records specprof keeps (cuptiActivityEnable-
 * DriverApi / RuntimeApi): those that make GPU work, wait for it or capture it. Every other call
 * (cudaGetDevice, cuCtxGetCurrent, cudaStreamGetCaptureInfo, ...: a dozen per launch in eager
 * PyTorch) would cost the application thread a record each and tell the agent nothing.
 *
 * Numbers from CUPTI's cupti_driver_cbid.h / cupti_runtime_cbid.h (CUDA 11.8; append-only across
 * versions), names matching
 *   driver:  ^cu(Launch|GraphLaunch|Memcpy|Memset|StreamSynchronize|CtxSynchronize|EventSynchronize|EventRecord|StreamWaitEvent|StreamBeginCapture|StreamEndCapture|GraphInstantiate|MemPrefetchAsync)
 *   runtime: ^cuda(Launch|GraphLaunch|Memcpy|Memset|StreamSynchronize|DeviceSynchronize|ThreadSynchronize|EventSynchronize|EventRecord|StreamWaitEvent|StreamBeginCapture|StreamEndCapture|GraphInstantiate|MemPrefetchAsync)
 * plus the batched async copies of CUDA 12.8 (driver 776-779, 796-799) and cuCtxSynchronize_v2 (800).
 * Generated; keep sorted. */

#ifndef SPECPROF_API_FILTER_H
#define SPECPROF_API_FILTER_H
#include <stdint.h>

static const uint16_t kept_driver_cbids[] = {
    17, 43, 45, 47, 49, 51, 53, 54, 55, 56, 57, 58, 60, 62, 64, 66,
    67, 68, 69, 71, 73, 75, 77, 79, 81, 115, 116, 117, 119, 121, 126, 216,
    218, 220, 222, 224, 226, 248, 249, 250, 251, 252, 253, 254, 276, 277, 278, 279,
    280, 281, 282, 283, 284, 285, 286, 287, 288, 289, 290, 291, 292, 293, 295, 305,
    306, 307, 318, 319, 320, 321, 397, 398, 399, 400, 401, 402, 403, 404, 405, 406,
    407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 418, 419, 420, 421, 422, 423,
    424, 425, 426, 427, 428, 429, 430, 431, 432, 433, 436, 440, 441, 442, 467, 468,
    477, 478, 480, 495, 496, 497, 498, 513, 514, 515, 527, 528, 539, 540, 578, 587,
    588, 643, 652, 653, 656, 657, 776, 777, 778, 779, 796, 797, 798, 799, 800,
};

static const uint16_t kept_runtime_cbids[] = {
    13, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45,
    46, 47, 48, 49, 50, 51, 52, 126, 131, 135, 137, 142, 143, 144, 145, 147,
    160, 161, 162, 163, 165, 211, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222,
    223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 239, 242,
    243, 244, 245, 246, 247, 249, 250, 252, 253, 269, 270, 272, 284, 285, 310, 311,
    312, 315, 316, 319, 320, 370, 371, 418, 430, 431,
};

#endif
