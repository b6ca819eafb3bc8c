//! The few system calls a control socket needs that std does not offer: the
//! peer's credentials (SO_PEERCRED), group lookup and who started the process.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Who is at the other end of a Unix stream, as the kernel recorded it at
/// connect time (never from anything the peer sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// The peer's effective user id.
    pub uid: u32,
    /// The peer's effective group id.
    pub gid: u32,
    /// The peer's process id.
    pub pid: i32,
}

/// The credentials the kernel recorded for the peer of `stream`.
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    // Safety: ucred is three integers: any bytes the kernel writes are a valid one.
    unsafe {
        crate::sys::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred,
        )
    }?;
    Ok(PeerCred {
        uid: cred.uid,
        gid: cred.gid,
        pid: cred.pid,
    })
}

/// The gid of a group given by name or number.
pub fn group_id(group: &str) -> Result<u32, String> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let name = CString::new(group).map_err(|_| format!("group '{group}': NUL in the name"))?;
    let mut grp: libc::group = unsafe {
        // Safety: a plain C struct; all-zero is a valid (empty) value.
        std::mem::zeroed()
    };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::group = std::ptr::null_mut();
    // Safety: every pointer is valid for the call; buf's length is passed.
    let rc = unsafe {
        libc::getgrnam_r(
            name.as_ptr(),
            &mut grp,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(format!(
            "group '{group}': {}",
            io::Error::from_raw_os_error(rc)
        ));
    }
    if result.is_null() {
        return Err(format!("no group '{group}' (see getent group)"));
    }
    Ok(grp.gr_gid)
}

/// The uid that started linkem: the real uid, or under sudo the caller's.
pub fn starter_uid() -> u32 {
    // Safety: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        if let Some(sudo) = std::env::var("SUDO_UID").ok().and_then(|s| s.parse().ok()) {
            return sudo;
        }
    }
    uid
}

/// The groups of the user that started linkem ([`starter_uid`]): the real gid
/// and the supplementary groups, or under sudo the caller's gid (`SUDO_GID`;
/// sudo does not pass on the caller's other groups).
pub fn starter_gids() -> Vec<u32> {
    // Safety: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 && starter_uid() != 0 {
        return std::env::var("SUDO_GID")
            .ok()
            .and_then(|s| s.parse().ok())
            .into_iter()
            .collect();
    }
    // Safety: getgid has no preconditions and cannot fail.
    let mut gids = vec![unsafe { libc::getgid() }];
    // Safety: with size 0 getgroups only counts.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if n > 0 {
        let mut more = vec![0 as libc::gid_t; n as usize];
        // Safety: `more` has room for the n groups asked for.
        let got = unsafe { libc::getgroups(n, more.as_mut_ptr()) };
        more.truncate(got.max(0) as usize);
        gids.extend(more);
    }
    gids
}

/// Whether the process runs with euid 0.
pub fn is_root() -> bool {
    // Safety: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
