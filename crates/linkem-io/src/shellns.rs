//! The namespaces of `linkem shell`: handles on network namespaces that a
//! thread creates and moves between (by file descriptor, so they need no
//! name under /run/netns and vanish with their last user), and a child
//! process that dies with the thread that started it, and one that reads a
//! file of its own at a path (its resolv.conf) in a mount namespace of its own.
//!
//! Network namespaces belong to threads: [`NetNs::unshare`] and
//! [`NetNs::enter`] move only the calling thread; threads and processes it
//! starts afterwards begin in the namespace it is in then. A namespace lives
//! while a thread is in it, a descriptor is open on it, or a socket opened
//! in it is open: an emulator holding the middle namespace only through its
//! own threads and sockets takes it (and its veths, whose peers go with them)
//! along when it is killed.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// An open network namespace.
#[derive(Debug)]
pub struct NetNs {
    file: File,
}

impl NetNs {
    /// The calling thread's namespace.
    pub fn current() -> io::Result<NetNs> {
        let file = File::open("/proc/thread-self/ns/net")?;
        Ok(NetNs { file })
    }

    /// Moves the calling thread into a new, empty namespace (only `lo`,
    /// down) and returns it. Needs CAP_SYS_ADMIN.
    pub fn unshare() -> io::Result<NetNs> {
        // Safety: unshare has no memory effects; it changes only the calling thread.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        NetNs::current()
    }

    /// Moves the calling thread into this namespace.
    pub fn enter(&self) -> io::Result<()> {
        // Safety: setns on this thread with a namespace descriptor we hold open.
        if unsafe { libc::setns(self.file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// A path naming this namespace for other programs (`nsenter --net=PATH`)
    /// while this process lives.
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.file.as_raw_fd())
    }
}

/// Makes `cmd`'s process get `signal` when the thread that spawns it ends
/// (also when this process is killed with SIGKILL), so that a command
/// wrapped in a namespace does not outlive the emulator that carries its
/// traffic. The spawning thread must live as long as the command should.
pub fn die_with_parent(cmd: &mut Command, signal: libc::c_int) {
    let parent = std::process::id() as libc::pid_t;
    // Safety: the closure runs between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid) on plain integers.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before prctl took effect: nobody would signal us.
            if libc::getppid() != parent {
                return Err(io::Error::other(
                    "the emulator ended before the command started",
                ));
            }
            Ok(())
        });
    }
}

/// Makes `cmd` start in a mount namespace of its own where the file
/// `source` is bound over the file `target`: the command (and what it
/// starts) reads `source`'s contents at `target`, and nobody else sees a
/// change. Its mounts are slaves of this namespace's: mounts made here later
/// reach it, none of its own reach back. `source` must exist until `cmd` has
/// started (the mount then holds it); `target` must exist. An error of the
/// mount is the spawn's error.
pub fn with_file_over(
    cmd: &mut Command,
    source: &std::path::Path,
    target: &std::path::Path,
) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &std::path::Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
    };
    // Built before the fork: the child only passes prepared strings.
    let (source, target, root) = (c(source)?, c(target)?, c(std::path::Path::new("/"))?);
    // Safety: the closure runs between fork and exec and calls only
    // async-signal-safe functions (unshare, mount) on strings made before
    // the fork; the new mount namespace is the child's alone.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Without this, a shared "/" would carry the bind back to the parent.
            let slave = libc::MS_REC | libc::MS_SLAVE;
            if libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                slave,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            if libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// Whether process `pid` exists (for names and rules a dead run left).
pub fn process_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Makes `cmd` start in a new user namespace, where it is root (uid and gid
/// 0 mapped to the caller's own), with a new network namespace that this
/// user namespace owns: what an ordinary user may make without any setuid
/// program. The process spawning `cmd` must have one thread only (the
/// maps are written between fork and exec).
pub fn in_user_namespace(cmd: &mut Command) {
    // Safety: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // Built before the fork: the child only writes prepared bytes.
    let files: [(&'static [u8], Vec<u8>); 3] = [
        (b"/proc/self/setgroups\0", b"deny".to_vec()),
        (b"/proc/self/uid_map\0", format!("0 {uid} 1").into_bytes()),
        (b"/proc/self/gid_map\0", format!("0 {gid} 1").into_bytes()),
    ];
    // Safety: the closure runs between fork and exec and calls only
    // async-signal-safe functions (unshare, open, write, close) on buffers
    // made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            for (path, text) in &files {
                let fd = libc::open(path.as_ptr().cast(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, text.as_ptr().cast(), text.len());
                libc::close(fd);
                if n != text.len() as isize {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}
