//! The process's memory: its resident size, and giving freed heap memory
//! back to the system.
//!
//! glibc keeps memory freed by many small allocations (expired flow
//! instances) in its arenas: only a free top of the heap is trimmed, so after
//! a flood of flows expires the resident size stays near its peak unless the
//! free pages inside the heap are released too ([`release_free_memory`],
//! `malloc_trim(0)`, which returns every whole free page with
//! `madvise(MADV_DONTNEED)`).

/// Resident set size of this process in bytes (the second field of
/// `/proc/self/statm`, in pages); None where that file cannot be read.
pub fn rss_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    // Safety: sysconf has no preconditions; it only reads a constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096))
}

/// Gives the heap's free pages back to the system. Takes the allocator's
/// locks and walks its free chunks: about a millisecond per hundred MB of
/// heap, so call it after large releases, not per packet. A no-op where the
/// C library is not glibc.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // Safety: malloc_trim only releases memory the allocator holds free; it
    // is thread-safe and touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}
