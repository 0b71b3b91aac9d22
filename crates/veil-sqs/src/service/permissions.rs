//! The permission actions, AddPermission and RemovePermission. Each edits the queue's access policy — the
//! `Policy` attribute, kept in the queue's protocol settings under `sqs.Policy` ([`POLICY_SETTING`]) — one
//! statement per label, so that GetQueueAttributes shows the document SQS would have written. The policy decides
//! what other accounts may do (`service/auth.rs`, `policy.rs`; docs/security.md, "SQS").
//!
//! The edit runs inside the engine's `update_queue_config`: it is durable before the answer, and two concurrent
//! edits of one queue's policy see each other, so neither loses the other's statement and a label cannot be
//! added twice.
//!
//! Where the wire details come from. Recorded from AWS (LocalStack's `test_sqs_permission_lifecycle`
//! snapshot, 2024): the generated document — version `2008-10-17`, id `<queue arn>/SQSDefaultPolicy`,
//! `SQS:` actions, `arn:aws:iam::<account>:root` principals, a string for one and a list for several — the
//! duplicate label's text, a policy that disappears with its last statement, and "can't find label." on a queue
//! without a policy. MuleSoft's SQS connector tests, run against AWS, record "can't find label on existing
//! policy." and "Value [<id>] for parameter PrincipalId is invalid. Reason: Unable to verify."; moto's
//! `test_add_permission_errors` the too-many-actions OverLimit (403), the owner-only action and the empty account
//! list; cloudtools/awacs issue 34 the text for a name that is no grantable action. AWS answers the document
//! compact, in the member order used here (its answers quoted in the Endgame project's SQS docs).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, Serializer};
use veil_core::EngineError;

use super::{engine_error, RequestContext, Service};
use crate::api::{AddPermissionInput, Output, RemovePermissionInput};
use crate::attributes::POLICY_SETTING;
use crate::error::{ErrorCode, SqsError, SqsResult};
use crate::limits;

/// What a new policy says it is written in: SQS's generated policies carry this version, not `2012-10-17`.
const POLICY_VERSION: &str = "2008-10-17";

/// The actions a statement may grant: the ones another account may call on a queue (SQS's AddPermission
/// reference; the batch versions come with their single ones).
const GRANTABLE_ACTIONS: [&str; 9] = [
    "*",
    "ChangeMessageVisibility",
    "DeleteMessage",
    "GetQueueAttributes",
    "GetQueueUrl",
    "ListDeadLetterSourceQueues",
    "PurgeQueue",
    "ReceiveMessage",
    "SendMessage",
];

/// Actions that only the queue's owner may call ("Cross-account permissions don't apply to this action" in
/// SQS's API reference): naming one is refused with its own reason.
const OWNER_ONLY_ACTIONS: [&str; 9] = [
    "AddPermission",
    "CreateQueue",
    "DeleteQueue",
    "ListQueueTags",
    "ListQueues",
    "RemovePermission",
    "SetQueueAttributes",
    "TagQueue",
    "UntagQueue",
];

impl Service {
    pub(super) async fn add_permission(
        &self,
        context: &RequestContext,
        input: AddPermissionInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        // A missing queue is reported before any parameter problem, as SetQueueAttributes does.
        self.require_queue(&key).await?;
        check_label(&input.label)?;
        let principals = principals(&input.aws_account_ids)?;
        let actions = granted_actions(&input.actions)?;
        let arn = self.arn(context, &key);
        let statement = statement(&input.label, principals, actions, &arn);
        let label = input.label;
        self.engine
            .update_queue_config(&key, move |config| {
                let stored = config.protocol_settings.get(POLICY_SETTING);
                let policy =
                    with_statement(stored.map(String::as_str), &label, statement.clone(), &arn)
                        .map_err(EngineError::InvalidArgument)?;
                config
                    .protocol_settings
                    .insert(POLICY_SETTING.to_string(), policy);
                Ok(())
            })
            .await
            .map_err(engine_error)?;
        Ok(Output::Empty)
    }

    pub(super) async fn remove_permission(
        &self,
        context: &RequestContext,
        input: RemovePermissionInput,
    ) -> SqsResult<Output> {
        let key = self.queue_key(context, &input.target)?;
        let label = input.label;
        self.engine
            .update_queue_config(&key, move |config| {
                let stored = config.protocol_settings.get(POLICY_SETTING);
                match without_statement(stored.map(String::as_str), &label)
                    .map_err(EngineError::InvalidArgument)?
                {
                    Some(policy) => config
                        .protocol_settings
                        .insert(POLICY_SETTING.to_string(), policy),
                    // With its last statement gone the queue has no policy at all, as in SQS.
                    None => config.protocol_settings.remove(POLICY_SETTING),
                };
                Ok(())
            })
            .await
            .map_err(engine_error)?;
        Ok(Output::Empty)
    }
}

/// A label names its statement (`Sid`): 1 to 80 letters, digits, `-` and `_` (SQS's AddPermission reference).
/// No record of AWS's text for a bad one was found, so the reason says the rule.
fn check_label(label: &str) -> SqsResult<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if label.len() > limits::PERMISSION_LABEL_CHARS_MAX || !label.chars().all(allowed) {
        return Err(SqsError::invalid_value(
            "Label",
            label,
            &format!(
                "Can only include alphanumeric characters, hyphens, or underscores. 1 to {} in length.",
                limits::PERMISSION_LABEL_CHARS_MAX
            ),
        ));
    }
    Ok(())
}

/// The principals of the accounts given. SQS grants only to accounts it can verify; Veil cannot look accounts
/// up, so it verifies the form: a 12-digit id. The answer lists what failed, as AWS's does (`Value [] …` for
/// no account at all).
fn principals(account_ids: &[String]) -> SqsResult<Vec<String>> {
    let is_account_id = |id: &String| {
        id.len() == limits::ACCOUNT_ID_DIGITS && id.bytes().all(|b| b.is_ascii_digit())
    };
    let unverifiable: Vec<&str> = account_ids
        .iter()
        .filter(|id| !is_account_id(id))
        .map(String::as_str)
        .collect();
    if account_ids.is_empty() || !unverifiable.is_empty() {
        return Err(SqsError::invalid_value(
            "PrincipalId",
            format!("[{}]", unverifiable.join(", ")),
            "Unable to verify.",
        ));
    }
    Ok(account_ids
        .iter()
        .map(|id| format!("arn:aws:iam::{id}:root"))
        .collect())
}

/// The statement's actions, `SQS:`-prefixed, after SQS's count and name rules.
fn granted_actions(actions: &[String]) -> SqsResult<Vec<String>> {
    if actions.len() > limits::PERMISSION_ACTIONS_MAX {
        return Err(SqsError::new(
            ErrorCode::OverLimit,
            format!(
                "{} Actions were found, maximum allowed is {}.",
                actions.len(),
                limits::PERMISSION_ACTIONS_MAX
            ),
        ));
    }
    actions
        .iter()
        .map(|action| {
            if GRANTABLE_ACTIONS.contains(&action.as_str()) {
                return Ok(format!("SQS:{action}"));
            }
            let reason = if OWNER_ONLY_ACTIONS.contains(&action.as_str()) {
                "Only the queue owner is allowed to invoke this action."
            } else {
                "Please refer to the appropriate WSDL for a list of valid actions."
            };
            Err(SqsError::invalid_value(
                "ActionName",
                format!("SQS:{action}"),
                reason,
            ))
        })
        .collect()
}

/// The statement AddPermission writes, its members in SQS's order.
fn statement(label: &str, principals: Vec<String>, actions: Vec<String>, arn: &str) -> Doc {
    Doc::object([
        ("Sid", Doc::String(label.to_string())),
        ("Effect", Doc::String("Allow".to_string())),
        ("Principal", Doc::object([("AWS", one_or_list(principals))])),
        ("Action", one_or_list(actions)),
        ("Resource", Doc::String(arn.to_string())),
    ])
}

/// SQS writes a single principal or action as a string and several as a list.
fn one_or_list(mut items: Vec<String>) -> Doc {
    if items.len() == 1 {
        Doc::String(items.remove(0))
    } else {
        Doc::Array(items.into_iter().map(Doc::String).collect())
    }
}

/// The stored policy with `statement` added, or SQS's new policy holding it. A policy set with
/// SetQueueAttributes keeps its own members and their order; only its statements grow. The error is the
/// InvalidParameterValue text.
fn with_statement(
    stored: Option<&str>,
    label: &str,
    statement: Doc,
    arn: &str,
) -> Result<String, String> {
    let Some(stored) = stored else {
        let policy = Doc::object([
            ("Version", Doc::String(POLICY_VERSION.to_string())),
            ("Id", Doc::String(format!("{arn}/SQSDefaultPolicy"))),
            ("Statement", Doc::Array(vec![statement])),
        ]);
        return Ok(policy.to_string());
    };
    let mut policy = parse_policy(stored)?;
    let statements = statements_of(&mut policy)?;
    if statements.iter().any(|existing| existing.has_sid(label)) {
        return Err(format!(
            "Value {label} for parameter Label is invalid. Reason: Already exists."
        ));
    }
    statements.push(statement);
    Ok(policy.to_string())
}

/// The stored policy without the statement named `label`: `None` when no statement is left, since SQS then
/// shows no policy at all. AWS words an unknown label differently when the queue has no policy to look in.
fn without_statement(stored: Option<&str>, label: &str) -> Result<Option<String>, String> {
    let not_found =
        |reason: &str| format!("Value {label} for parameter Label is invalid. Reason: {reason}");
    let Some(stored) = stored else {
        return Err(not_found("can't find label."));
    };
    let mut policy = parse_policy(stored)?;
    let statements = statements_of(&mut policy)?;
    let before = statements.len();
    statements.retain(|statement| !statement.has_sid(label));
    if statements.len() == before {
        return Err(not_found("can't find label on existing policy."));
    }
    Ok((!statements.is_empty()).then(|| policy.to_string()))
}

/// SetQueueAttributes stores only JSON objects (`attributes::policy`), so a stored policy that is not one
/// cannot happen; it is refused rather than overwritten.
fn parse_policy(stored: &str) -> Result<Doc, String> {
    match serde_json::from_str::<Doc>(stored) {
        Ok(policy @ Doc::Object(_)) => Ok(policy),
        _ => Err("The queue's Policy is not a JSON object.".to_string()),
    }
}

/// A policy's statements as a list, made one if needed: the policy grammar allows a single statement object
/// in place of the list, and a policy without statements gets an empty list.
fn statements_of(policy: &mut Doc) -> Result<&mut Vec<Doc>, String> {
    let Doc::Object(members) = policy else {
        unreachable!("parse_policy returns objects only");
    };
    let position = match members.iter().position(|(name, _)| name == "Statement") {
        Some(position) => position,
        None => {
            members.push(("Statement".to_string(), Doc::Array(Vec::new())));
            members.len() - 1
        }
    };
    let slot = &mut members[position].1;
    if let Doc::Object(_) = slot {
        let single = std::mem::replace(slot, Doc::Null);
        *slot = Doc::Array(vec![single]);
    }
    match slot {
        Doc::Array(statements) => Ok(statements),
        _ => Err("The queue's Policy has a Statement that is neither a statement nor a list of statements.".to_string()),
    }
}

/// A JSON value that keeps an object's members in document order. serde_json's `Value` sorts them (the
/// workspace does not enable its `preserve_order` feature, which would change every crate's JSON), and a policy
/// edit must leave the rest of a user's document as it was written.
#[derive(Clone, Debug, PartialEq)]
enum Doc {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

impl Doc {
    fn object<const N: usize>(members: [(&str, Doc); N]) -> Self {
        Doc::Object(
            members
                .into_iter()
                .map(|(name, value)| (name.to_string(), value))
                .collect(),
        )
    }

    /// Whether this is a statement whose `Sid` is `label`.
    fn has_sid(&self, label: &str) -> bool {
        let Doc::Object(members) = self else {
            return false;
        };
        members
            .iter()
            .any(|(name, value)| name == "Sid" && *value == Doc::String(label.to_string()))
    }
}

/// Compact, as SQS returns policies.
impl fmt::Display for Doc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl Serialize for Doc {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Doc::Null => serializer.serialize_unit(),
            Doc::Bool(flag) => serializer.serialize_bool(*flag),
            Doc::Number(number) => number.serialize(serializer),
            Doc::String(text) => serializer.serialize_str(text),
            Doc::Array(items) => serializer.collect_seq(items),
            Doc::Object(members) => serializer.collect_map(members.iter().map(|(k, v)| (k, v))),
        }
    }
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_bool<E: de::Error>(self, flag: bool) -> Result<Doc, E> {
        Ok(Doc::Bool(flag))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Doc, E> {
        Ok(Doc::Number(number.into()))
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Doc, E> {
        Ok(Doc::Number(number.into()))
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Doc, E> {
        serde_json::Number::from_f64(number)
            .map(Doc::Number)
            .ok_or_else(|| E::custom("a JSON number is finite"))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Doc, E> {
        Ok(Doc::String(text.to_string()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Doc, E> {
        Ok(Doc::String(text))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Doc::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry::<String, Doc>()? {
            members.push(member);
        }
        Ok(Doc::Object(members))
    }
}

#[cfg(test)]
#[path = "permissions_tests.rs"]
mod tests;
