//! Memory hints for the simulator's large tables: fetch a line ahead of its use, and back a
//! table with huge pages. A table of 10⁶ objects read at random spans thousands of 4 KiB
//! pages, far more than the TLB holds, so each read also walks the page tables (in a VM,
//! two of them); with 2 MiB pages it is a handful of TLB entries.

/// Asks the CPU to fetch the cache line of `item` (a hint: nothing waits for it).
#[inline]
pub fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch only hints the cache; the address is a valid reference
        unsafe { _mm_prefetch::<_MM_HINT_T0>(item as *const T as *const i8) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = item;
}

/// Below this a table fits the TLB's reach anyway.
const HUGE_FROM: usize = 4 << 20;

/// `len` copies of `value`, in memory the kernel is asked to back with huge pages
/// (transparent huge pages are often enabled only where asked for, `madvise`).
pub fn filled<T: Clone>(len: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(len);
    advise_huge(v.as_mut_ptr() as *mut u8, len * std::mem::size_of::<T>());
    v.resize(len, value);
    v
}

fn advise_huge(start: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_FROM {
        const PAGE: usize = 4096;
        let from = (start as usize).next_multiple_of(PAGE);
        let to = (start as usize + bytes) / PAGE * PAGE;
        // SAFETY: the range lies within one allocation of ours; madvise only changes how
        // the kernel backs it (a failure is harmless: 4 KiB pages, as without the hint)
        unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, bytes);
}
