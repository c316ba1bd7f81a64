//! What the walk and the stack scan ask their owner about addresses outside
//! the unwind table ([`Loader`]).

use crate::table::Entry;

/// What the walk asks its owner about addresses outside the table.
pub(crate) trait Loader {
    /// An address in no table entry: is it inside a module loaded after the table
    /// was built (then the table is stale), or in anonymous code?
    fn loaded_elsewhere(&self, address: u64) -> bool;
    /// May the entry still be read? (The local unwinder checks modules that may
    /// have been unloaded since the table was built.)
    fn still_loaded(&self, entry: &Entry, address: u64) -> bool;
    /// Is `return_address` the start of a stack's outermost function, which
    /// has no caller to unwind to (glibc's `__start_context`, where a
    /// `makecontext` coroutine starts)? Then the stack is complete there.
    fn is_root_return(&self, _return_address: u64) -> bool {
        false
    }
    /// Is `return_address` a signal return trampoline (glibc's `__restore_rt`:
    /// `mov $15, %rax; syscall`), where a signal handler returns to the kernel?
    /// Then the kernel's signal frame sits above the handler's frame, holding
    /// the interrupted code's registers.
    fn is_signal_return(&self, _entry: &Entry, _return_address: u64) -> bool {
        false
    }
    /// The walk continues in code interrupted by a signal, whose stack pointer
    /// is `sp`: maybe another stack than the handler's (an alternate signal
    /// stack, `sigaltstack`), which reads must then accept.
    fn enter_stack(&self, _sp: u64) {}
    /// Is the instruction that ends at `return_address` (inside `entry`'s
    /// code) a call? Only a loader that can read the code says yes; the
    /// default turns the crossing of code without unwind info off.
    fn call_before(&self, _entry: &Entry, _return_address: u64) -> bool {
        false
    }
    /// The target of the direct call (`call rel32`) that ends at
    /// `return_address` (inside `entry`'s code, where `call_before` found a
    /// call); `None` for an indirect call, or code that cannot be read.
    fn call_target(&self, _entry: &Entry, _return_address: u64) -> Option<u64> {
        None
    }
    /// Does the code at `address` (inside `entry`) begin with a jump: a PLT
    /// stub (`jmp *GOT(%rip)`, maybe after `endbr64` or a `bnd` prefix), or
    /// a thunk that jumps on? A call to it may end anywhere.
    fn starts_with_jump(&self, _entry: &Entry, _address: u64) -> bool {
        false
    }
    /// Is every module of the tables still loaded, as when they were built
    /// (then `still_loaded` is always true), and the code of each the same?
    /// Only then may a walk take a scan's result from its unchanged words.
    fn stable(&self) -> bool {
        false
    }
}
