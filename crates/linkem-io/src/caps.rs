//! Linux capabilities of the calling thread: read them (`capget`), and
//! narrow them (`capset`) once what needed them is done.
//!
//! Capabilities are per thread: [`limit`] changes the calling thread and the
//! threads it starts afterwards, so call it before starting workers. Only the
//! effective and permitted sets are touched; the inheritable set is cleared,
//! so a program linkem might run gets nothing.
//!
//! Written over the raw syscalls (two of them, version 3 headers) rather than
//! a crate: `caps` and `libcap` bindings would add a dependency for forty
//! lines.

use std::fmt;
use std::io;

/// A capability number (`include/uapi/linux/capability.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub u32);

impl Cap {
    /// `CAP_NET_ADMIN` (12): attach an XDP program to an interface; the AF_XDP
    /// backend needs it.
    pub const NET_ADMIN: Cap = Cap(12);
    /// `CAP_NET_RAW` (13): open AF_PACKET and AF_XDP sockets; both backends need it.
    pub const NET_RAW: Cap = Cap(13);
    /// `CAP_IPC_LOCK` (14): lock the AF_XDP UMEM in memory beyond `ulimit -l`
    /// (not needed when that limit is unlimited).
    pub const IPC_LOCK: Cap = Cap(14);
    /// `CAP_SYS_NICE` (23): switch threads to `SCHED_FIFO` (`--realtime`).
    pub const SYS_NICE: Cap = Cap(23);
    /// `CAP_BPF` (39, Linux 5.8+): create BPF maps and load the XDP program.
    pub const BPF: Cap = Cap(39);

    /// The name `setcap` and `capsh` use, e.g. `cap_net_raw`.
    pub fn name(self) -> String {
        match self.0 {
            12 => "cap_net_admin".into(),
            13 => "cap_net_raw".into(),
            14 => "cap_ipc_lock".into(),
            21 => "cap_sys_admin".into(),
            23 => "cap_sys_nice".into(),
            39 => "cap_bpf".into(),
            n => format!("cap_{n}"),
        }
    }

    fn bit(self) -> u64 {
        1u64 << self.0
    }
}

impl fmt::Display for Cap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name().to_uppercase())
    }
}

/// A set of capabilities as a bit mask: bit `n` set means [`Cap`]`(n)` is in the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapSet(pub u64);

impl CapSet {
    /// The set holding exactly `caps` (repeats are harmless).
    pub fn of(caps: &[Cap]) -> CapSet {
        CapSet(caps.iter().fold(0, |m, c| m | c.bit()))
    }

    /// Whether `cap` is in the set.
    pub fn has(self, cap: Cap) -> bool {
        self.0 & cap.bit() != 0
    }
}

/// The calling thread's capability sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// What the kernel checks now: a privileged call succeeds only if its
    /// capability is here.
    pub effective: CapSet,
    /// What the thread may still make effective ([`raise`]); once dropped from
    /// this set a capability cannot come back.
    pub permitted: CapSet,
}

const VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The calling thread's sets.
pub fn current() -> io::Result<Caps> {
    let d = get_raw()?;
    let join = |lo: u32, hi: u32| CapSet(lo as u64 | (hi as u64) << 32);
    Ok(Caps {
        effective: join(d[0].effective, d[1].effective),
        permitted: join(d[0].permitted, d[1].permitted),
    })
}

/// The capabilities of `need` missing from the calling thread's effective set, in
/// the order given: the one check every front end makes before it opens anything (what
/// each socket needs is named beside it: [`crate::afpacket::NEEDED_CAPS`],
/// [`crate::afxdp::needed_caps`], [`crate::nfqueue::NEEDED_CAPS`]).
pub fn lacking(need: &[Cap]) -> io::Result<Vec<Cap>> {
    let have = current()
        .map_err(|e| io::Error::other(format!("cannot read this process's capabilities: {e}")))?
        .effective;
    Ok(need.iter().copied().filter(|c| !have.has(*c)).collect())
}

/// Sets the calling thread's sets: `effective` must lie within `permitted`,
/// which may only shrink. The inheritable set is cleared.
pub fn set(effective: CapSet, permitted: CapSet) -> io::Result<()> {
    let part = |s: CapSet, i: usize| (s.0 >> (32 * i)) as u32;
    let d = [0, 1].map(|i| Data {
        effective: part(effective, i),
        permitted: part(permitted, i),
        inheritable: 0,
    });
    set_raw(&d)
}

/// The thread's three sets as capget(2) version 3 gives them (low and high
/// 32 bits).
fn get_raw() -> io::Result<[Data; 2]> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut d = [Data::default(); 2];
    // Safety: version 3 takes a header and two data structs, both live and writable.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut h as *mut Header, d.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(d)
}

/// Sets the thread's three sets to `d` (capset(2) version 3).
fn set_raw(d: &[Data; 2]) -> io::Result<()> {
    let mut h = Header {
        version: VERSION_3,
        pid: 0,
    };
    // Safety: version 3 takes a header and two data structs, both live.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Keeps only `keep_effective` effective and `keep_permitted` (a superset)
/// permitted, of what the thread has now.
pub fn limit(keep_effective: CapSet, keep_permitted: CapSet) -> io::Result<Caps> {
    let now = current()?;
    let permitted = CapSet(now.permitted.0 & (keep_permitted.0 | keep_effective.0));
    let effective = CapSet(now.effective.0 & keep_effective.0 & permitted.0);
    set(effective, permitted)?;
    current()
}

/// Makes `cap` effective again if it is still permitted (e.g. for cleanup).
pub fn raise(cap: Cap) -> io::Result<()> {
    let now = current()?;
    if !now.permitted.has(cap) {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    set(CapSet(now.effective.0 | cap.bit()), now.permitted)
}

/// Adds `caps` to the calling thread's inheritable and ambient sets, so
/// that a program it runs afterwards (one without file capabilities, not
/// set-uid) starts with them permitted and effective: what a process holding
/// CAP_NET_ADMIN through file capabilities, as an ordinary user, needs for
/// `iptables` to work (it checks nothing itself; without the capability the
/// kernel refuses it, "you must be root"). Each must be permitted now. Only
/// threads and children started after the call inherit the sets.
pub fn pass_to_programs(caps: &[Cap]) -> io::Result<()> {
    let mut d = get_raw()?;
    let bits = CapSet::of(caps).0;
    d[0].inheritable |= bits as u32;
    d[1].inheritable |= (bits >> 32) as u32;
    set_raw(&d)?;
    for c in caps {
        // Safety: prctl with integer arguments only.
        let r = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                c.0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_capability_reaches_a_program_run_afterwards() {
        if !current().unwrap().permitted.has(Cap::NET_ADMIN) {
            eprintln!("skipped: CAP_NET_ADMIN is not permitted here");
            return;
        }
        // Capabilities are per thread: only this one's children see the change.
        std::thread::spawn(|| {
            pass_to_programs(&[Cap::NET_ADMIN]).unwrap();
            let o = std::process::Command::new("grep")
                .args(["CapAmb", "/proc/self/status"])
                .output()
                .unwrap();
            let line = String::from_utf8_lossy(&o.stdout).to_string();
            let amb = line
                .split_whitespace()
                .nth(1)
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .unwrap_or_else(|| panic!("CapAmb: {line}"));
            assert_ne!(amb & (1 << 12), 0, "{line}");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn names_are_setcap_words() {
        assert_eq!(Cap::NET_RAW.name(), "cap_net_raw");
        assert_eq!(Cap::BPF.to_string(), "CAP_BPF");
        assert!(CapSet::of(&[Cap::NET_ADMIN, Cap::BPF]).has(Cap::BPF));
        assert!(!CapSet::of(&[Cap::NET_ADMIN]).has(Cap::NET_RAW));
    }

    #[test]
    fn a_thread_can_narrow_its_own_sets_and_not_widen_them() {
        // In a thread of its own: capabilities are per thread, so the
        // other tests keep theirs.
        std::thread::spawn(|| {
            let before = current().unwrap();
            assert!(before.effective.0 & !before.permitted.0 == 0);
            let after = limit(CapSet::of(&[Cap::NET_RAW]), CapSet::of(&[Cap::NET_ADMIN])).unwrap();
            assert_eq!(after.effective.0 & !CapSet::of(&[Cap::NET_RAW]).0, 0);
            assert_eq!(
                after.permitted.0 & !CapSet::of(&[Cap::NET_RAW, Cap::NET_ADMIN]).0,
                0
            );
            if before.permitted.has(Cap::NET_ADMIN) {
                raise(Cap::NET_ADMIN).unwrap();
                assert!(current().unwrap().effective.has(Cap::NET_ADMIN));
            }
            assert!(raise(Cap::SYS_NICE).is_err(), "dropped means gone");
        })
        .join()
        .unwrap();
    }
}
