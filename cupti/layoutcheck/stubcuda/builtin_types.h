/* Stub for run.sh --debian (cupti_callbacks.h includes it). */
