//! The queue names and namespaces the admin paths accept (the API's create, `[[queues]]` and `veil queues
//! apply`, `veil import`): only those some protocol can address, so that every queue an operator makes can be
//! listed and reached by a client (docs/security.md "Identifiers"). The widest protocol sets the bound:
//! KubeMQ's channel characters (letters, digits, `.`, `_`, `-`) without its `/`, which the admin paths use
//! between a namespace and a name; SQS's and Azure's names are all of this shape. Every one then passes
//! veil-core's shared rule, which the engine checks again at its door.

use veil_core::ident::{self, IdentKind};
use veil_core::QueueKey;

/// Why `key` cannot name a queue made through the admin paths; `None` when it can.
pub fn refusal(key: &QueueKey) -> Option<String> {
    namespace_refusal(&key.namespace).or_else(|| name_refusal(&key.name))
}

fn name_refusal(name: &str) -> Option<String> {
    if let Err(error) = ident::check(IdentKind::QueueName, name) {
        return Some(error.to_string());
    }
    let shaped = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..");
    (!shaped).then(|| {
        "a queue name is made of ASCII letters, digits, '.', '_' and '-' (no leading, trailing or double '.'), \
         as some protocol can address it"
            .to_owned()
    })
}

fn namespace_refusal(namespace: &str) -> Option<String> {
    if let Err(error) = ident::check(IdentKind::Namespace, namespace) {
        return Some(error.to_string());
    }
    let shaped = namespace
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b));
    (!shaped).then(|| {
        "a namespace is made of ASCII letters, digits, '.', '_', '-' and ':' (default, sqs:<account>:<region>, \
         azure:<account>)"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> QueueKey {
        QueueKey::new("default", name)
    }

    #[test]
    fn names_some_protocol_addresses_are_accepted() {
        for name in ["orders", "jobs.fifo", "a-b_c", "kubemq.channel.x", "abc"] {
            assert_eq!(refusal(&key(name)), None, "{name}");
        }
        assert_eq!(
            refusal(&QueueKey::new("sqs:123456789012:eu-west-1", "q")),
            None
        );
    }

    #[test]
    fn names_no_protocol_allows_are_refused() {
        for name in [
            "",
            "/",
            "..",
            "a/b",
            "a b",
            "line\nbreak",
            "nul\0",
            ".x",
            "x.",
            "a..b",
            "ü",
        ] {
            assert!(refusal(&key(name)).is_some(), "{name:?}");
        }
        assert!(refusal(&key(&"a".repeat(100_000))).is_some());
        assert!(refusal(&QueueKey::new("bad\0ns", "q")).is_some());
        assert!(refusal(&QueueKey::new("a/b", "q")).is_some());
    }
}
