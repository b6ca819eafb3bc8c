//! Byte-level helpers shared by the pcap and pcapng readers.

use std::io::{self, Read};

/// Reads `buf.len()` bytes unless the input ends first; returns how many were read, so
/// that a clean end (0) can be told from a cut record (between 0 and `buf.len()`).
pub(super) fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

pub(super) fn u32_at(bytes: &[u8], at: usize, big_endian: bool) -> u32 {
    let mut b = [0u8; 4];
    if let Some(src) = at.checked_add(4).and_then(|end| bytes.get(at..end)) {
        b.copy_from_slice(src);
    }
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

pub(super) fn u16_at(bytes: &[u8], at: usize, big_endian: bool) -> u16 {
    let mut b = [0u8; 2];
    if let Some(src) = at.checked_add(2).and_then(|end| bytes.get(at..end)) {
        b.copy_from_slice(src);
    }
    if big_endian {
        u16::from_be_bytes(b)
    } else {
        u16::from_le_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_in_either_byte_order_and_short_slices_read_as_zero_padded() {
        let b = [0x12, 0x34, 0x56, 0x78, 0x9a];
        assert_eq!(u32_at(&b, 0, true), 0x1234_5678);
        assert_eq!(u32_at(&b, 0, false), 0x7856_3412);
        assert_eq!(u16_at(&b, 3, true), 0x789a);
        assert_eq!(u16_at(&b, 3, false), 0x9a78);
        // Out of range: zero, never a panic.
        assert_eq!(u32_at(&b, 2, true), 0);
        assert_eq!(u16_at(&b, usize::MAX - 1, false), 0);
    }

    /// A reader that hands out one byte per call and is interrupted in between.
    struct Trickle<'a>(&'a [u8], bool);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = !self.1;
            if self.1 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            match self.0.split_first() {
                Some((&b, rest)) if !buf.is_empty() => {
                    buf[0] = b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }

    #[test]
    fn read_full_tells_a_clean_end_from_a_short_read() {
        let mut buf = [0u8; 4];
        assert_eq!(
            read_full(&mut Trickle(b"abcdef", false), &mut buf).unwrap(),
            4
        );
        assert_eq!(&buf, b"abcd");
        assert_eq!(read_full(&mut Trickle(b"ab", false), &mut buf).unwrap(), 2);
        assert_eq!(read_full(&mut Trickle(b"", false), &mut buf).unwrap(), 0);
    }
}
