/* Records shared by launch.bpf.c and the Rust reader (src/event.rs). Every
 * field is naturally aligned so both sides agree without packing. */
#ifndef GPUPERF_LAUNCH_H
#define GPUPERF_LAUNCH_H

#define MAX_STACK_DEPTH 127
/* MAX_STACK_DEPTH rounded up to a power of two, for masked indexing. */
#define STACK_SLOTS 128
#define TASK_COMM_LEN 16

enum event_kind {
	EVENT_LAUNCH = 1,
	EVENT_STACK = 2,
	EVENT_EXEC = 3,
	EVENT_FILE = 4,
	EVENT_COPY = 5,
};

/* Where a launch record's stack was taken. */
enum stack_origin {
	/* At the entry of the launch API function: user frames intact. */
	STACK_AT_ENTRY = 1,
	/* At the marker, inside the CUPTI callback: stops in NVIDIA frames. */
	STACK_AT_MARKER = 2,
};

/* One per launch; 64 bytes. */
struct launch_event {
	__u32 kind;
	__u32 pid;
	__u32 tid;
	__u32 cpu;
	__u64 ts;
	__u64 correlation_id;
	__u64 callback;
	__s32 stack_id;
	__u32 origin;
	char comm[TASK_COMM_LEN];
};

/* The frames of a stack id, sent once per distinct stack. Frames are
 * (build id, file offset) where the kernel could read the build id and raw
 * addresses otherwise, so they can be symbolized after the process exits. */
struct stack_event {
	__u32 kind;
	__s32 stack_id;
	__u32 pid;
	__u32 size;
	struct bpf_stack_build_id frames[MAX_STACK_DEPTH];
};

#define EXEC_PATH_LEN 256

/* A traced process called execve. */
struct exec_event {
	__u32 kind;
	__u32 pid;
	char filename[EXEC_PATH_LEN];
};

#define FILE_PATH_LEN 4096

/* Where a file_event's file sits in its process's memory. */
enum file_place {
	/* Mapped at [start, end) from file offset `offset` (an mmap). */
	PLACE_MAPPING = 1,
	/* The executable: `start` is the mm's start_code, where its lowest
	 * executable segment starts (its ELF address plus the load bias). */
	PLACE_EXEC = 2,
};

/* A traced process execs or maps a file as code. Sent with its full path
 * (path_len bytes, the NUL included) and its place, so the file and the
 * frames in it can be found after the process exits, and with its inode
 * number and size, so that a file found by that path (in another mount
 * namespace, or replaced since) is used only if it is the same one. */
struct file_event {
	__u32 kind;
	__u32 pid;
	__u32 path_len;
	__u32 place;
	__u64 start;
	__u64 end;
	__u64 offset;
	__u64 ino;
	__u64 size;
	char path[FILE_PATH_LEN];
};

enum stat_index {
	STAT_ENTRIES,
	STAT_MARKERS,
	STAT_MARKER_ENTRY_STACK,
	STAT_MARKER_OWN_STACK,
	STAT_STACK_ERRORS,
	STAT_STACK_COLLISIONS,
	STAT_LAUNCH_DROPS,
	STAT_STACK_DROPS,
	STAT_EXEC_DROPS,
	STAT_STACK_MAP_FULL,
	STAT_WALK_MISMATCH,
	STAT_FILE_DROPS,
	STAT_COPIES,
	STAT_COPY_DROPS,
	STAT_RECIPE_HITS,
	STAT_RECIPE_MISSES,
	STAT_CALLER_RESTORED, /* the kernel's walk left out the caller at [sp] */
	STAT_COUNT,
};

/* A stack_event frame's status, past the kernel's BPF_STACK_BUILD_ID_*: the
 * caller at [sp] that the kernel's walk left out (its address in ip). It is
 * in the last slot, past `size`, and belongs in second place. */
#define FRAME_CALLER_AT_SP 0x100

/* What a launch record's stack_id names, by range:
 *   [0, COPY_ID_BASE)                    a frame-pointer stack (stack_event)
 *   [COPY_ID_BASE, FULL_ID_BASE)         a stack copy sent for unwinding (copy_event)
 *   [FULL_ID_BASE, INLINE_STACK_ID_BASE) a stack user space unwound (a recipe's)
 *   [INLINE_STACK_ID_BASE, ...)          a one-shot frame-pointer stack that could
 *                                        not be kept in the stack map (collision,
 *                                        map full) */
#define FP_STACK_ID_MASK 0x1fffffff
#define COPY_ID_BASE 0x20000000
#define FULL_ID_BASE 0x30000000
#define INLINE_STACK_ID_BASE 0x40000000

/* The most bytes of user stack a copy_event carries, from sp up. */
#define COPY_BYTES (16 << 10)

/* The top of the user stack with the registers at a probe, for unwinding
 * with .eh_frame in user space when the frame-pointer walk did not reach a
 * root frame. `len` bytes of `bytes` are sent, from `sp` up to the thread's
 * stack top or COPY_BYTES. The launch record names it by copy_id. */
struct copy_event {
	__u32 kind;
	__s32 copy_id;
	__u32 pid;
	__u32 tid;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__s32 fp_id;
	__u32 len;
	/* The frame-pointer walk: whether it read the caller at [sp] first,
	 * and the hash of where it went (see struct recipe). */
	__u32 caller_at_sp;
	__u32 pad;
	__u64 walk_hash;
	__u8 bytes[COPY_BYTES];
};

/* A recipe: which stack words a user-space unwind read and depended on, so a
 * later launch with the same (process, ip, sp) whose words still hold those
 * values has the same unwound stack without a copy. Written by user space. */
#define MAX_CHECKS 128

enum recipe_flags {
	/* The unwind used the initial %rbp: it must be equal too. */
	RECIPE_BP = 1,
	/* The unwind read past the end of the copy: the copy's length must be
	 * equal too. */
	RECIPE_LEN = 2,
};

struct recipe_key {
	__u32 tgid;
	__u32 pad;
	__u64 ip;
	__u64 sp;
};

struct recipe_check {
	/* From sp. */
	__u32 off;
	__u32 pad;
	__u64 value;
};

struct recipe {
	/* Equal to seq_end in a recipe read whole. */
	__u64 seq;
	__s32 stack_id;
	/* The frame-pointer stack the launch must have, or -1. */
	__s32 fp_id;
	__u32 nchecks;
	__u32 flags;
	__u64 bp;
	__u32 len;
	/* The checks after the first `uncovered` read words that the
	 * frame-pointer walk read too: they hold already when the walk gave
	 * frame-pointer stack walk_fp_id (its return addresses) and went
	 * through the same places relative to sp (walk_hash, its saved frame
	 * pointers). walk_fp_id is -1 when no check is covered. */
	__u32 uncovered;
	__s32 walk_fp_id;
	__u32 pad;
	__u64 walk_hash;
	struct recipe_check checks[MAX_CHECKS];
	__u64 seq_end;
};

#endif
