//! The executable's code moved onto 2 MiB pages before the runtime starts.
//!
//! Why: at a few hundred requests a second the proxy sleeps between requests, and a burst of them
//! starts on cold caches and a cold TLB: with the code on 4 KiB pages, the first request's pass
//! over it misses the instruction TLB once per page it touches, and on a virtual machine each miss
//! walks two levels of page tables. On 2 MiB pages a few entries cover all of it. Measured beside
//! the same binary without it (`bench/PERF_NOTES.md`, forty-first round): at 500 requests a second
//! in bursts of 16, every answer of a burst 50-189 µs sooner and less CPU per request; at 2000,
//! 27-59 µs sooner in one run and no difference in another; about 1.5-2 MB more resident memory.
//!
//! How: the kernel maps the file's code with 4 KiB page-cache pages here (a file's text on huge
//! pages needs `CONFIG_READ_ONLY_THP_FOR_FS` and the segment's address and file offset congruent
//! modulo 2 MiB). So the largest 2 MiB-aligned stretch of the code is copied into anonymous memory
//! advised `MADV_HUGEPAGE` (madvise(2)), made read and execute only, and moved over the original
//! with one `mremap` (mremap(2), `MREMAP_FIXED`: "any previous mapping at the address range
//! specified by new_address and new_size is unmapped"), under the kernel's lock of the address
//! space. Every address holds the same bytes before and after, so the code running meanwhile (this
//! function, the system call's own instructions) carries on. It runs before any other thread of
//! the process exists.
//!
//! Nothing but speed depends on it: `MVPROXY_HUGE_TEXT=0` skips it, and so does a kernel whose
//! transparent huge pages are off, or any step that fails (a policy refusing executable anonymous
//! memory, say), leaving the code as loaded. Tools that find code through the executable's file
//! (`perf`'s symbols, uprobes, valgrind) see an anonymous mapping there instead: run them with
//! `MVPROXY_HUGE_TEXT=0`.
#![allow(unsafe_code)]

use std::ffi::c_void;

use mvproxy_core::config::ConfigError;

/// The variable that turns the move off (`0`) or on (`1`, the default).
pub const VARIABLE: &str = "MVPROXY_HUGE_TEXT";

/// The size of an x86-64 (and arm64 with 4 KiB base pages) transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// Whether to move the code, from `MVPROXY_HUGE_TEXT`'s value.
pub fn wanted(value: Option<&str>) -> Result<bool, ConfigError> {
    match value.map(str::trim) {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(v) => Err(ConfigError {
            field: VARIABLE.to_owned(),
            why: format!("{v:?} is neither 0 nor 1"),
        }),
    }
}

/// What `move_text` did, for the log once logging has started.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// This many bytes of code moved into memory advised for huge pages (whether the kernel found
    /// free ones for all of it, `AnonHugePages` in `/proc/PID/smaps` says).
    Moved(usize),
    /// Left as loaded, and why.
    Skipped(&'static str),
}

/// Moves the executable's code onto huge pages where the kernel offers them (module docs).
/// Must be called before the process starts a thread.
pub fn move_text() -> Outcome {
    let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
    if !enabled.is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]")) {
        return Outcome::Skipped("transparent huge pages are off");
    }
    let (Ok(exe), Ok(maps)) = (
        std::fs::read_link("/proc/self/exe"),
        std::fs::read_to_string("/proc/self/maps"),
    ) else {
        return Outcome::Skipped("/proc/self is unreadable");
    };
    let Some((lo, hi)) = code_range(&maps, &exe.to_string_lossy()) else {
        return Outcome::Skipped("no executable mapping of the binary's file");
    };
    let Some((start, len)) = huge_stretch(lo, hi) else {
        return Outcome::Skipped("the code spans no whole aligned huge page");
    };
    // SAFETY: `[start, start + len)` lies inside the binary's read-and-execute mapping (from
    // /proc/self/maps), so reading it is sound; the copy is written to memory mapped here for it
    // alone; the final `mremap` replaces that range with identical bytes, read and execute only,
    // so no code or constant in the process changes. No other thread exists yet (`move_text`'s
    // contract). Every failure leaves the original mapping in place and unmaps the copy.
    unsafe { move_onto_huge_pages(start, len) }
}

/// The binary's own read-and-execute mapping in `/proc/self/maps`: `lo-hi r-xp offset dev inode
/// path`.
fn code_range(maps: &str, exe: &str) -> Option<(usize, usize)> {
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (range, perms) = (fields.next()?, fields.next()?);
        let path = fields.nth(3)?;
        if perms != "r-xp" || path != exe {
            return None;
        }
        let (lo, hi) = range.split_once('-')?;
        Some((
            usize::from_str_radix(lo, 16).ok()?,
            usize::from_str_radix(hi, 16).ok()?,
        ))
    })
}

/// The largest stretch of `[lo, hi)` that starts and ends on a huge-page boundary: its start and
/// length, if it holds one page or more.
fn huge_stretch(lo: usize, hi: usize) -> Option<(usize, usize)> {
    let start = lo.checked_next_multiple_of(HUGE_PAGE)?;
    let end = hi - hi % HUGE_PAGE;
    (end > start).then(|| (start, end - start))
}

/// Copies `[start, start + len)` onto huge pages and moves the copy over it.
///
/// # Safety
///
/// `[start, start + len)` must lie inside a readable and executable mapping, both ends aligned to
/// `HUGE_PAGE`, and no other thread may run meanwhile.
unsafe fn move_onto_huge_pages(start: usize, len: usize) -> Outcome {
    // One huge page more than needed, so that an aligned stretch of `len` lies inside.
    let reserved = len + HUGE_PAGE;
    // SAFETY (each call below): the arguments name memory this function maps and owns, or the
    // code range its caller checked.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserved,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Outcome::Skipped("mmap of the copy failed");
    }
    let copy = (raw as usize).next_multiple_of(HUGE_PAGE);
    let moved = unsafe {
        libc::madvise(copy as *mut c_void, len, libc::MADV_HUGEPAGE) == 0
            && {
                std::ptr::copy_nonoverlapping(start as *const u8, copy as *mut u8, len);
                libc::mprotect(copy as *mut c_void, len, libc::PROT_READ | libc::PROT_EXEC) == 0
            }
            && libc::mremap(
                copy as *mut c_void,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                start as *mut c_void,
            ) != libc::MAP_FAILED
    };
    // What of the reservation is not now the code: before and after the copy, and the copy
    // itself if it was not moved.
    let head = copy - raw as usize;
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        libc::munmap((copy + len) as *mut c_void, reserved - head - len);
        if !moved {
            libc::munmap(copy as *mut c_void, len);
        }
    }
    if moved {
        Outcome::Moved(len)
    } else {
        Outcome::Skipped("the kernel refused a step (madvise, mprotect or mremap)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_is_0_or_1() {
        assert_eq!(wanted(None), Ok(true));
        assert_eq!(wanted(Some("1")), Ok(true));
        assert_eq!(wanted(Some("0")), Ok(false));
        for bad in ["", "yes", "2", "off"] {
            let e = wanted(Some(bad)).unwrap_err();
            assert_eq!(e.field, VARIABLE, "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_binary_s_code_mapping_is_found_by_path_and_permissions() {
        let maps = "\
55d0a0000000-55d0a02e7000 r--p 00000000 fe:00 131 /usr/bin/mvproxy
55d0a02e7000-55d0a0d7b000 r-xp 002e6000 fe:00 131 /usr/bin/mvproxy
55d0a0d7b000-55d0a0dc2000 rw-p 00d7a000 fe:00 131 /usr/bin/mvproxy
7f0000000000-7f0000200000 r-xp 00000000 fe:00 99 /usr/lib/other.so
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
";
        assert_eq!(
            code_range(maps, "/usr/bin/mvproxy"),
            Some((0x55d0a02e7000, 0x55d0a0d7b000))
        );
        assert_eq!(code_range(maps, "/usr/bin/other"), None);
        assert_eq!(
            code_range("garbage\n\n1-2 r-xp\n", "/usr/bin/mvproxy"),
            None
        );
    }

    #[test]
    fn only_whole_aligned_huge_pages_are_moved() {
        // 0x2e7000..0xd7b000: the pages from 4 MiB to 12 MiB.
        assert_eq!(huge_stretch(0x2e7000, 0xd7b000), Some((0x400000, 0x800000)));
        assert_eq!(huge_stretch(0x200000, 0x400000), Some((0x200000, 0x200000)));
        assert_eq!(
            huge_stretch(0x201000, 0x5ff000),
            None,
            "no whole page inside"
        );
        assert_eq!(huge_stretch(0x1000, 0x3ff000), None);
        assert_eq!(huge_stretch(usize::MAX - 0x1000, usize::MAX), None);
    }
}
