//! Queues declared by the operator (README.md "Queues declared in the config file"): the config file's
//! `[[queues]]` list, applied when `veil serve` starts, and `veil queues apply FILE` (`POST
//! /api/v1/queues/apply`) against a running server. Applying creates each missing queue with its settings, then
//! brings each existing one to the settings, tags and metadata listed, then sets the dead-letter rules (a rule
//! may name a queue declared further down). It is idempotent: a second apply changes nothing. It never deletes
//! a queue, a tag or a metadata key the list leaves out, and never changes a setting the entry leaves out.
//!
//! Everything that can be checked is checked before anything changes, so a list with one bad entry changes
//! nothing; each error names its entry (`queues[3] (default/orders)`).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use veil_core::{
    CreateOutcome, Dispatch, EngineError, QueueConfig, QueueKey, RedrivePolicy,
    AZURE_METADATA_SETTING_PREFIX, CREATED_BY_SETTING, DEFAULT_NAMESPACE, SQS_TAG_SETTING_PREFIX,
};

use crate::api::apply_settings;
use crate::api::types::QueueSettings;
use crate::limits::{DECLARED_MAX_RECEIVE_COUNT_MAX, DECLARED_MAX_RECEIVE_COUNT_MIN};

/// What `created_by` says of a queue a declaration made.
pub const CREATED_BY_DECLARATION: &str = "config";

/// One entry of `[[queues]]`. Every setting is optional: left out, a new queue gets the default and an
/// existing one keeps what it has.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueDeclaration {
    pub name: String,
    /// `default` when left out (the namespace SQS's default account, Azure's development account and KubeMQ
    /// share).
    #[serde(default)]
    pub namespace: Option<String>,
    /// A FIFO queue. A queue's kind never changes: an existing queue of the other kind is an error.
    #[serde(default)]
    pub fifo: bool,
    #[serde(default)]
    pub visibility_timeout_s: Option<u64>,
    #[serde(default)]
    pub delay_s: Option<u64>,
    #[serde(default)]
    pub retention_s: Option<u64>,
    #[serde(default)]
    pub message_size_bytes_max: Option<u32>,
    #[serde(default)]
    pub receive_wait_s: Option<u64>,
    #[serde(default)]
    pub inflight_max: Option<u32>,
    #[serde(default)]
    pub delivery_history: Option<bool>,
    /// Move a message here after this many receives.
    #[serde(default)]
    pub dead_letter: Option<DeclaredDeadLetter>,
    /// SQS tags, set or updated; tags not listed are left as they are.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Azure metadata, set or updated; keys not listed are left as they are.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclaredDeadLetter {
    /// `name` (in the declaring queue's namespace) or `namespace/name`.
    pub queue: String,
    pub max_receive_count: u32,
}

/// What applying did (or, on a dry run, would do) to one queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Change {
    /// `namespace/name`.
    pub queue: String,
    pub action: ChangeAction,
    /// One line per setting made or changed: `visibility_timeout_s 30 -> 60`.
    pub details: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeAction {
    Create,
    Update,
    Unchanged,
}

/// Why a list cannot be applied: its entry (1-based, as an operator counts `[[queues]]` tables), the queue,
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("queues[{entry}] ({queue}): {reason}")]
pub struct DeclareError {
    pub entry: usize,
    pub queue: String,
    pub reason: String,
}

/// An entry's queue and its wanted settings, checked.
struct Checked<'a> {
    entry: usize,
    key: QueueKey,
    declaration: &'a QueueDeclaration,
    settings: QueueSettings,
    dead_letter: Option<RedrivePolicy>,
}

impl QueueDeclaration {
    pub fn key(&self) -> QueueKey {
        QueueKey::new(
            self.namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
            self.name.clone(),
        )
    }

    fn settings(&self) -> QueueSettings {
        QueueSettings {
            visibility_timeout_s: self.visibility_timeout_s,
            delay_s: self.delay_s,
            retention_s: self.retention_s,
            message_size_bytes_max: self.message_size_bytes_max,
            receive_wait_s: self.receive_wait_s,
            inflight_max: self.inflight_max,
            delivery_history: self.delivery_history,
        }
    }
}

/// The checks that need no server: names, ranges, duplicates, and dead-letter rules between entries of the
/// list (`veil serve` runs them when it reads its config file, before it opens the store).
pub fn validate(declarations: &[QueueDeclaration]) -> Result<(), DeclareError> {
    check(declarations).map(drop)
}

fn check(declarations: &[QueueDeclaration]) -> Result<Vec<Checked<'_>>, DeclareError> {
    if let Some(over) = declarations.get(crate::limits::DECLARED_QUEUES_MAX) {
        return Err(DeclareError {
            entry: crate::limits::DECLARED_QUEUES_MAX + 1,
            queue: label(&over.key()),
            reason: format!(
                "a list declares at most {} queues; apply a longer one in parts",
                crate::limits::DECLARED_QUEUES_MAX
            ),
        });
    }
    let mut seen = BTreeSet::new();
    let mut checked = Vec::with_capacity(declarations.len());
    for (index, declaration) in declarations.iter().enumerate() {
        let entry = index + 1;
        let key = declaration.key();
        let fail = |reason: String| DeclareError {
            entry,
            queue: label(&key),
            reason,
        };
        if let Some(reason) = crate::names::refusal(&key) {
            return Err(fail(reason));
        }
        if !seen.insert(key.clone()) {
            return Err(fail("the list declares this queue twice".into()));
        }
        let settings = declaration.settings();
        apply_settings(&mut QueueConfig::default(), &settings).map_err(|e| fail(e.to_string()))?;
        let dead_letter = match &declaration.dead_letter {
            None => None,
            Some(rule) => Some(check_dead_letter(rule, &key).map_err(fail)?),
        };
        checked.push(Checked {
            entry,
            key,
            declaration,
            settings,
            dead_letter,
        });
    }
    // A rule that names a queue of the list needs that queue to be of the same kind (SQS's rule for FIFO).
    for item in &checked {
        let Some(rule) = &item.dead_letter else {
            continue;
        };
        if let Some(target) = checked.iter().find(|c| c.key == rule.dead_letter_queue) {
            if target.declaration.fifo != item.declaration.fifo {
                return Err(DeclareError {
                    entry: item.entry,
                    queue: label(&item.key),
                    reason: kind_mismatch(item.declaration.fifo),
                });
            }
        }
    }
    Ok(checked)
}

fn check_dead_letter(
    rule: &DeclaredDeadLetter,
    source: &QueueKey,
) -> Result<RedrivePolicy, String> {
    let target = match rule.queue.split_once('/') {
        Some((namespace, name)) => QueueKey::new(namespace.to_owned(), name.to_owned()),
        None => QueueKey::new(source.namespace.clone(), rule.queue.clone()),
    };
    if let Some(reason) = crate::names::refusal(&target) {
        return Err(format!("dead_letter.queue names no queue: {reason}"));
    }
    if &target == source {
        return Err("a queue cannot be its own dead-letter queue".into());
    }
    let range = DECLARED_MAX_RECEIVE_COUNT_MIN..=DECLARED_MAX_RECEIVE_COUNT_MAX;
    if !range.contains(&rule.max_receive_count) {
        return Err(format!(
            "dead_letter.max_receive_count must be from {} to {}, not {}",
            range.start(),
            range.end(),
            rule.max_receive_count
        ));
    }
    Ok(RedrivePolicy {
        dead_letter_queue: target,
        max_receive_count: rule.max_receive_count,
    })
}

fn kind_mismatch(source_fifo: bool) -> String {
    if source_fifo {
        "a FIFO queue's dead-letter queue must be a FIFO queue too".into()
    } else {
        "a standard queue's dead-letter queue must be a standard queue too".into()
    }
}

fn label(key: &QueueKey) -> String {
    format!("{}/{}", key.namespace, key.name)
}

/// Applies the list to the queues `engine` serves, or only says what it would change (`dry_run`). Returns
/// one change per entry, in the list's order.
pub async fn apply(
    engine: &Dispatch,
    declarations: &[QueueDeclaration],
    dry_run: bool,
) -> Result<Vec<Change>, DeclareError> {
    let checked = check(declarations)?;
    // What exists now, and the checks that need it, before anything changes.
    let mut existing: Vec<Option<QueueConfig>> = Vec::with_capacity(checked.len());
    for item in &checked {
        let fail = |reason: String| DeclareError {
            entry: item.entry,
            queue: label(&item.key),
            reason,
        };
        let current = match engine.queue_info(&item.key).await {
            Ok(info) => Some(info.config),
            Err(EngineError::QueueNotFound(_)) => None,
            Err(other) => return Err(fail(crate::engine_error_text(&other))),
        };
        if let Some(config) = &current {
            if config.fifo.is_some() != item.declaration.fifo {
                return Err(fail(format!(
                    "exists as a {} queue and the list says fifo = {}: a queue's kind cannot change",
                    if config.fifo.is_some() { "FIFO" } else { "standard" },
                    item.declaration.fifo
                )));
            }
        }
        if let Some(rule) = &item.dead_letter {
            let declared = checked.iter().any(|c| c.key == rule.dead_letter_queue);
            if !declared {
                match engine.queue_info(&rule.dead_letter_queue).await {
                    Ok(info) if info.config.fifo.is_some() != item.declaration.fifo => {
                        return Err(fail(kind_mismatch(item.declaration.fifo)))
                    }
                    Ok(_) => {}
                    Err(EngineError::QueueNotFound(_)) => {
                        return Err(fail(format!(
                        "its dead-letter queue {} does not exist and the list does not declare it",
                        label(&rule.dead_letter_queue)
                    )))
                    }
                    Err(other) => return Err(fail(crate::engine_error_text(&other))),
                }
            }
        }
        existing.push(current);
    }
    let mut changes = Vec::with_capacity(checked.len());
    for (item, current) in checked.iter().zip(&existing) {
        let change = match current {
            None => create(engine, item, dry_run).await?,
            Some(config) => update(engine, item, config, dry_run).await?,
        };
        changes.push(change);
    }
    // The rules last: a rule may name a queue created above.
    for (item, change) in checked.iter().zip(changes.iter_mut()) {
        let Some(rule) = &item.dead_letter else {
            continue;
        };
        let current = existing[item.entry - 1]
            .as_ref()
            .and_then(|config| config.redrive_policy.as_ref());
        if current == Some(rule) {
            continue;
        }
        change.details.push(format!(
            "dead_letter {} -> {} after {} receives",
            current.map_or("none".to_owned(), |p| label(&p.dead_letter_queue)),
            label(&rule.dead_letter_queue),
            rule.max_receive_count
        ));
        if change.action == ChangeAction::Unchanged {
            change.action = ChangeAction::Update;
        }
        if !dry_run {
            let wanted = rule.clone();
            edit(engine, item, move |config| {
                config.redrive_policy = Some(wanted.clone());
                Ok(())
            })
            .await?;
        }
    }
    Ok(changes)
}

async fn create(
    engine: &Dispatch,
    item: &Checked<'_>,
    dry_run: bool,
) -> Result<Change, DeclareError> {
    let mut config = QueueConfig::default();
    if item.declaration.fifo {
        config.fifo = Some(Default::default());
    }
    let fail = |reason: String| DeclareError {
        entry: item.entry,
        queue: label(&item.key),
        reason,
    };
    apply_settings(&mut config, &item.settings).map_err(|e| fail(e.to_string()))?;
    set_labels(&mut config, item.declaration);
    config
        .protocol_settings
        .insert(CREATED_BY_SETTING.into(), CREATED_BY_DECLARATION.into());
    let details = given_settings(item);
    if !dry_run {
        // Another node, or a client, may have made it meanwhile: then it is brought to the list like any
        // existing queue.
        if let CreateOutcome::Existing(_) = engine
            .create_queue(item.key.clone(), config)
            .await
            .map_err(|e| fail(crate::engine_error_text(&e)))?
        {
            let info = engine
                .queue_info(&item.key)
                .await
                .map_err(|e| fail(crate::engine_error_text(&e)))?;
            return Box::pin(update(engine, item, &info.config, dry_run)).await;
        }
    }
    Ok(Change {
        queue: label(&item.key),
        action: ChangeAction::Create,
        details,
    })
}

async fn update(
    engine: &Dispatch,
    item: &Checked<'_>,
    current: &QueueConfig,
    dry_run: bool,
) -> Result<Change, DeclareError> {
    let mut wanted = current.clone();
    apply_settings(&mut wanted, &item.settings).map_err(|e| DeclareError {
        entry: item.entry,
        queue: label(&item.key),
        reason: e.to_string(),
    })?;
    set_labels(&mut wanted, item.declaration);
    let details = differences(current, &wanted);
    if !details.is_empty() && !dry_run {
        let (settings, declaration) = (item.settings.clone(), item.declaration.clone());
        edit(engine, item, move |config| {
            apply_settings(config, &settings)
                .map_err(|e| EngineError::InvalidArgument(e.to_string()))?;
            set_labels(config, &declaration);
            Ok(())
        })
        .await?;
    }
    Ok(Change {
        queue: label(&item.key),
        action: if details.is_empty() {
            ChangeAction::Unchanged
        } else {
            ChangeAction::Update
        },
        details,
    })
}

async fn edit<F>(engine: &Dispatch, item: &Checked<'_>, change: F) -> Result<(), DeclareError>
where
    F: FnMut(&mut QueueConfig) -> Result<(), EngineError>,
{
    engine
        .update_queue_config(&item.key, change)
        .await
        .map(drop)
        .map_err(|e| DeclareError {
            entry: item.entry,
            queue: label(&item.key),
            reason: crate::engine_error_text(&e),
        })
}

/// The entry's tags and metadata, set over what the queue has (nothing removed).
fn set_labels(config: &mut QueueConfig, declaration: &QueueDeclaration) {
    for (prefix, labels) in [
        (SQS_TAG_SETTING_PREFIX, &declaration.tags),
        (AZURE_METADATA_SETTING_PREFIX, &declaration.metadata),
    ] {
        for (name, value) in labels {
            config
                .protocol_settings
                .insert(format!("{prefix}{name}"), value.clone());
        }
    }
}

/// What a new queue gets beyond the defaults, for the change's details.
fn given_settings(item: &Checked<'_>) -> Vec<String> {
    let mut details = differences(&QueueConfig::default(), &{
        let mut config = QueueConfig::default();
        // Checked in `check`: applying cannot fail here.
        let _ = apply_settings(&mut config, &item.settings);
        set_labels(&mut config, item.declaration);
        config
    });
    if item.declaration.fifo {
        details.insert(0, "fifo".into());
    }
    details
}

/// One line per setting, tag or metadata key that differs, in the admin API's units.
fn differences(before: &QueueConfig, after: &QueueConfig) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = |name: &str, old: String, new: String| {
        if old != new {
            lines.push(format!("{name} {old} -> {new}"));
        }
    };
    let seconds = |ms: u64| (ms / 1000).to_string();
    line(
        "visibility_timeout_s",
        seconds(before.visibility_timeout_ms),
        seconds(after.visibility_timeout_ms),
    );
    line("delay_s", seconds(before.delay_ms), seconds(after.delay_ms));
    let retention = |ms: Option<u64>| ms.map_or("forever".to_owned(), seconds);
    line(
        "retention_s",
        retention(before.retention_ms),
        retention(after.retention_ms),
    );
    line(
        "message_size_bytes_max",
        before.message_size_bytes_max.to_string(),
        after.message_size_bytes_max.to_string(),
    );
    line(
        "receive_wait_s",
        seconds(before.receive_wait_ms),
        seconds(after.receive_wait_ms),
    );
    line(
        "inflight_max",
        before.inflight_max.to_string(),
        after.inflight_max.to_string(),
    );
    line(
        "delivery_history",
        before.delivery_history.to_string(),
        after.delivery_history.to_string(),
    );
    for (key, value) in &after.protocol_settings {
        let label = if let Some(tag) = key.strip_prefix(SQS_TAG_SETTING_PREFIX) {
            format!("tag {tag}")
        } else if let Some(name) = key.strip_prefix(AZURE_METADATA_SETTING_PREFIX) {
            format!("metadata {name}")
        } else {
            continue;
        };
        let old = before.protocol_settings.get(key);
        if old != Some(value) {
            line(
                &label,
                old.map_or("none".to_owned(), |v| format!("{v:?}")),
                format!("{value:?}"),
            );
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str) -> QueueDeclaration {
        QueueDeclaration {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn an_error_names_its_entry_counting_from_one() {
        let mut bad = queue("orders");
        bad.visibility_timeout_s = Some(999_999);
        let error = validate(&[queue("a"), bad]).unwrap_err();
        assert_eq!(error.entry, 2);
        assert!(
            error
                .to_string()
                .starts_with("queues[2] (default/orders): visibility_timeout_s"),
            "{error}"
        );
    }

    #[test]
    fn a_list_longer_than_the_limit_is_refused_at_the_first_entry_over_it() {
        let max = crate::limits::DECLARED_QUEUES_MAX;
        let list: Vec<_> = (0..=max).map(|i| queue(&format!("q{i}"))).collect();
        let error = validate(&list).unwrap_err();
        assert_eq!(
            (error.entry, error.queue.as_str()),
            (max + 1, &*format!("default/q{max}"))
        );
        assert!(error.reason.contains("at most"), "{error}");
        validate(&list[..max]).expect("exactly the limit is accepted");
    }

    #[test]
    fn a_queue_declared_twice_is_refused() {
        let error = validate(&[queue("a"), queue("b"), queue("a")]).unwrap_err();
        assert_eq!(error.entry, 3);
        assert!(error.reason.contains("twice"));
    }

    #[test]
    fn a_fifo_queue_needs_a_fifo_dead_letter_queue() {
        let mut source = queue("orders.fifo");
        source.fifo = true;
        source.dead_letter = Some(DeclaredDeadLetter {
            queue: "orders-dlq".into(),
            max_receive_count: 3,
        });
        let error = validate(&[source.clone(), queue("orders-dlq")]).unwrap_err();
        assert!(error.reason.contains("FIFO"), "{error}");
        let mut fifo_dlq = queue("orders-dlq");
        fifo_dlq.fifo = true;
        validate(&[source, fifo_dlq]).expect("kinds match");
    }

    #[test]
    fn a_dead_letter_rule_is_checked_before_any_server_is_asked() {
        let mut own = queue("a");
        own.dead_letter = Some(DeclaredDeadLetter {
            queue: "default/a".into(),
            max_receive_count: 3,
        });
        assert!(validate(&[own]).unwrap_err().reason.contains("its own"));
        let mut zero = queue("a");
        zero.dead_letter = Some(DeclaredDeadLetter {
            queue: "b".into(),
            max_receive_count: 0,
        });
        assert!(validate(&[zero])
            .unwrap_err()
            .reason
            .contains("from 1 to 1000"));
    }

    #[test]
    fn differences_list_settings_and_labels_in_the_apis_units() {
        let before = QueueConfig::default();
        let mut after = before.clone();
        after.visibility_timeout_ms = 60_000;
        after
            .protocol_settings
            .insert(format!("{SQS_TAG_SETTING_PREFIX}team"), "a".into());
        assert_eq!(
            differences(&before, &after),
            [
                format!(
                    "visibility_timeout_s {} -> 60",
                    before.visibility_timeout_ms / 1000
                ),
                "tag team none -> \"a\"".to_owned()
            ]
        );
        assert!(differences(&after, &after).is_empty());
    }
}
