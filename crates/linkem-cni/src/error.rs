//! The CNI error result: `{"cniVersion", "code", "msg", "details"}` on stdout
//! and a non-zero exit. Codes 1-99 are the CNI spec's; 100 and up are this
//! plugin's own.

use serde_json::{json, Value};

/// Incompatible CNI version (spec).
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// Invalid or missing environment variables (spec).
pub const INVALID_ENV: u32 = 4;
/// The configuration is not JSON (spec: failure to decode content).
pub const DECODE: u32 = 6;
/// A field of the network configuration is wrong (spec).
pub const INVALID_CONFIG: u32 = 7;
/// An interface of the link is missing from the container's namespace.
pub const LINK_MISSING: u32 = 100;
/// The emulator (`linkem bridge`) of the link is not running.
pub const EMULATOR_NOT_RUNNING: u32 = 101;
/// The emulator did not start (its log says why).
pub const EMULATOR_START: u32 = 102;
/// A command that changes the namespace's interfaces failed.
pub const COMMAND_FAILED: u32 = 103;

/// A CNI error: what the runtime gets on stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> CniError {
        self.details = details.into();
        self
    }

    pub fn config(msg: impl Into<String>) -> CniError {
        CniError::new(INVALID_CONFIG, msg)
    }

    /// The JSON the spec asks for, in the version the configuration named.
    pub fn to_json(&self, cni_version: &str) -> Value {
        let mut v = json!({"cniVersion": cni_version, "code": self.code, "msg": self.msg});
        if !self.details.is_empty() {
            v["details"] = Value::String(self.details.clone());
        }
        v
    }
}

impl std::fmt::Display for CniError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.msg, self.code)?;
        if !self.details.is_empty() {
            write!(f, ": {}", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}
