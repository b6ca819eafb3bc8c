//! Link types: the raw LINKTYPE number, libpcap's name for it, and whether replay
//! knows where the frames of that type begin and end.

use pcap_file::DataLink;
use std::fmt;

/// A capture's datalink type, kept as the raw LINKTYPE number so that the writer can
/// reproduce it exactly even for types this crate has no name for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

/// The name the rest of the project may use for [`LinkType`].
pub type LinkTypeInfo = LinkType;

impl LinkType {
    /// BSD loopback: a 4-byte address family in the capturing host's byte order.
    pub const NULL: LinkType = LinkType(0);
    /// Ethernet (`DLT_EN10MB`): frames start with the 14-byte Ethernet header, as
    /// the frames the packet backends carry do.
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP, version in the first nibble.
    pub const RAW: LinkType = LinkType(101);
    /// Linux cooked capture (`tcpdump -i any`).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4: every packet starts with an IPv4 header.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6: every packet starts with an IPv6 header.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux cooked capture v2 (`tcpdump -i any` with a recent libpcap): a 20-byte
    /// pseudo-header with the interface index, then the packet from L3.
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// The raw LINKTYPE number.
    pub fn dlt(self) -> u32 {
        self.0
    }

    /// libpcap's `DLT_` name, when the number is a registered one.
    pub fn name(self) -> Option<String> {
        if self == LinkType::ETHERNET {
            // pcap-file calls it ETHERNET; libpcap users know it as EN10MB.
            return Some("DLT_EN10MB".to_string());
        }
        match DataLink::from(self.0) {
            DataLink::Unknown(_) => None,
            known => Some(format!("DLT_{known:?}")),
        }
    }

    /// Whether replay knows where the packets of this link type begin and end; others are
    /// refused up front rather than emulated with a wrong notion of packet length.
    pub fn is_supported(self) -> bool {
        matches!(
            self,
            LinkType::NULL
                | LinkType::ETHERNET
                | LinkType::RAW
                | LinkType::LINUX_SLL
                | LinkType::IPV4
                | LinkType::IPV6
                | LinkType::LINUX_SLL2
        )
    }
}

impl From<u32> for LinkType {
    fn from(dlt: u32) -> Self {
        LinkType(dlt)
    }
}

impl From<LinkType> for u32 {
    fn from(link_type: LinkType) -> Self {
        link_type.0
    }
}

impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{} ({name})", self.0),
            None => write!(f, "{}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_support() {
        assert_eq!(LinkType(147).to_string(), "147 (DLT_USER0)");
        assert_eq!(LinkType::ETHERNET.to_string(), "1 (DLT_EN10MB)");
        assert_eq!(LinkType(276).name().as_deref(), Some("DLT_LINUX_SLL2"));
        assert_eq!(LinkType(60000).name(), None);
        assert_eq!(LinkType(60000).to_string(), "60000");
        assert_eq!(u32::from(LinkType::from(229)), 229);
        assert!(LinkType::LINUX_SLL.is_supported() && LinkType::NULL.is_supported());
        assert!(!LinkType(105).is_supported());
    }
}
