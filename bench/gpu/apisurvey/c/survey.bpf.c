// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* apisurvey: an entry and a return probe on each surveyed symbol; the
 * attach cookie is the symbol's index. Per symbol: calls, and the time
 * between entry and return summed and maxed (the time the caller spent
 * inside the call, blocked or not). */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAX_SYMS 512

struct sym_stat {
	__u64 calls;
	__u64 returns;
	__u64 ns;
	__u64 max_ns;
	__u64 orphans; /* returns without an entry (attached mid-call) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SYMS);
	__type(key, __u32);
	__type(value, struct sym_stat);
} stats SEC(".maps");

/* (tid << 32 | symbol index) -> entry time: calls of one symbol do not
 * nest on a thread, calls of different symbols may. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} entered SEC(".maps");

static __always_inline __u64 key_of(__u32 idx)
{
	return (bpf_get_current_pid_tgid() << 32) | idx;
}

SEC("uprobe") int survey_enter(struct pt_regs *ctx)
{
	__u32 idx = (__u32)bpf_get_attach_cookie(ctx);
	struct sym_stat *s = bpf_map_lookup_elem(&stats, &idx);
	if (!s)
		return 0;
	__sync_fetch_and_add(&s->calls, 1);
	__u64 k = key_of(idx), now = bpf_ktime_get_ns();
	bpf_map_update_elem(&entered, &k, &now, BPF_ANY);
	return 0;
}

SEC("uretprobe") int survey_return(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u32 idx = (__u32)bpf_get_attach_cookie(ctx);
	struct sym_stat *s = bpf_map_lookup_elem(&stats, &idx);
	if (!s)
		return 0;
	__u64 k = key_of(idx);
	__u64 *t = bpf_map_lookup_elem(&entered, &k);
	if (!t) {
		__sync_fetch_and_add(&s->orphans, 1);
		return 0;
	}
	__u64 d = now - *t;
	bpf_map_delete_elem(&entered, &k);
	__sync_fetch_and_add(&s->returns, 1);
	__sync_fetch_and_add(&s->ns, d);
	if (d > s->max_ns)
		s->max_ns = d; /* racy across threads; a survey figure */
	return 0;
}
