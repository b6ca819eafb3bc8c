//! The bpf(2) system call and the commands linkem makes with it: maps, program load,
//! XDP attachment.

use super::*;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// bpf(2) commands (`enum bpf_cmd`), the first argument of [`sys_bpf`].
pub mod cmd {
    /// `BPF_MAP_CREATE`: create a map, returns its fd ([`super::create_xskmap`]).
    pub const MAP_CREATE: u32 = 0;
    /// `BPF_MAP_LOOKUP_ELEM`: read one entry ([`super::map_lookup_percpu`]).
    pub const MAP_LOOKUP_ELEM: u32 = 1;
    /// `BPF_MAP_UPDATE_ELEM`: set one entry ([`super::map_update_u32`]).
    pub const MAP_UPDATE_ELEM: u32 = 2;
    /// `BPF_MAP_DELETE_ELEM`: remove one entry ([`super::map_delete_u32`]).
    pub const MAP_DELETE_ELEM: u32 = 3;
    /// `BPF_PROG_LOAD`: verify and load a program, returns its fd
    /// ([`super::load_xdp_program`]).
    pub const PROG_LOAD: u32 = 5;
    /// `BPF_PROG_QUERY`: the programs attached to a hook
    /// ([`super::tcx_ingress_programs`]).
    pub const PROG_QUERY: u32 = 16;
    /// `BPF_LINK_CREATE`: attach a program through a link, returns the link's
    /// fd ([`super::link_xdp`]).
    pub const LINK_CREATE: u32 = 28;
}

/// `enum bpf_map_type`: a map from u32 keys to AF_XDP sockets, the target of
/// `bpf_redirect_map` in an XDP program.
pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `enum bpf_map_type`: an array indexed by u32 keys.
pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// `enum bpf_map_type`: an array with one copy of each value per CPU.
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `enum bpf_prog_type`: a socket filter (`SO_ATTACH_BPF`).
pub const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
/// `enum bpf_prog_type`: a tc classifier (here attached through tcx).
pub const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
/// `enum bpf_prog_type`: a program run at a network device's XDP hook.
pub const BPF_PROG_TYPE_XDP: u32 = 6;
/// `enum bpf_attach_type`: a device's tcx ingress hook (Linux 6.6+).
pub const BPF_TCX_INGRESS: u32 = 46;
/// `enum bpf_attach_type`: attach to a network device's XDP hook.
pub const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE` (include/uapi/linux/if_link.h): generic XDP.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: the driver runs the program (native XDP).
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// The `union bpf_attr` member for `BPF_MAP_CREATE` (first 44 bytes).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// The member for `BPF_MAP_UPDATE_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The member for `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The member for `BPF_LINK_CREATE`, up to `flags`.
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// The member for `BPF_PROG_QUERY`, whole: the kernel writes its answer
/// (the count, the flags, the hook's revision) into the caller's copy, up to
/// `revision`. The id buffers stay null: it only counts.
#[repr(C)]
#[derive(Default)]
struct ProgQueryAttr {
    target_ifindex: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
    prog_attach_flags: u64,
    link_ids: u64,
    link_attach_flags: u64,
    revision: u64,
}

// The layouts of include/uapi/linux/bpf.h (checked against the header with offsetof).
const _: () = assert!(std::mem::size_of::<MapCreateAttr>() == 44);
const _: () = assert!(std::mem::size_of::<MapElemAttr>() == 32);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, log_level) == 24);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, prog_name) == 48);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type) == 68);
const _: () = assert!(std::mem::size_of::<LinkCreateAttr>() == 16);
const _: () = assert!(std::mem::offset_of!(ProgQueryAttr, prog_cnt) == 24);
const _: () = assert!(std::mem::offset_of!(ProgQueryAttr, revision) == 56);

/// The one place bpf(2) is called. The kernel reads `size_of::<A>()` bytes
/// of `attr` and treats the rest of its `union bpf_attr` as zero.
///
/// # Safety
/// `A` must be the `union bpf_attr` member of `cmd`, and every pointer in it
/// must be valid for what the kernel does with it during the call.
pub unsafe fn sys_bpf<A>(cmd: u32, attr: &mut A) -> io::Result<RawFd> {
    // Safety: attr is a live, exclusively borrowed buffer of the size passed;
    // the caller vouches for the pointers inside it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut A,
            std::mem::size_of::<A>() as libc::c_long,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as RawFd)
    }
}

pub(super) fn object_name(name: &str) -> [u8; 16] {
    // The kernel accepts [A-Za-z0-9_.], at most 15 bytes and a NUL.
    let mut out = [0u8; 16];
    for (o, c) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = if c.is_ascii_alphanumeric() || c == b'.' {
            c
        } else {
            b'_'
        };
    }
    out
}

fn owned(fd: RawFd) -> OwnedFd {
    // Safety: fd was just returned by bpf(2), is open and owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Creates a `BPF_MAP_TYPE_XSKMAP` with u32 keys (receive queue) and u32
/// values (AF_XDP socket fd). Key `k` is meant to hold the socket bound to
/// receive queue `k`; the program of [`xdp_redirect_program`] passes frames of
/// a queue whose key is empty to the kernel stack. `max_entries` bounds the
/// keys (the AF_XDP backend uses the queue count, at least 64); `name` is
/// what `bpftool map` shows (at most 15 bytes, other characters become `_`).
///
/// # Errors
/// The errno of `BPF_MAP_CREATE`, e.g. `EPERM` without CAP_BPF.
pub fn create_xskmap(name: &str, max_entries: u32) -> Result<OwnedFd, BpfError> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries,
        map_name: object_name(name),
        ..Default::default()
    };
    // Safety: MapCreateAttr is the BPF_MAP_CREATE member; it holds no pointers.
    match unsafe { sys_bpf(cmd::MAP_CREATE, &mut attr) } {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => Err(BpfError::new("BPF_MAP_CREATE", format!("XSKMAP {name}"), e)),
    }
}

/// Creates an array map (`BPF_MAP_TYPE_ARRAY` or, with `per_cpu`,
/// `BPF_MAP_TYPE_PERCPU_ARRAY`) of `entries` values of `value_size` bytes,
/// all zero, keyed by u32.
///
/// # Errors
/// The errno of `BPF_MAP_CREATE`, e.g. `EPERM` without CAP_BPF.
pub fn create_array(
    name: &str,
    value_size: u32,
    entries: u32,
    per_cpu: bool,
) -> Result<OwnedFd, BpfError> {
    let mut attr = MapCreateAttr {
        map_type: if per_cpu {
            BPF_MAP_TYPE_PERCPU_ARRAY
        } else {
            BPF_MAP_TYPE_ARRAY
        },
        key_size: 4,
        value_size,
        max_entries: entries,
        map_name: object_name(name),
        ..Default::default()
    };
    // Safety: MapCreateAttr is the BPF_MAP_CREATE member; it holds no pointers.
    match unsafe { sys_bpf(cmd::MAP_CREATE, &mut attr) } {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => Err(BpfError::new("BPF_MAP_CREATE", format!("array {name}"), e)),
    }
}

/// The CPUs the kernel may ever run (`/sys/devices/system/cpu/possible`):
/// a per-CPU map's value holds one copy for each.
pub fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    // "0-63" or "0,2-5": the highest CPU number plus one.
    let highest = text
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max();
    match highest {
        Some(n) => n + 1,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Every CPU's copy of `map[key]` in a per-CPU map whose values are
/// `value_size` bytes, concatenated (each copy padded to 8 bytes, as the
/// kernel writes them).
pub fn map_lookup_percpu(
    map: BorrowedFd<'_>,
    key: u32,
    value_size: u32,
) -> Result<Vec<u8>, BpfError> {
    let stride = (value_size as usize).div_ceil(8) * 8;
    let mut buf = vec![0u8; stride * possible_cpus()];
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: buf.as_mut_ptr() as u64,
        ..Default::default()
    };
    // Safety: key is a live u32; buf holds a padded copy for every possible
    // CPU, which is what the kernel writes for a per-CPU map.
    match unsafe { sys_bpf(cmd::MAP_LOOKUP_ELEM, &mut attr) } {
        Ok(_) => Ok(buf),
        Err(e) => Err(BpfError::new(
            "BPF_MAP_LOOKUP_ELEM",
            format!("key {key}"),
            e,
        )),
    }
}

/// `map[key] = value` for a map with u32 keys and values.
pub fn map_update_u32(map: BorrowedFd<'_>, key: u32, value: u32) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0, // BPF_ANY
        ..Default::default()
    };
    // Safety: key and value are live u32s, the sizes the map was created with.
    match unsafe { sys_bpf(cmd::MAP_UPDATE_ELEM, &mut attr) } {
        Ok(_) => Ok(()),
        Err(e) => Err(BpfError::new(
            "BPF_MAP_UPDATE_ELEM",
            format!("key {key}"),
            e,
        )),
    }
}

/// Deletes `map[key]` for a map with u32 keys.
pub fn map_delete_u32(map: BorrowedFd<'_>, key: u32) -> Result<(), BpfError> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: &key as *const u32 as u64,
        ..Default::default()
    };
    // Safety: key is a live u32, the key size the map was created with.
    match unsafe { sys_bpf(cmd::MAP_DELETE_ELEM, &mut attr) } {
        Ok(_) => Ok(()),
        Err(e) => Err(BpfError::new(
            "BPF_MAP_DELETE_ELEM",
            format!("key {key}"),
            e,
        )),
    }
}

/// Size of the verifier log requested when a load fails: the log of a
/// program this size is a few kilobytes.
const VERIFIER_LOG_BYTES: usize = 64 * 1024;

/// Loads an XDP program ([`load_program`]).
pub fn load_xdp_program(name: &str, insns: &[BpfInsn]) -> Result<OwnedFd, BpfError> {
    load_xdp_program_flags(name, insns, 0)
}

/// `prog_flags` bit: the program handles frames in several buffers
/// (multi-buffer XDP, Linux 5.18+), which lets it run on a veth or a driver
/// whose MTU exceeds a page.
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// [`load_xdp_program`] with `prog_flags` (e.g. [`BPF_F_XDP_HAS_FRAGS`]).
pub fn load_xdp_program_flags(
    name: &str,
    insns: &[BpfInsn],
    prog_flags: u32,
) -> Result<OwnedFd, BpfError> {
    load_program(ProgKind::Xdp, name, insns, prog_flags)
}

/// What a program is loaded as: its `prog_type` and `expected_attach_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgKind {
    /// At a device's XDP hook.
    Xdp,
    /// At a device's tcx hook.
    TcxIngress,
    /// On a socket, through `SO_ATTACH_BPF`.
    SocketFilter,
}

impl ProgKind {
    fn types(self) -> (u32, u32) {
        match self {
            ProgKind::Xdp => (BPF_PROG_TYPE_XDP, BPF_XDP),
            ProgKind::TcxIngress => (BPF_PROG_TYPE_SCHED_CLS, BPF_TCX_INGRESS),
            ProgKind::SocketFilter => (BPF_PROG_TYPE_SOCKET_FILTER, 0),
        }
    }

    fn what(self) -> &'static str {
        match self {
            ProgKind::Xdp => "XDP program",
            ProgKind::TcxIngress => "tc program",
            ProgKind::SocketFilter => "socket filter",
        }
    }
}

/// Loads a program of `kind`. The licence "Dual MIT/GPL" is GPL-compatible,
/// which none of the helpers used here needs, but keeps the door open. On
/// failure the load is repeated with the verifier log on, and the log is
/// part of the error.
pub fn load_program(
    kind: ProgKind,
    name: &str,
    insns: &[BpfInsn],
    prog_flags: u32,
) -> Result<OwnedFd, BpfError> {
    const LICENSE: &[u8] = b"Dual MIT/GPL\0";
    let (prog_type, expected_attach_type) = kind.types();
    let load = |log: Option<&mut Vec<u8>>| {
        let mut attr = ProgLoadAttr {
            prog_type,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: LICENSE.as_ptr() as u64,
            prog_name: object_name(name),
            expected_attach_type,
            prog_flags,
            ..Default::default()
        };
        if let Some(buf) = log {
            attr.log_level = 1;
            attr.log_size = buf.len() as u32;
            attr.log_buf = buf.as_mut_ptr() as u64;
        }
        // Safety: insns, the licence and the log buffer outlive the call and
        // have the lengths given; BpfInsn has the kernel's layout.
        unsafe { sys_bpf(cmd::PROG_LOAD, &mut attr) }
    };
    match load(None) {
        Ok(fd) => Ok(owned(fd)),
        Err(first) => {
            let mut buf = vec![0u8; VERIFIER_LOG_BYTES];
            let err = match load(Some(&mut buf)) {
                // Loads with the log on: keep it, it is what we got.
                Ok(fd) => return Ok(owned(fd)),
                Err(e) => e,
            };
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            let log = String::from_utf8_lossy(&buf[..end]).trim_end().to_string();
            let mut e = BpfError::new("BPF_PROG_LOAD", format!("{} {name}", kind.what()), err);
            if first.raw_os_error() == Some(libc::EPERM) {
                e.hint = Some(format!(
                    "not root: loading a {} needs CAP_BPF and CAP_NET_ADMIN",
                    kind.what()
                ));
            }
            e.verifier_log = (!log.is_empty()).then_some(log);
            Err(e)
        }
    }
}

/// Attaches `prog` (a [`ProgKind::TcxIngress`] program) to the tcx ingress
/// hook of `ifindex` through a BPF link, after any program already there:
/// the kernel detaches it when the returned fd (and every copy of it) is
/// closed, even if the process is killed. Linux 6.6+.
pub fn link_tcx_ingress(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    ifname: &str,
) -> Result<OwnedFd, BpfError> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_TCX_INGRESS,
        flags: 0,
    };
    // Safety: LinkCreateAttr is the BPF_LINK_CREATE member; no pointers. The
    // kernel reads the tcx fields after it (relative fd, expected revision) as
    // zero: append after every program, whatever the revision.
    match unsafe { sys_bpf(cmd::LINK_CREATE, &mut attr) } {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let mut err = BpfError::new("BPF_LINK_CREATE", format!("tcx ingress of {ifname}"), e);
            if err.errno() == libc::EINVAL {
                err.hint = Some("this kernel has no tcx hook (Linux 6.6+)".into());
            }
            Err(err)
        }
    }
}

/// How many programs are attached to the tcx ingress hook of `ifindex`, by
/// anyone (what `bpftool net` lists under tcx/ingress). Linux 6.6+.
pub fn tcx_ingress_programs(ifindex: u32) -> Result<u32, BpfError> {
    let mut attr = ProgQueryAttr {
        target_ifindex: ifindex,
        attach_type: BPF_TCX_INGRESS,
        ..Default::default()
    };
    // Safety: ProgQueryAttr is the whole BPF_PROG_QUERY member (the kernel
    // writes up to `revision` into it); the id buffers are null, so it writes
    // nothing else.
    unsafe { sys_bpf(cmd::PROG_QUERY, &mut attr) }
        .map_err(|e| BpfError::new("BPF_PROG_QUERY", format!("tcx ingress of {ifindex}"), e))?;
    Ok(attr.prog_cnt)
}

/// Where an XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before an skb exists ("native", `XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the core network stack on skbs ("generic", `XDP_FLAGS_SKB_MODE`):
    /// works on every device, slower.
    Generic,
}

impl XdpMode {
    /// The `XDP_FLAGS_*` bit that requests this mode from `BPF_LINK_CREATE`:
    /// [`XDP_FLAGS_DRV_MODE`] or [`XDP_FLAGS_SKB_MODE`].
    pub fn flags(self) -> u32 {
        match self {
            XdpMode::Native => XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        })
    }
}

/// Attaches `prog` to the XDP hook of `ifindex` in `mode` through a BPF
/// link: the kernel detaches the program when the returned fd (and every
/// copy of it) is closed, even if the process is killed.
pub fn link_xdp(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    ifname: &str,
    mode: XdpMode,
) -> Result<OwnedFd, BpfError> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: mode.flags(),
    };
    // Safety: LinkCreateAttr is the BPF_LINK_CREATE member; no pointers.
    match unsafe { sys_bpf(cmd::LINK_CREATE, &mut attr) } {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let mut err = BpfError::new("BPF_LINK_CREATE", ifname.to_string(), e);
            err.hint = match err.errno() {
                libc::EBUSY | libc::EEXIST => Some(format!(
                    "an XDP program is already attached; remove it with 'ip link set dev {ifname} xdp off', \
                     or end the process holding its BPF link"
                )),
                libc::EPERM => Some("not root: attaching XDP needs CAP_NET_ADMIN and CAP_BPF".into()),
                libc::ERANGE => Some(format!("the MTU of '{ifname}' (or its veth peer) is too large for XDP")),
                _ => None,
            };
            Err(err)
        }
    }
}

/// Attaches in native mode, or in generic mode if the driver has no native
/// XDP; says which. A busy hook or missing privilege is reported at once.
pub fn attach_xdp(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    ifname: &str,
) -> Result<(OwnedFd, XdpMode), BpfError> {
    match link_xdp(prog, ifindex, ifname, XdpMode::Native) {
        Ok(link) => Ok((link, XdpMode::Native)),
        Err(e)
            if matches!(
                e.errno(),
                libc::EBUSY | libc::EEXIST | libc::EPERM | libc::ENODEV
            ) =>
        {
            Err(e)
        }
        Err(native) => match link_xdp(prog, ifindex, ifname, XdpMode::Generic) {
            Ok(link) => Ok((link, XdpMode::Generic)),
            Err(mut generic) => {
                let note = format!("native mode failed first: {}", native.errno_text());
                generic.hint = Some(match generic.hint.take() {
                    Some(h) => format!("{h}; {note}"),
                    None => note,
                });
                Err(generic)
            }
        },
    }
}
