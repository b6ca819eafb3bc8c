//! The few bpf(2) calls the AF_XDP backend needs, and its XDP program,
//! assembled by hand.
//!
//! Why by hand: the program is seventeen instructions. Compiling it from C
//! would put clang, libbpf and libelf on every machine that builds linkem,
//! and loading it through a crate would pull in either a copyleft licence or
//! a rustc newer than this project's (see the [`crate::afxdp`] module doc).
//! Five commands of the bpf(2) syscall, `BPF_MAP_CREATE`,
//! `BPF_MAP_UPDATE_ELEM`, `BPF_MAP_DELETE_ELEM`, `BPF_PROG_LOAD` and
//! `BPF_LINK_CREATE`, are all it takes.
//!
//! The program ([`xdp_redirect_program`]) stamps each frame with the time
//! the XDP hook saw it, in the 8 bytes of XDP metadata just in front of the
//! frame, then redirects it to the AF_XDP socket registered for its receive
//! queue in an `XSKMAP`, or passes it to the kernel stack if there is none.
//!
//! Every syscall goes through [`sys_bpf`]; errors name the command, the
//! object and the errno, and say what to do about the usual ones.

mod asm;
mod insn;
mod program;
mod syscall;
#[cfg(test)]
mod tests;

pub use asm::Asm;
pub use insn::*;
pub use program::*;
pub use syscall::*;

use std::fmt;
use std::io;

/// A failed bpf(2) command: which, on what, the errno, and advice.
#[derive(Debug)]
pub struct BpfError {
    /// The command, e.g. `"BPF_LINK_CREATE"`.
    pub call: &'static str,
    /// What it was applied to, e.g. the interface name.
    pub target: String,
    /// The errno the kernel returned, as [`io::Error`]; also the error's
    /// [`source`](std::error::Error::source).
    pub source: io::Error,
    /// What to do about it, when the errno has a usual cause (missing
    /// capability, a program already attached, an MTU too large for XDP), or
    /// what an earlier attempt (native mode, the CLOCK_TAI program) failed with.
    pub hint: Option<String>,
    /// The verifier's explanation, for `BPF_PROG_LOAD`.
    pub verifier_log: Option<String>,
}

impl BpfError {
    pub(crate) fn new(call: &'static str, target: String, source: io::Error) -> Self {
        BpfError {
            call,
            target,
            source,
            hint: None,
            verifier_log: None,
        }
    }

    /// The raw errno (e.g. `libc::EPERM`), or 0 if the error carries none.
    pub fn errno(&self) -> i32 {
        self.source.raw_os_error().unwrap_or(0)
    }

    /// "Device or resource busy", without std's " (os error 16)".
    pub fn errno_text(&self) -> String {
        errno_text(&self.source)
    }
}

/// The strerror text of an io::Error, with the symbolic errno name.
pub(crate) fn errno_text(e: &io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    };
    match e.raw_os_error().and_then(errno_name) {
        Some(name) => format!("{text} ({name})"),
        None => text,
    }
}

fn errno_name(e: i32) -> Option<&'static str> {
    Some(match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOBUFS => "ENOBUFS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENETDOWN => "ENETDOWN",
        _ => return None,
    })
}

impl fmt::Display for BpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on '{}': {}",
            self.call,
            self.target,
            self.errno_text()
        )?;
        if let Some(h) = &self.hint {
            write!(f, " ({h})")?;
        }
        if let Some(log) = &self.verifier_log {
            write!(f, "\nverifier log:\n{log}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BpfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<BpfError> for io::Error {
    fn from(e: BpfError) -> Self {
        io::Error::new(e.source.kind(), e.to_string())
    }
}
