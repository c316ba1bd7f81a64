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
 * frames in it can be found after the process exits. */
struct file_event {
	__u32 kind;
	__u32 pid;
	__u32 path_len;
	__u32 place;
	__u64 start;
	__u64 end;
	__u64 offset;
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
	STAT_COUNT,
};

/* Launch record ids at and above this are one-shot ids for stacks that
 * could not be kept in the stack map (hash collision, map full). */
#define INLINE_STACK_ID_BASE 0x40000000

#endif
