// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Launch-stack probes: one fixed-size record per launch, stacks walked by frame
 * pointers here, deduplicated by our own hash map and sent once each. See the crate docs for why the
 * stack is taken at the launch API's entry and joined at the marker. */
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "launch.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define EEXIST 17

/* The fields we read, relocated against the running kernel's BTF. */
struct file;

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct mm_struct {
	unsigned long start_code;
	unsigned long start_stack;
} __attribute__((preserve_access_index));

struct qstr {
	__u32 len;
	const unsigned char *name;
} __attribute__((preserve_access_index));

struct dentry {
	struct dentry *d_parent;
	struct qstr d_name;
} __attribute__((preserve_access_index));

struct vfsmount {
	struct dentry *mnt_root;
} __attribute__((preserve_access_index));

struct path {
	struct vfsmount *mnt;
	struct dentry *dentry;
} __attribute__((preserve_access_index));

struct fs_struct {
	struct path root;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct fs_struct *fs;
	struct files_struct *files;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

/* The kernel's private mount tree node around each vfsmount. */
struct mount {
	struct mount *mnt_parent;
	struct dentry *mnt_mountpoint;
	struct vfsmount mnt;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	long long i_size;
} __attribute__((preserve_access_index));

struct file {
	struct path f_path;
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct linux_binprm {
	const char *filename;
	struct file *file;
} __attribute__((preserve_access_index));

/* Set before load. */
const volatile bool filter_pids = false;
/* Send a stack copy for unwinding in user space when no recipe matches. */
const volatile bool unwind_copies = false;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

/* A user stack as our walk sees it: the dedupe map's value and the per-CPU
 * scratch the walk writes into. */
struct user_stack {
	__s32 id;
	__u32 nr;
	__u32 tgid;
	__u32 pad;
	__u64 ips[STACK_SLOTS];
};

/* hash(tgid, frames) -> the stack with its id, kept from first sight on so a
 * stack's frames are sent once. The full frames are kept to tell a hash
 * collision from a repeat. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, struct user_stack);
	__uint(max_entries, 16384);
} stack_ids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct user_stack);
	__uint(max_entries, 1);
} scratch SEC(".maps");

/* Processes to trace (tgid), and their threads once they fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 65536);
} targets SEC(".maps");

/* The stack taken at a launch API's entry, waiting for its marker. Slots are
 * indexed by TID modulo the size and hold the TID they belong to: an array
 * lookup costs a fraction of a hash update, and two live threads sharing a
 * slot only cost one join (that launch then gets the marker's stack). */
struct pending {
	__u64 ts;
	__u64 sp;
	__u64 ret;
	__s32 stack_id;
	__u32 cpu;
	__u32 tid;
	__u32 tgid;
};

#define PENDING_SLOTS 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct pending);
	__uint(max_entries, PENDING_SLOTS);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, STAT_COUNT);
} stats SEC(".maps");

__u32 next_inline_id = 0;
__u32 next_stack_id = 0;
__u32 next_copy_id = 0;

/* (process, ip, sp) -> what a user-space unwind of a copy taken there depended
 * on, and its result. Written by user space; least recently used first out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, struct recipe_key);
	__type(value, struct recipe);
	__uint(max_entries, 2048);
} recipes SEC(".maps");

/* TID -> the stack pointer a thread started with (its stack's top), for
 * threads created while traced. A main thread's is its mm's start_stack. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 65536);
} thread_tops SEC(".maps");

/* A copy_event being put together, with a page of slack so each read's
 * bounds are simple for the verifier. */
struct copy_scratch {
	struct copy_event e;
	__u8 slack[4096];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct copy_scratch);
	__uint(max_entries, 1);
} copy_scratch SEC(".maps");

/* Wake the reader only once a batch is waiting: a wake-up per record costs
 * more than the rest of the probe. The reader also polls on a short timer. */
#define WAKEUP_BYTES (256 << 10)

static __always_inline __u64 wakeup_flag(void)
{
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES
		       ? BPF_RB_FORCE_WAKEUP
		       : BPF_RB_NO_WAKEUP;
}

static __always_inline void count(__u32 index)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &index);
	if (v)
		*v += 1;
}

static __always_inline bool traced(__u64 pid_tgid)
{
	if (!filter_pids)
		return true;
	__u32 tgid = pid_tgid >> 32;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

/* Sends the (build id, offset) frames of the current user stack. They come
 * from the kernel's own walk, which follows the same rules as walk_stack, so
 * they are the frames that were hashed. */
static __always_inline bool send_stack(void *ctx, __s32 id, __u32 pid, __u32 nr, __u64 caller)
{
	struct stack_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(STAT_STACK_DROPS);
		return false;
	}
	e->kind = EVENT_STACK;
	e->stack_id = id;
	e->pid = pid;
	long n = bpf_get_stack(ctx, e->frames, sizeof(e->frames),
			       BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
	e->size = n > 0 ? n : 0;
	/* Kernels whose perf_callchain_user predates reading the return address
	 * at [sp] for a uprobe at a function's entry (5.15) leave out the
	 * caller, which the walk read. It is sent in the last slot, which a
	 * stack one frame short leaves free (a constant index: 5.15's verifier
	 * cannot bound a computed one here), marked; user space puts it back in
	 * second place. The slot is always written when free: the ring buffer's
	 * memory holds older records. */
	__u32 k = e->size / sizeof(e->frames[0]);
	if (k < MAX_STACK_DEPTH) {
		struct bpf_stack_build_id *last = &e->frames[MAX_STACK_DEPTH - 1];
		bool restore = caller && k >= 1 && k + 1 == nr;
		last->status = restore ? FRAME_CALLER_AT_SP : 0;
		last->ip = caller;
		if (restore) {
			count(STAT_CALLER_RESTORED);
			k = nr;
		}
	}
	if (k != nr)
		count(STAT_WALK_MISMATCH);
	bpf_ringbuf_submit(e, wakeup_flag());
	return true;
}

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h = (h ^ v) * 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 32);
}

/* Below this no user page is mapped (vm.mmap_min_addr): reading there only
 * faults, and a fault costs more than the rest of the walk. Frame-pointer
 * chains end in a zero. */
#define MIN_USER_ADDR 4096
#define PAGE_BYTES 4096

/* A copy of the user stack page the walk is in. One bpf_probe_read_user
 * costs about as much as copying a whole page (each call pays for hardened
 * usercopy checks), so the walk reads a page at a time, not a frame. */
struct stack_page {
	__u8 bytes[PAGE_BYTES];
	/* Where the copy came from and how long it is, and the walk's
	 * walk_hash (struct recipe), left by the walk for the recipe checks
	 * of the same probe hit. */
	__u64 base;
	__u64 len;
	__u64 walk_hash;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stack_page);
	__uint(max_entries, 1);
} page_copy SEC(".maps");

/* Reads the 16 bytes at addr through the page copy, refilling it from addr to
 * the end of addr's page when addr is outside it. A read never crosses into
 * the next page unless the 16 bytes do, so it fails only where reading the
 * 16 bytes alone would fail. */
static __always_inline bool read_pair(struct stack_page *page, __u64 *base, __u64 *len,
				      __u64 addr, __u64 out[2])
{
	if (addr < *base || addr + 16 > *base + *len) {
		__u64 size = PAGE_BYTES - (addr & (PAGE_BYTES - 1));
		if (size < 16)
			size = 16;
		if (size > PAGE_BYTES)
			size = PAGE_BYTES;
		if (bpf_probe_read_user(page->bytes, size, (void *)addr)) {
			*len = 0;
			return false;
		}
		*base = addr;
		*len = size;
	}
	__u64 off = addr - *base;
	if (off > PAGE_BYTES - 16)
		return false;
	__builtin_memcpy(out, &page->bytes[off], 16);
	return true;
}

/* The user stack by frame pointers, with the rules of the kernel's
 * perf_callchain_user: the IP, then the return address at [sp] when the probe
 * sits on `push %rbp` or `endbr64` at a function's entry, then the %rbp chain
 * until a read fails. Unlike the kernel it does not read below
 * MIN_USER_ADDR, where the chain's closing zero sends the kernel through a
 * page fault on every walk. Returns the stack in per-CPU scratch and its
 * hash in *hash. */
static __always_inline struct user_stack *walk_stack(struct pt_regs *ctx, __u32 tgid,
						     bool caller_at_sp, __u64 *hash)
{
	__u32 zero = 0;
	struct user_stack *s = bpf_map_lookup_elem(&scratch, &zero);
	struct stack_page *page = bpf_map_lookup_elem(&page_copy, &zero);
	if (!s || !page)
		return NULL;
	__u64 base = 0, len = 0, pair[2];
	__u64 ip = PT_REGS_IP(ctx);
	__u64 h = mix(tgid, ip);
	__u32 n = 1;
	s->ips[0] = ip;
	if (caller_at_sp) {
		/* Reads [sp] and the next word: the page copy then starts at
		 * sp, where the frames are. */
		__u64 sp = PT_REGS_SP(ctx);
		if (read_pair(page, &base, &len, sp, pair) ||
		    bpf_probe_read_user(pair, 8, (void *)sp) == 0) {
			s->ips[1] = pair[0];
			h = mix(h, pair[0]);
			n = 2;
		}
	}
	__u64 fp = PT_REGS_FP(ctx);
	/* Where the chain went, relative to sp: with the frames, it fixes every
	 * word the walk read (see struct recipe). */
	__u64 sp = PT_REGS_SP(ctx), wh = 0;
	for (int i = 0; i < MAX_STACK_DEPTH; i++) {
		wh = mix(wh, fp - sp);
		if (n >= MAX_STACK_DEPTH || fp < MIN_USER_ADDR ||
		    !read_pair(page, &base, &len, fp, pair))
			break;
		s->ips[n & (STACK_SLOTS - 1)] = pair[1];
		h = mix(h, pair[1]);
		n++;
		fp = pair[0];
	}
	s->nr = n;
	s->tgid = tgid;
	*hash = mix(h, n);
	page->base = base;
	page->len = len;
	page->walk_hash = wh;
	return s;
}

static __always_inline bool same_stack(const struct user_stack *a, const struct user_stack *b)
{
	if (a->nr != b->nr || a->tgid != b->tgid)
		return false;
	for (int i = 0; i < MAX_STACK_DEPTH; i++) {
		if (i >= a->nr)
			break;
		if (a->ips[i] != b->ips[i])
			return false;
	}
	return true;
}

/* A one-shot id for a stack that cannot be kept: its frames go with it. */
static __always_inline __s32 send_inline(void *ctx, __u32 tgid, __u32 nr, __u64 caller)
{
	__s32 id = INLINE_STACK_ID_BASE +
		   (__sync_fetch_and_add(&next_inline_id, 1) & 0x3fffffff);
	return send_stack(ctx, id, tgid, nr, caller) ? id : -1;
}

/* The user stack's id; its frames are sent the first time it is seen. With
 * caller_at_sp, *ret_at_sp is the return address the walk read at [sp] (0
 * when unread). */
static __always_inline __s32 take_stack(void *ctx, __u32 tgid, bool caller_at_sp,
					__u64 *ret_at_sp)
{
	__u64 key;
	struct user_stack *s = walk_stack(ctx, tgid, caller_at_sp, &key);
	*ret_at_sp = 0;
	if (!s) {
		count(STAT_STACK_ERRORS);
		return -1;
	}
	if (caller_at_sp && s->nr >= 2)
		*ret_at_sp = s->ips[1];
	struct user_stack *known = bpf_map_lookup_elem(&stack_ids, &key);
	if (!known) {
		s->id = __sync_fetch_and_add(&next_stack_id, 1) & FP_STACK_ID_MASK;
		long err = bpf_map_update_elem(&stack_ids, &key, s, BPF_NOEXIST);
		if (err == 0) {
			/* On a full ring buffer forget the stack: the next
			 * launch with it sends it again. */
			if (!send_stack(ctx, s->id, tgid, s->nr, *ret_at_sp))
				bpf_map_delete_elem(&stack_ids, &key);
			return s->id;
		}
		if (err != -EEXIST) {
			count(STAT_STACK_MAP_FULL);
			return send_inline(ctx, tgid, s->nr, *ret_at_sp);
		}
		/* Another CPU inserted it meanwhile; it sends the frames. */
		known = bpf_map_lookup_elem(&stack_ids, &key);
		if (!known)
			return send_inline(ctx, tgid, s->nr, *ret_at_sp);
	}
	if (same_stack(known, s))
		return known->id;
	count(STAT_STACK_COLLISIONS);
	return send_inline(ctx, tgid, s->nr, *ret_at_sp);
}

/* Where the calling thread's stack ends: the main thread's at its mm's
 * start_stack, another thread's where it started (if it started while
 * traced); 0 when unknown. */
static __always_inline __u64 stack_top(__u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid;
	if (tid == pid_tgid >> 32) {
		struct task_struct *task = (void *)bpf_get_current_task();
		return BPF_CORE_READ(task, mm, start_stack);
	}
	__u64 *top = bpf_map_lookup_elem(&thread_tops, &tid);
	return top ? *top : 0;
}

/* How many bytes a copy taken at sp holds: up to the stack's top, at most
 * COPY_BYTES (then the stack may be cut short, and its unwind says so). */
static __always_inline __u32 copy_len(__u64 pid_tgid, __u64 sp)
{
	__u64 top = stack_top(pid_tgid);
	if (top > sp && top - sp < COPY_BYTES)
		return top - sp;
	return COPY_BYTES;
}

/* Copies the user stack from addr to the end of its page (at least 8 bytes)
 * into the per-CPU page copy; 0 on success. */
__attribute__((noinline)) int refill_page(__u64 addr)
{
	__u32 zero = 0;
	struct stack_page *page = bpf_map_lookup_elem(&page_copy, &zero);
	if (!page)
		return -1;
	__u32 size = PAGE_BYTES - (addr & (PAGE_BYTES - 1));
	if (size < 8)
		size = 8;
	if (size > PAGE_BYTES)
		size = PAGE_BYTES;
	if (bpf_probe_read_user(page->bytes, size, (void *)addr)) {
		page->len = 0;
		return -1;
	}
	page->base = addr;
	page->len = size;
	return 0;
}

/* The stack id of the recipe for (process, ip, sp) if it holds for this
 * launch, else -1. A recipe holds when every stack word it depends on is
 * unchanged: the unwind would then read the same values and give the same
 * stack. A global function, so the verifier checks it once, not on every
 * path through the walk. */
__attribute__((noinline)) int recipe_stack(__u64 pid_tgid, __u64 ip, __u64 sp, __u64 bp,
					    int fp_id)
{
	__u32 zero = 0;
	struct stack_page *page = bpf_map_lookup_elem(&page_copy, &zero);
	if (!page)
		return -1;
	struct recipe_key key = {.tgid = pid_tgid >> 32, .ip = ip, .sp = sp};
	struct recipe *r = bpf_map_lookup_elem(&recipes, &key);
	if (!r)
		return -1;
	__u64 seq = r->seq;
	if ((r->fp_id >= 0 && r->fp_id != fp_id) ||
	    ((r->flags & RECIPE_BP) && r->bp != bp) ||
	    ((r->flags & RECIPE_LEN) && r->len != copy_len(pid_tgid, sp)))
		goto miss;
	/* Words the walk read are unchanged when it gave the same frames
	 * through the same places. */
	__u32 n = r->walk_fp_id >= 0 && r->walk_fp_id == fp_id &&
			  r->walk_hash == page->walk_hash
		      ? r->uncovered
		      : r->nchecks;
	for (int i = 0; i < MAX_CHECKS; i++) {
		if (i >= n)
			break;
		__u64 addr = sp + r->checks[i].off;
		/* The page copy's place is kept in the map, not in registers:
		 * the verifier then sees every round alike. */
		if (addr < page->base || addr + 8 > page->base + page->len) {
			if (refill_page(addr))
				goto miss;
		}
		__u64 off = addr - page->base;
		if (off > PAGE_BYTES - 8)
			goto miss;
		if (*(__u64 *)&page->bytes[off] != r->checks[i].value)
			goto miss;
	}
	/* An element being reused by a concurrent update is not trusted. */
	if (seq == 0 || r->seq_end != seq)
		goto miss;
	count(STAT_RECIPE_HITS);
	return r->stack_id;
miss:
	count(STAT_RECIPE_MISSES);
	return -1;
}

/* Sends the top of the user stack and the registers for unwinding in user
 * space; returns the copy's id, or -1 when the ring buffer is full. walk is
 * the frame-pointer stack's id in its low 32 bits and caller_at_sp above (BPF
 * functions take five arguments). A global function, as recipe_stack. */
__attribute__((noinline)) int send_copy(__u64 pid_tgid, __u64 ip, __u64 sp, __u64 bp, __u64 walk)
{
	int fp_id = (int)walk;
	__u32 zero = 0;
	struct copy_scratch *c = bpf_map_lookup_elem(&copy_scratch, &zero);
	struct stack_page *page = bpf_map_lookup_elem(&page_copy, &zero);
	if (!c || !page)
		return -1;
	__u32 want = copy_len(pid_tgid, sp);
	__u32 len = 0;
	__u64 addr = sp;
	/* A page at a time: a read that fails (the end of the stack's
	 * mapping) ends the copy without losing what came before. */
	for (int i = 0; i < COPY_BYTES / PAGE_BYTES + 1; i++) {
		if (len >= want || len >= COPY_BYTES)
			break;
		__u64 n = PAGE_BYTES - (addr & (PAGE_BYTES - 1));
		if (n > want - len)
			n = want - len;
		/* Clang knows n <= PAGE_BYTES and would drop the check; Linux
		 * 6.1's verifier does not learn bounds from comparing two
		 * registers, so it needs the check against a constant. */
		asm volatile("" : "+r"(n));
		if (n > PAGE_BYTES)
			n = PAGE_BYTES;
		if (bpf_probe_read_user(&c->e.bytes[len], n, (void *)addr))
			break;
		len += n;
		addr += n;
	}
	if (len > COPY_BYTES)
		return -1;
	__s32 id = COPY_ID_BASE + (__sync_fetch_and_add(&next_copy_id, 1) & 0x0fffffff);
	c->e.kind = EVENT_COPY;
	c->e.copy_id = id;
	c->e.pid = pid_tgid >> 32;
	c->e.tid = (__u32)pid_tgid;
	c->e.ip = ip;
	c->e.sp = sp;
	c->e.bp = bp;
	c->e.fp_id = fp_id;
	c->e.len = len;
	c->e.caller_at_sp = walk >> 32;
	c->e.pad = 0;
	c->e.walk_hash = page->walk_hash;
	/* Wake the reader now: until it answers with a recipe, every launch
	 * from here sends a copy. */
	if (bpf_ringbuf_output(&events, &c->e, offsetof(struct copy_event, bytes) + len,
			       BPF_RB_FORCE_WAKEUP)) {
		count(STAT_COPY_DROPS);
		return -1;
	}
	count(STAT_COPIES);
	return id;
}

/* The stack id a launch record gets: the frame-pointer stack when unwinding
 * is off, else the stack of a recipe that holds, else a fresh copy's. When
 * the copy is lost, the frame-pointer stack (counted as truncated). */
static __always_inline __s32 resolve_stack(struct pt_regs *ctx, __u64 pid_tgid, __s32 fp_id,
					   bool caller_at_sp)
{
	if (!unwind_copies)
		return fp_id;
	__u64 ip = PT_REGS_IP(ctx), sp = PT_REGS_SP(ctx), bp = PT_REGS_FP(ctx);
	int id = recipe_stack(pid_tgid, ip, sp, bp, fp_id);
	if (id >= 0)
		return id;
	id = send_copy(pid_tgid, ip, sp, bp, (__u64)caller_at_sp << 32 | (__u32)fp_id);
	return id >= 0 ? id : fp_id;
}

static __always_inline void emit_launch(__u64 pid_tgid, __u64 ts, __u32 cpu,
					__u64 corr, __u64 callback, __s32 stack_id,
					__u32 origin)
{
	struct launch_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(STAT_LAUNCH_DROPS);
		return;
	}
	e->kind = EVENT_LAUNCH;
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->cpu = cpu;
	e->ts = ts;
	e->correlation_id = corr;
	e->callback = callback;
	e->stack_id = stack_id;
	e->origin = origin;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, wakeup_flag());
}

/* Cookie bits. EMIT: write the record here (compatibility mode, no marker
 * follows). CALLER_AT_SP: the probed instruction is one for which the kernel's
 * walk reads the caller's return address at [sp]. */
#define COOKIE_EMIT (1ULL << 63)
#define COOKIE_CALLER_AT_SP (1ULL << 62)

SEC("uprobe")
int launch_entry(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!traced(pid_tgid))
		return 0;
	count(STAT_ENTRIES);
	__u64 ts = bpf_ktime_get_ns();
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u64 ret = 0;
	__s32 fp_id = take_stack(ctx, pid_tgid >> 32, cookie & COOKIE_CALLER_AT_SP, &ret);
	__s32 stack_id = resolve_stack(ctx, pid_tgid, fp_id, cookie & COOKIE_CALLER_AT_SP);

	if (cookie & COOKIE_EMIT) {
		emit_launch(pid_tgid, ts, cpu, 0, 0, stack_id, STACK_AT_ENTRY);
		return 0;
	}
	__u32 slot = (__u32)pid_tgid % PENDING_SLOTS;
	struct pending *p = bpf_map_lookup_elem(&pending, &slot);
	if (!p)
		return 0;
	p->ts = ts;
	p->sp = PT_REGS_SP(ctx);
	p->stack_id = stack_id;
	p->cpu = cpu;
	p->tid = (__u32)pid_tgid;
	p->tgid = pid_tgid >> 32;
	/* The return address identifies this call while its frame is live;
	 * the walk usually read it already. */
	p->ret = ret;
	if (!ret && bpf_probe_read_user(&p->ret, sizeof(p->ret), (void *)p->sp))
		p->sp = 0;
	return 0;
}

SEC("uprobe")
int launch_marker(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!traced(pid_tgid))
		return 0;
	count(STAT_MARKERS);
	__u64 corr = PT_REGS_PARM1(ctx);
	__u64 callback = PT_REGS_PARM2(ctx);

	__u32 slot = (__u32)pid_tgid % PENDING_SLOTS;
	struct pending *p = bpf_map_lookup_elem(&pending, &slot);
	if (p && p->sp && p->tid == (__u32)pid_tgid && p->tgid == pid_tgid >> 32) {
		/* Accept the entry's stack only if that call is still on this
		 * thread's stack, i.e. the marker runs inside it. A stale entry
		 * (an API call without a marker) fails one of these checks. */
		__u64 ret = 0;
		if (p->sp > PT_REGS_SP(ctx) &&
		    bpf_probe_read_user(&ret, sizeof(ret), (void *)p->sp) == 0 &&
		    ret == p->ret) {
			__u64 ts = p->ts;
			__u32 cpu = p->cpu;
			__s32 stack_id = p->stack_id;
			p->sp = 0; /* consumed */
			count(STAT_MARKER_ENTRY_STACK);
			emit_launch(pid_tgid, ts, cpu, corr, callback, stack_id,
				    STACK_AT_ENTRY);
			return 0;
		}
		p->sp = 0;
	}
	count(STAT_MARKER_OWN_STACK);
	__u64 ret;
	bool caller_at_sp = bpf_get_attach_cookie(ctx) & COOKIE_CALLER_AT_SP;
	__s32 fp_id = take_stack(ctx, pid_tgid >> 32, caller_at_sp, &ret);
	__s32 stack_id = resolve_stack(ctx, pid_tgid, fp_id, caller_at_sp);
	emit_launch(pid_tgid, bpf_ktime_get_ns(), bpf_get_smp_processor_id(), corr,
		    callback, stack_id, STACK_AT_MARKER);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 tgid = parent->tgid;
	if (filter_pids && !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	if (unwind_copies && child->pid != child->tgid) {
		/* A new thread: its stack ends where it starts. */
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(child);
		__u64 top = regs ? PT_REGS_SP(regs) : 0;
		__u32 tid = child->pid;
		if (top)
			bpf_map_update_elem(&thread_tops, &tid, &top, BPF_ANY);
		return 0;
	}
	if (!filter_pids)
		return 0;
	__u32 child_tgid = child->tgid;
	__u8 one = 1;
	bpf_map_update_elem(&targets, &child_tgid, &one, BPF_ANY);
	return 0;
}

/* Where file paths are put together, last component first. */
#define NAME_LEN 256
#define PATH_DEPTH 64

struct file_scratch {
	/* Kept in the map, not a register: the verifier then sees every loop
	 * round alike, instead of tracking the offset's range round by round. */
	__u32 off;
	__u32 pad;
	char buf[FILE_PATH_LEN + NAME_LEN];
	struct file_event e;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct file_scratch);
	__uint(max_entries, 1);
} file_scratch SEC(".maps");

/* Sends the path of a file that a traced process maps as code (or execs), so
 * that user space can find the file by the build ids in its frames after the
 * process is gone. The path is the one the process sees, from its root
 * directory (a chroot's, if it runs in one) or else from its mount
 * namespace's root: the dentry names up to each mount's root, then across to
 * the mount point, as d_path does (bpf_d_path is not allowed in these
 * programs), so it is the path /proc/PID/maps shows. A path deeper than
 * PATH_DEPTH or longer than FILE_PATH_LEN is not sent. */
static __always_inline void send_file(struct file *file, __u32 tgid, __u32 place, __u64 start,
				      __u64 end, __u64 offset)
{
	__u32 zero = 0;
	struct file_scratch *s = bpf_map_lookup_elem(&file_scratch, &zero);
	if (!s || !file)
		return;
	__u64 mnt_off = bpf_core_field_offset(struct mount, mnt);
	struct dentry *dentry = BPF_CORE_READ(file, f_path.dentry);
	struct vfsmount *vfsmnt = BPF_CORE_READ(file, f_path.mnt);
	struct mount *mnt = (void *)vfsmnt - mnt_off;
	/* The process's root directory: inside a chroot, the path above it is
	 * not the process's (nor that of a profiler in the same chroot). */
	struct task_struct *task = (void *)bpf_get_current_task();
	struct dentry *task_root = BPF_CORE_READ(task, fs, root.dentry);
	struct vfsmount *task_root_mnt = BPF_CORE_READ(task, fs, root.mnt);
	/* The path ends at buf[last], its NUL, and starts at buf[s->off]. */
	__u32 last = FILE_PATH_LEN - 1;
	bool root = false;
	s->off = last;
	s->buf[last] = 0;
	for (int i = 0; i < PATH_DEPTH; i++) {
		if (dentry == task_root && vfsmnt == task_root_mnt) {
			root = true;
			break;
		}
		struct dentry *parent = BPF_CORE_READ(dentry, d_parent);
		struct dentry *mnt_root = BPF_CORE_READ(vfsmnt, mnt_root);
		if (dentry == mnt_root || dentry == parent) {
			struct mount *up = BPF_CORE_READ(mnt, mnt_parent);
			if (dentry != mnt_root || up == mnt) {
				root = true;
				break;
			}
			dentry = BPF_CORE_READ(mnt, mnt_mountpoint);
			mnt = up;
			vfsmnt = (void *)mnt + mnt_off;
			continue;
		}
		__u32 len = BPF_CORE_READ(dentry, d_name.len);
		const unsigned char *name = BPF_CORE_READ(dentry, d_name.name);
		__u32 off = s->off;
		if (len >= NAME_LEN || len + 1 > off)
			return;
		off -= len + 1;
		s->off = off;
		s->buf[off & (FILE_PATH_LEN - 1)] = '/';
		if (bpf_probe_read_kernel(&s->buf[(off + 1) & (FILE_PATH_LEN - 1)],
					  len & (NAME_LEN - 1), name))
			return;
		dentry = parent;
	}
	__u32 off = s->off;
	if (!root || off >= last)
		return;
	__u32 n = last + 1 - off;
	if (n > FILE_PATH_LEN)
		return;
	if (bpf_probe_read_kernel(s->e.path, n, &s->buf[off & (FILE_PATH_LEN - 1)]))
		return;
	s->e.kind = EVENT_FILE;
	s->e.pid = tgid;
	s->e.path_len = n;
	s->e.place = place;
	s->e.start = start;
	s->e.end = end;
	s->e.offset = offset;
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	s->e.ino = BPF_CORE_READ(inode, i_ino);
	s->e.size = BPF_CORE_READ(inode, i_size);
	if (bpf_ringbuf_output(&events, &s->e, offsetof(struct file_event, path) + n,
			       wakeup_flag()))
		count(STAT_FILE_DROPS);
}

/* The arguments of the syscalls:sys_enter_mmap tracepoint and the result of
 * sys_exit_mmap (their format files). */
struct mmap_enter {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__u64 addr;
	__u64 len;
	__u64 prot;
	__u64 flags;
	__u64 fd;
	__u64 off;
};

struct mmap_exit {
	__u64 common;
	__s32 nr;
	__u32 pad;
	__s64 ret;
};

#define PROT_EXEC 0x4
#define MAX_ERRNO 4095

struct mmap_call {
	__u64 fd;
	__u64 len;
	__u64 off;
};

/* A thread's mmap of a file as code, from syscall entry to exit. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, struct mmap_call);
	__uint(max_entries, 4096);
} mmap_calls SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_mmap")
int on_mmap_enter(struct mmap_enter *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!filter_pids || !(ctx->prot & PROT_EXEC) || (__s64)ctx->fd < 0 ||
	    !traced(pid_tgid))
		return 0;
	__u32 tid = pid_tgid;
	struct mmap_call call = {.fd = ctx->fd, .len = ctx->len, .off = ctx->off};
	bpf_map_update_elem(&mmap_calls, &tid, &call, BPF_ANY);
	return 0;
}

/* A traced process mapped a file as code (the loader mapping a library):
 * its path and where it went. */
SEC("tracepoint/syscalls/sys_exit_mmap")
int on_mmap_exit(struct mmap_exit *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = pid_tgid;
	struct mmap_call *c = bpf_map_lookup_elem(&mmap_calls, &tid);
	if (!c)
		return 0;
	struct mmap_call call = *c;
	bpf_map_delete_elem(&mmap_calls, &tid);
	if (ctx->ret < 0 && ctx->ret >= -MAX_ERRNO)
		return 0;
	struct task_struct *task = (void *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || call.fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = NULL;
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[call.fd]))
		return 0;
	__u64 start = ctx->ret;
	send_file(file, pid_tgid >> 32, PLACE_MAPPING, start, start + call.len, call.off);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, int old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = p->tgid;
	if (filter_pids && !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	struct exec_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(STAT_EXEC_DROPS);
		return 0;
	}
	e->kind = EVENT_EXEC;
	e->pid = tgid;
	bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), bprm->filename);
	bpf_ringbuf_submit(e, wakeup_flag());
	/* The name given to execve may be relative, and the process may be gone
	 * before user space reads its /proc entry: send the file's full path. */
	if (filter_pids)
		send_file(BPF_CORE_READ(bprm, file), tgid, PLACE_EXEC,
			  BPF_CORE_READ(p, mm, start_code), 0, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(forget_exit, struct task_struct *p)
{
	if (p->pid != p->tgid) {
		__u32 tid = p->pid;
		bpf_map_delete_elem(&thread_tops, &tid);
		return 0;
	}
	__u32 tgid = p->tgid;
	bpf_map_delete_elem(&targets, &tgid);
	return 0;
}

