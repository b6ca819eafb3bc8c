//! Big-endian 16-bit fields of a frame, read and written in place.
//!
//! Network headers store their fields big-endian (RFC 1700, "network byte
//! order"). These two helpers sit in their own module, below both
//! [`super::headers`] (which reads fields to walk the headers) and
//! [`super::checksum`] (which reads and stores checksum fields and needs
//! [`super::headers::locate`]), so that neither has to import the other's
//! helpers in a circle.
//!
//! Invariant: [`read16`] never panics (an out-of-frame field is `None`);
//! [`write16`] is called only at offsets a bounds check already vouched for.

/// The big-endian `u16` at `frame[at..at + 2]`, or `None` when that lies
/// outside the frame (an offset near `usize::MAX` included).
pub(crate) fn read16(frame: &[u8], at: usize) -> Option<u16> {
    match frame.get(at..at.checked_add(2)?)? {
        [a, b] => Some(u16::from_be_bytes([*a, *b])),
        _ => None,
    }
}

/// Stores `v` big-endian at `frame[at..at + 2]`.
pub(crate) fn write16(frame: &mut [u8], at: usize, v: u16) {
    // Callers write only at offsets that `locate` or a bounds check vouched for.
    frame[at..at + 2].copy_from_slice(&v.to_be_bytes());
}
