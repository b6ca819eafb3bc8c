//! `linkem synth`: synthetic captures of UDP frames for demos, tests and
//! benchmarks.
//!
//! The frames are built by hand: three fixed headers (Ethernet, IPv4, UDP) with
//! a sequence number in the payload need no packet library, and writing them
//! directly keeps a million-frame capture quick to make.

pub use crate::cli::tools::SynthArgs;
use anyhow::{bail, Result};
use linkem_core::rng::{Stream, StreamId};
use linkem_core::units::parse_rate_bps;
use linkem_io::capture::CaptureWriter;

/// `IP:PORT`.
fn endpoint(text: &str, what: &str) -> Result<([u8; 4], u16)> {
    let addr: std::net::SocketAddrV4 = text
        .parse()
        .map_err(|_| anyhow::anyhow!("--{what} {text}: expected IPv4:PORT such as 10.0.0.1:80"))?;
    Ok((addr.ip().octets(), addr.port()))
}

/// LINKTYPE_ETHERNET.
const ETHERNET: u32 = 1;
const HEADERS: usize = 14 + 20 + 8;

/// Writes the checksum of the 20-byte IPv4 header `ip` into its field.
fn set_ipv4_checksum(ip: &mut [u8]) {
    ip[10..12].copy_from_slice(&[0, 0]);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// An Ethernet/IPv4/UDP frame of `size` bytes from 10.0.0.1:5000 to 10.0.0.2:5001
/// carrying `seq` in its first payload bytes.
pub fn udp_frame(size: usize, seq: u64) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (size - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    set_ipv4_checksum(ip);
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&5000u16.to_be_bytes());
    udp[2..4].copy_from_slice(&5001u16.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    // UDP checksum 0: "not computed", valid for IPv4.
    let payload = &mut f[HEADERS..];
    let n = payload.len().min(8);
    payload[..n].copy_from_slice(&seq.to_be_bytes()[..n]);
    f
}

pub fn run(args: &SynthArgs) -> Result<()> {
    if !(60..=9000).contains(&args.size) {
        bail!("--size {}: frames are 60 to 9000 bytes", args.size);
    }
    if args.burst == 0 {
        bail!("--burst 0: a burst has at least one frame");
    }
    let rate_bps = parse_rate_bps(&args.rate).map_err(|e| anyhow::anyhow!("--rate {e}"))?;
    let bits = args.size as u128 * 8;
    let mut writer =
        CaptureWriter::create(&args.output, ETHERNET, 65535).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut stream = Stream::new(args.seed, 0, StreamId::Delay);
    let mut t_ns: u64 = 0;
    if args.flows == 0 {
        bail!("--flows 0: at least one flow");
    }
    let mut template = udp_frame(args.size as usize, 0);
    let (src, sport) = match &args.src {
        Some(t) => endpoint(t, "src")?,
        None => ([10, 0, 0, 1], 5000),
    };
    let (dst, dport) = match &args.dst {
        Some(t) => endpoint(t, "dst")?,
        None => ([10, 0, 0, 2], 5001),
    };
    template[26..30].copy_from_slice(&src);
    template[30..34].copy_from_slice(&dst);
    template[36..38].copy_from_slice(&dport.to_be_bytes());
    let mut frame = template.clone();
    for i in 0..args.packets {
        let burst_index = i / args.burst as u64;
        let ts = if args.poisson {
            if i % args.burst as u64 == 0 && i > 0 {
                let mean_ns = (bits * args.burst as u128 * 1_000_000_000 / rate_bps as u128) as f64;
                t_ns += (-(1.0 - stream.unit()).ln() * mean_ns).round() as u64;
            }
            t_ns
        } else {
            // Exact, drift-free spacing: the n-th burst starts at n·burst·bits/rate.
            (burst_index as u128 * args.burst as u128 * bits * 1_000_000_000 / rate_bps as u128)
                as u64
        };
        frame.copy_from_slice(&template);
        let seq_bytes = i.to_be_bytes();
        let n = (args.size as usize - HEADERS).min(8);
        frame[HEADERS..HEADERS + n].copy_from_slice(&seq_bytes[..n]);
        frame[18..20].copy_from_slice(&(i as u16).to_be_bytes());
        let port = sport.wrapping_add((i % args.flows as u64) as u16);
        frame[34..36].copy_from_slice(&port.to_be_bytes());
        // Patch the IPv4 checksum for the changed identification field.
        set_ipv4_checksum(&mut frame[14..34]);
        writer
            .write(ts, args.size, &frame)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    writer.finish().map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!(
        "linkem: wrote {} frames of {} bytes at {} to {}",
        args.packets,
        args.size,
        args.rate,
        args.output.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_has_valid_ipv4_checksum_and_sequence() {
        let f = udp_frame(100, 0x0102_0304_0506_0708);
        let sum: u32 = f[14..34]
            .chunks(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
            .sum();
        let folded = (sum & 0xffff) + (sum >> 16);
        assert_eq!(folded as u16, 0xffff);
        assert_eq!(&f[42..50], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 100 - 34);
    }
}
