//! The least a user-space forwarder between two interfaces can do: the
//! baseline the benches measure linkem against in the same run, so that what
//! the platform costs any user-space emulator (a wake-up, the copies in and
//! out of the kernel) is told apart from what linkem's own code costs.
//!
//! Two AF_PACKET sockets with `PACKET_VNET_HDR` (a host's TSO super-frame is
//! received whole and sent on whole with its offload header, as linkem's
//! AF_PACKET backend does, with the same 8 MiB socket receive buffer), no
//! model, no queue, no ring, no counts: a frame is copied once into user
//! space and once back.
//!
//! ```text
//! cargo run --release -p linkem-io --example plain_forward -- IF_A IF_B [--threads 1|2]
//! ```
//!
//! `--threads 2` (the default): one thread per direction, each blocked in
//! `recv` and sending what it got (the most throughput two cores give).
//! `--threads 1`: one thread polls both sockets and drains each before it
//! sleeps again, so an answer that comes back inside the send call (veth runs
//! the receiving host in it) is taken in the same wake-up (the least latency).
//! Hand-written rather than built on linkem-io's ports so that nothing of
//! linkem's is in the baseline. Runs until SIGINT or SIGTERM, then prints the
//! frames it forwarded per direction on stderr.

use std::ffi::CString;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A super-frame of 64 KiB, its virtio-net header and an Ethernet header.
const BUF_BYTES: usize = 70_000;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn open(ifname: &str) -> io::Result<libc::c_int> {
    let name = CString::new(ifname).map_err(|_| io::Error::other("interface name has a NUL"))?;
    // Safety: a plain C call on a NUL-terminated string that outlives it.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(io::Error::other(format!("no interface {ifname}")));
    }
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // Safety: a plain system call with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto as libc::c_int) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    linkem_io::sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1)?;
    linkem_io::sys::setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &1)?;
    // Room for a burst of super-frames on the socket queue, as linkem's
    // AF_PACKET backend asks for (8 MiB; FORCE needs CAP_NET_ADMIN, and
    // without it the default stays).
    let _ = linkem_io::sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &(8 << 20));
    // A thread blocked in recv looks at STOP this often.
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    linkem_io::sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout)?;
    // Safety: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = proto;
    addr.sll_ifindex = index as i32;
    // Safety: `addr` is a sockaddr_ll that outlives the call, its size given.
    let r = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Receives one frame (with `flags`) and sends it on; false when none came.
fn forward(from: libc::c_int, to: libc::c_int, buf: &mut [u8], flags: libc::c_int) -> bool {
    // Safety: recv writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::recv(from, buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n <= 0 {
        return false;
    }
    // Safety: send reads the `n` bytes recv wrote.
    unsafe { libc::send(to, buf.as_ptr().cast(), n as usize, 0) };
    true
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let threads = match args.iter().position(|a| a == "--threads") {
        Some(i) => args.get(i + 1).map(String::as_str),
        None => Some("2"),
    };
    let (Some(a), Some(b), Some(threads @ ("1" | "2"))) = (args.first(), args.get(1), threads)
    else {
        eprintln!("usage: plain_forward IF_A IF_B [--threads 1|2]");
        std::process::exit(2);
    };
    let fds = match (open(a), open(b)) {
        (Ok(x), Ok(y)) => [x, y],
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("plain_forward: {e}");
            std::process::exit(1);
        }
    };
    // Safety: the handler only stores to an atomic; SA_RESTART is left off so
    // that a blocked recv or poll returns EINTR and the loops see STOP.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
    }
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    if threads == "2" {
        let workers: Vec<_> = [(0, fds[0], fds[1]), (1, fds[1], fds[0])]
            .into_iter()
            .map(|(i, from, to)| {
                let counts = counts.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; BUF_BYTES];
                    while !STOP.load(Ordering::Relaxed) {
                        if forward(from, to, &mut buf, 0) {
                            counts[i].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        // Signals go to any thread; a worker blocked in recv sees STOP within
        // the sockets' receive timeout.
        while !STOP.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        for w in workers {
            let _ = w.join();
        }
    } else {
        let mut buf = vec![0u8; BUF_BYTES];
        while !STOP.load(Ordering::Relaxed) {
            for (i, (from, to)) in [(fds[0], fds[1]), (fds[1], fds[0])].into_iter().enumerate() {
                while forward(from, to, &mut buf, libc::MSG_DONTWAIT) {
                    counts[i].fetch_add(1, Ordering::Relaxed);
                }
            }
            let mut pfds = fds.map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            // Safety: `pfds` is an array of two pollfd that outlives the call.
            unsafe { libc::poll(pfds.as_mut_ptr(), 2, 200) };
        }
    }
    eprintln!(
        "plain_forward: a->b {} b->a {}",
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed)
    );
}
