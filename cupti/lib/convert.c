/*
 * Record conversion (sender thread): CUPTI activity records into the wire records of ../wire.h
 * (mirrored by gen_wire.go, decoded by decode.go). Each CUPTI record is read only up to the prefix
 * that cupti_min.h describes, and only when its size covers it; otherwise collection switches off
 * (layout_mismatch). Kernel names are interned per process and sent once per connection as NAME
 * records. Timestamps are CLOCK_MONOTONIC: CUPTI's own through the timestamp callback, or CUPTI's
 * clock shifted by a measured offset (spc.clock).
 */
#define _GNU_SOURCE
#include "state.h"

#include <stdlib.h>
#include <string.h>

static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ? h : 1;
}

/* Returns the table slot of name s (inserted when new), or UINT32_MAX when the table is full. */
static uint32_t name_slot(const char *s) {
    size_t ci = ((uintptr_t)s >> 3) & 1023;
    if (spc.names.cache_ptr[ci] == s && spc.names.t && !strcmp(spc.names.t[spc.names.cache_slot[ci]].s, s)) return spc.names.cache_slot[ci];
    size_t len = strnlen(s, SPW_MAX_NAME);
    uint64_t h = name_hash(s, len);
    if (spc.names.n * 2 >= spc.names.cap) {
        if (spc.names.n >= NAMES_MAX) return UINT32_MAX;
        uint32_t nc = spc.names.cap ? spc.names.cap * 2 : 1024;
        struct name_ent *nt = calloc(nc, sizeof *nt);
        if (!nt) return UINT32_MAX;
        for (uint32_t i = 0; i < spc.names.cap; i++) {
            if (!spc.names.t[i].s) continue;
            uint32_t j = (uint32_t)(spc.names.t[i].hash & (nc - 1));
            while (nt[j].s) j = (j + 1) & (nc - 1);
            nt[j] = spc.names.t[i];
        }
        free(spc.names.t);
        spc.names.t = nt;
        spc.names.cap = nc;
        memset(spc.names.cache_ptr, 0, sizeof spc.names.cache_ptr);
    }
    uint32_t j = (uint32_t)(h & (spc.names.cap - 1));
    for (; spc.names.t[j].s; j = (j + 1) & (spc.names.cap - 1))
        if (spc.names.t[j].hash == h && spc.names.t[j].len == len && !memcmp(spc.names.t[j].s, s, len)) goto found;
    char *copy = malloc(len + 1);
    if (!copy) return UINT32_MAX;
    memcpy(copy, s, len);
    copy[len] = 0;
    spc.names.t[j] = (struct name_ent){.s = copy, .len = (uint32_t)len, .id = ++spc.names.n, .epoch = 0, .hash = h};
found:
    spc.names.cache_ptr[ci] = s;
    spc.names.cache_slot[ci] = j;
    return j;
}

/* Name id for a kernel record, sending the NAME record first on this connection. 0: unknown. */
static int name_id(const char *s, uint32_t *id) {
    *id = 0;
    if (!s) return 0;
    uint32_t j = name_slot(s);
    if (j == UINT32_MAX) {
        atomic_fetch_add(&spc.st.names_dropped, 1);
        return 0;
    }
    struct name_ent *e = &spc.names.t[j];
    if (e->epoch != spc.out.epoch) {
        struct spw_name nh = {.id = e->id, .len = e->len};
        if (out_record(SPW_NAME, 0, &nh, sizeof nh, e->s, e->len) < 0) return -1;
        e->epoch = spc.out.epoch;
    }
    *id = e->id;
    return 0;
}

static uint64_t ts(uint64_t t) {
    if (!t || spc.clock == SPW_CLOCK_CALLBACK) return t;
    return t - (uint64_t)atomic_load_explicit(&spc.offset, memory_order_relaxed);
}

static void layout_mismatch(uint32_t kind, size_t size, size_t need) {
    LOG_ONCE(L_LAYOUT,
             "CUPTI %u: a kind-%u activity record is %zu bytes, fewer than the %zu this library reads; "
             "collection disabled (unsupported record layout)",
             spc.cupti_version, kind, size, need);
    atomic_store(&spc.active, 0);
}

/* Converts one record of `size` bytes (distance to the next record, or to the end of the valid
 * data for the last one). Returns -1 when the output is full (the record is dropped). */
static int convert(const struct spc_activity *a, size_t size) {
    switch (a->kind) {
    case SPC_KIND_CONCURRENT_KERNEL: {
        if (size < sizeof(struct spc_kernel_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_kernel_prefix));
            return 0;
        }
        const struct spc_kernel_prefix *k = (const void *)a;
        struct spw_kernel w = {
            .start = ts(k->start),
            .end = ts(k->end),
            .graphNodeID = k->graphNodeId,
            .graphID = k->graphId,
            .device = k->deviceId,
            .context = k->contextId,
            .stream = k->streamId,
            .correlationID = k->correlationId,
            .grid = {(uint32_t)k->gridX, (uint32_t)k->gridY, (uint32_t)k->gridZ},
            .block = {(uint32_t)k->blockX, (uint32_t)k->blockY, (uint32_t)k->blockZ},
            .registers = k->registersPerThread,
            .staticShared = (uint32_t)k->staticSharedMemory,
            .dynamicShared = (uint32_t)k->dynamicSharedMemory,
        };
        if (name_id(k->name, &w.nameID) < 0) return -1;
        return out_record(SPW_KERNEL, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_MEMCPY: {
        if (size < sizeof(struct spc_memcpy_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_memcpy_prefix));
            return 0;
        }
        const struct spc_memcpy_prefix *m = (const void *)a;
        struct spw_memcpy w = {.start = ts(m->start),
                               .end = ts(m->end),
                               .bytes = m->bytes,
                               .graphNodeID = m->graphNodeId,
                               .graphID = m->graphId,
                               .device = m->deviceId,
                               .context = m->contextId,
                               .stream = m->streamId,
                               .correlationID = m->correlationId,
                               .copyKind = m->copyKind,
                               .srcKind = m->srcKind,
                               .dstKind = m->dstKind,
                               .flags = m->flags};
        return out_record(SPW_MEMCPY, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_MEMSET: {
        if (size < sizeof(struct spc_memset_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_memset_prefix));
            return 0;
        }
        const struct spc_memset_prefix *m = (const void *)a;
        struct spw_memset w = {.start = ts(m->start),
                               .end = ts(m->end),
                               .bytes = m->bytes,
                               .graphNodeID = m->graphNodeId,
                               .graphID = m->graphId,
                               .device = m->deviceId,
                               .context = m->contextId,
                               .stream = m->streamId,
                               .correlationID = m->correlationId,
                               .value = m->value,
                               .memoryKind = m->memoryKind,
                               .flags = m->flags};
        return out_record(SPW_MEMSET, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_DRIVER:
    case SPC_KIND_RUNTIME: {
        if (size < sizeof(struct spc_api)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_api));
            return 0;
        }
        const struct spc_api *r = (const void *)a;
        struct spw_api w = {.start = ts(r->start),
                            .end = ts(r->end),
                            .cbid = r->cbid,
                            .pid = r->processId,
                            .tid = r->threadId,
                            .correlationID = r->correlationId,
                            .result = r->returnValue,
                            .domain = a->kind == SPC_KIND_RUNTIME ? SPW_DOMAIN_RUNTIME : SPW_DOMAIN_DRIVER};
        return out_record(SPW_API, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_SYNCHRONIZATION: {
        if (size < sizeof(struct spc_sync_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_sync_prefix));
            return 0;
        }
        const struct spc_sync_prefix *s = (const void *)a;
        struct spw_sync w = {.start = ts(s->start),
                             .end = ts(s->end),
                             .kind = s->type,
                             .context = s->contextId,
                             .stream = s->streamId,
                             .event = s->cudaEventId,
                             .correlationID = s->correlationId};
        return out_record(SPW_SYNC, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_OVERHEAD: {
        if (size < sizeof(struct spc_overhead_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_overhead_prefix));
            return 0;
        }
        const struct spc_overhead_prefix *o = (const void *)a;
        struct spw_overhead w = {.start = ts(o->start),
                                 .end = ts(o->end),
                                 .kind = o->overheadKind,
                                 .objectKind = o->objectKind,
                                 .objectID = {o->objectId[0], o->objectId[1], o->objectId[2]}};
        return out_record(SPW_OVERHEAD, 0, &w, sizeof w, NULL, 0);
    }
    case SPC_KIND_GRAPH_TRACE: {
        if (size < sizeof(struct spc_graph_trace_prefix)) {
            layout_mismatch(a->kind, size, sizeof(struct spc_graph_trace_prefix));
            return 0;
        }
        const struct spc_graph_trace_prefix *g = (const void *)a;
        struct spw_graph_exec w = {.start = ts(g->start),
                                   .end = ts(g->end),
                                   .graphID = g->graphId,
                                   .device = g->deviceId,
                                   .context = g->contextId,
                                   .stream = g->streamId,
                                   .correlationID = g->correlationId};
        return out_record(SPW_GRAPH_EXEC, 0, &w, sizeof w, NULL, 0);
    }
    default:
        atomic_fetch_add(&spc.st.unknown, 1);
        return 0;
    }
}

/* Converts (or, without an agent, counts) every record of one completed buffer. */
void process_buffer(uint8_t *buf, size_t valid) {
    struct spc_activity *rec = NULL;
    spc_result r = spc.cupti.ActivityGetNextRecord(buf, valid, &rec);
    uint64_t dropped = 0;
    int full = 0;
    while (r == SPC_SUCCESS && rec) {
        struct spc_activity *cur = rec;
        r = spc.cupti.ActivityGetNextRecord(buf, valid, &rec);
        size_t size = (r == SPC_SUCCESS && rec) ? (size_t)((uint8_t *)rec - (uint8_t *)cur)
                                                : (size_t)(buf + valid - (uint8_t *)cur);
        if (!atomic_load(&spc.active)) {
            dropped++;
            continue;
        }
        if (spc.out.fd < 0 || spc.out.hello_pending) {
            atomic_fetch_add(&spc.st.dropped_no_agent, 1);
            continue;
        }
        if (full || convert(cur, size) < 0) {
            full = 1;
            atomic_fetch_add(&spc.st.dropped_backpressure, 1);
        }
    }
    if (dropped) atomic_fetch_add(&spc.st.dropped_no_agent, dropped);
    if (r != SPC_SUCCESS && r != SPC_ERROR_MAX_LIMIT_REACHED)
        LOG_ONCE(L_GETNEXT, "cuptiActivityGetNextRecord: %s; rest of a buffer skipped", result_str(r));
    buffer_free(buf);
}

/* Offset mode: CUPTI time minus CLOCK_MONOTONIC, from the tightest of a few brackets. */
void measure_offset(void) {
    if (!spc.cupti.GetTimestamp || !cupti_usable()) return;
    uint64_t best = UINT64_MAX;
    int64_t off = atomic_load(&spc.offset);
    for (int i = 0; i < 5; i++) {
        uint64_t c = 0, t0 = mono_ns();
        if (spc.cupti.GetTimestamp(&c) != SPC_SUCCESS) return;
        uint64_t t1 = mono_ns();
        if (t1 - t0 < best) {
            best = t1 - t0;
            off = (int64_t)(c - (t0 + (t1 - t0) / 2));
        }
    }
    atomic_store(&spc.offset, off);
}
