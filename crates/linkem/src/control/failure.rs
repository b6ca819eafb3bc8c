//! [`Failure`]: why a control request changed nothing, as the client is told
//! and the audit log records it. A room of its own so that the request
//! handlers ([`super::rules`]) and the [`super::Model`] that holds them both
//! use it without importing each other.

/// Why a request changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The request cannot be carried out (bad input, nothing to change).
    Error(String),
    /// The peer may not do it.
    Refused(String),
    /// A word of the request is wrong: its 1-based position in the line.
    Word {
        message: String,
        position: usize,
        word: String,
    },
}

impl Failure {
    pub fn message(&self) -> &str {
        match self {
            Failure::Error(m) | Failure::Refused(m) => m,
            Failure::Word { message, .. } => message,
        }
    }

    pub fn audit_result(&self) -> String {
        match self {
            Failure::Error(m) => format!("error: {m}"),
            Failure::Refused(m) => format!("refused: {m}"),
            Failure::Word {
                message,
                position,
                word,
            } => format!("error: word {position} '{word}': {message}"),
        }
    }
}
