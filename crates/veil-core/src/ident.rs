//! The identifiers that reach the engine, and through it a store: namespaces, queue names, FIFO message groups
//! and deduplication ids, sender and consumer identities, attribute names. Whatever protocol or admin path
//! brings one, it passes [`check`] here, in one place (docs/security.md "Identifiers").
//!
//! The rule is the part every protocol shares and every store can hold: not empty, at most the kind's
//! bytes, and no control character (NUL above all: PostgreSQL's `text` refuses it, and a refused statement
//! in a group commit would fail the store for every request in the commit). Each front-end narrows it to its
//! protocol's own rule first (SQS's `[A-Za-z0-9_-]{1,80}` names, Azure's lower-case names, KubeMQ's channel
//! characters, AWS's region pattern) and answers in its protocol's words; the engine checks again at its own
//! door, so that a path that forgot cannot put a store into its failed state — it gets
//! [`crate::EngineError::InvalidArgument`], one request's refusal.

use crate::model::{Attributes, NewMessage, QueueKey};

/// What an identifier names; each kind has its own length bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentKind {
    Namespace,
    QueueName,
    MessageGroup,
    DeduplicationId,
    SenderId,
    ConsumerIdentity,
    AttributeName,
}

impl IdentKind {
    /// The longest identifier of this kind, in bytes (`crate::limits`).
    pub fn bytes_max(self) -> usize {
        use crate::limits::*;
        match self {
            Self::Namespace => NAMESPACE_BYTES_MAX,
            Self::QueueName => QUEUE_NAME_BYTES_MAX,
            Self::MessageGroup | Self::DeduplicationId => MESSAGE_GROUP_ID_BYTES_MAX,
            Self::SenderId | Self::ConsumerIdentity => CLIENT_ID_BYTES_MAX,
            Self::AttributeName => ATTRIBUTE_NAME_BYTES_MAX,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Namespace => "namespace",
            Self::QueueName => "queue name",
            Self::MessageGroup => "message group id",
            Self::DeduplicationId => "deduplication id",
            Self::SenderId => "sender id",
            Self::ConsumerIdentity => "client id",
            Self::AttributeName => "attribute name",
        }
    }
}

/// Why an identifier was refused. Its text never quotes the identifier: it may hold any bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentError {
    #[error("the {} is empty", .0.what())]
    Empty(IdentKind),
    #[error("the {} has {bytes} bytes; at most {max} are allowed", kind.what())]
    TooLong {
        kind: IdentKind,
        bytes: usize,
        max: usize,
    },
    #[error("the {} holds the control character U+{code:04X} at byte {at}", kind.what())]
    ControlCharacter {
        kind: IdentKind,
        code: u32,
        at: usize,
    },
}

impl From<IdentError> for crate::EngineError {
    fn from(error: IdentError) -> Self {
        Self::InvalidArgument(error.to_string())
    }
}

/// The shared rule: not empty, at most `kind`'s bytes, no control character (C0, DEL, C1). The length is
/// checked first, so an oversized identifier costs nothing more.
pub fn check(kind: IdentKind, value: &str) -> Result<(), IdentError> {
    if value.is_empty() {
        return Err(IdentError::Empty(kind));
    }
    let max = kind.bytes_max();
    if value.len() > max {
        return Err(IdentError::TooLong {
            kind,
            bytes: value.len(),
            max,
        });
    }
    match value.char_indices().find(|(_, c)| c.is_control()) {
        Some((at, c)) => Err(IdentError::ControlCharacter {
            kind,
            code: u32::from(c),
            at,
        }),
        None => Ok(()),
    }
}

/// A queue's namespace and name.
pub fn check_key(key: &QueueKey) -> Result<(), IdentError> {
    check(IdentKind::Namespace, &key.namespace)?;
    check(IdentKind::QueueName, &key.name)
}

/// Every identifier a new message carries: its group, deduplication id, sender, attribute names and the
/// queue its own dead-letter rule names.
pub fn check_new_message(message: &NewMessage) -> Result<(), IdentError> {
    if let Some(group) = &message.group {
        check(IdentKind::MessageGroup, group)?;
    }
    if let Some(dedup_id) = &message.dedup_id {
        check(IdentKind::DeduplicationId, dedup_id)?;
    }
    // A sender id may be empty (a protocol that names no sender); when present it follows the rule.
    if !message.sender_id.is_empty() {
        check(IdentKind::SenderId, &message.sender_id)?;
    }
    check_attribute_names(&message.attributes)?;
    if let Some(target) = message
        .redrive
        .as_ref()
        .and_then(|p| p.dead_letter_queue.as_ref())
    {
        check_key(target)?;
    }
    Ok(())
}

fn check_attribute_names(attributes: &Attributes) -> Result<(), IdentError> {
    attributes
        .keys()
        .try_for_each(|name| check(IdentKind::AttributeName, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identifier_with_nul_or_another_control_character_is_refused() {
        for bad in [
            "a\0b",
            "\u{1}",
            "line\nbreak",
            "tab\t",
            "del\u{7f}",
            "c1\u{85}",
        ] {
            assert!(
                matches!(
                    check(IdentKind::QueueName, bad),
                    Err(IdentError::ControlCharacter { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(check(IdentKind::QueueName, "orders-1.fifo").is_ok());
        assert!(check(IdentKind::MessageGroup, "grüße / ok").is_ok());
    }

    #[test]
    fn an_identifier_is_refused_past_its_kinds_bytes_and_when_empty() {
        let max = IdentKind::ConsumerIdentity.bytes_max();
        assert!(check(IdentKind::ConsumerIdentity, &"c".repeat(max)).is_ok());
        assert_eq!(
            check(IdentKind::ConsumerIdentity, &"c".repeat(max + 1)),
            Err(IdentError::TooLong {
                kind: IdentKind::ConsumerIdentity,
                bytes: max + 1,
                max
            })
        );
        assert_eq!(
            check(IdentKind::Namespace, ""),
            Err(IdentError::Empty(IdentKind::Namespace))
        );
    }

    #[test]
    fn a_refusal_never_quotes_the_identifier() {
        let error = check(IdentKind::DeduplicationId, "secret\0").unwrap_err();
        let text = error.to_string();
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("U+0000"), "{text}");
    }
}
